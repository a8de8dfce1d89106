"""What Lightning does not do for exact, safe resumption (atomic checkpoint files, RNG state in
the checkpoint, one `last.ckpt` written periodically and on SIGTERM), the end-of-training
positional figures, the test accuracy after every epoch that small-ViT papers report, and progress
that tells the whole run's length (a bar on a terminal, a line every few percent in a log file)."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from torchmetrics.classification import MulticlassAccuracy

from .errors import CheckpointWriteError, check_setting, is_integer
from .plots import make_figures, pyplot, sample_images, save_figures
from .runs import size_tag


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file in the same folder, flushes it to disk, then
    renames it over the target (`os.replace` is atomic on POSIX): a kill at any moment leaves
    either the previous file or the new one, never a truncated `last.ckpt`. A write that fails (a
    full disk, a quota) stops the run with one line that names the cause and the intact file."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        path = Path(path)
        temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for stale in path.parent.glob(f".{path.name}.tmp*"):  # left by a process killed mid-save
                stale.unlink(missing_ok=True)
            super().save_checkpoint(checkpoint, temporary, storage_options)
            with open(temporary, "rb") as f:
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except OSError as error:
            kept = f"the previous {path.name} is intact" if path.is_file() else f"no earlier {path.name} exists"
            raise CheckpointWriteError(
                f"cannot write checkpoint {path} ({error.strerror or error}); {kept}; "
                f"free space in {path.parent} and continue with resume=true"
            ) from None
        finally:
            temporary.unlink(missing_ok=True)


def rng_states() -> dict:
    """The global random states that training consumes: torch (CPU and every CUDA device), numpy, Python."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {}),
    }


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class RNGStateInCheckpoint(L.Callback):
    """Saves the global RNG states (torch, CUDA, numpy, Python) with each checkpoint and restores
    them when training resumes, right before the first training batch is drawn, so augmentation and
    stochastic depth continue the uninterrupted run's random stream. Under DDP every rank is seeded
    alike and consumes its stream alike, so rank 0's states are every rank's."""

    def __init__(self):
        self._to_restore = None

    def state_dict(self) -> dict:
        return {"rng": rng_states()}

    def load_state_dict(self, state_dict: dict) -> None:
        self._to_restore = state_dict["rng"]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._to_restore is not None:
            set_rng_states(self._to_restore)
            self._to_restore = None


def batch_size(batch) -> int:
    """Images in a (images, labels) batch, for ThroughputMonitor (a named function: ddp_spawn
    pickles the callbacks)."""
    return len(batch[1])


class LastCheckpoint(L.Callback):
    """The one writer of `<run>/checkpoints/<filename>`: every `every_n_steps` optimizer steps (one
    step later when that step ends an epoch, so that its validation is in the checkpoint), at the
    end of training, and on SIGTERM (pre-emption, `scancel`, a container stop): the signal only
    marks the request, and at the end of the optimizer step every rank learns whether any rank got
    it and all stop together (`SIGTERMException`), after this saves, so `resume=true` loses no step
    (one step later at the end of a curriculum phase whose successor steps with another batch).
    (The best-by-val checkpoints are Lightning's `ModelCheckpoint`.)"""

    def __init__(self, every_n_steps: int = 500, filename: str = "last.ckpt"):
        check_setting(
            "callbacks.last_checkpoint.every_n_steps",
            every_n_steps,
            is_integer(every_n_steps) and every_n_steps > 0,
            "be a positive number of optimizer steps, e.g. checkpoint_every_n_steps=500",
        )
        self.every_n_steps, self.filename = every_n_steps, filename
        self.path: Path | None = None  # known once the trainer has its run folder
        self.stop_requested = False
        self._saved_step = 0  # the step of the last periodic save (or of the start)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.path = Path(trainer.log_dir) / "checkpoints" / self.filename  # rank 0's folder, on every rank

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._saved_step = trainer.global_step  # 0, or the step a resumed run starts from
        # In place of Lightning's SIGTERM handler, which enters a collective inside the handler: with
        # every DDP rank signalled at once (a scheduler signals the whole job) the ranks' collectives
        # then mismatch and the job crashes instead of saving. Lightning restores the handlers after fit.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.request_stop)

    def request_stop(self, signum, frame) -> None:
        self.stop_requested = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        # once per optimizer step: with gradient accumulation this hook also runs on micro-batches
        # between steps, where a save would record a half-accumulated state (an epoch's last batch
        # always ends a step)
        if (batch_idx + 1) % trainer.accumulate_grad_batches and not trainer.is_last_batch:
            return
        stop = trainer.strategy.reduce_boolean_decision(self.stop_requested, all=False)  # any rank, on every rank
        # Lightning resumes from an epoch's last step by its next loader's length: where the next epoch
        # steps with another batch (a curriculum phase's end), the stop waits one step, past validation
        if stop and not (trainer.is_last_batch and trainer.datamodule.rebatches_after(trainer.current_epoch)):
            raise SIGTERMException
        # A save due at an epoch's last step waits for the next step: Lightning resumes from an
        # epoch's last step without that epoch's validation, whose best checkpoint would stay unknown.
        step = trainer.global_step
        if step // self.every_n_steps > self._saved_step // self.every_n_steps and not trainer.is_last_batch:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: resumable
            self._saved_step = step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.save_checkpoint(self.path, weights_only=False)  # the full state: resumable

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: resumable


class PositionalFigures(L.Callback):
    """At the end of training, logs `make_figures` of the trained model to TensorBoard
    (`figures/<name>`, at the last step) and saves them as PNG under `<run>/figures/`, using the
    first `num_images` validation images."""

    def __init__(self, num_images: int = 64):
        self.num_images = num_images

    @rank_zero_only
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model = pl_module.model
        was_training = model.training
        images = sample_images(trainer.datamodule, self.num_images).to(pl_module.device)
        figures = make_figures(model, images.to(next(model.parameters()).dtype))
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "add_figure"):
            for name, figure in figures.items():
                experiment.add_figure(f"figures/{name}", figure, global_step=trainer.global_step, close=False)
        # the logger's folder, not `trainer.log_dir`: that one is a broadcast, a collective that
        # rank 0 alone (this hook) must not enter under DDP
        log_dir = getattr(trainer.logger, "log_dir", None)
        if log_dir:
            save_figures(figures, Path(log_dir) / "figures")
        else:
            for figure in figures.values():
                pyplot().close(figure)
        model.train(was_training)


def every_epoch_test(enabled: bool) -> EveryEpochTest | None:
    """`EveryEpochTest` when `enabled` (train.yaml's `test_every_epoch`), else no callback."""
    return EveryEpochTest() if enabled else None


def progress(enabled: bool = True) -> L.Callback | None:
    """The run's progress when `enabled` (`trainer.enable_progress_bar`): `ProgressBar` on a
    terminal, `ProgressLog` otherwise (a log file, CI, a study script)."""
    if not enabled:
        return None
    return ProgressBar() if sys.stdout.isatty() else ProgressLog()


class EveryEpochTest(L.Callback):
    """After every validation (not the sanity check), the top-1 accuracy of the current weights on
    the whole test split as `test_each_epoch/acc`, and its maximum so far as `_best`: the "best test
    accuracy over the epochs" that published small-ViT ablations report, no held-out figure (the
    run's `test/acc`, of the best-by-validation checkpoint, stays one). It draws no random number,
    so training is the same with or without it."""

    def __init__(self):
        self.best = 0.0
        self._loader = self._metric = None

    def state_dict(self) -> dict:
        return {"best": self.best}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best = state_dict["best"]

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        datamodule, device = trainer.datamodule, pl_module.device
        if self._loader is None:  # one loader for the run
            self._loader = datamodule.test_dataloader()
            self._metric = MulticlassAccuracy(datamodule.num_classes, top_k=1, average="micro").to(device)
        self._metric.reset()
        was_training = pl_module.training
        pl_module.eval()
        with torch.inference_mode(), trainer.precision_plugin.forward_context():
            for images, labels in self._loader:
                logits = pl_module(datamodule.preprocess(images.to(device), train=False))
                self._metric.update(logits.float(), labels.to(device))
        pl_module.train(was_training)
        accuracy = float(self._metric.compute())  # over every rank's shard
        self.best = max(self.best, accuracy)
        pl_module.log("test_each_epoch/acc", accuracy, sync_dist=True)
        pl_module.log("test_each_epoch/acc_best", self.best, sync_dist=True)


class RunClock:
    """The whole run's progress: optimizer steps done of the run's total and the wall-clock time
    left at the pace since this process started training (validation included)."""

    def __init__(self):
        self.started = self.first_step = None
        self.total = 0

    def start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """At the start of training: the run's total steps, as the module counts them for its schedule
        (Lightning's estimate counts the first epoch's batches for every epoch: a curriculum's may differ)."""
        self.started, self.first_step = time.perf_counter(), trainer.global_step
        self.total = pl_module.total_steps()

    def eta(self, trainer: L.Trainer) -> str:
        """`h:mm:ss` left, or `?` before the first step."""
        done = trainer.global_step - (self.first_step or 0)
        if self.started is None or done <= 0:
            return "?"
        left = (time.perf_counter() - self.started) / done * max(0, self.total - trainer.global_step)
        return time.strftime("%H:%M:%S", time.gmtime(left)).removeprefix("00:")


class ProgressBar(TQDMProgressBar):
    """Lightning's progress bar with the run's length (`Epoch k/N`, the whole run's ETA), training
    images/s (on CPU a few it/s say little) and a short postfix, the run's ETA first, that fits in 100
    columns (tqdm cuts a longer line at the terminal's edge)."""

    # the epoch's elapsed time, not its remaining time and it/s: the postfix has the run's ETA and img/s
    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"

    def __init__(self, smoothing: float = 0.9):
        super().__init__()
        self.smoothing, self.images_per_s, self._last = smoothing, None, None
        self.clock = RunClock()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self.clock.start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.train_progress_bar.set_description(epoch_label(trainer))

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar.total is None or bar.total == float("inf"):  # resumed mid-epoch: Lightning's bar has no total
            bar.reset(total=trainer.num_training_batches)
            bar.n = batch_idx
            bar.set_description(epoch_label(trainer))
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._last is not None:
            rate = len(batch[1]) * trainer.world_size / (now - self._last)
            self.images_per_s = (
                rate if self.images_per_s is None else self.smoothing * self.images_per_s + (1 - self.smoothing) * rate
            )
        self._last = now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last = None  # validation time is not training time
        super().on_train_epoch_end(trainer, pl_module)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict:
        """The postfix: run ETA, the step's training loss, the best validation accuracy (%), img/s."""
        metrics = trainer.progress_bar_metrics
        shown = {"run ETA": self.clock.eta(trainer)}
        if "train/loss_step" in metrics:
            shown["loss"] = f"{float(metrics['train/loss_step']):.3f}"
        if "val/acc_best" in metrics:
            shown["best val"] = f"{100 * float(metrics['val/acc_best']):.2f}%"
        if self.images_per_s is not None:
            shown["img/s"] = f"{self.images_per_s:.0f}"
        return shown


def epoch_label(trainer: L.Trainer) -> str:
    """`Epoch 3/15` (counted from 1), or `Epoch 3` when the run is bounded by steps only; `at 16px`
    after it in a curriculum."""
    epochs = trainer.max_epochs if trainer.max_epochs not in (None, -1) and trainer.max_steps in (None, -1) else None
    phase = trainer.datamodule.curriculum_phase() if trainer.datamodule is not None else None
    return (
        f"Epoch {trainer.current_epoch + 1}"
        + (f"/{epochs}" if epochs else "")
        + (f" at {size_tag(phase.size)}" if phase else "")
    )


class ProgressLog(LightningProgressBar):
    """Progress for a console that is not a terminal (a log file, CI, a study script): instead of a
    redrawn bar, one line every `every` of the run's optimizer steps, with the step and epoch of
    the total, the step's training loss, the best validation accuracy (%) and the whole run's ETA; in a
    curriculum, a line where a phase ends with its training images/s (this process's part, validation
    excluded)."""

    def __init__(self, every: float = 0.05):
        super().__init__()
        self.every, self.enabled, self.clock = every, True, RunClock()
        self._next = 0
        self._phase = None  # the curriculum phase of the epoch trained last
        self._phase_images, self._phase_seconds, self._last = 0, 0.0, 0.0

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.clock.start(trainer, pl_module)
        self._next = self._mark_after(trainer.global_step)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Where a curriculum's phase follows another: the one ending and its images/s, the next one's
        size and batch (the start line gives the whole plan)."""
        self._last = time.perf_counter()
        phase = trainer.datamodule.curriculum_phase()
        if self._phase is not None and phase != self._phase:
            self._say(
                f"{self._phase_done()}; {size_tag(phase.size)} from epoch {phase.first_epoch + 1}, "
                f"{phase.batch_size} images per step and process",
                trainer,
            )
        self._phase = phase

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._phase is not None:
            self._say(self._phase_done(), trainer)

    def _phase_done(self) -> str:
        """`16px done at 2400 img/s`, and the count starts again."""
        rate = self._phase_images / max(self._phase_seconds, 1e-9)
        self._phase_images, self._phase_seconds = 0, 0.0
        return f"{size_tag(self._phase.size)} done at {rate:.0f} img/s"

    def _say(self, text: str, trainer: L.Trainer) -> None:
        if self.enabled and trainer.is_global_zero:
            print(f"vitpos: curriculum: {text}", flush=True)

    def _mark_after(self, step: int) -> int:
        interval = max(1, round(self.every * self.clock.total))
        return (step // interval + 1) * interval

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        self._phase_seconds += now - self._last
        self._phase_images += len(batch[1]) * trainer.world_size
        self._last = now
        step, total = trainer.global_step, self.clock.total
        if step < self._next and step < total:
            return
        self._next = self._mark_after(step)
        if not (self.enabled and trainer.is_global_zero):
            return
        metrics = trainer.progress_bar_metrics
        parts = [
            f"step {step}/{total} ({100 * step / max(total, 1):.0f}%)",
            epoch_label(trainer).lower(),
            *([f"loss {float(metrics['train/loss_step']):.4f}"] if "train/loss_step" in metrics else []),
            *([f"best val {100 * float(metrics['val/acc_best']):.2f}%"] if "val/acc_best" in metrics else []),
            f"run ETA {self.clock.eta(trainer)}",
        ]
        print("vitpos: " + " | ".join(parts), flush=True)
