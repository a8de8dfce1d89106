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
  run=${arg[paths.log_dir]}/${arg[experiment]}/${arg[pos]}_cifar10_32px_seed${arg[seed]}
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


def test_study_skips_finished_steps_resumes_interrupted_runs_and_retrains_lost_checkpoints(tmp_path):
    logs = tmp_path / "study"
    study = logs / "cifar10_study"
    make_run(study / "done_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/best-epoch9-step90.ckpt",
             "transfer_default/resolution.csv")
    make_run(study / "lost_cifar10_32px_seed0" / "version_0", "results.json", "checkpoints/last.ckpt")
    make_run(study / "killed_cifar10_32px_seed0" / "version_0", "checkpoints/last.ckpt")
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}", CALLS=str(tmp_path / "calls"),
               SCHEMES="done,lost,killed", SEEDS="0", LOGS=str(logs), DATASET="cifar10")
    env.pop("CIFAR10_ROOT", None)
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
    result = subprocess.run(["bash", "scripts/study.sh", "runs"], cwd=ROOT, capture_output=True, text=True,
                            env=dict(os.environ, DATASET="mnist"))
    assert result.returncode == 2 and result.stderr.startswith("error: DATASET=mnist is not a study")
