"""`pip install .` (not editable) gives a working vitpos: configs travel with the package, and
training, evaluation and comparison run from a folder outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_built_wheel_trains_evaluates_and_compares_outside_the_checkout(tmp_path):
    site = tmp_path / "site"  # the wheel's install, first on the path: it, not the checkout, is imported

    def run(*command, cwd=tmp_path):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(site),
        }
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{command}: {result.stdout[-1500:]}{result.stderr[-2500:]}"
        return result.stdout

    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path / "dist"),
        str(ROOT),
    )
    wheel = next((tmp_path / "dist").glob("vitpos-*.whl"))
    run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel))
    python = sys.executable  # its dependencies (torch, Lightning, ...) as installed; vitpos from the wheel
    location = run(python, "-c", "import vitpos; print(vitpos.__file__)")
    assert location.startswith(str(site)), location

    work = tmp_path / "elsewhere"
    work.mkdir()
    assert "pos: 1d_learned" in run(python, "-m", "vitpos", "--help", cwd=work)
    run(
        python,
        "-m",
        "vitpos",
        "pos=rel_bias",
        "data=synthetic",
        "model=vit_70k",
        "trainer.max_steps=3",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "data.num_train=512",
        "data.val_size=64",
        "data.num_test=64",
        "trainer.enable_progress_bar=false",
        "trainer.devices=1",
        "callbacks.figures=null",
        cwd=work,
    )
    assert "test acc" in run(python, "-m", "vitpos.evaluate", "ckpt=logs", "img_sizes=[32,48]", cwd=work)
    assert "rel_bias" in run(python, "-m", "vitpos.compare", "logs", cwd=work)
