"""What Lightning does not do for exact, safe resumption (atomic checkpoint files, RNG state in
the checkpoint, one `last.ckpt` written periodically and on SIGTERM), the end-of-training
positional figures and the test accuracy after every epoch that small-ViT papers report (the
progress bar and log lines: `progress`)."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from torchmetrics.classification import MulticlassAccuracy

from .errors import CheckpointWriteError, check_setting, is_integer
from .plots import make_figures, pyplot, sample_images, save_figures


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
        # while fitting only: the test after fit holds the best checkpoint's weights and progress, and
        # the end of fit has saved the finished training
        if isinstance(exception, SIGTERMException) and trainer.state.fn == TrainerFn.FITTING:
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
