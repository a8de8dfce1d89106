"""`train(cfg)`: the whole training run from a composed Hydra config; `python -m vitpos` (and
`train.py`) wrap it."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint, ThroughputMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard.summary import hparams as hparams_summary

from .callbacks import (
    AtomicCheckpointIO,
    EveryEpochTest,
    LastCheckpoint,
    PositionalFigures,
    ProgressBar,
    ProgressLog,
    RNGStateInCheckpoint,
)
from .config import instantiate
from .data import ImageDataModule
from .errors import ConfigError, check_setting, is_integer
from .model import VisionTransformer, as_built, image_size
from .module import ImageClassifier
from .precision import bf16_supported, device_description, resolve_precision
from .resize import checkpoint_file, model_from_checkpoint, read_checkpoint
from .runs import RESULTS_FILE, budget, devices, run_dir, scheme_label, size_tag, sizes_tag

HPARAM_METRICS = ("val/acc_best", "test/acc", "val/acc", "resolution/test_acc")


def batch_size(batch) -> int:
    """Images in a (images, labels) batch (a named function: ddp_spawn pickles the callbacks)."""
    return len(batch[1])


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


def hparams_row(cfg: DictConfig, module: ImageClassifier, datamodule: ImageDataModule, trained_size=None) -> dict:
    """The HParams-tab columns: what tells runs of a comparison apart (the full config stays in
    the run's config.yaml; parameters and speed are in vitpos.compare). Integers are written as text,
    which TensorBoard shows as written (a number would read 42.000)."""
    model = module.model.config
    return {
        "pos": scheme_label(cfg.pos),
        "seed": str(cfg.seed),
        "budget": budget(cfg.trainer),
        "batch_size": str(datamodule.batch_size * devices(cfg.trainer)),
        "size": size_tag(to_container(cfg.img_size)),
        "data": datamodule.name,
        "data_source": datamodule.source or "-",
        "experiment": cfg.get("experiment") or "-",
        "finetuned_from": size_tag(trained_size) if trained_size else "-",
        "train_sizes": sizes_tag(cfg.train_img_sizes) if cfg.get("train_img_sizes") else "-",
        "lr": cfg.optim.lr,
        "model": f"d{model['dim']}xL{model['depth']}xH{model['num_heads']}/p{model['patch_size']}",
    }


# TensorBoard orders HParams columns by (not differs, name) and ticks the first five: marking these
# as differing puts the scheme, seed and size first, then the rest by name.
HPARAMS_FIRST = ("pos", "seed", "size")


# TensorBoard's Custom Scalars tab: one chart per question, every run as a line (regexes over tags)
SCALARS_LAYOUT = {
    "1 accuracy": {
        "validation accuracy (every run)": ["Multiline", [r"^val/acc$"]],
        "best validation accuracy": ["Multiline", [r"^val/acc_best$"]],
        "test accuracy": ["Multiline", [r"^test/acc$"]],
        "test accuracy after every epoch (test_every_epoch=true; not held out)": ["Multiline", [r"^test_each_epoch/"]],
        "accuracy vs resolution (x = image height, from vitpos.evaluate)": ["Multiline", [r"^resolution/"]],
    },
    "2 training": {
        "training loss": ["Multiline", [r"^train/loss_step$"]],
        "learning rate": ["Multiline", [r"^lr$"]],
    },
    "3 throughput": {
        "samples/s": ["Multiline", [r"/samples_per_sec$"]],
        "flops and time": ["Multiline", [r"^train/device/(flops|mfu)", r"^train/time"]],
    },
}


def log_hparams(logger: TensorBoardLogger, row: dict) -> None:
    """Write the HParams-tab summary (hparams.yaml too), compared on accuracy at every resolution."""
    logger.log_hyperparams(row)  # hparams.yaml; with no metrics Lightning writes no HParams summary
    experiment, *session = hparams_summary(row, {name: 0.0 for name in HPARAM_METRICS})
    content = HParamsPluginData.FromString(experiment.value[0].metadata.plugin_data.content)
    for info in content.experiment.hparam_infos:
        info.differs = info.name in HPARAMS_FIRST
    experiment.value[0].metadata.plugin_data.content = content.SerializeToString()
    for summary in (experiment, *session):
        logger.experiment.file_writer.add_summary(summary)
    logger.experiment.add_custom_scalars(SCALARS_LAYOUT)


def finetune_source(cfg: DictConfig, datamodule: ImageDataModule) -> tuple[VisionTransformer, list[int]]:
    """The model of `cfg.finetune_from` converted to `cfg.img_size` and checked against the config,
    and the image size it was trained at."""
    checkpoint = read_checkpoint(cfg.finetune_from)
    model = model_from_checkpoint(checkpoint, img_size=to_container(cfg.img_size), resize_mode=cfg.resize_mode,
                                  attn_temperature=cfg.get("attn_temperature"))
    trained = model.config
    if trained["pos"] != cfg.pos.name:
        raise ConfigError(f"checkpoint {cfg.finetune_from} was trained with pos={trained['pos']} but the config "
                          f"asks for pos={cfg.pos.name}; pass pos={trained['pos']}")
    if (trained["num_classes"], trained["in_chans"]) != (datamodule.num_classes, datamodule.in_chans):
        raise ConfigError(f"checkpoint {cfg.finetune_from} has {trained['num_classes']} classes and "
                          f"{trained['in_chans']} input channels, data={datamodule.name} has "
                          f"{datamodule.num_classes} and {datamodule.in_chans}; pass the data it was trained on")
    return model, checkpoint["hyper_parameters"]["model"]["img_size"]


def resume_checkpoint(cfg: DictConfig, log_root: Path, run_name: str, module: ImageClassifier) -> Path:
    """The checkpoint `resume=` names (`true`: the newest version of this run with a last.ckpt),
    refused when it was made for another model than the config builds."""
    if cfg.resume is True:
        candidates = sorted(Path(log_root, run_name).glob("version_*/checkpoints/last.ckpt"),
                            key=lambda p: int(p.parent.parent.name.removeprefix("version_")))
        if not candidates:
            raise ConfigError(f"resume=true but no last.ckpt under {Path(log_root, run_name)}/version_*/"
                              f"checkpoints; pass resume=<path to a .ckpt> or drop resume to start a fresh run")
        path = candidates[-1]
    else:
        path = Path(str(cfg.resume))
    saved = as_built(read_checkpoint(path)["hyper_parameters"]["model"])  # keys it predates: as it was built
    changed = {k: (saved.get(k), v) for k, v in as_built(module.hparams["model"]).items() if saved.get(k) != v}
    if changed:
        diff = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
        raise ConfigError(f"cannot resume {path}: the config builds another model ({diff}); resume with the "
                          f"run's original settings, or start a fresh run without resume")
    if run_dir(path) is None or not run_dir(path).name.startswith("version_"):
        raise ConfigError(f"cannot resume {path}: expected a checkpoint under <run>/version_N/checkpoints/")
    return path


def check_run_settings(cfg: DictConfig) -> None:
    """The top-level settings of train.yaml that no constructor checks."""
    check_setting("seed", cfg.seed, is_integer(cfg.seed), "be an integer, e.g. seed=0")
    check_setting("checkpoint_every_n_steps", cfg.checkpoint_every_n_steps,
                  is_integer(cfg.checkpoint_every_n_steps) and cfg.checkpoint_every_n_steps > 0,
                  "be a positive number of optimizer steps between last.ckpt saves, e.g. checkpoint_every_n_steps=500")


def check_writable(folder: Path) -> None:
    """Fail before training when the log folder cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(f"cannot write to paths.log_dir ({folder}: {error.strerror}); pass a writable folder, "
                          f"e.g. paths.log_dir=logs") from None


def remove_run_folder(version_dir: Path) -> None:
    """Delete `<run>/version_N`, and `<run>` if that leaves it empty."""
    shutil.rmtree(version_dir, ignore_errors=True)
    if version_dir.parent.is_dir() and not any(version_dir.parent.iterdir()):
        version_dir.parent.rmdir()


def to_container(value):
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def train(cfg: DictConfig) -> dict[str, float]:
    """Train (and test) one run; returns the final metrics (`val/acc_best`, `test/acc`, ...).

    With `cfg.finetune_from`, the checkpoint's model (architecture and weights) is converted to
    `cfg.img_size` with the scheme's resize rule (`cfg.resize_mode`) and trained from there.
    """
    check_run_settings(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    trained_size = None
    datamodule: ImageDataModule = instantiate(cfg.data)
    data_cfg = to_container(cfg.data)
    run_name = f"{scheme_label(cfg.pos).replace('+', '_')}_{datamodule.name}_{size_tag(to_container(cfg.img_size))}"
    if cfg.finetune_from:
        source, trained_size = finetune_source(cfg, datamodule)
        module = ImageClassifier(model=source.config, data=data_cfg, compile=cfg.model.get("compile", False),
                                 **cfg.optim)
        module.model.load_state_dict(source.state_dict())
        if rank_zero_only.rank == 0:  # before the Trainer exists: Lightning's rank from the launcher's environment
            old_grid = "x".join(str(s // source.patch_size) for s in image_size(trained_size))
            mode = source.config["pos_kwargs"].get("resize_mode") or "the scheme's resize rule"
            print(f"vitpos: fine-tuning {checkpoint_file(cfg.finetune_from)} ({cfg.pos.name}): grid {old_grid} -> "
                  f"{'x'.join(map(str, source.grid))} ({mode})", flush=True)
        run_name = f"{run_name}_from_{size_tag(trained_size)}"
    else:
        module = ImageClassifier(model=model_config(cfg, datamodule), data=data_cfg,
                                 compile=cfg.model.get("compile", False), **cfg.optim)

    mixed = len(datamodule.train_img_sizes) > 1 or datamodule.train_img_sizes[0] != datamodule.img_size
    if mixed:
        for size in datamodule.train_img_sizes:
            module.model.grid_for(size)  # every training size must divide into patches
        run_name = f"{run_name}_train{sizes_tag(datamodule.train_img_sizes)}"
    # Runs of one study share <log_dir>/<experiment>/; names start with the scheme and stay distinct by seed.
    run_name = str(cfg.run_name) if cfg.run_name is not None else f"{run_name}_seed{cfg.seed}"  # run_name=nan: a name
    log_root = Path(cfg.paths.log_dir, cfg.experiment) if cfg.get("experiment") else Path(cfg.paths.log_dir)
    resume_from = resume_checkpoint(cfg, log_root, run_name, module) if cfg.resume else None
    version = int(resume_from.parent.parent.name.removeprefix("version_")) if resume_from else None
    logger = TensorBoardLogger(save_dir=log_root, name=run_name, version=version, default_hp_metric=False)
    checkpoint_dir = Path(logger.log_dir) / "checkpoints"
    best = ModelCheckpoint(dirpath=checkpoint_dir, filename="best-epoch{epoch}-step{step}", monitor="val/acc",
                           mode="max", auto_insert_metric_name=False)
    callbacks = [best, LastCheckpoint(checkpoint_dir / "last.ckpt", cfg.checkpoint_every_n_steps),
                 RNGStateInCheckpoint(), ThroughputMonitor(batch_size_fn=batch_size, window_size=10),
                 *([PositionalFigures()] if cfg.get("figures_at_end", True) else []),
                 *([EveryEpochTest()] if cfg.get("test_every_epoch") else []),
                 *([ProgressBar() if sys.stdout.isatty() else ProgressLog()]
                   if cfg.trainer.get("enable_progress_bar", True) else []),
                 *(instantiate(c) for c in (cfg.get("callbacks") or {}).values())]
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg["precision"] = resolve_precision(trainer_cfg.get("precision", "auto"),
                                                 trainer_cfg.get("accelerator", "auto"))
    if trainer_cfg.get("use_distributed_sampler"):
        raise ConfigError("trainer.use_distributed_sampler must stay false: vitpos shards the data itself "
                          "(vitpos.data.ShardedSampler), which keeps resumption exact and counts no sample twice")
    trainer: L.Trainer = instantiate(trainer_cfg, logger=logger, callbacks=callbacks, plugins=[AtomicCheckpointIO()])
    if trainer.local_rank == 0:
        datamodule.prepare_data()  # fail on missing data before a run folder is created
    datamodule.setup("fit")  # ... and on a split that cannot fill one batch
    params = sum(p.numel() for p in module.model.parameters())
    if trainer.is_global_zero:
        check_writable(log_root)
        log_hparams(logger, hparams_row(cfg, module, datamodule, trained_size))
        OmegaConf.save(cfg, Path(logger.log_dir) / "config.yaml", resolve=True)
        grid = "x".join(map(str, module.model.grid))
        size_note = " | training sizes " + sizes_tag(datamodule.train_img_sizes) if mixed else ""
        source_note = " from " + datamodule.source if datamodule.source else ""
        print(f"vitpos: run {logger.log_dir} | pos={scheme_label(cfg.pos)} | {grid} grid "
              f"({size_tag(module.model.config['img_size'])}, patch {module.model.patch_size}){size_note} | "
              f"data={datamodule.name}{source_note} ({len(datamodule.train_set)} train, "
              f"{len(datamodule.val_set)} val) | {params / 1e6:.2f}M "
              f"params | precision {trainer_cfg['precision']} on {device_description(trainer.strategy.root_device)}",
              flush=True)
        if trainer.strategy.root_device.type == "cpu" and not bf16_supported("cpu"):
            print("vitpos: this CPU has no native bf16 (an AVX2-class CPU), so the run trains in fp32 and takes "
                  "several times longer than README's times (measured on AVX512-BF16 CPUs)", flush=True)

    started = time.perf_counter()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=False)
    except BaseException:
        if trainer.is_global_zero and resume_from is None and trainer.global_step == 0:
            remove_run_folder(Path(logger.log_dir))  # a run that never trained leaves nothing behind
        raise
    fit_seconds = round(time.perf_counter() - started, 1)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.test_after_fit:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best.best_model_path or None, verbose=False,
                               weights_only=False)
        metrics.update({k: float(v) for k, v in results[0].items()})
    metrics["checkpoint"] = best.best_model_path or str(checkpoint_dir / "last.ckpt")
    metrics["log_dir"] = logger.log_dir
    metrics["params"] = params
    metrics["data_source"] = datamodule.source or datamodule.name
    metrics["fit_seconds"] = fit_seconds  # this process's fit (a resumed run counts only its own part)
    # the run's one throughput figure (summary, results.json, compare): training images over the fit's
    # wall-clock time, validation included, of this process's part of the run
    metrics["images_per_s"] = round(module.images_trained * trainer.world_size / max(fit_seconds, 1e-9), 1)
    if trainer.is_global_zero:  # the mark of a finished run: compare and the study scripts read it
        (Path(logger.log_dir) / RESULTS_FILE).write_text(json.dumps(metrics, indent=1) + "\n")
        print(summary(cfg, metrics), flush=True)
    return metrics


def finetune_command(cfg: DictConfig, run: Path, bigger: str) -> str:
    """The closing summary's fine-tune line, safe to paste: the experiment's fine-tune recipe where it
    names one, else a short fine-tune at twice the size (one pass over at most 10k images, a fifth of
    the run's lr); into the run's own log root, from the same copy of the data."""
    source = [f"finetune_from={run}", f"paths.log_dir={cfg.paths.log_dir}",
              *([f"data.root={cfg.data.root}"] if cfg.data.get("root") else [])]
    if cfg.get("finetune_recipe"):
        return " ".join(["python train.py", f"experiment={cfg.finetune_recipe}", f"pos={cfg.pos.name}", *source])
    subset = ["data.train_subset=10000"] if "train_subset" in cfg.data else []
    return " ".join(["python train.py", f"pos={cfg.pos.name}", f"img_size={bigger}", *source, "trainer.max_epochs=1",
                     *subset, f"optim.lr={cfg.optim.lr / 5:g}", "optim.warmup_steps=10"])


def summary(cfg: DictConfig, metrics: dict) -> str:
    """The closing block: results, where they are, and the next commands with this run filled in."""
    run, minutes = Path(metrics["log_dir"]), metrics["fit_seconds"] / 60
    accuracy = lambda key: f"{100 * metrics[key]:.2f}%" if key in metrics else "-"  # noqa: E731
    size = to_container(cfg.img_size)
    height, width = image_size(size)
    square = height == width  # a rectangle is written [H,W] in the commands, a square as one int
    sizes = f"[{height},{2 * height}]" if square else f"[[{height},{width}],[{2 * height},{2 * width}]]"
    bigger = f"{2 * height}" if square else f"[{2 * height},{2 * width}]"
    root = run.parent.parent
    lines = [
        f"vitpos: finished {run}",
        f"  best val acc {accuracy('val/acc_best')} | test acc {accuracy('test/acc')} (top-1) | "
        f"fit {minutes:.1f} min, {metrics['images_per_s']:.0f} img/s",
        f"  checkpoint   {metrics['checkpoint']}",
        *([f"  figures      {run / 'figures'}"] if (run / "figures").is_dir() else []),
        "  next:",
        f"    python -m vitpos.evaluate ckpt={run} img_sizes={sizes}",
        f"    {finetune_command(cfg, run, bigger)}",
        f"    python -m vitpos.compare {root}",
        f"    tensorboard --logdir {root}",
    ]
    return "\n".join(lines)
