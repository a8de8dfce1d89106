"""`train(cfg)`: the whole training run from a composed Hydra config; `python -m vitpos` (and
`train.py`) wrap it."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
from datetime import datetime
from pathlib import Path

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from .assembly import (
    build_module,
    build_trainer,
    check_run_settings,
    check_training_sizes,
    is_mixed,
    run_name_of,
)
from .callbacks import LastCheckpoint
from .config import instantiate
from .data import ImageDataModule, describe_pixels
from .errors import Preempted, RankLostError
from .hparams import hparams_row, log_hparams
from .module import ImageClassifier
from .precision import bf16_supported, device_description
from .resume import resume_checkpoint
from .runs import (
    RESULTS_FILE,
    check_writable,
    claim_version,
    claimed_version,
    remove_run_folder,
    run_dir,
    scheme_label,
    size_tag,
    sizes_tag,
    version_of,
)
from .summary import summary


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
    pixels = describe_pixels(datamodule.img_size, datamodule.native_size)  # "" where the data's size is unknown
    pixels_note = f", {pixels}" if pixels else ""
    evaluated = evaluated_weights(cfg)
    evaluated = "" if evaluated == "model" else f" | evaluates {evaluated}"
    print(
        f"vitpos: run {logger.log_dir} | pos={scheme_label(cfg.pos)} | {grid} grid "
        f"({size_tag(module.model.config['img_size'])}{pixels_note}, patch {module.model.patch_size}){size_note} | "
        f"data={datamodule.name}{source_note} ({len(datamodule.train_set)} train, {len(datamodule.val_set)} val) "
        f"| {params / 1e6:.2f}M params | precision {trainer.precision} on "
        f"{device_description(trainer.strategy.root_device)}{evaluated}",
        flush=True,
    )
    if trainer.strategy.root_device.type == "cpu" and not bf16_supported("cpu"):
        print(
            "vitpos: this CPU has no native bf16 (an AVX2-class CPU), so the run trains in fp32 and takes "
            "several times longer than README's times (measured on AVX512-BF16 CPUs)",
            flush=True,
        )


def evaluated_weights(cfg: DictConfig) -> str:
    """What validation and test evaluate: `model` or `ema 0.999` weights, `+ flip` under test_flip."""
    decay, warmup = cfg.get("ema_decay"), cfg.get("ema_warmup", False)
    weights = "model" if decay is None else f"ema {decay}" + (" (warm-up)" if warmup else "")
    return weights + (" + flip" if cfg.get("test_flip", False) else "")


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
            trainer = build_trainer(cfg, datamodule, module, logger)
            if trainer.is_global_zero:
                start_run(cfg, trainer, module, datamodule, trained_size, params)
            started = time.perf_counter()
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=False)
        # in the try: a SIGTERM while the best checkpoint is tested is a pre-emption too
        return finish_run(cfg, trainer, module, datamodule, params, round(time.perf_counter() - started, 1))
    except BaseException as error:
        if claimed and (trainer is None or trainer.global_step == 0):
            remove_run_folder(claimed, created)  # a run that never trained leaves nothing behind
        reason = stop_reason(error, trainer)
        if reason is None:
            raise
        raise reason from None


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
        if trainer.state.fn == TrainerFn.TESTING:  # after fit: its last.ckpt is the finished training
            return Preempted(
                f"SIGTERM while testing, after training finished at step {step}: {saved[0]} holds it; "
                f"continue with resume=true to test it"
            )
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
    # the training size against the data's own (compare labels each evaluated size from native_size)
    metrics["pixels"] = datamodule.pixels()
    metrics["native_size"] = list(datamodule.native_size) if datamodule.native_size else None
    metrics["fit_seconds"] = round(fit_seconds, 1)
    metrics["images_trained"] = images
    # the run's one throughput figure (summary, results.json, compare): training images over the fit's
    # wall-clock time, validation included (a resumed run: the time lost after its checkpoint is not counted)
    metrics["images_per_s"] = round(images / max(fit_seconds, 1e-9), 1)
    # what the times and the numerics depend on: a study spread over machines keeps them beside each run
    metrics["precision"] = str(trainer.precision)
    metrics["evaluated"] = evaluated_weights(cfg)  # the weights and test-time flip behind val/ and test/
    metrics["device"] = device_description(trainer.strategy.root_device)
    metrics["finished_at"] = datetime.now().isoformat(timespec="seconds")  # a copied log keeps it
    if trainer.is_global_zero:
        (log_dir / RESULTS_FILE).write_text(json.dumps(metrics, indent=1) + "\n")
        print(summary(cfg, metrics), flush=True)
    return metrics
