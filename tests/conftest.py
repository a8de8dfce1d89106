"""Shared fixtures: a Hydra config composed exactly as `train.py` does, shrunk for CPU tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # `-n 2`: the workers share the cores, one thread each
        torch.set_num_threads(1)


def compose_config(overrides: list[str], tmp_path: Path) -> DictConfig:
    """Compose configs/train.yaml with `overrides`, logging and data under `tmp_path`."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            config_name="train",
            overrides=[
                f"paths.log_dir={tmp_path / 'logs'}",
                f"paths.data_dir={tmp_path / 'data'}",
                "trainer.accelerator=cpu",
                "trainer.enable_progress_bar=false",
                "trainer.num_sanity_val_steps=0",
                *overrides,
            ],
        )


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: one intra-op thread is faster, and immune to a busy machine (two threads
    spin-waiting against another process ran the model tests 10x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def make_config(tmp_path):
    """`make_config(overrides)` -> the composed config, writing under this test's tmp_path."""
    return lambda overrides: compose_config(overrides, tmp_path)


@pytest.fixture
def tiny_overrides() -> list[str]:
    """A micro model on a small synthetic set: a full train+test run takes a few seconds."""
    return [
        "data=synthetic",
        "model=vit_70k",
        "data.num_train=640",
        "data.num_test=128",
        "data.val_size=128",
        "data.batch_size=64",
        "trainer.max_steps=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.precision=32-true",
        "callbacks.figures=null",
    ]
