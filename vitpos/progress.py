"""Progress that tells the whole run's length: a bar on a terminal, a line every few percent in a
log file (Lightning's own bar counts one epoch)."""

from __future__ import annotations

import sys
import time

import lightning as L
from lightning.pytorch.callbacks import ProgressBar as LightningProgressBar
from lightning.pytorch.callbacks import TQDMProgressBar

from .runs import size_tag


def progress(enabled: bool = True) -> L.Callback | None:
    """The run's progress when `enabled` (`trainer.enable_progress_bar`): `ProgressBar` on a
    terminal, `ProgressLog` otherwise (a log file, CI, a study script)."""
    if not enabled:
        return None
    return ProgressBar() if sys.stdout.isatty() else ProgressLog()


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
