"""scripts/recipes.sh trains RECIPES x SEEDS one after the other, seed by seed, skips a finished run,
resumes an interrupted one, records the machine of every sitting and writes the comparison.
`python` is replaced by a stand-in that records each command and writes the files a real run or
comparison would."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
declare -A arg
for word in "$@"; do [[ $word == *=* ]] && arg[${word%%=*}]=${word#*=}; done
if [ "$1" = train.py ]; then
  run=${arg[paths.log_dir]}/${arg[experiment]}/${arg[run_name]}
  if [ -n "${arg[resume]:-}" ]; then version=$(ls -d "$run"/version_* | tail -n 1); else
    version=$run/version_$(ls -d "$run"/version_* 2> /dev/null | wc -l); fi
  mkdir -p "$version/checkpoints"
  touch "$version/results.json" "$version/checkpoints/last.ckpt"
else
  mkdir -p "${arg[out]}" && touch "${arg[out]}/compare.md" "${arg[out]}/accuracy_vs_minutes.png"
fi
"""
QUIET = "trainer.enable_progress_bar=false callbacks.figures=null"


def fake_env(tmp_path: Path, **settings) -> dict:
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake.parent}:{os.environ['PATH']}",
        CALLS=str(tmp_path / "calls"),
        LOGS=str(tmp_path / "logs"),
        OUT=str(tmp_path / "out"),
        **settings,
    )
    env.pop("CIFAR10_ROOT", None)
    return env


def recipes(env: dict, step: str = "all") -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/recipes.sh", step], cwd=ROOT, env=env, capture_output=True, text=True)


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def train_call(logs: Path, recipe: str, seed: int, pos: str = "cpe") -> str:
    name = f"{recipe}_{pos}_seed{seed}"
    return f"train.py experiment={recipe} pos={pos} seed={seed} run_name={name} paths.log_dir={logs} {QUIET}"


def test_runs_go_seed_by_seed_then_the_comparison_and_the_machines(tmp_path):
    env = fake_env(tmp_path, SEEDS="0,1")
    result = recipes(env)
    assert result.returncode == 0, result.stderr
    logs, out = tmp_path / "logs", tmp_path / "out"
    assert calls(tmp_path) == [
        train_call(logs, "cifar10_cpu", 0),
        train_call(logs, "cifar10_curriculum", 0),
        train_call(logs, "cifar10_cpu", 1),
        train_call(logs, "cifar10_curriculum", 1),
        f"-m vitpos.compare {logs} out={out} reach=80",
    ]
    machine = (logs / "cifar10_cpu" / "cifar10_cpu_cpe_seed0" / "machine.txt").read_text().splitlines()
    assert len(machine) == 1 and machine[0].count(" | ") == 3 and " | load " in machine[0]
    table = (out / "machines.md").read_text().splitlines()
    assert table[2] == "| run | started | CPU | flags | load |" and len(table) == 4 + 4
    assert all(line.startswith("| cifar10_") and line.endswith(" |") for line in table[4:])
    # again: every run is done, so only the comparison runs
    assert recipes(env).returncode == 0
    assert calls(tmp_path)[5:] == [f"-m vitpos.compare {logs} out={out} reach=80"]


def test_an_interrupted_run_resumes_and_tagged_runs_have_their_own_names(tmp_path):
    logs = tmp_path / "logs"
    version = logs / "cifar10_cpu" / "cifar10_cpu_rope_axial_ema_seed0" / "version_0"
    (version / "checkpoints").mkdir(parents=True)
    (version / "checkpoints" / "last.ckpt").touch()  # interrupted: no results.json
    env = fake_env(
        tmp_path, RECIPES="cifar10_cpu", SEEDS="0", POS="rope_axial", ARGS="ema_decay=0.999 test_flip=true", TAG="ema"
    )
    result = recipes(env, "runs")
    assert result.returncode == 0, result.stderr
    (call,) = calls(tmp_path)
    assert call == (
        "train.py experiment=cifar10_cpu pos=rope_axial seed=0 run_name=cifar10_cpu_rope_axial_ema_seed0 "
        f"paths.log_dir={logs} {QUIET} "
        "ema_decay=0.999 test_flip=true resume=true"
    )
    assert (version / "results.json").is_file() and not (tmp_path / "out").exists()  # runs: no tables


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(SEEDS="0,x"), "error: SEEDS=0,x must be comma-separated non-negative integers"),
        (dict(RECIPES="cifar10_cpu,nope"), "error: RECIPES: no configs/experiment/nope.yaml"),
        (dict(POS="nope"), "error: POS=nope: no configs/pos/nope.yaml"),
        (dict(POS="../model/vit_800k"), "error: POS=../model/vit_800k: no configs/pos/"),
        (dict(REACH="120"), "error: REACH=120 must be a validation accuracy in percent"),
        (dict(ARGS="test_flip=true"), 'error: ARGS="test_flip=true" needs TAG=<word>'),
        (dict(TAG="a b"), "error: TAG=a b must be one word"),
    ],
)
def test_a_bad_variable_is_one_error_line_and_nothing_runs(tmp_path, settings, message):
    result = recipes(fake_env(tmp_path, **settings))
    assert result.returncode == 2 and result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert calls(tmp_path) == [] and not (tmp_path / "logs").exists()


def test_one_training_script_per_logs(tmp_path):
    (tmp_path / "logs").mkdir()
    with open(tmp_path / "logs" / ".study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running study.sh or recipes.sh holds it
        result = recipes(fake_env(tmp_path))
    assert result.returncode == 2 and result.stderr.startswith("error: another recipes.sh or study.sh")
    assert calls(tmp_path) == []
