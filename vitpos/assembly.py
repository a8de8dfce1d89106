"""The parts of a training run built and checked from its composed config: the settings no
constructor checks, the LightningModule (a new model or a fine-tune's converted one), the sizes it
trains at, the run's name, the callbacks' monitors and the Trainer."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from .callbacks import AtomicCheckpointIO
from .config import instantiate, to_container
from .data import ImageDataModule
from .errors import ConfigError, check_setting, is_integer
from .finetune import finetune_source
from .model import image_size
from .module import ImageClassifier
from .options import DATA_OPTIONS, TRAIN_OPTIONS, check_options
from .precision import resolve_precision
from .resize import checkpoint_file
from .runs import run_folder_label, size_tag, sizes_tag

LOSS_KEYS = {"label_smoothing", "mixup_alpha", "cutmix_alpha"}  # train.yaml's loss: (ImageClassifier arguments)


def model_config(cfg: DictConfig, datamodule: ImageDataModule) -> dict:
    """`create_model` arguments from the config's pos/ and model/ groups and the dataset."""
    pos_kwargs = OmegaConf.to_container(cfg.pos, resolve=True)
    model_args = OmegaConf.to_container(cfg.model, resolve=True)
    model_args.pop("compile", None)  # a training option (ImageClassifier), not an architecture argument
    return dict(
        model_args,
        pos=pos_kwargs.pop("name"),
        pos_kwargs=pos_kwargs,
        img_size=to_container(cfg.img_size),
        num_classes=datamodule.num_classes,
        in_chans=datamodule.in_chans,
    )


def check_run_settings(cfg: DictConfig) -> None:
    """The top-level settings of train.yaml that no constructor checks."""
    check_options(cfg, TRAIN_OPTIONS)
    check_options(cfg.data, DATA_OPTIONS, prefix="data.")
    check_setting(
        "checkpoint_every_n_steps",
        cfg.checkpoint_every_n_steps,
        is_integer(cfg.checkpoint_every_n_steps) and cfg.checkpoint_every_n_steps > 0,
        "be a positive number of optimizer steps between last.ckpt saves, e.g. checkpoint_every_n_steps=500",
    )
    if cfg.trainer.get("fast_dev_run"):  # Lightning then runs without the logger and checkpoints a run is made of
        raise ConfigError(
            "trainer.fast_dev_run is not supported (it turns off the run's logger and checkpoints); for a quick "
            "check use trainer.max_epochs=1 trainer.limit_train_batches=2 trainer.limit_val_batches=2 "
            "trainer.limit_test_batches=2"
        )


def check_monitors(callbacks: dict, module: ImageClassifier) -> None:
    """A callback (by its name in `callbacks:`) that watches a metric (ModelCheckpoint, EarlyStopping)
    names one the module logs: Lightning would find out at the first validation, with a traceback."""
    logged = module.epoch_metric_names()
    for name, callback in callbacks.items():
        monitor = getattr(callback, "monitor", None)
        if monitor is None:
            continue
        if monitor not in logged:
            raise ConfigError(
                f"callbacks.{name}.monitor={monitor!r} is not a logged metric; use one of {', '.join(logged)}"
            )
        better = "min" if monitor.split("/")[-1].startswith("loss") else "max"
        if getattr(callback, "mode", better) != better:
            raise ConfigError(
                f"callbacks.{name}.monitor={monitor!r} with mode={callback.mode!r} keeps the worst one; "
                f"add callbacks.{name}.mode={better}"
            )


def build_module(cfg: DictConfig, datamodule: ImageDataModule) -> tuple[ImageClassifier, list[int] | None]:
    """The LightningModule of the run: a new model from the config, or the `finetune_from` model
    converted to `img_size` (and the size it was trained at)."""
    unknown = sorted(set(cfg.loss) - LOSS_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown loss setting(s) {', '.join(f'loss.{k}' for k in unknown)}; the loss takes "
            f"{', '.join(f'loss.{k}' for k in sorted(LOSS_KEYS))}"
        )
    options = dict(
        data=to_container(cfg.data),
        compile=cfg.model.get("compile", False),
        optimizer=instantiate(cfg.optim, _convert_="all"),
        scheduler=instantiate(cfg.scheduler, _convert_="all"),
        check_finite_every=cfg.check_finite_every,
        ema_decay=cfg.get("ema_decay"),
        ema_warmup=cfg.get("ema_warmup", False),
        test_flip=cfg.get("test_flip", False),
        **cfg.loss,
    )
    if not cfg.finetune_from:
        return ImageClassifier(model=model_config(cfg, datamodule), **options), None
    source, trained_size = finetune_source(cfg, datamodule)
    module = ImageClassifier(model=source.config, **options)
    module.model.load_state_dict(source.state_dict())
    if rank_zero_only.rank == 0:  # before the Trainer exists: Lightning's rank from the launcher's environment
        old_grid = "x".join(str(s // source.patch_size) for s in image_size(trained_size))
        mode = source.config["pos_kwargs"].get("resize_mode") or "the scheme's resize rule"
        print(
            f"vitpos: fine-tuning {checkpoint_file(cfg.finetune_from)} ({cfg.pos.name}): grid {old_grid} -> "
            f"{'x'.join(map(str, source.grid))} ({mode})",
            flush=True,
        )
    return module, trained_size


def check_training_sizes(cfg: DictConfig, datamodule: ImageDataModule, module: ImageClassifier) -> None:
    """Every training size divides into patches, and a curriculum's phases fit the run's epochs."""
    curriculum = datamodule.curriculum
    for size in [*datamodule.train_img_sizes, *(curriculum.sizes if curriculum else [])]:
        module.model.grid_for(size)
    if curriculum:
        curriculum.plan(cfg.trainer.max_epochs)


def trainer_config(cfg: DictConfig, datamodule: ImageDataModule | None = None) -> dict:
    """The Trainer's arguments with `precision=auto` resolved for the device, and `devices=auto`
    (trainer=default) as one process: only the command line picks several (`python -m vitpos`), since
    Lightning starts the other processes by re-running it. A curriculum whose batch follows the tokens
    has its training loader built anew each epoch (Lightning sizes an epoch by the loader's length)."""
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    if str(trainer_cfg.get("devices")) == "auto":
        trainer_cfg["devices"] = 1
    for count in ("max_steps", "max_epochs"):  # Lightning trains a float bound without a word, or fails deep inside
        value = trainer_cfg.get(count)
        check_setting(
            f"trainer.{count}", value, value is None or is_integer(value), f"be an integer, e.g. trainer.{count}=10"
        )
    if datamodule is not None and datamodule.curriculum and datamodule.curriculum.batch == "tokens":
        if trainer_cfg.get("reload_dataloaders_every_n_epochs", 0) not in (0, 1):
            raise ConfigError(
                "curriculum_batch=tokens rebuilds the training loader every epoch (each phase has its own "
                "batch size); leave trainer.reload_dataloaders_every_n_epochs unset"
            )
        trainer_cfg["reload_dataloaders_every_n_epochs"] = 1
    trainer_cfg["precision"] = resolve_precision(
        trainer_cfg.get("precision", "auto"), trainer_cfg.get("accelerator", "auto")
    )
    if trainer_cfg.get("use_distributed_sampler"):
        raise ConfigError(
            "trainer.use_distributed_sampler must stay false: vitpos shards the data itself "
            "(vitpos.data.ShardedSampler), which keeps resumption exact and counts no sample twice"
        )
    return trainer_cfg


def run_name_of(cfg: DictConfig, datamodule: ImageDataModule, trained_size) -> str:
    """`<scheme>_<data>_<size>[_from_<size>][_train<sizes>|_curriculum<tag>]_seed<seed>`, or `run_name`.
    Runs of one study share <log_dir>/<experiment>/; names start with the scheme and stay distinct by seed."""
    if cfg.run_name is not None:
        name = str(cfg.run_name)  # run_name=nan: a name
        check_setting(
            "run_name",
            name,
            name.strip(". ") != "" and "/" not in name and "\\" not in name,
            "be one folder name, without / (use experiment=<group> to group runs)",
        )
        return name
    name = f"{run_folder_label(cfg.pos)}_{datamodule.name}_{size_tag(to_container(cfg.img_size))}"
    name += f"_from_{size_tag(trained_size)}" if trained_size else ""
    if is_mixed(datamodule):
        name += f"_train{sizes_tag(datamodule.train_img_sizes)}"
    if datamodule.curriculum:
        name += f"_curriculum{datamodule.curriculum.tag(cfg.trainer.max_epochs)}"
    return f"{name}_seed{cfg.seed}"


def is_mixed(datamodule: ImageDataModule) -> bool:
    return len(datamodule.train_img_sizes) > 1 or datamodule.train_img_sizes[0] != datamodule.img_size


def build_trainer(cfg: DictConfig, datamodule: ImageDataModule, module: ImageClassifier, logger) -> L.Trainer:
    """The Trainer with the run's callbacks (`callbacks:` by name; a factory returns None when
    switched off) and atomic checkpoint files."""
    built = {name: instantiate(c) for name, c in cfg.callbacks.items() if c is not None}
    check_monitors(built, module)
    callbacks = [c for c in built.values() if c is not None]
    return instantiate(
        trainer_config(cfg, datamodule), logger=logger, callbacks=callbacks, plugins=[AtomicCheckpointIO()]
    )
