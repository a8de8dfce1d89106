"""Config composition shared by train.py and the CLIs: the same `configs/` tree, composed as
train.py composes it, so `data=<name>` means the same everywhere."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def compose_train_config(overrides: list[str] = ()):
    """configs/train.yaml with `overrides`, as `python train.py <overrides>` would see it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def data_config(name: str) -> dict:
    """configs/data/<name>.yaml composed as train.py would (interpolations resolved)."""
    return OmegaConf.to_container(compose_train_config([f"data={name}"]).data, resolve=True)
