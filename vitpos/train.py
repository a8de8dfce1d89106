"""`train(cfg)`: the whole training run from a composed Hydra config; `python -m vitpos` (and
`train.py`) wrap it."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
from torch.utils.tensorboard.summary import hparams as hparams_summary

from .callbacks import AtomicCheckpointIO, LastCheckpoint
from .config import CONFIG_DIR, instantiate, to_container
from .data import ImageDataModule
from .data.curriculum import curriculum_tag
from .errors import ConfigError, Preempted, RankLostError, check_setting, is_integer
from .finetune import finetune_source
from .model import as_built, image_size
from .module import ImageClassifier
from .options import DATA_OPTIONS, TRAIN_OPTIONS, check_options
from .precision import bf16_supported, device_description, resolve_precision
from .resize import checkpoint_file, read_checkpoint
from .runs import (
    RESULTS_FILE,
    budget,
    claim_version,
    claimed_version,
    devices,
    run_dir,
    scheme_label,
    size_tag,
    sizes_tag,
    version_of,
)

HPARAM_METRICS = ("val/acc_best", "test/acc", "val/acc", "resolution/test_acc")


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
        "curriculum": curriculum_tag(cfg),
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


def log_hparams(logger, row: dict) -> None:
    """Write the HParams row (hparams.yaml) and, to TensorBoard, the HParams-tab summary compared
    on accuracy at every resolution and the Custom Scalars layout."""
    logger.log_hyperparams(row)  # hparams.yaml; with no metrics Lightning writes no HParams summary
    if not isinstance(logger, TensorBoardLogger):
        return
    experiment, *session = hparams_summary(row, {name: 0.0 for name in HPARAM_METRICS})
    content = HParamsPluginData.FromString(experiment.value[0].metadata.plugin_data.content)
    for info in content.experiment.hparam_infos:
        info.differs = info.name in HPARAMS_FIRST
    experiment.value[0].metadata.plugin_data.content = content.SerializeToString()
    for summary in (experiment, *session):
        logger.experiment.file_writer.add_summary(summary)
    logger.experiment.add_custom_scalars(SCALARS_LAYOUT)


def resume_checkpoint(cfg: DictConfig, log_root: Path, run_name: str, module: ImageClassifier) -> Path:
    """The checkpoint `resume=` names (`true`: the newest version of this run with a last.ckpt),
    refused when it was made for another model than the config builds, or its run trained with other
    optimizer, schedule or loss settings (its config.yaml)."""
    if cfg.resume is True:
        candidates = sorted(
            Path(log_root, run_name).glob("version_*/checkpoints/last.ckpt"),
            key=lambda p: version_of(p.parent.parent),
        )
        if not candidates:
            raise ConfigError(
                f"resume=true but no last.ckpt under {Path(log_root, run_name)}/version_*/"
                f"checkpoints; pass resume=<path to a .ckpt> or drop resume to start a fresh run"
            )
        path = candidates[-1]
    else:
        path = Path(str(cfg.resume))
    saved = as_built(read_checkpoint(path)["hyper_parameters"]["model"])  # keys it predates: as it was built
    changed = {k: (saved.get(k), v) for k, v in as_built(module.hparams["model"]).items() if saved.get(k) != v}
    if changed:
        diff = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
        raise ConfigError(
            f"cannot resume {path}: the config builds another model ({diff}); resume with the "
            f"run's original settings, or start a fresh run without resume"
        )
    if run_dir(path) is None or not run_dir(path).name.startswith("version_"):
        raise ConfigError(f"cannot resume {path}: expected a checkpoint under <run>/version_N/checkpoints/")
    saved_config = run_dir(path) / "config.yaml"
    if saved_config.is_file():
        saved = OmegaConf.load(saved_config)
        changed = [
            f"{group}.{key}: {to_container(saved[group][key])} -> {value}"
            for group in TRAINING_SETTINGS
            if group in saved
            for key, value in to_container(cfg[group]).items()
            if key in saved[group] and to_container(saved[group][key]) != value  # keys it predates: unchanged
        ]
        changed += [
            f"{key}: {to_container(saved[key])} -> {to_container(cfg.get(key))}"
            for key in TRAINING_SIZES
            if key in saved and to_container(saved[key]) != to_container(cfg.get(key))  # keys it predates: unchanged
        ]
        if changed:
            raise ConfigError(
                f"cannot resume {path}: its run trained with other settings ({', '.join(changed)}); resume with "
                f"the run's own settings (its config.yaml), or start a fresh run"
            )
    return path


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


def check_writable(folder: Path) -> Path | None:
    """Fail before training when the log folder cannot be written; return the outermost folder this
    made (None: `folder` existed), for a run that never trains to take away."""
    created = next((f for f in [*reversed(folder.parents), folder] if not f.exists()), None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(
            f"cannot write to paths.log_dir ({folder}: {error.strerror}); pass a writable folder, "
            f"e.g. paths.log_dir=logs"
        ) from None
    return created


def remove_run_folder(version_dir: Path, created: Path | None) -> None:
    """Delete `<run>/version_N`, `<run>` if that leaves it empty, and the folders above it this run
    made (`created` and those below it) where they are left empty."""
    shutil.rmtree(version_dir, ignore_errors=True)
    run = version_dir.parent
    up_to_created = [f for f in version_dir.parents if created is not None and (f == created or created in f.parents)]
    for folder in up_to_created or [run]:  # innermost first
        if not folder.is_dir() or any(folder.iterdir()):
            break
        folder.rmdir()


LOSS_KEYS = {"label_smoothing", "mixup_alpha", "cutmix_alpha"}  # train.yaml's loss: (ImageClassifier arguments)
# the settings a resumed run must share with the run it continues, besides the model (its saved config.yaml)
TRAINING_SETTINGS = ("optim", "scheduler", "loss")
TRAINING_SIZES = ("train_img_sizes", "batch_by_tokens", "curriculum", "curriculum_batch")  # top-level keys, likewise


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


def run_name_of(cfg: DictConfig, datamodule: ImageDataModule, trained_size) -> str:
    """`<scheme>_<data>_<size>[_from_<size>][_train<sizes>|_curriculum<tag>]_seed<seed>`, or `run_name`.
    Runs of one study share <log_dir>/<experiment>/; names start with the scheme and stay distinct by seed."""
    if cfg.run_name is not None:
        return str(cfg.run_name)  # run_name=nan: a name
    name = f"{scheme_label(cfg.pos).replace('+', '_')}_{datamodule.name}_{size_tag(to_container(cfg.img_size))}"
    name += f"_from_{size_tag(trained_size)}" if trained_size else ""
    if is_mixed(datamodule):
        name += f"_train{sizes_tag(datamodule.train_img_sizes)}"
    if datamodule.curriculum:
        name += f"_curriculum{datamodule.curriculum.tag(cfg.trainer.max_epochs)}"
    return f"{name}_seed{cfg.seed}"


def is_mixed(datamodule: ImageDataModule) -> bool:
    return len(datamodule.train_img_sizes) > 1 or datamodule.train_img_sizes[0] != datamodule.img_size


def trainer_config(cfg: DictConfig, datamodule: ImageDataModule | None = None) -> dict:
    """The Trainer's arguments with `precision=auto` resolved for the device, and `devices=auto`
    (trainer=default) as one process: only the command line picks several (`python -m vitpos`), since
    Lightning starts the other processes by re-running it. A curriculum whose batch follows the tokens
    has its training loader built anew each epoch (Lightning sizes an epoch by the loader's length)."""
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    if str(trainer_cfg.get("devices")) == "auto":
        trainer_cfg["devices"] = 1
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


def start_run(
    cfg: DictConfig, trainer: L.Trainer, module: ImageClassifier, datamodule: ImageDataModule, trained_size, params: int
) -> None:
    """Rank 0, before fit: the HParams row, config.yaml, and the start line."""
    logger = trainer.logger
    log_hparams(logger, hparams_row(cfg, module, datamodule, trained_size))
    OmegaConf.save(cfg, Path(logger.log_dir) / "config.yaml", resolve=True)
    grid = "x".join(map(str, module.model.grid))
    size_note = " | training sizes " + sizes_tag(datamodule.train_img_sizes) if is_mixed(datamodule) else ""
    if datamodule.curriculum:
        size_note = " | curriculum " + datamodule.curriculum.describe(trainer.max_epochs)
    source_note = " from " + datamodule.source if datamodule.source else ""
    print(
        f"vitpos: run {logger.log_dir} | pos={scheme_label(cfg.pos)} | {grid} grid "
        f"({size_tag(module.model.config['img_size'])}, patch {module.model.patch_size}){size_note} | "
        f"data={datamodule.name}{source_note} ({len(datamodule.train_set)} train, {len(datamodule.val_set)} val) "
        f"| {params / 1e6:.2f}M params | precision {trainer.precision} on "
        f"{device_description(trainer.strategy.root_device)}",
        flush=True,
    )
    if trainer.strategy.root_device.type == "cpu" and not bf16_supported("cpu"):
        print(
            "vitpos: this CPU has no native bf16 (an AVX2-class CPU), so the run trains in fp32 and takes "
            "several times longer than README's times (measured on AVX512-BF16 CPUs)",
            flush=True,
        )


def train(cfg: DictConfig) -> dict[str, float]:
    """Train (and test) one run; returns the final metrics (`val/acc_best`, `test/acc`, ...).

    With `cfg.finetune_from`, the checkpoint's model (architecture and weights) is converted to
    `cfg.img_size` with the scheme's resize rule (`cfg.resize_mode`) and trained from there.
    Logger, callbacks, optimizer and schedule are built from their config groups.
    """
    check_run_settings(cfg)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule: ImageDataModule = instantiate(cfg.data)
    module, trained_size = build_module(cfg, datamodule)
    check_training_sizes(cfg, datamodule, module)
    run_name = run_name_of(cfg, datamodule, trained_size)
    params = sum(p.numel() for p in module.model.parameters())
    run_root = Path(cfg.paths.log_dir, *([cfg.experiment] if cfg.get("experiment") else []), run_name)
    resume_from = resume_checkpoint(cfg, run_root.parent, run_name, module) if cfg.resume else None
    first_rank = rank_zero_only.rank == 0  # the Trainer does not exist yet: the launcher's environment
    created = check_writable(run_root.parent) if first_rank else None
    claimed = claim_version(run_root) if first_rank and resume_from is None else None  # a duplicate: the next N
    version = (
        version_of(run_dir(resume_from))
        if resume_from
        else version_of(claimed)
        if claimed
        else claimed_version(run_root)
    )
    trainer = None
    try:
        with sigterm_stops_the_run():  # until fit installs the per-step stop (LastCheckpoint)
            # missing data, a split that cannot fill a batch: one error line, before the Trainer prints
            # its device lines; fit prepares the data again on each other node's first process
            if first_rank:
                datamodule.prepare_data()
            datamodule.setup("fit")
            logger = instantiate(cfg.logger, save_dir=str(run_root.parent), name=run_name, version=version)
            built = {name: instantiate(c) for name, c in cfg.callbacks.items() if c is not None}
            check_monitors(built, module)
            callbacks = [c for c in built.values() if c is not None]  # a factory returns None when switched off
            trainer = instantiate(
                trainer_config(cfg, datamodule), logger=logger, callbacks=callbacks, plugins=[AtomicCheckpointIO()]
            )
            if trainer.is_global_zero:
                start_run(cfg, trainer, module, datamodule, trained_size, params)
            started = time.perf_counter()
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=False)
    except BaseException as error:
        if claimed and (trainer is None or trainer.global_step == 0):
            remove_run_folder(claimed, created)  # a run that never trained leaves nothing behind
        reason = stop_reason(error, trainer)
        if reason is None:
            raise
        raise reason from None
    return finish_run(cfg, trainer, module, datamodule, params, round(time.perf_counter() - started, 1))


@contextlib.contextmanager
def sigterm_stops_the_run():
    """While the run is set up, a SIGTERM raises `SIGTERMException` (Python's default would end the
    process on the spot, leaving a run folder with nothing to resume), which `train()` cleans up and
    reports as a pre-emption; the trainer's own handling takes over in fit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def raise_sigterm(signum, frame) -> None:
    raise SIGTERMException


def stop_reason(error: BaseException, trainer: L.Trainer | None) -> Exception | None:
    """What a run that stopped with `error` tells the user, where it is not the error itself: a
    pre-emption (SIGTERM: last.ckpt saved), or a collective that failed because another rank is gone
    (torch's DistError, or gloo's closed or reset connection)."""
    import torch.distributed

    if isinstance(error, SIGTERMException):
        step = trainer.global_step if trainer is not None else 0
        saved = [c.path for c in (trainer.callbacks if trainer is not None else []) if isinstance(c, LastCheckpoint)]
        if not (saved and saved[0] and Path(saved[0]).is_file()):
            return Preempted(f"SIGTERM at step {step}, before anything to resume was saved; run the command again")
        return Preempted(f"SIGTERM at step {step}: saved {saved[0]}; continue with resume=true")
    text = str(error)
    lost = isinstance(error, torch.distributed.DistError) or (
        isinstance(error, RuntimeError) and "gloo" in text and "by peer" in text
    )
    if lost and trainer is not None and trainer.world_size > 1:
        cause = re.sub(r"\[[^\]]*\.(cc|cpp):\d+\] ", "", text).split(". ")[0]  # without torch's source line
        return RankLostError(
            f"another process of this {trainer.world_size}-process run stopped ({cause}); the "
            f"checkpoints it left are intact: see that process' output, then continue with "
            f"resume=true"
        )
    return None


def finish_run(
    cfg: DictConfig,
    trainer: L.Trainer,
    module: ImageClassifier,
    datamodule: ImageDataModule,
    params: int,
    fit_seconds: float,
) -> dict:
    """Test the best checkpoint, write results.json (the mark of a finished run: compare and the
    study scripts read it) and print the summary; return the metrics."""
    best = trainer.checkpoint_callback
    best_path = getattr(best, "best_model_path", "") or None
    # the whole run: this process's fit and, when it resumed, the parts before its checkpoint (read
    # before testing, whose loading of the best checkpoint restores that checkpoint's figures)
    fit_seconds += module.resumed_fit_seconds
    images = (module.resumed_images + module.images_trained) * trainer.world_size
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if cfg.test_after_fit:
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best_path, verbose=False, weights_only=False)
        metrics.update({k: float(v) for k, v in results[0].items()})
    log_dir = Path(trainer.logger.log_dir)
    metrics["checkpoint"] = best_path or str(log_dir / "checkpoints" / "last.ckpt")
    metrics["log_dir"] = str(log_dir)
    metrics["params"] = params
    metrics["data_source"] = datamodule.source or datamodule.name
    metrics["fit_seconds"] = round(fit_seconds, 1)
    metrics["images_trained"] = images
    # the run's one throughput figure (summary, results.json, compare): training images over the fit's
    # wall-clock time, validation included (a resumed run: the time lost after its checkpoint is not counted)
    metrics["images_per_s"] = round(images / max(fit_seconds, 1e-9), 1)
    # what the times and the numerics depend on: a study spread over machines keeps them beside each run
    metrics["precision"] = str(trainer.precision)
    metrics["device"] = device_description(trainer.strategy.root_device)
    metrics["finished_at"] = datetime.now().isoformat(timespec="seconds")  # a copied log keeps it
    if trainer.is_global_zero:
        (log_dir / RESULTS_FILE).write_text(json.dumps(metrics, indent=1) + "\n")
        print(summary(cfg, metrics), flush=True)
    return metrics


def group_choices() -> list[str]:
    """`optim=sgd`-style overrides of this run's optimizer, schedule and logger where the command
    line chose other than train.yaml's defaults (known when Hydra runs the job)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    chosen = HydraConfig.get().runtime.choices
    defaults = {
        k: v
        for entry in OmegaConf.load(CONFIG_DIR / "train.yaml").defaults
        if OmegaConf.is_dict(entry)
        for k, v in entry.items()
    }
    return [
        f"{group}={chosen[group]}"
        for group in ("optim", "scheduler", "logger")
        if chosen.get(group, defaults[group]) != defaults[group]
    ]


def finetune_command(cfg: DictConfig, run: Path, bigger: str) -> str:
    """The closing summary's fine-tune line, safe to paste: the experiment's fine-tune recipe where it
    names one, else a short fine-tune at twice the size (one pass over at most 10k images, a fifth of
    the run's lr); into the run's own log root, from the same copy of the data."""
    source = [
        f"finetune_from={run}",
        f"paths.log_dir={cfg.paths.log_dir}",
        *([f"data.root={cfg.data.root}"] if cfg.data.get("root") else []),
    ]
    source += group_choices()
    if cfg.get("finetune_recipe"):
        return " ".join(["python -m vitpos", f"experiment={cfg.finetune_recipe}", f"pos={cfg.pos.name}", *source])
    subset = ["data.train_subset=10000"] if "train_subset" in cfg.data else []
    return " ".join(
        [
            "python -m vitpos",
            f"pos={cfg.pos.name}",
            f"img_size={bigger}",
            *source,
            "trainer.max_epochs=1",
            *subset,
            f"optim.lr={cfg.optim.lr / 5:g}",
            "scheduler.warmup_steps=10",
        ]
    )


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
        *([f"    tensorboard --logdir {root}"] if any(run.glob("events.out.tfevents*")) else []),
    ]
    return "\n".join(lines)
