"""scripts/study.sh resumes a study: finished steps are skipped, an interrupted run is continued
from its last.ckpt, and a run whose checkpoint is gone is trained again. `python` is replaced by
a stand-in that records each command and writes the files a real run or evaluation would."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
declare -A arg
for word in "$@"; do [[ $word == *=* ]] && arg[${word%%=*}]=${word#*=}; done
if [ "$1" = train.py ]; then
  fuzzy=$([ "${arg[pos.fuzzy]:-}" = true ] && echo _fuzzy || true)
  sizes=$(echo "${arg[train_img_sizes]:-}" | tr -d '[]' | tr , -)
  mixed=$([ -n "$sizes" ] && echo "_train${sizes}px" || true)
  run=${arg[paths.log_dir]}/${arg[experiment]}/${arg[pos]}${fuzzy}_cifar10_32px${mixed}_seed${arg[seed]}
  if [ -n "${arg[resume]:-}" ]; then version=$(ls -d "$run"/version_* | tail -n 1); else
    version=$run/version_$(ls -d "$run"/version_* 2> /dev/null | wc -l); fi
  mkdir -p "$version/checkpoints" && touch "$version/results.json" "$version/checkpoints/best-epoch1-step9.ckpt"
else
  mkdir -p "${arg[out]}" && touch "${arg[out]}/resolution.csv"
fi
"""


def make_run(folder: Path, *files: str) -> None:
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).touch()


def fake_env(tmp_path: Path, logs: Path, **settings) -> dict:
    """The environment of a study.sh run whose `python` is FAKE_PYTHON."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake.parent}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls"),
        LOGS=str(logs),
        DATASET="cifar10",
        **settings,
    )
    env.pop("CIFAR10_ROOT", None)
    return env


def test_study_skips_finished_steps_resumes_interrupted_runs_and_retrains_lost_checkpoints(tmp_path):
    logs = tmp_path / "study"
    study = logs / "cifar10_study"
    make_run(
        study / "done_cifar10_32px_seed0" / "version_0",
        "results.json",
        "checkpoints/best-epoch9-step90.ckpt",
        "transfer_default/resolution.csv",
    )
    make_run(study / "lost_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/last.ckpt")
    make_run(study / "killed_cifar10_32px_seed0" / "version_0", "checkpoints/last.ckpt")
    env = fake_env(tmp_path, logs, SCHEMES="done,lost,killed", SEEDS="0")
    result = subprocess.run(["bash", "scripts/study.sh", "runs"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    trains = [c for c in calls if c.startswith("train.py")]
    assert len(trains) == 2 and not any("pos=done" in c for c in calls)  # finished and evaluated: nothing to do
    lost = next(c for c in trains if "pos=lost" in c)
    assert "resume=true" not in lost and (study / "lost_cifar10_32px_seed0" / "version_1" / "results.json").is_file()
    killed = next(c for c in trains if "pos=killed" in c)
    assert "resume=true" in killed and not (study / "killed_cifar10_32px_seed0" / "version_1").exists()
    assert all("experiment=cifar10_study" in c and f"paths.log_dir={logs}" in c for c in trains)
    evaluations = [c for c in calls if c.startswith("-m vitpos.evaluate")]
    assert len(evaluations) == 2 and all("img_sizes=[32,48,64]" in c for c in evaluations)
    assert any("lost_cifar10_32px_seed0/version_1/checkpoints/best-epoch1-step9.ckpt" in c for c in evaluations)
    again = subprocess.run(["bash", "scripts/study.sh", "runs"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and len((tmp_path / "calls").read_text().splitlines()) == len(calls)  # all done


def test_study_refuses_an_unknown_dataset():
    result = subprocess.run(
        ["bash", "scripts/study.sh", "runs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=dict(os.environ, DATASET="mnist"),
    )
    assert result.returncode == 2 and result.stderr.startswith("error: DATASET=mnist is not a study")


def test_fuzzy_and_mixed_twins_then_every_conversion_of_every_finished_run(tmp_path):
    logs = tmp_path / "study"
    study = logs / "cifar10_study"
    for name in ("2d_sin_cifar10_32px_seed0", "none_cifar10_32px_seed0"):
        make_run(study / name / "version_0", "results.json", "checkpoints/best-epoch9-step90.ckpt")
    env = fake_env(
        tmp_path, logs, SCHEMES="2d_sin,none,cpe", SEEDS="0", FUZZY_SCHEMES="1d_learned", MIXED_SCHEMES="rope_axial"
    )
    for step in ("fuzzy", "mixed", "extrapolation"):
        result = subprocess.run(["bash", "scripts/study.sh", step], cwd=ROOT, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    quiet = "trainer.enable_progress_bar=false callbacks.figures=null"
    assert [c for c in calls if c.startswith("train.py")] == [
        f"train.py experiment=cifar10_study pos=1d_learned pos.fuzzy=true seed=0 paths.log_dir={logs} {quiet}",
        f"train.py experiment=cifar10_study pos=rope_axial seed=0 paths.log_dir={logs} {quiet} "
        "train_img_sizes=[32,48,64] batch_by_tokens=true",
    ]
    evaluated = {
        call.split("ckpt=")[1].split("/version_0")[0].rsplit("/", 1)[1]: call
        for call in calls
        if "img_sizes=[32,48,64,96]" in call
    }
    # cpe never finished: skipped; every other run once, with every conversion of its scheme
    assert sorted(evaluated) == [
        "1d_learned_fuzzy_cifar10_32px_seed0",
        "2d_sin_cifar10_32px_seed0",
        "none_cifar10_32px_seed0",
        "rope_axial_cifar10_32px_train32-48-64px_seed0",
    ]
    assert all("resize_mode=all" in call and "limit=2000" in call for call in evaluated.values())
    assert evaluated["2d_sin_cifar10_32px_seed0"].endswith("/2d_sin_cifar10_32px_seed0/version_0/extrapolation")
    before = len(calls)
    again = subprocess.run(
        ["bash", "scripts/study.sh", "extrapolation"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and len((tmp_path / "calls").read_text().splitlines()) == before  # all done
