"""Fine-tuning a checkpoint at another resolution: the run's config from the command line and the
checkpoint (its dataset by default; no silent change of its architecture), and its model
converted to the new size with the scheme's resize rule."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from .config import override_key, to_container
from .data import ImageDataModule
from .errors import ConfigError
from .model import VisionTransformer
from .resize import model_from_checkpoint, read_checkpoint


def finetune_config(cfg):
    """The run's config for `finetune_from=`, from the command line's overrides: the checkpoint's
    dataset unless `data=` (or `experiment=`) is given, the checkpoint's copy of it (its `data.root`)
    unless `data.root=` is given or the dataset differs, and a refusal of `model.*` / `pos.*`
    overrides that the checkpoint's architecture would silently replace."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.utils import get_class

    if not cfg.get("finetune_from") or not HydraConfig.initialized():
        return cfg
    overrides = list(HydraConfig.get().overrides.task)
    keys = [override_key(o) for o in overrides]
    checkpoint = read_checkpoint(cfg.finetune_from)
    refuse_architecture_overrides(cfg, keys, checkpoint["hyper_parameters"]["model"])
    data = checkpoint["hyper_parameters"].get("data") or {}
    if "_target_" not in data:
        return cfg
    name = get_class(data["_target_"]).name
    if not any(key in ("data", "experiment") for key in keys) and name != get_class(cfg.data._target_).name:
        print(f"vitpos: fine-tuning on data={name}, the dataset of {cfg.finetune_from} (data=<name> picks another)")
        cfg = compose(config_name="train", overrides=[*overrides, f"data={name}"])
    root = data.get("root")
    if root is None or "data.root" in keys or get_class(cfg.data._target_) is not get_class(data["_target_"]):
        return cfg
    if cfg.data.get("root") != root:  # e.g. an experiment's data group, which names no copy
        print(f"vitpos: fine-tuning on data.root={root}, the copy {cfg.finetune_from} read (data.root= picks another)")
        OmegaConf.update(cfg, "data.root", root)
    return cfg


def refuse_architecture_overrides(cfg, keys: list[str], trained: dict) -> None:
    """A fine-tune keeps the checkpoint's architecture: overridden model/pos settings that differ
    from it are an error listing them (as resume does), not silently dropped."""
    model_keys = set(cfg.model) if "model" in keys else {k.split(".", 1)[1] for k in keys if k.startswith("model.")}
    changed = [
        f"model.{k}={cfg.model[k]} (checkpoint: {trained[k]})"
        for k in cfg.model
        if k in model_keys and k in trained and trained[k] != cfg.model[k]
    ]
    for key in keys:
        if key.startswith("pos.") and key != "pos.name":
            name = key.split(".", 1)[1]
            if trained["pos_kwargs"].get(name) != cfg.pos.get(name):
                changed.append(f"{key}={cfg.pos.get(name)} (checkpoint: {trained['pos_kwargs'].get(name)})")
    if changed:
        raise ConfigError(
            f"fine-tuning keeps the checkpoint's architecture, but {', '.join(changed)}; drop "
            f"these overrides (resize_mode= picks how positions are converted)"
        )


def finetune_source(cfg: DictConfig, datamodule: ImageDataModule) -> tuple[VisionTransformer, list[int]]:
    """The model of `cfg.finetune_from` converted to `cfg.img_size` and checked against the config,
    and the image size it was trained at."""
    checkpoint = read_checkpoint(cfg.finetune_from)
    model = model_from_checkpoint(
        checkpoint,
        img_size=to_container(cfg.img_size),
        resize_mode=cfg.resize_mode,
        attn_temperature=cfg.get("attn_temperature"),
    )
    trained = model.config
    if trained["pos"] != cfg.pos.name:
        raise ConfigError(
            f"checkpoint {cfg.finetune_from} was trained with pos={trained['pos']} but the config "
            f"asks for pos={cfg.pos.name}; pass pos={trained['pos']}"
        )
    for key in list(cfg.pos):  # the run's config (its name, config.yaml) states the scheme settings it fine-tunes
        if key not in ("name", "fuzzy", "resize_mode") and key in trained["pos_kwargs"]:
            OmegaConf.update(cfg, f"pos.{key}", trained["pos_kwargs"][key])
    if (trained["num_classes"], trained["in_chans"]) != (datamodule.num_classes, datamodule.in_chans):
        raise ConfigError(
            f"checkpoint {cfg.finetune_from} has {trained['num_classes']} classes and "
            f"{trained['in_chans']} input channels, data={datamodule.name} has "
            f"{datamodule.num_classes} and {datamodule.in_chans}; pass the data it was trained on"
        )
    return model, checkpoint["hyper_parameters"]["model"]["img_size"]
