"""scripts/slurm_ddp.sbatch: a first start trains a new run; a requeued start resumes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "env, resume",
    [
        ({}, "resume=false"),  # the first submission: no last.ckpt exists, resume=true would refuse
        ({"SLURM_RESTART_COUNT": "0"}, "resume=false"),
        ({"SLURM_RESTART_COUNT": "2"}, "resume=true"),  # requeued after a pre-emption
        ({"SLURM_RESTART_COUNT": "2", "VITPOS_RESUME": "false"}, "resume=false"),
        ({"VITPOS_RESUME": "true"}, "resume=true"),
    ],
)
def test_the_sbatch_script_resumes_only_a_requeued_job(tmp_path, env, resume):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')  # srun prints the command it would start
    (fake / "srun").chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if k not in ("SLURM_RESTART_COUNT", "VITPOS_RESUME")}
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm_ddp.sbatch"), "seed=3"],
        env={**clean, **env, "PATH": f"{fake}{os.pathsep}{clean['PATH']}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    assert words[:2] == ["python", "train.py"] and resume in words and words[-1] == "seed=3"
    assert [w for w in words if w.startswith("resume=")] == [resume]
