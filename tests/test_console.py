"""What a run prints to a log file (stdout not a terminal): the start line says where it runs and
how, progress is a line every 5% of the run with its ETA, and third-party noise is gone."""

from __future__ import annotations

import io
import logging
import os
import time
from pathlib import Path
from types import SimpleNamespace

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from vitpos.console import LIGHTNING_LOGGERS, quiet_third_party
from vitpos.precision import bf16_supported, cpu_name
from vitpos.progress import ProgressBar

ROOT = Path(__file__).resolve().parents[1]


def test_a_run_logged_to_a_file_is_short_and_says_what_matters(tmp_path):
    run = forked_cli.run(
        [
            str(ROOT / "train.py"),
            "data=synthetic",
            "model=vit_70k",
            "data.num_train=1280",
            "data.val_size=128",
            "data.num_test=128",
            "data.batch_size=16",
            "trainer.max_epochs=2",
            "trainer.accelerator=cpu",
            "trainer.devices=1",  # one process: 2 on this CPU would re-run the command line
            "callbacks.figures=null",
            "trainer.log_every_n_steps=1",
            "pos=2d_sin",
        ],
        cwd=tmp_path,
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
    for noise in ("LeafSpec", "💡", "Total Flops", "sync_dist=True", "\r", "GPU available", "TPU available"):
        assert noise not in console, noise
    assert len(console.encode()) < 10_000


@pytest.mark.parametrize(
    "message",
    [
        "GPU available: False, used: False",
        "GPU available: True (cuda), used: True",
        "TPU available: False, using: 0 TPU cores",
        "HPU available: False, using: 0 HPUs",
        "💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels]",
        f"{'-' * 100}\ndistributed_backend=gloo\nAll distributed processes registered. Starting with 2 processes\n",
    ],
)
def test_lightnings_device_and_process_banners_are_silenced_and_nothing_else(message):
    quiet_third_party()

    def passes(name: str, text: str) -> bool:
        return bool(logging.getLogger(name).filter(logging.LogRecord(name, logging.INFO, "", 0, text, None, None)))

    for name in LIGHTNING_LOGGERS:
        assert not passes(name, message)
        assert passes(name, "`Trainer.fit` stopped: `max_steps=2` reached.")
        assert passes(name, "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2")


def test_the_progress_bar_keeps_the_runs_eta_within_100_columns():
    """A long line: a 3-digit epoch count, 4-digit steps, an hour-long epoch, a run ETA in hours and
    every postfix field (the epoch's train/loss too, which Lightning adds from the second epoch); with
    even more digits tqdm cuts the line's end, never the run's ETA, which comes first."""
    bar = ProgressBar()
    trainer = SimpleNamespace(
        global_step=123_456,
        progress_bar_metrics={"train/loss_step": 2.3456, "train/loss_epoch": 2.3456, "val/acc_best": 0.98765},
    )
    bar.clock.started, bar.clock.first_step, bar.clock.total = time.perf_counter() - 36_000, 0, 200_000
    bar.images_per_s = 2_345.6
    eta = bar.clock.eta(trainer)
    assert len(eta) == 8  # hh:mm:ss
    shown = Tqdm(
        total=9_999, initial=9_876, desc="Epoch 100/100", file=io.StringIO(), ncols=100, bar_format=bar.BAR_FORMAT
    )
    shown.start_t -= 3_599  # an epoch of almost an hour: elapsed 59:59
    shown.set_postfix(bar.get_metrics(trainer, None), refresh=False)
    line = shown.format_meter(**shown.format_dict)
    shown.close()
    assert len(line) <= 100 and f"run ETA={eta}" in line, line
    assert "loss=2.346" in line and "best val=98.77%" in line and "img/s=2346" in line, line
