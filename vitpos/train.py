"""`train(cfg)`: the whole training run from a composed Hydra config; `train.py` wraps it."""
from __future__ import annotations

from pathlib import Path

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ThroughputMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf
from torch.utils.tensorboard.summary import hparams as hparams_summary

from .callbacks import AtomicCheckpointIO, LastCheckpoint, RNGStateInCheckpoint
from .figures import PositionalFigures
from .data import ImageDataModule
from .errors import ConfigError
from .model import VisionTransformer
from .module import ImageClassifier
from .resize import model_from_checkpoint, read_checkpoint

HPARAM_METRICS = ("val/acc", "val/acc_best", "test/acc")


def batch_size(batch) -> int:
    """Images in a (images, labels) batch (a named function: ddp_spawn pickles the callbacks)."""
    return len(batch[1])


def bf16_supported(accelerator: str = "auto") -> bool:
    """Whether bf16 mixed precision runs natively where this run will train."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    if accelerator in ("auto", "cpu"):
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return False


def resolve_precision(precision, accelerator: str = "auto"):
    """`auto` -> `bf16-mixed` where bf16 is native, else `32-true`; anything else is Lightning's."""
    if str(precision) != "auto":
        return precision
    return "bf16-mixed" if bf16_supported(accelerator) else "32-true"


def size_tag(img_size) -> str:
    sizes = [img_size] * 2 if isinstance(img_size, int) else list(img_size)
    return f"{sizes[0]}px" if sizes[0] == sizes[1] else f"{sizes[0]}x{sizes[1]}px"


def model_config(cfg: DictConfig, datamodule: ImageDataModule) -> dict:
    """`create_model` arguments from the config's pos/ and model/ groups and the dataset."""
    pos_kwargs = OmegaConf.to_container(cfg.pos, resolve=True)
    model_args = OmegaConf.to_container(cfg.model, resolve=True)
    model_args.pop("compile", None)  # a training option (ImageClassifier), not an architecture argument
    return dict(
        model_args,
        pos=pos_kwargs.pop("name"), pos_kwargs=pos_kwargs, img_size=to_container(cfg.img_size),
        num_classes=datamodule.num_classes, in_chans=datamodule.in_chans,
    )


def log_hparams(logger: TensorBoardLogger, cfg: DictConfig, module: ImageClassifier) -> None:
    """Write the HParams-tab summary: flat config + parameter count, compared on `val/acc` etc."""
    flat = {}
    for key, value in OmegaConf.to_container(cfg, resolve=True).items():
        if isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items() if not str(k).startswith("_")})
        else:
            flat[key] = value
    flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flat.items()}
    flat["params"] = sum(p.numel() for p in module.model.parameters())
    logger.log_hyperparams(flat)
    writer = logger.experiment._get_file_writer()
    for summary in hparams_summary(flat, {name: 0.0 for name in HPARAM_METRICS}):
        writer.add_summary(summary)


def finetune_source(cfg: DictConfig, datamodule: ImageDataModule) -> tuple[VisionTransformer, list[int]]:
    """The model of `cfg.finetune_from` converted to `cfg.img_size` and checked against the config,
    and the image size it was trained at."""
    checkpoint = read_checkpoint(cfg.finetune_from)
    model = model_from_checkpoint(checkpoint, img_size=to_container(cfg.img_size), resize_mode=cfg.resize_mode)
    trained = model.config
    if trained["pos"] != cfg.pos.name:
        raise ConfigError(f"checkpoint {cfg.finetune_from} was trained with pos={trained['pos']} but the config "
                          f"asks for pos={cfg.pos.name}; pass pos={trained['pos']}")
    if (trained["num_classes"], trained["in_chans"]) != (datamodule.num_classes, datamodule.in_chans):
        raise ConfigError(f"checkpoint {cfg.finetune_from} has {trained['num_classes']} classes and "
                          f"{trained['in_chans']} input channels, data={datamodule.name} has "
                          f"{datamodule.num_classes} and {datamodule.in_chans}; pass the data it was trained on")
    return model, checkpoint["hyper_parameters"]["model"]["img_size"]


def resume_checkpoint(cfg: DictConfig, run_name: str, module: ImageClassifier) -> Path:
    """The checkpoint `resume=` names (`true`: the newest version of this run with a last.ckpt),
    refused when it was made for another model than the config builds."""
    if cfg.resume is True:
        candidates = sorted(Path(cfg.paths.log_dir, run_name).glob("version_*/checkpoints/last.ckpt"),
                            key=lambda p: int(p.parent.parent.name.removeprefix("version_")))
        if not candidates:
            raise ConfigError(f"resume=true but no last.ckpt under {Path(cfg.paths.log_dir, run_name)}/version_*/"
                              f"checkpoints; pass resume=<path to a .ckpt> or drop resume to start a fresh run")
        path = candidates[-1]
    else:
        path = Path(str(cfg.resume))
    saved = read_checkpoint(path)["hyper_parameters"]["model"]
    changed = {k: (saved.get(k), v) for k, v in module.hparams["model"].items() if saved.get(k) != v}
    if changed:
        diff = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
        raise ConfigError(f"cannot resume {path}: the config builds another model ({diff}); resume with the "
                          f"run's original settings, or start a fresh run without resume")
    if path.parent.name != "checkpoints" or not path.parent.parent.name.startswith("version_"):
        raise ConfigError(f"cannot resume {path}: expected a checkpoint under <run>/version_N/checkpoints/")
    return path


def to_container(value):
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def train(cfg: DictConfig) -> dict[str, float]:
    """Train (and test) one run; returns the final metrics (`val/acc_best`, `test/acc`, ...).

    With `cfg.finetune_from`, the checkpoint's model (architecture and weights) is converted to
    `cfg.img_size` with the scheme's resize rule (`cfg.resize_mode`) and trained from there.
    """
    L.seed_everything(cfg.seed, workers=True)
    datamodule: ImageDataModule = hydra.utils.instantiate(cfg.data)
    data_cfg = to_container(cfg.data)
    run_name = cfg.run_name or f"{cfg.pos.name}_{datamodule.name}_{size_tag(to_container(cfg.img_size))}"
    if cfg.finetune_from:
        source, trained_size = finetune_source(cfg, datamodule)
        module = ImageClassifier(model=source.config, data=data_cfg, compile=cfg.model.get("compile", False),
                                 **cfg.optim)
        module.model.load_state_dict(source.state_dict())
        run_name = cfg.run_name or f"{run_name}_from_{size_tag(trained_size)}"
    else:
        module = ImageClassifier(model=model_config(cfg, datamodule), data=data_cfg,
                                 compile=cfg.model.get("compile", False), **cfg.optim)

    resume_from = resume_checkpoint(cfg, run_name, module) if cfg.resume else None
    version = int(resume_from.parent.parent.name.removeprefix("version_")) if resume_from else None
    logger = TensorBoardLogger(save_dir=cfg.paths.log_dir, name=run_name, version=version, default_hp_metric=False)
    checkpoint_dir = Path(logger.log_dir) / "checkpoints"
    best = ModelCheckpoint(dirpath=checkpoint_dir, filename="best-epoch{epoch}-step{step}", monitor="val/acc",
                           mode="max", auto_insert_metric_name=False)
    callbacks = [best, LastCheckpoint(checkpoint_dir / "last.ckpt", cfg.checkpoint_every_n_steps), RNGStateInCheckpoint(),
                 ThroughputMonitor(batch_size_fn=batch_size, window_size=10),
                 *([PositionalFigures()] if cfg.get("figures_at_end", True) else []),
                 *(hydra.utils.instantiate(c) for c in (cfg.get("callbacks") or {}).values())]
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg["precision"] = resolve_precision(trainer_cfg.get("precision", "auto"),
                                                 trainer_cfg.get("accelerator", "auto"))
    if trainer_cfg.get("use_distributed_sampler"):
        raise ConfigError("trainer.use_distributed_sampler must stay false: vitpos shards the data itself "
                          "(vitpos.data.ShardedSampler), which keeps resumption exact and counts no sample twice")
    trainer: L.Trainer = hydra.utils.instantiate(trainer_cfg, logger=logger, callbacks=callbacks,
                                                 plugins=[AtomicCheckpointIO()])
    if trainer.local_rank == 0:
        datamodule.prepare_data()  # fail on missing data before a run folder is created
    if trainer.is_global_zero:
        log_hparams(logger, cfg, module)
        OmegaConf.save(cfg, Path(logger.log_dir) / "config.yaml", resolve=True)

    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=False)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.test_after_fit:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best.best_model_path or None,
                               weights_only=False)
        metrics.update({k: float(v) for k, v in results[0].items()})
    metrics["checkpoint"] = best.best_model_path or str(checkpoint_dir / "last.ckpt")
    metrics["log_dir"] = logger.log_dir
    return metrics
