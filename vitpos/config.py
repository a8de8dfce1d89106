"""Config composition shared by train.py and the CLIs: the same `configs/` tree, composed as
train.py composes it, so `data=<name>` means the same everywhere; objects built from it."""

from __future__ import annotations

import inspect
import re
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
        target = str(config.get("_target_", ""))
        if isinstance(error.__cause__, MisconfigurationException):
            raise ConfigError(f"{target.rsplit('.', 1)[-1]}: {' '.join(str(error.__cause__).split())}") from None
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(error.__cause__))
        if isinstance(error.__cause__, TypeError) and unexpected:  # e.g. +data.batchsize=10
            raise ConfigError(
                f"{target.rsplit('.', 1)[-1]} has no setting {unexpected.group(1)!r}; it takes "
                f"{', '.join(settings_of(hydra.utils.get_object(target)))}"
            ) from None
        raise


def data_config_names() -> list[str]:
    """The data configs a run can name (`data=cifar10`): configs/data/*.yaml."""
    return sorted(path.stem for path in (CONFIG_DIR / "data").glob("*.yaml"))


def data_config(name: str) -> dict:
    """configs/data/<name>.yaml composed as train.py would (interpolations resolved)."""
    names = data_config_names()
    if name not in names:
        raise ConfigError(f"data={name!r} is not a data config; use one of {', '.join(names)}")
    return OmegaConf.to_container(compose_train_config([f"data={name}"]).data, resolve=True)


def data_settings(data, recorded: dict | None, source: str) -> dict:
    """The data config a CLI reads a model's images with. `data`: None (`recorded`, the config
    `source` was trained on), a configs/data name (that config instead), or a mapping, from
    `data.<key>=value` options (`recorded` with those settings replaced, e.g. data.root=<copy>)."""
    import hydra

    if isinstance(data, str):
        return data_config(data)
    if not recorded:
        raise ConfigError(f"{source} records no data config; pass data=<name of configs/data/*.yaml>")
    overrides = to_container(data) or {}
    target = hydra.utils.get_object(recorded["_target_"])
    takes = settings_of(target)
    stale = sorted(set(recorded) - {"_target_"} - set(takes))
    if stale:
        name = getattr(target, "name", "<name of configs/data/*.yaml>")
        raise ConfigError(
            f"{source} records {', '.join(f'data.{k}' for k in stale)}, which this vitpos no longer takes (an older "
            f"version wrote it); pass data={name} to read its images with today's configs/data/{name}.yaml"
        )
    unknown = sorted(set(overrides) - set(recorded) - set(takes))
    if unknown:
        raise ConfigError(
            f"unknown data setting(s) {', '.join(f'data.{k}' for k in unknown)}; "
            f"{recorded['_target_'].rsplit('.', 1)[-1]} takes {', '.join(f'data.{k}' for k in takes)}"
        )
    return {**recorded, **overrides}


def settings_of(target) -> list[str]:
    """The keyword arguments a class (its own and those its `**kwargs` pass to its bases) or function takes."""
    names: list[str] = []
    for function in [c.__init__ for c in target.__mro__] if isinstance(target, type) else [target]:
        parameters = inspect.signature(function).parameters.values()
        names += [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return list(dict.fromkeys(names))
