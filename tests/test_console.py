"""What a run prints to a log file (stdout not a terminal): the start line says where it runs and
how, progress is a line every 5% of the run with its ETA, and third-party noise is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vitpos.precision import bf16_supported, cpu_name

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_logged_to_a_file_is_short_and_says_what_matters(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "data=synthetic",
            "model=vit_micro",
            "data.num_train=1280",
            "data.val_size=128",
            "data.num_test=128",
            "data.batch_size=16",
            "trainer.max_epochs=2",
            "trainer.accelerator=cpu",
            "callbacks.figures=null",
            "trainer.log_every_n_steps=1",
            "pos=2d_sin",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    console = run.stdout + run.stderr
    start = next(line for line in run.stdout.splitlines() if line.startswith("vitpos: run "))
    native = "native bf16" if bf16_supported("cpu") else "no native bf16"
    assert f"on CPU {cpu_name()} (" in start and native in start and "M params" in start
    progress = [line for line in run.stdout.splitlines() if line.startswith("vitpos: step ")]
    assert 20 <= len(progress) <= 21  # 144 steps: one line every 5%, the last at 100%
    assert progress[-1].startswith("vitpos: step 144/144 (100%) | epoch 2/2") and "run ETA" in progress[-1]
    for noise in ("LeafSpec", "💡", "Total Flops", "sync_dist=True", "\r"):
        assert noise not in console, noise
    assert len(console.encode()) < 10_000
