"""scripts/study.sh resumes a study across sessions and machines: each run goes through every step
that needs its checkpoint and is then archived (light files only); an archived run is done without
its checkpoint, an interrupted run continues from its last.ckpt, and a run whose checkpoint is gone
and whose archive is incomplete is trained again. `python` is replaced by a stand-in that records
each command and writes the files a real run or evaluation would."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = scripts/process_layout.py ]; then echo "layout-$2=${3##*/}"; exit 0; fi  # names what it was asked
echo "$*" >> "$CALLS"
echo "${OMP_NUM_THREADS:--} $(date +%s.%N) start $*" >> "$CALLS.times"
declare -A arg
for word in "$@"; do [[ $word == *=* ]] && arg[${word%%=*}]=${word#*=}; done
if [ "$1" = train.py ]; then
  fuzzy=$([ "${arg[pos.fuzzy]:-}" = true ] && echo _fuzzy || true)
  sizes=$(echo "${arg[train_img_sizes]:-}" | tr -d '[]' | tr , -)
  mixed=$([ -n "$sizes" ] && echo "_train${sizes}px" || true)
  size=${arg[img_size]:-32}px
  if [[ ${arg[finetune_from]:-} =~ _([0-9]+)px_seed ]]; then size=${arg[img_size]:-64}px_from_${BASH_REMATCH[1]}px; fi
  run=${arg[paths.log_dir]}/${arg[experiment]}/${arg[run_name]:-${arg[pos]}${fuzzy}_cifar10_${size}${mixed}_seed${arg[seed]}}
  if [ -n "${arg[resume]:-}" ]; then version=$(ls -d "$run"/version_* | tail -n 1); else
    version=$run/version_$(ls -d "$run"/version_* 2> /dev/null | wc -l); fi
  mkdir -p "$version/checkpoints"
  sleep "${FAKE_TRAIN_SECONDS:-0}"
  touch "$version/results.json" "$version/events.out.tfevents.1.vm" "$version/checkpoints/best-epoch1-step9.ckpt"
else
  mkdir -p "${arg[out]}" && touch "${arg[out]}/resolution.csv"
fi
echo "${OMP_NUM_THREADS:--} $(date +%s.%N) end $*" >> "$CALLS.times"
"""
QUIET = "trainer.enable_progress_bar=false callbacks.figures=null"


def make_run(folder: Path, *files: str) -> None:
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()


def fake_env(tmp_path: Path, **settings) -> dict:
    """The environment of a study.sh run whose `python` is FAKE_PYTHON, with LOGS and RESULTS in tmp_path."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake.parent}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls"),
        LOGS=str(tmp_path / "logs"),
        RESULTS=str(tmp_path / "results"),
        DATASET="cifar10",
        **settings,
    )
    env.pop("CIFAR10_ROOT", None)
    return env


def study(tmp_path: Path, env: dict, step: str = "runs") -> list[str]:
    """Run one step of study.sh; return the python commands it ran so far."""
    result = subprocess.run(["bash", "scripts/study.sh", step], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_run_takes_every_step_then_its_archive_outlives_the_machine(tmp_path):
    env = fake_env(tmp_path, SCHEMES="2d_sin", SEEDS="0")
    calls = study(tmp_path, env)
    logs, run = tmp_path / "logs", "cifar10_study/2d_sin_cifar10_32px_seed0"
    best = f"{logs}/{run}/version_0/checkpoints/best-epoch1-step9.ckpt"
    assert calls == [
        f"train.py experiment=cifar10_study pos=2d_sin seed=0 paths.log_dir={logs} {QUIET}",
        f"-m vitpos.evaluate ckpt={best} img_sizes=[32,48,64] out={logs}/{run}/version_0/transfer_default",
        f"-m vitpos.evaluate ckpt={best} img_sizes=[32,48,64] out={logs}/{run}/version_0/transfer_interpolate "
        "resize_mode=interpolate",
        f"-m vitpos.evaluate ckpt={best} img_sizes=[32,48,64,96] resize_mode=all limit=2000 "
        f"out={logs}/{run}/version_0/extrapolation",
        f"train.py experiment=cifar10_finetune pos=2d_sin seed=0 paths.log_dir={logs} {QUIET} finetune_from={best}",
    ]
    archive = tmp_path / "results" / "study_logs"
    archived = sorted(str(p.relative_to(archive)) for p in archive.rglob("*") if p.is_file())
    assert archived == [
        "cifar10_finetune/2d_sin_cifar10_64px_from_32px_seed0/version_0/events.out.tfevents.1.vm",
        "cifar10_finetune/2d_sin_cifar10_64px_from_32px_seed0/version_0/results.json",
        f"{run}/version_0/events.out.tfevents.1.vm",
        f"{run}/version_0/extrapolation/resolution.csv",
        f"{run}/version_0/results.json",
        f"{run}/version_0/transfer_default/resolution.csv",
        f"{run}/version_0/transfer_interpolate/resolution.csv",
    ]  # no checkpoint
    assert study(tmp_path, env) == calls  # all done
    shutil.rmtree(logs)  # another machine, the same checkout: the archive says it is done
    assert study(tmp_path, env) == calls
    (archive / run / "version_0" / "extrapolation" / "resolution.csv").unlink()  # an output missing, no checkpoint
    again = study(tmp_path, env)[len(calls) :]
    assert again[0] == calls[0] and len(again) == len(calls) - 1  # trained again, evaluated; its fine-tune is archived
    assert (archive / run / "version_0" / "extrapolation" / "resolution.csv").is_file()


def test_runs_in_logs_are_finished_resumed_or_retrained(tmp_path):
    study_logs = tmp_path / "logs" / "cifar10_study"
    outputs = ("transfer_default/resolution.csv", "extrapolation/resolution.csv")
    make_run(study_logs / "cpb_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/best-e9.ckpt", *outputs)
    make_run(study_logs / "cpe_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/last.ckpt")
    make_run(study_logs / "fire_cifar10_32px_seed0" / "version_0", "checkpoints/last.ckpt")
    env = fake_env(tmp_path, SCHEMES="cpb,cpe,fire", SEEDS="0", FINETUNE_SEEDS="1")
    calls = study(tmp_path, env)
    assert not any("pos=cpb" in c or "cpb_cifar10" in c for c in calls)  # trained and evaluated: archived only
    assert (tmp_path / "results/study_logs/cifar10_study/cpb_cifar10_32px_seed0/version_0/results.json").is_file()
    trains = [c for c in calls if c.startswith("train.py")]
    assert len(trains) == 2 and not any("cifar10_finetune" in c for c in trains)  # seed 0 is no fine-tune seed
    lost = next(c for c in trains if "pos=cpe" in c)
    assert "resume=true" not in lost
    assert (study_logs / "cpe_cifar10_32px_seed0" / "version_1" / "results.json").is_file()
    killed = next(c for c in trains if "pos=fire" in c)
    assert "resume=true" in killed and not (study_logs / "fire_cifar10_32px_seed0" / "version_1").exists()
    evaluations = [c for c in calls if c.startswith("-m vitpos.evaluate")]
    assert len(evaluations) == 4  # transfer and extrapolation of each trained run, from its newest best checkpoint
    assert sum("cpe_cifar10_32px_seed0/version_1/checkpoints/best-epoch1-step9.ckpt" in c for c in evaluations) == 2


def test_fuzzy_and_mixed_twins_are_trained_extrapolated_and_archived(tmp_path):
    env = fake_env(tmp_path, SEEDS="0", FUZZY_SCHEMES="1d_learned", MIXED_SCHEMES="rope_axial")
    study(tmp_path, env, "fuzzy")
    calls = study(tmp_path, env, "mixed")  # every command so far
    logs = tmp_path / "logs"
    assert [c for c in calls if c.startswith("train.py")] == [
        f"train.py experiment=cifar10_study pos=1d_learned seed=0 paths.log_dir={logs} {QUIET} pos.fuzzy=true",
        f"train.py experiment=cifar10_study pos=rope_axial seed=0 paths.log_dir={logs} {QUIET} "
        "train_img_sizes=[32,48,64] batch_by_tokens=true",
    ]
    evaluated = [c.split("out=")[1] for c in calls if c.startswith("-m vitpos.evaluate")]
    assert [e.split("/cifar10_study/")[1] for e in evaluated] == [
        "1d_learned_fuzzy_cifar10_32px_seed0/version_0/transfer_default",
        "1d_learned_fuzzy_cifar10_32px_seed0/version_0/extrapolation",
        "rope_axial_cifar10_32px_train32-48-64px_seed0/version_0/extrapolation",  # mixed: no transfer step
    ]
    archive = tmp_path / "results" / "study_logs" / "cifar10_study"
    assert sorted(p.name for p in archive.iterdir()) == [
        "1d_learned_fuzzy_cifar10_32px_seed0",
        "rope_axial_cifar10_32px_train32-48-64px_seed0",
    ]


def test_mixed_twins_train_the_seeds_of_mixed_seeds_only(tmp_path):
    env = fake_env(tmp_path, SEEDS="0,1,2", MIXED_SEEDS="1,2", MIXED_SCHEMES="cpe")
    calls = study(tmp_path, env, "mixed")
    assert [c.split(" seed=")[1].split()[0] for c in calls if c.startswith("train.py")] == ["1", "2"]


def test_study_refuses_an_unknown_dataset_or_step(tmp_path):
    for settings, step, message in (
        (dict(DATASET="mnist"), "runs", "error: DATASET=mnist is not a study"),
        (
            {},
            "finetune",
            "error: unknown step 'finetune'; use one of runs, fuzzy, mixed, long, published, native, curriculum, park, "
            "tables, all, status",
        ),
    ):
        env = dict(fake_env(tmp_path), **settings)
        result = subprocess.run(["bash", "scripts/study.sh", step], cwd=ROOT, capture_output=True, text=True, env=env)
        assert result.returncode == 2 and result.stderr.startswith(message) and result.stderr.count("\n") == 1
        assert not (tmp_path / "calls").exists() and not (tmp_path / "logs").exists()


def test_a_second_study_on_the_same_logs_is_refused(tmp_path):
    env = fake_env(tmp_path, SCHEMES="none", SEEDS="0")
    (tmp_path / "logs").mkdir()
    with open(tmp_path / "logs" / ".study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running study.sh holds it
        result = subprocess.run(["bash", "scripts/study.sh", "runs"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 2 and not (tmp_path / "calls").exists()
    assert result.stderr.startswith(f"error: another study.sh is training into {tmp_path / 'logs'}")
    assert study(tmp_path, env)[0].startswith("train.py")  # once it has ended


def test_long_runs_train_the_longer_recipe_and_are_archived_without_evaluations(tmp_path):
    env = fake_env(tmp_path, LONG_SCHEMES="none,rel_shaw")
    calls = study(tmp_path, env, "long")
    logs = tmp_path / "logs"
    assert calls == [
        f"train.py experiment=cifar10_cpu pos={pos} seed=0 paths.log_dir={logs} {QUIET}" for pos in ("none", "rel_shaw")
    ]
    archive = tmp_path / "results" / "study_logs" / "cifar10_cpu"
    assert sorted(p.name for p in archive.iterdir()) == ["none_cifar10_32px_seed0", "rel_shaw_cifar10_32px_seed0"]
    shutil.rmtree(logs)
    assert study(tmp_path, env, "long") == calls  # archived: done on any machine


def test_tables_set_the_cifar10_studies_beside_the_published_ablation_and_not_the_fine_tunes(tmp_path):
    env = fake_env(tmp_path, SCHEMES="none", SEEDS="0", FINETUNE_SEEDS="0", LONG_SCHEMES="none")
    study(tmp_path, env)
    study(tmp_path, env, "long")
    results = tmp_path / "results"
    calls = [c for c in study(tmp_path, env, "tables") if "vitpos.compare" in c]
    reference = f"reference={results}/published/cifar10_small_vit_ablation.csv"
    assert calls == [
        f"-m vitpos.compare {results}/study_logs/cifar10_study out={results}/cifar10_study {reference}",
        f"-m vitpos.compare {results}/study_logs/cifar10_finetune out={results}/cifar10_finetune",
        f"-m vitpos.compare {results}/study_logs/cifar10_cpu out={results}/cifar10_cpu {reference}",
    ]
    # the table it names is the repository's
    assert (ROOT / "docs" / "results" / "published" / "cifar10_small_vit_ablation.csv").is_file()


def test_tables_set_the_published_recipes_curves_beside_the_studys_for_its_schemes(tmp_path):
    env = fake_env(tmp_path, SCHEMES="none,cpe", SEEDS="0", FINETUNE_SEEDS="", PUBLISHED_SCHEMES="none,rel_shaw")
    study(tmp_path, env)
    assert not [c for c in study(tmp_path, env, "tables") if "beside_study" in c]  # nothing at 200 epochs yet
    study(tmp_path, env, "published")
    results = tmp_path / "results"
    calls = [c for c in study(tmp_path, env, "tables") if "vitpos.compare" in c]
    archive = f"{results}/study_logs"
    assert calls[-1] == (
        f"-m vitpos.compare {archive}/cifar10_study {archive}/cifar10_published pos=[none,rel_shaw] "
        f"out={results}/cifar10_published_beside_study reference={results}/published/cifar10_small_vit_ablation.csv"
    )


def test_status_names_each_run_of_all_in_its_order_with_its_state_and_runs_nothing(tmp_path):
    env = fake_env(
        tmp_path,
        SCHEMES="none,2d_sin,cpe",
        SEEDS="0,1",
        FUZZY_SCHEMES="2d_sin",
        MIXED_SCHEMES="cpe",
        LONG_SCHEMES="none",
        PUBLISHED_SCHEMES="rel_shaw",
        NATIVE_SCHEMES="cpe",
        NATIVE_SIZES="16:0 24:0",
        NATIVE_RRC_SCHEMES="cpb",
        CURRICULUM_SCHEMES="rel_bias",
    )
    study(tmp_path, dict(env, SCHEMES="none", SEEDS="0"))  # none, seed 0: every step, archived
    parked = tmp_path / "results" / "study_parked" / "cifar10_published" / "rel_shaw_cifar10_32px_seed0"
    make_run(parked / "version_0", "checkpoints/last.ckpt")
    shutil.rmtree(tmp_path / "logs")  # as on a new machine
    (tmp_path / "calls").unlink()
    study_logs = tmp_path / "logs" / "cifar10_study"
    make_run(study_logs / "2d_sin_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/best-e9.ckpt")
    make_run(study_logs / "cpe_cifar10_32px_seed0" / "version_0", "checkpoints/last.ckpt")
    make_run(
        tmp_path / "logs" / "native" / "cifar10_study" / "cpe_cifar10_24px_seed0" / "version_0", "checkpoints/last.ckpt"
    )
    result = subprocess.run(["bash", "scripts/study.sh", "status"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "calls").exists()  # reads only
    *lines, total = result.stdout.splitlines()
    states = [(line[:12].strip(), line[13:].split()[0]) for line in lines]  # "%-12s %s": state, run[, note]
    study_run = "cifar10_study/{}_cifar10_32px{}_seed{}".format
    assert states == [  # the order of `all`: seed by seed the runs, fuzzy and mixed twins; then long, published
        ("done", study_run("none", "", 0)),
        ("trained", study_run("2d_sin", "", 0)),
        ("interrupted", study_run("cpe", "", 0)),
        ("to do", study_run("2d_sin_fuzzy", "", 0)),
        ("to do", study_run("cpe", "_train32-48-64px", 0)),  # cifar10's mixed twins: seed 0 (MIXED_SEEDS)
        *[("to do", study_run(pos, "", 1)) for pos in ("none", "2d_sin", "cpe")],
        ("to do", study_run("2d_sin_fuzzy", "", 1)),
        ("to do", "cifar10_cpu/none_cifar10_32px_seed0"),
        ("parked", "cifar10_published/rel_shaw_cifar10_32px_seed0"),
        # then the native study, seed by seed: each size of NATIVE_SIZES, then the rrc twins
        ("to do", "native/cifar10_study/cpe_cifar10_16px_seed0"),
        ("interrupted", "native/cifar10_study/cpe_cifar10_24px_seed0"),
        ("to do", "native/cifar10_study/cpb_rrc_cifar10_16px_seed0"),
        ("to do", "cifar10_study/rel_bias_cifar10_32px_curriculum16-5-24-5-32-5_seed0"),  # last, the curriculum
    ]
    assert lines[2].endswith(f"(resumes from its last.ckpt in {tmp_path}/logs)")
    logs = f"{tmp_path}/results/study_logs and {tmp_path}/logs"
    assert total == f"15 runs in {logs}: 1 done, 1 trained, 2 interrupted, 1 parked, 10 to do"
    with open(tmp_path / "logs" / ".study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running study.sh holds it
        result = subprocess.run(
            ["bash", "scripts/study.sh", "status"], cwd=ROOT, env=env, capture_output=True, text=True
        )
    assert result.returncode == 0 and result.stdout.startswith(f"a study.sh is training into {tmp_path}/logs now")


def test_curriculum_runs_train_the_study_recipe_under_the_curriculum_named_by_its_phases(tmp_path):
    env = fake_env(tmp_path, CURRICULUM_SCHEMES="none,cpe")
    calls = study(tmp_path, env, "curriculum")
    logs = tmp_path / "logs"
    name = "{}_cifar10_32px_curriculum16-5-24-5-32-5_seed0".format
    version = "{}/cifar10_study/{}/version_0".format
    assert calls == [
        call
        for pos in ("none", "cpe")
        for call in (
            f"train.py experiment=cifar10_study pos={pos} seed=0 paths.log_dir={logs} {QUIET} "
            f"curriculum=[[16,5],[24,5],[32,5]] run_name={name(pos)}",
            f"-m vitpos.evaluate ckpt={version(logs, name(pos))}/checkpoints/best-epoch1-step9.ckpt "
            f"img_sizes=[32,48,64] out={version(logs, name(pos))}/transfer_default",
        )
    ]
    archive = tmp_path / "results" / "study_logs" / "cifar10_study"
    assert sorted(p.name for p in archive.iterdir()) == [name("cpe"), name("none")]
    shutil.rmtree(logs)
    assert study(tmp_path, env, "curriculum") == calls  # archived: done on any machine
    # another curriculum is another run, beside the first
    longer = study(tmp_path, dict(env, CURRICULUM="[[16,10],[32,5]]", CURRICULUM_SCHEMES="none"), "curriculum")
    assert longer[len(calls)].endswith(
        "curriculum=[[16,10],[32,5]] run_name=none_cifar10_32px_curriculum16-10-32-5_seed0"
    )


def test_published_runs_train_the_published_recipe_and_are_archived_without_evaluations(tmp_path):
    env = fake_env(tmp_path, PUBLISHED_SCHEMES="none,rope_axial")
    calls = study(tmp_path, env, "published")
    logs = tmp_path / "logs"
    assert calls == [
        f"train.py experiment=cifar10_published pos={pos} seed=0 paths.log_dir={logs} {QUIET}"
        for pos in ("none", "rope_axial")
    ]
    archive = tmp_path / "results" / "study_logs" / "cifar10_published"
    assert sorted(p.name for p in archive.iterdir()) == ["none_cifar10_32px_seed0", "rope_axial_cifar10_32px_seed0"]


def test_a_parked_run_continues_on_another_machine_and_its_archive_replaces_it(tmp_path):
    env = fake_env(tmp_path, PUBLISHED_SCHEMES="rel_shaw")
    run = "cifar10_published/rel_shaw_cifar10_32px_seed0"
    logs, parked = tmp_path / "logs", tmp_path / "results" / "study_parked"
    make_run(logs / run / "version_0", "checkpoints/last.ckpt", "checkpoints/best-epoch3-step9.ckpt", "metrics.csv")
    make_run(logs / run / "version_0", "figures/attention.png")
    make_run(logs / "cifar10_study/none_cifar10_32px_seed0/version_0", "results.json", "checkpoints/last.ckpt")
    study(tmp_path, env, "park")
    parked_files = sorted(str(p.relative_to(parked)) for p in parked.rglob("*") if p.is_file())
    assert parked_files == [  # the interrupted run only, its checkpoints and logs, no figures
        f"{run}/version_0/checkpoints/best-epoch3-step9.ckpt",
        f"{run}/version_0/checkpoints/last.ckpt",
        f"{run}/version_0/metrics.csv",
    ]
    shutil.rmtree(logs)  # a new machine: only the checkout, with the parked run
    calls = study(tmp_path, env, "published")
    assert calls == [
        f"train.py experiment=cifar10_published pos=rel_shaw seed=0 paths.log_dir={logs} {QUIET} resume=true"
    ]  # continued from the parked last.ckpt, not started again
    assert not (parked / run).exists()  # archived: the parked copy is gone
    assert (tmp_path / "results" / "study_logs" / run / "version_0" / "results.json").is_file()


def test_park_waits_for_a_running_study(tmp_path):
    env = fake_env(tmp_path)
    (tmp_path / "logs").mkdir()
    with open(tmp_path / "logs" / ".study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running study.sh holds it
        result = subprocess.run(["bash", "scripts/study.sh", "park"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 2 and result.stderr.startswith("error: another study.sh is training into")


def settable_variables() -> list[str]:
    """The variables a user sets study.sh with: those assigned from themselves with a default."""
    script = (ROOT / "scripts" / "study.sh").read_text()
    return sorted(set(re.findall(r"\b([A-Z0-9_]+)=\$\{\1:?-", script)))


BAD_VALUES = {  # family (how a variable's name ends) -> (a bad value, words of the one error line)
    "NATIVE_SIZES": [("32:0", "must be <size>:<seeds> words with sizes below the native 32px"),
                     ("16", "must be <size>:<seeds> words")],
    "RRC_SIZES": [("16:a", "must be <size>:<seeds> words")],
    "SEEDS": [("-1", "must list seeds 0..4294967295"), ("4294967296", "must list seeds 0..4294967295"),
              ("0,,1", "must list seeds 0..4294967295 separated by commas"), ("a", "must list seeds")],
    "SCHEMES": [("2d_sin,nosuch", "names no scheme 'nosuch'; the schemes are 1d_learned,"),
                ("2d_sin,", "must list schemes separated by commas")],
    "SIZES": [("[32,0]", "must be lists of positive sizes in brackets"), ("32,48", "must be lists of positive sizes")],
    "LIMIT": [("0", "must be a positive number of test images"), ("2k", "must be a positive number of test images")],
    "DATASET": [("imagenet", "is not a study; use DATASET=cifar10 or DATASET=fmnist")],
    "AT_ONCE": [("0", "must be a number of runs from 1 to the"), ("10000", "must be a number of runs from 1 to the"),
                ("two", "must be a number of runs")],
    "CURRICULUM": [("[[16,5],[32]]", "must be [size,epochs] phases in brackets, e.g. CURRICULUM=[[16,5],[24,5],"),
                   ("16,5", "must be [size,epochs] phases"), ("[[16,5],[32,5]", "must be [size,epochs] phases"),
                   ("[[0,5],[32,10]]", "must be [size,epochs] phases"), ("[[16,5] [32,10]]", "must be [size,")],
}  # fmt: skip
FREE = {"LOGS", "RESULTS", "ARCHIVE", "PARKED"}  # folders: any path


def family(variable: str) -> str:
    return next(end for end in BAD_VALUES if variable.endswith(end))


CHECKED = [(v, value, words) for v in settable_variables() if v not in FREE for value, words in BAD_VALUES[family(v)]]


def test_every_settable_variable_belongs_to_a_checked_family():
    assert {v for v, _, _ in CHECKED} | FREE == set(settable_variables())
    assert {"SEEDS", "FINETUNE_SEEDS", "SCHEMES", "EXTRAP_LIMIT", "DATASET", "MIXED_SIZES"} <= set(settable_variables())


@pytest.mark.parametrize("variable, value, words", CHECKED, ids=[f"{v}={value}" for v, value, _ in CHECKED])
def test_a_bad_setting_is_one_error_line_before_anything_runs(variable, value, words, tmp_path):
    env = {**fake_env(tmp_path), variable: value}
    result = subprocess.run(["bash", "scripts/study.sh", "runs"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and not result.stdout
    assert result.stderr.startswith(f"error: {variable}={value} ") and words in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "calls").exists() and not (tmp_path / "logs").exists()


def test_a_missing_cifar10_copy_and_an_unknown_step_are_refused_before_anything_runs(tmp_path):
    for env, step, words in [
        ({**fake_env(tmp_path), "CIFAR10_ROOT": str(tmp_path / "nope")}, "runs", "CIFAR10_ROOT="),
        (fake_env(tmp_path), "rnus", "unknown step 'rnus'"),
    ]:
        result = subprocess.run(["bash", "scripts/study.sh", step], cwd=ROOT, env=env, capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.startswith("error: ") and words in result.stderr
        assert not (tmp_path / "logs").exists()


def test_native_runs_train_low_evaluate_up_to_native_pixels_and_fine_tune_seed_0_at_32px(tmp_path):
    env = fake_env(tmp_path, NATIVE_SCHEMES="2d_sin,cpe", NATIVE_SIZES="16:0,1 24:0", NATIVE_RRC_SCHEMES="cpb")
    calls = study(tmp_path, env, "native")
    logs, native = tmp_path / "logs", tmp_path / "logs" / "native"
    run = "cifar10_study/2d_sin_cifar10_16px_seed0"
    best = f"{native}/{run}/version_0/checkpoints/best-epoch1-step9.ckpt"
    assert calls[:3] == [
        f"train.py experiment=cifar10_study pos=2d_sin seed=0 paths.log_dir={native} {QUIET} img_size=16",
        f"-m vitpos.evaluate ckpt={best} img_sizes=[16,24,32] resize_mode=all limit=2000 "
        f"out={native}/{run}/version_0/transfer_native",  # every conversion, without and with log temperature
        f"train.py experiment=cifar10_finetune pos=2d_sin seed=0 paths.log_dir={native} {QUIET} img_size=32 "
        f"finetune_from={best}",
    ]
    trained = [  # scheme, seed and what follows the recipe's shared arguments
        (c.split(" pos=")[1].split()[0] + " seed=" + c.split(" seed=")[1].split()[0], c.split(f"{QUIET} ")[1])
        for c in calls
        if c.startswith("train.py")
    ]
    assert trained == [  # seed by seed: each size, then the twins
        ("2d_sin seed=0", "img_size=16"),
        ("2d_sin seed=0", f"img_size=32 finetune_from={best}"),
        ("cpe seed=0", "img_size=16"),
        ("cpe seed=0", f"img_size=32 finetune_from={best.replace('2d_sin', 'cpe')}"),
        ("2d_sin seed=0", "img_size=24"),
        ("2d_sin seed=0", f"img_size=32 finetune_from={best.replace('16px', '24px')}"),
        ("cpe seed=0", "img_size=24"),
        ("cpe seed=0", f"img_size=32 finetune_from={best.replace('2d_sin', 'cpe').replace('16px', '24px')}"),
        ("cpb seed=0", "img_size=16 data.augment=rrc run_name=cpb_rrc_cifar10_16px_seed0"),  # no fine-tune
        ("2d_sin seed=1", "img_size=16"),  # seed 1: no fine-tune
        ("cpe seed=1", "img_size=16"),
    ]
    evaluated = [c for c in calls if c.startswith("-m vitpos.evaluate")]
    assert len(evaluated) == 7 and all("img_sizes=[16,24,32] resize_mode=all" in c for c in evaluated)
    archive = tmp_path / "results" / "study_logs"
    assert sorted(p.name for p in archive.iterdir()) == ["native"]  # the 32 px study's folders hold only its runs
    assert sorted(str(p.relative_to(archive / "native")) for p in (archive / "native").glob("*/*")) == [
        "cifar10_finetune/2d_sin_cifar10_32px_from_16px_seed0",
        "cifar10_finetune/2d_sin_cifar10_32px_from_24px_seed0",
        "cifar10_finetune/cpe_cifar10_32px_from_16px_seed0",
        "cifar10_finetune/cpe_cifar10_32px_from_24px_seed0",
        "cifar10_study/2d_sin_cifar10_16px_seed0",
        "cifar10_study/2d_sin_cifar10_16px_seed1",
        "cifar10_study/2d_sin_cifar10_24px_seed0",
        "cifar10_study/cpb_rrc_cifar10_16px_seed0",
        "cifar10_study/cpe_cifar10_16px_seed0",
        "cifar10_study/cpe_cifar10_16px_seed1",
        "cifar10_study/cpe_cifar10_24px_seed0",
    ]
    assert (archive / "native" / run / "version_0" / "transfer_native" / "resolution.csv").is_file()
    assert not list(archive.rglob("*.ckpt"))
    assert study(tmp_path, env, "native") == calls  # all done
    shutil.rmtree(logs)  # another machine: the archive says it is done
    assert study(tmp_path, env, "native") == calls


def test_an_interrupted_native_run_is_parked_and_resumed_on_another_machine(tmp_path):
    env = fake_env(tmp_path, NATIVE_SCHEMES="rope_mixed", NATIVE_SIZES="24:0", NATIVE_RRC_SCHEMES="")
    run = "native/cifar10_study/rope_mixed_cifar10_24px_seed0"
    logs, parked = tmp_path / "logs", tmp_path / "results" / "study_parked"
    make_run(logs / run / "version_0", "checkpoints/last.ckpt", "checkpoints/best-epoch3-step9.ckpt")
    study(tmp_path, env, "park")
    assert (parked / run / "version_0" / "checkpoints" / "last.ckpt").is_file()
    shutil.rmtree(logs)
    calls = study(tmp_path, env, "native")
    assert calls[0] == (
        f"train.py experiment=cifar10_study pos=rope_mixed seed=0 paths.log_dir={logs}/native {QUIET} img_size=24 "
        "resume=true"
    )
    assert [c.split()[0] for c in calls] == ["train.py", "-m", "train.py"]  # then evaluated and fine-tuned
    assert not (parked / run).exists()
    assert (tmp_path / "results" / "study_logs" / run / "version_0" / "results.json").is_file()


def test_native_schemes_default_to_every_scheme_of_configs_pos(tmp_path):
    env = fake_env(tmp_path, SCHEMES="none", SEEDS="0", NATIVE_SIZES="16:0", NATIVE_RRC_SCHEMES="")
    result = subprocess.run(["bash", "scripts/study.sh", "status"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    native = [line.split()[-1] for line in result.stdout.splitlines() if " native/" in line]
    schemes = sorted(p.stem for p in (ROOT / "configs" / "pos").glob("*.yaml"))
    assert native == [f"native/cifar10_study/{pos}_cifar10_16px_seed0" for pos in schemes] and len(schemes) >= 14


def test_tables_write_the_native_study_apart_from_the_32px_study(tmp_path):
    env = fake_env(tmp_path, NATIVE_SCHEMES="cpb", NATIVE_SIZES="16:0", NATIVE_RRC_SCHEMES="cpb")
    study(tmp_path, env, "native")
    results = tmp_path / "results"
    calls = [c for c in study(tmp_path, env, "tables") if "vitpos.compare" in c]
    assert calls == [
        f"-m vitpos.compare {results}/study_logs/native/cifar10_study out={results}/cifar10_native",
        f"-m vitpos.compare {results}/study_logs/native/cifar10_finetune out={results}/cifar10_native_finetune",
    ]


def test_runs_at_once_trains_each_run_once_as_one_process_at_the_same_time(tmp_path):
    settings = dict(NATIVE_SCHEMES="2d_sin,cpe", NATIVE_SIZES="16:0,1", NATIVE_RRC_SCHEMES="cpb")
    (tmp_path / "alone").mkdir()
    alone = study(tmp_path / "alone", fake_env(tmp_path / "alone", **settings), "native")
    env = fake_env(tmp_path, RUNS_AT_ONCE="2", FAKE_TRAIN_SECONDS="0.5", **settings)
    result = subprocess.run(["bash", "scripts/study.sh", "native"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    layouts = {"cifar10_study": "layout-recipe=cifar10_study", "cifar10_finetune": "layout-recipe=cifar10_finetune"}
    trains = [c for c in calls if c.startswith("train.py")]
    # every run of a lone study.sh, once, each with the one-process layout of its recipe
    assert all(c.endswith(" " + layouts[c.split("experiment=")[1].split()[0]]) for c in trains)
    assert sorted(c.rsplit(" ", 1)[0].replace(str(tmp_path), "") for c in trains) == sorted(
        c.replace(str(tmp_path / "alone"), "") for c in alone if c.startswith("train.py")
    )
    assert len([c for c in calls if c.startswith("-m vitpos.evaluate")]) == len(trains) - 2  # 2 fine-tunes
    # one thread each, two trainings at the same time, each copy naming itself
    times = [line.split(" ", 3) for line in (tmp_path / "calls.times").read_text().splitlines()]
    assert {threads for threads, *_ in times} == {"1"}
    spans = {}
    for _, when, _, call in times:
        if call.startswith("train.py"):
            spans.setdefault(call, []).append(float(when))
    assert any(a[0] < b[1] and b[0] < a[1] for a in spans.values() for b in spans.values() if a is not b)
    assert "worker 1] train" in result.stdout and "worker 2] train" in result.stdout
    assert not (tmp_path / "logs" / ".claims").exists()
    assert study(tmp_path, env, "native") == calls  # all done


def test_an_interrupted_run_resumes_in_the_layout_it_started_with(tmp_path):
    run = tmp_path / "logs" / "native" / "cifar10_study" / "cpe_cifar10_16px_seed1"
    make_run(run / "version_0", "config.yaml", "checkpoints/last.ckpt")
    for at_once in ("1", "2"):
        env = fake_env(tmp_path, NATIVE_SCHEMES="cpe", NATIVE_SIZES="16:1", NATIVE_RRC_SCHEMES="", RUNS_AT_ONCE=at_once)
        (train,) = [c for c in study(tmp_path, env, "native") if c.startswith("train.py")]
        assert train.endswith("img_size=16 resume=true layout-saved=config.yaml")
        shutil.rmtree(tmp_path / "results")  # not done: it trains again from the same interrupted folder
        shutil.rmtree(run / "version_1", ignore_errors=True)
        (tmp_path / "calls").unlink()
        (run / "version_0" / "results.json").unlink()


def test_process_layout_trains_a_recipe_as_one_process_of_its_global_batch(tmp_path):
    def layout(*args):
        result = subprocess.run(
            [sys.executable, "scripts/process_layout.py", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    # cifar10_study: trainer=cpu_ddp, 2 processes of 64 images
    assert layout("recipe", "cifar10_study") == "trainer.devices=1 trainer.strategy=auto data.batch_size=128"
    assert layout("recipe", "cifar10_finetune") == "trainer.devices=1"  # trainer=default: the batch is global
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  devices: 2\n  strategy: ddp\ndata:\n  batch_size: 64\n")
    assert layout("saved", str(config)) == "trainer.devices=2 trainer.strategy=ddp data.batch_size=64"
