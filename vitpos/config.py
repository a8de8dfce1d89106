"""Config composition shared by train.py and the CLIs: the same `configs/` tree, composed as
train.py composes it, so `data=<name>` means the same everywhere; objects built from it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from .errors import ConfigError, VitposError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # packaged with vitpos (pip install . keeps it)


def to_container(value):
    """A config node as plain Python (an int or a list stays as it is)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def override_key(override: str) -> str:
    """The key a Hydra override sets: `a.b=1`, `+a.b=1`, `++a.b=1` and `~a.b` -> `a.b`."""
    return override.split("=", 1)[0].lstrip("+~")


def compose_train_config(overrides: list[str] = ()):
    """configs/train.yaml with `overrides`, as `python train.py <overrides>` would see it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def instantiate(config, **kwargs):
    """`hydra.utils.instantiate`, re-raising a user error from the target as itself (Hydra wraps
    it in an InstantiationException with a traceback), and Lightning's check of its own arguments
    (`MisconfigurationException`, e.g. trainer.max_epochs=-5) as a one-line ConfigError; every CLI
    builds objects through it."""
    import hydra
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        return hydra.utils.instantiate(config, **kwargs)
    except InstantiationException as error:
        if isinstance(error.__cause__, VitposError):
            raise error.__cause__ from None
        if isinstance(error.__cause__, MisconfigurationException):
            target = str(config.get("_target_", "")).rsplit(".", 1)[-1]
            raise ConfigError(f"{target}: {' '.join(str(error.__cause__).split())}") from None
        raise


def data_config(name: str) -> dict:
    """configs/data/<name>.yaml composed as train.py would (interpolations resolved)."""
    return OmegaConf.to_container(compose_train_config([f"data={name}"]).data, resolve=True)
