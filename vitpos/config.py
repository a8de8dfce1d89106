"""Config composition shared by train.py and the CLIs: the same `configs/` tree, composed as
train.py composes it, so `data=<name>` means the same everywhere."""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError, VitposError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # packaged with vitpos (pip install . keeps it)


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


def finetune_config(cfg):
    """The run's config for `finetune_from=`, from the command line's overrides: the checkpoint's
    dataset unless `data=` (or `experiment=`) is given, and a refusal of `model.*` / `pos.*`
    overrides that the checkpoint's architecture would silently replace."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_class

    from .resize import read_checkpoint

    if not cfg.get("finetune_from") or not HydraConfig.initialized():
        return cfg
    overrides = list(HydraConfig.get().overrides.task)
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    checkpoint = read_checkpoint(cfg.finetune_from)
    refuse_architecture_overrides(cfg, keys, checkpoint["hyper_parameters"]["model"])
    if any(key in ("data", "experiment") for key in keys):
        return cfg
    data = checkpoint["hyper_parameters"].get("data") or {}
    name = get_class(data["_target_"]).name if "_target_" in data else None
    if name is None or name == get_class(cfg.data._target_).name:
        return cfg
    print(f"vitpos: fine-tuning on data={name}, the dataset of {cfg.finetune_from} (data=<name> picks another)")
    return compose(config_name="train", overrides=[*overrides, f"data={name}"])


def refuse_architecture_overrides(cfg, keys: list[str], trained: dict) -> None:
    """A fine-tune keeps the checkpoint's architecture: overridden model/pos settings that differ
    from it are an error listing them (as resume does), not silently dropped."""
    model_keys = set(cfg.model) if "model" in keys else {k.split(".", 1)[1] for k in keys if k.startswith("model.")}
    changed = [f"model.{k}={cfg.model[k]} (checkpoint: {trained[k]})" for k in cfg.model
               if k in model_keys and k in trained and trained[k] != cfg.model[k]]
    for key in keys:
        if key.startswith("pos.") and key != "pos.name":
            name = key.split(".", 1)[1]
            if trained["pos_kwargs"].get(name) != cfg.pos.get(name):
                changed.append(f"{key}={cfg.pos.get(name)} (checkpoint: {trained['pos_kwargs'].get(name)})")
    if changed:
        raise ConfigError(f"fine-tuning keeps the checkpoint's architecture, but {', '.join(changed)}; drop "
                          f"these overrides (resize_mode= picks how positions are converted)")


def parse_options(argv: list[str], defaults: dict, doc: str, extra_keys=()) -> DictConfig:
    """The one command-line convention of the vitpos CLIs: `key=value` options in Hydra's override
    syntax (`img_sizes=[32,48]`, `ckpt=[a,b]`) over `defaults`; `--help` prints `doc` and exits.
    `extra_keys` are accepted beyond the defaults (model arguments for a fresh model)."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(doc.strip())
        raise SystemExit(0)
    loose = [arg for arg in argv if "=" not in arg]
    if loose:
        raise ConfigError(f"expected key=value options, got {loose[0]!r}; see --help")
    try:
        options = OmegaConf.from_dotlist(argv)
    except Exception as error:  # OmegaConf's grammar errors have several types
        raise ConfigError(f"cannot parse the options ({str(error).splitlines()[0]}); see --help") from None
    unknown = set(options) - set(defaults) - set(extra_keys)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(sorted(unknown))}; valid: "
                          f"{', '.join([*defaults, *sorted(extra_keys)])}")
    return OmegaConf.merge(OmegaConf.create(defaults), options)
