"""Test-only Lightning callbacks: a signal during a given optimizer step, like a pre-emption
(SIGTERM) or a crash (SIGKILL) at a known point; a NaN loss, a full disk, a rank that dies."""

import os
import signal

import lightning as L


class InterruptAtStep(L.Callback):
    """Sends the signal while optimizer step `step` runs (at the start of its batch)."""

    def __init__(self, step: int, signal_name: str = "SIGTERM"):
        self.step, self.signal = step, getattr(signal, signal_name)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step - 1:
            os.kill(os.getpid(), self.signal)


class NaNLossAtStep(L.Callback):
    """Makes rank `rank`'s next loss NaN from step `step` on, by poisoning its input batch."""

    def __init__(self, step: int, rank: int = 0):
        self.step, self.rank = step, rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step and trainer.global_rank == self.rank:
            batch[0].fill_(float("nan"))


class RecordBatches(L.Callback):
    """Appends `step checksum` of every training batch (after augmentation) to `path`."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        images, labels = batch
        with open(self.path, "a") as f:
            size = "x".join(map(str, images.shape[-2:]))
            f.write(f"{trainer.global_step} {images.double().sum().item():.6f} {labels.tolist()} {size}\n")


class DiskFullAtStep(L.Callback):
    """From optimizer step `step` on, every checkpoint write on this process fills the disk: half a
    file is written, then `OSError(ENOSPC)`, as a full disk does mid-save."""

    def __init__(self, step: int):
        self.step = step

    def setup(self, trainer, pl_module, stage):
        import errno

        from lightning.pytorch.plugins.io import TorchCheckpointIO

        original, callback = TorchCheckpointIO.save_checkpoint, self

        def save_until_full(io, checkpoint, path, storage_options=None):
            if trainer.global_step < callback.step:
                return original(io, checkpoint, path, storage_options)
            with open(path, "wb") as f:
                f.write(b"\0" * 1024)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        TorchCheckpointIO.save_checkpoint = save_until_full


class DieAtStep(L.Callback):
    """Rank `rank` exits at once (no cleanup, as a killed or crashed process) after step `step`."""

    def __init__(self, step: int, rank: int = 1):
        self.step, self.rank = step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and trainer.global_rank == self.rank:
            os._exit(1)


class SignalWhenBuilt(L.Callback):
    """Sends the signal as the run is set up (when the callbacks are built), before training starts."""

    def __init__(self, signal_name: str = "SIGTERM"):
        os.kill(os.getpid(), getattr(signal, signal_name))


class InterruptAtTest(L.Callback):
    """Sends the signal while the run tests its best checkpoint, after training has finished."""

    def __init__(self, signal_name: str = "SIGTERM"):
        self.signal = getattr(signal, signal_name)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        os.kill(os.getpid(), self.signal)
