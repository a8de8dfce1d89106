"""LightningModule: cross-entropy with label smoothing (optionally timm's Mixup/CutMix), top-1
torchmetrics accuracy per split, and the optimizer and schedule the config builds (`optim/`,
`scheduler/`: AdamW and linear warm-up then cosine decay by default), stepped every optimizer step."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F
from lightning.fabric.utilities.throughput import measure_flops
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.utils import ModelEmaV3
from torch import Tensor
from torchmetrics import MaxMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from .errors import ConfigError, NonFiniteLossError, check_setting, is_integer, is_number
from .model import create_model, image_size
from .tta import predict


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """LR multiplier: linear from 0 to 1 over `warmup_steps`, then cosine down to `min_lr_ratio`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def warmup_cosine_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int = 500, min_lr_ratio: float = 0.01
) -> torch.optim.lr_scheduler.LambdaLR:
    """`warmup_cosine` over a run of `total_steps` optimizer steps, the warm-up capped at a tenth of
    the run (configs/scheduler/warmup_cosine.yaml)."""
    check_setting(
        "scheduler.warmup_steps",
        warmup_steps,
        is_integer(warmup_steps) and warmup_steps >= 0,
        "be a whole number of steps, e.g. scheduler.warmup_steps=500",
    )
    check_setting(
        "scheduler.min_lr_ratio",
        min_lr_ratio,
        is_number(min_lr_ratio) and 0 <= min_lr_ratio <= 1,
        "be a number in [0, 1] (the final lr as a fraction of optim.lr), e.g. scheduler.min_lr_ratio=0.01",
    )
    warmup = max(1, min(warmup_steps, total_steps // 10))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        functools.partial(warmup_cosine, warmup_steps=warmup, total_steps=total_steps, min_lr_ratio=min_lr_ratio),
    )


default_optimizer = functools.partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.05)
soft_target_cross_entropy = SoftTargetCrossEntropy()
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
PROGRESS_KEY = "vitpos_progress"  # checkpoint entry: the fit seconds and images (per rank) up to the save


def check_optimizer(optimizer: Callable, scheduler: Callable) -> None:
    """Build the optimizer and the schedule once over a stand-in parameter, so that a bad setting
    (a negative lr, betas out of range, a warm-up that is not a number) fails before training, as
    one line naming the key."""
    for name in ("lr", "weight_decay"):
        if isinstance(optimizer, functools.partial) and name in optimizer.keywords:
            value = optimizer.keywords[name]
            check_setting(
                f"optim.{name}",
                value,
                is_number(value) and value >= 0,
                f"be a non-negative number, e.g. optim.{name}={1e-3 if name == 'lr' else 0.05}",
            )
    keys = ", ".join(f"optim.{k}={v!r}" for k, v in getattr(optimizer, "keywords", {}).items())
    try:
        built = optimizer([torch.nn.Parameter(torch.zeros(1))])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"optim: {error} (the optimizer's settings: {keys}); pass valid values") from None
    try:
        scheduler(built, total_steps=1)
    except TypeError as error:
        raise ConfigError(f"scheduler: {error}; see configs/scheduler/ for the schedule's settings") from None


def check_loss_settings(label_smoothing, mixup_alpha, cutmix_alpha, check_finite_every) -> None:
    """The loss settings and the interval of the finite-loss check, each refused as one line."""
    for name, value in (
        ("label_smoothing", label_smoothing),
        ("mixup_alpha", mixup_alpha),
        ("cutmix_alpha", cutmix_alpha),
    ):
        check_setting(f"loss.{name}", value, is_number(value) and value >= 0, "be a non-negative number")
    check_setting(
        "loss.label_smoothing",
        label_smoothing,
        label_smoothing < 1,
        "be below 1 (the target's share moved to the other classes), e.g. loss.label_smoothing=0.1",
    )
    check_setting(
        "check_finite_every",
        check_finite_every,
        is_integer(check_finite_every) and check_finite_every > 0,
        "be a positive number of steps, e.g. check_finite_every=50",
    )


def check_evaluation_settings(ema_decay, ema_warmup, test_flip) -> None:
    """The weight-EMA and test-time flip settings, each refused as one line."""
    check_setting(
        "ema_decay",
        ema_decay,
        ema_decay is None or (is_number(ema_decay) and 0 <= ema_decay <= 1),
        "be null (off) or a number in [0, 1], e.g. ema_decay=0.999",
    )
    for name, value in (("ema_warmup", ema_warmup), ("test_flip", test_flip)):
        check_setting(name, value, isinstance(value, bool), f"be true or false, e.g. {name}=true")


def compiled(model: torch.nn.Module, compile: bool | str) -> torch.nn.Module:
    """`model` compiled in place by `torch.compile` (so checkpoints keep their keys) unless `compile`
    is false; true is torch's default mode."""
    if compile not in (False, True, *COMPILE_MODES):
        raise ConfigError(f"model.compile={compile!r} must be false, true or one of {', '.join(COMPILE_MODES)}")
    if compile:
        model.compile(mode=None if compile is True else compile)
    return model


def accuracy_metrics(prefix: str, num_classes: int) -> MetricCollection:
    """Top-1 and top-5 (top-k for fewer classes) as papers report them: correct / seen (micro).
    torchmetrics' default is the macro mean of per-class recalls, which differs on unbalanced splits
    (validation, `limit=`)."""
    top_k = min(5, num_classes)
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes, top_k=1, average="micro"),
            f"acc_top{top_k}": MulticlassAccuracy(num_classes, top_k=top_k, average="micro"),
        },
        prefix=prefix,
    )


class ImageClassifier(L.LightningModule):
    """Trains a `vitpos` ViT on an image-classification DataModule.

    Args:
        model: `create_model` arguments (pos, img_size, num_classes, in_chans, dim, ...). Saved in
            the checkpoint's hyper-parameters, so the model can be rebuilt from the file alone.
        optimizer: a partial optimizer, called with the parameter groups (weight decay only for
            matrices and kernels); default AdamW(lr=1e-3, weight_decay=0.05).
        scheduler: a partial schedule, called with the optimizer and `total_steps`; default
            `warmup_cosine_schedule`.
        label_smoothing: cross-entropy label smoothing.
        mixup_alpha, cutmix_alpha: Beta(alpha, alpha) of timm's `Mixup` (Zhang et al. 2018; Yun et al.
            2019; one of the two per batch when both are on); 0 and 0 train on the plain batch.
        data: the data config (`_target_` and arguments), kept in the checkpoint so evaluation
            can rebuild the dataset.
        check_finite_every: steps between checks of the training loss for NaN/inf (each check is a
            host sync; a non-finite loss stops the run at the next check).
        compile: compile the model with `torch.compile` (in place, so checkpoints keep their keys):
            false, true (torch's default mode) or a mode name such as `max-autotune-no-cudagraphs`
            or `reduce-overhead` (CUDA graphs).
        ema_decay: null, or the decay of an exponential moving average of the weights (timm's
            `ModelEmaV3`, updated after every optimizer step) that validation, test and the
            checkpoint's evaluation use.
        ema_warmup: timm's EMA warm-up: the decay grows as 1 - (1 + step)^(-2/3) up to `ema_decay`.
        test_flip: validation and test average each image's logits with its mirror's (`tta`).
    """

    def __init__(
        self,
        model: dict,
        optimizer: Callable | None = None,
        scheduler: Callable | None = None,
        label_smoothing: float = 0.1,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        check_finite_every: int = 50,
        data: dict | None = None,
        compile: bool | str = False,
        ema_decay: float | None = None,
        ema_warmup: bool = False,
        test_flip: bool = False,
    ):
        super().__init__()
        check_loss_settings(label_smoothing, mixup_alpha, cutmix_alpha, check_finite_every)
        check_evaluation_settings(ema_decay, ema_warmup, test_flip)
        self.optimizer_factory = optimizer or default_optimizer
        self.scheduler_factory = scheduler or warmup_cosine_schedule
        check_optimizer(self.optimizer_factory, self.scheduler_factory)
        self.save_hyperparameters(ignore=["optimizer", "scheduler"])  # the run's config.yaml keeps them
        self.model = compiled(create_model(**model), compile)
        num_classes = self.model.config["num_classes"]
        self.ema: ModelEmaV3 | None = None  # with ema_decay: made in configure_model
        # soft targets (mixed and smoothed) for training; evaluation keeps the hard-label loss
        self.mixup = (
            Mixup(
                mixup_alpha=mixup_alpha,
                cutmix_alpha=cutmix_alpha,
                label_smoothing=label_smoothing,
                num_classes=num_classes,
            )
            if mixup_alpha > 0 or cutmix_alpha > 0
            else None
        )
        self.train_metrics = accuracy_metrics("train/", num_classes)
        self.val_metrics = accuracy_metrics("val/", num_classes)
        self.test_metrics = accuracy_metrics("test/", num_classes)
        self.val_acc_best = MaxMetric()
        self._nonfinite: Tensor | None = None  # non-finite losses since the last check (on the device)
        self._total_steps = 1
        self._checked_step = -1  # the last step whose loss was checked
        self.images_trained = 0  # by this process and rank (with batch_by_tokens, batches differ in size)
        # a resumed run's earlier parts, up to the checkpoint it resumes from: fit seconds, images (this rank)
        self.resumed_fit_seconds, self.resumed_images = 0.0, 0
        self._fit_started = time.perf_counter()

    def configure_model(self) -> None:
        """The weight EMA, a submodule, so its weights are in every checkpoint (`ema.module.*`) and
        restored on resume. Made here, in the process that trains, before a checkpoint is loaded:
        timm's private RNG generator cannot be pickled into a `ddp_spawn` process."""
        if self.hparams.ema_decay is not None and self.ema is None:
            self.ema = ModelEmaV3(self.model, decay=self.hparams.ema_decay, use_warmup=self.hparams.ema_warmup)
            self.ema.requires_grad_(False)  # a copy of trained parameters: DDP would wait for their gradients
            self.ema.train(self.training)  # in the module's mode, as Lightning expects (eval in validation and test)

    def setup(self, stage: str) -> None:
        """Count the training FLOPs of one batch, so Lightning's ThroughputMonitor logs FLOP/s and,
        on GPUs it knows, MFU (a curriculum's phases: at each epoch's start)."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if stage != "fit" or datamodule is None:
            return
        self.flops_per_batch = self.batch_flops(datamodule.batch_size, self.hparams.model["img_size"])

    def batch_flops(self, batch_size: int, img_size) -> int:
        """Training FLOPs of a batch of `batch_size` images at `img_size`, counted on the meta device
        (no compute)."""
        with torch.device("meta"):
            model = create_model(**self.hparams.model)
            images = torch.empty(batch_size, model.config["in_chans"], *image_size(img_size))
        return measure_flops(model, lambda: model(images), loss_fn=torch.Tensor.sum)

    def on_train_epoch_start(self) -> None:
        phase = self.trainer.datamodule.curriculum_phase() if self.trainer.datamodule is not None else None
        if phase is not None:
            self.flops_per_batch = self.batch_flops(phase.batch_size, phase.size)

    def epoch_metric_names(self) -> list[str]:
        """The keys logged at every training and validation epoch's end: what a callback's `monitor`
        can name (the training loss, logged per step too, also as Lightning's `train/loss_epoch`)."""
        losses = ["train/loss", "train/loss_epoch", "val/loss"]
        return [*losses, *self.train_metrics.keys(), *self.val_metrics.keys(), "val/acc_best"]

    def evaluated_model(self) -> torch.nn.Module:
        """The weights validation and test use: the EMA's when on, else the trained ones."""
        return self.ema.module if self.ema is not None else self.model

    def forward(self, images: Tensor) -> Tensor:
        """Evaluation logits: the evaluated model's, flip-averaged under `test_flip`."""
        return predict(self.evaluated_model(), images, self.hparams.test_flip)

    def _step(self, batch, metrics: MetricCollection, stage: str) -> Tensor:
        images, labels = batch
        if stage == "train" and self.mixup is not None:
            images, targets = self.mixup(images, labels)  # accuracy is still counted on the true labels
            logits = self.model(images)
            loss = soft_target_cross_entropy(logits.float(), targets)
        else:
            logits = self.model(images) if stage == "train" else self(images)
            loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.hparams.label_smoothing)
        metrics.update(logits.detach(), labels)
        on_step = stage == "train"
        # the progress bar shows train/loss and val/acc_best only: a short line
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=on_step, sync_dist=not on_step)
        self.log_dict(metrics, on_step=False, on_epoch=True)
        return loss

    def training_step(self, batch, batch_idx: int) -> Tensor:
        loss = self._step(batch, self.train_metrics, "train")
        self.images_trained += len(batch[1])
        self.check_finite(loss)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def optimizer_step(self, *args, **kwargs) -> None:
        """The optimizer step, then the EMA update (fixed decay, or timm's warm-up by step): here, not
        in a batch-end hook, so that a checkpoint saved at the step's end (callbacks run first) holds both."""
        super().optimizer_step(*args, **kwargs)
        if self.ema is not None:
            self.ema.update(self.model, step=self.global_step if self.hparams.ema_warmup else None)

    def check_finite(self, loss: Tensor) -> None:
        """Stop every rank together (no hang in the gradient all-reduce) once any rank's loss has
        been non-finite. The flag is kept on the device and read every `check_finite_every` steps
        and at the last step: reading it is a host sync, which stalls a GPU's queue."""
        nonfinite = (~torch.isfinite(loss.detach())).float()
        self._nonfinite = nonfinite if self._nonfinite is None else self._nonfinite + nonfinite
        step, every = self.global_step, self.hparams.check_finite_every
        if (step + 1) % every and step + 1 < self._total_steps:
            return
        bad = self.trainer.strategy.reduce(self._nonfinite, reduce_op="sum")  # non-finite steps, all ranks
        first, self._nonfinite, self._checked_step = self._checked_step + 1, None, step
        if bad > 0:
            where = f"at step {step}" if first == step else f"between steps {first} and {step}"
            raise NonFiniteLossError(
                f"non-finite training loss {where} (epoch {self.current_epoch}; "
                f"{int(bad)} rank-step(s), checked every check_finite_every={every}); "
                f"lower optim.lr, keep trainer.gradient_clip_val, "
                f"or try trainer.precision=32-true"
            )

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, self.val_metrics, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, self.test_metrics, "test")

    def on_fit_start(self) -> None:
        self._fit_started = time.perf_counter()

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[PROGRESS_KEY] = {
            "fit_seconds": self.resumed_fit_seconds + time.perf_counter() - self._fit_started,
            "images": self.resumed_images + self.images_trained,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Resuming: the run's fit time and images so far (a checkpoint saved before they were
        recorded: none), so a resumed run's figures count all its parts."""
        progress = checkpoint.get(PROGRESS_KEY, {})
        self.resumed_fit_seconds, self.resumed_images = progress.get("fit_seconds", 0.0), progress.get("images", 0)

    def on_train_start(self) -> None:
        self.val_acc_best.reset()
        self._checked_step = self.global_step - 1  # a resumed run checks from where it starts

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        self.val_acc_best(self.val_metrics["acc"].compute())
        self.log("val/acc_best", self.val_acc_best.compute(), prog_bar=True, sync_dist=True)

    def parameter_groups(self) -> list[dict]:
        """AdamW groups: decay for matrices and conv kernels; none for norms, biases, positional
        tables and the cls token (nanoGPT's `dim >= 2` rule plus the model's own exclusions)."""
        skip = self.model.no_weight_decay()
        decay, no_decay = [], []
        for name, param in self.model.named_parameters():
            if not param.requires_grad:
                continue
            (no_decay if param.ndim < 2 or name in skip else decay).append(param)
        return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]  # decay: the optimizer's own

    def total_steps(self) -> int:
        """Optimizer steps of the whole run, counted from the datamodule epoch by epoch (a curriculum's
        phases may differ in batch size; Lightning's `estimated_stepping_batches` would count the first
        epoch's loader for every epoch, and build it before a resumed run restores its position)."""
        trainer = self.trainer
        counts = [trainer.max_steps] if trainer.max_steps and trainer.max_steps > 0 else []
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            limit = trainer.limit_train_batches

            def epoch_steps(epoch: int) -> int:
                batches = trainer.datamodule.train_batches_per_epoch(trainer.world_size, epoch)
                batches = (
                    min(batches, limit)
                    if isinstance(limit, int)
                    else int(batches * (limit if limit is not None else 1.0))
                )
                return math.ceil(batches / trainer.accumulate_grad_batches)

            counts.append(sum(epoch_steps(epoch) for epoch in range(trainer.max_epochs)))
        if not counts:
            raise ConfigError("set trainer.max_epochs or trainer.max_steps: the learning-rate schedule needs a length")
        return max(1, min(counts))

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameter_groups())
        self._total_steps = self.total_steps()
        scheduler = self.scheduler_factory(optimizer, total_steps=self._total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
