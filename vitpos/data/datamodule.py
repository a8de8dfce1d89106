"""`ImageDataModule`, the base of every dataset: the train/val split, each split held at its size
(downsampled once from the native images, or native), the loaders (DataLoader or `DeviceBatches`,
each over a `ShardedSampler`), and the batched resize, augmentation and normalisation on the
training device after the transfer; subclasses only `load` a split. `pixels_label` says how a size
relates to the dataset's own resolution."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from ..errors import ConfigError, is_integer
from ..model import image_size
from ..runs import size_tag
from .augment import AUGMENTS, BATCH_POLICIES, random_crop_flip, random_resized_crop
from .curriculum import Curriculum, Phase
from .sampling import DeviceBatches, ResumableDataLoader, ShardedSampler, UInt8ImageDataset


def pixels_label(size, native) -> str:
    """How images at `size` (H, W) relate to a dataset's own resolution `native` (H, W): `native`
    (the stored pixels), `downsampled` (no side larger), `upsampled` (a side larger: interpolated
    pixels, no new detail); "" where the native size is unknown (None: an image tree of mixed sizes)."""
    if native is None:
        return ""
    size, native = image_size(size), image_size(native)
    if size == native:
        return "native"
    return "downsampled" if all(s <= n for s, n in zip(size, native)) else "upsampled"


def describe_pixels(size, native) -> str:
    """`native pixels`, `downsampled from 32px`, `upsampled from 28px`, or "" (unknown native size):
    `pixels_label` for the console."""
    label = pixels_label(size, native)
    return "native pixels" if label == "native" else f"{label} from {size_tag(native)}" if label else ""


def downsample(images: Tensor, size: tuple[int, int]) -> Tensor:
    """uint8 (N, C, H, W) -> uint8 (N, C, h, w): torchvision's antialiased bicubic resize of the
    uint8 images, done once per split; in chunks, which bounds the float copy it may make."""
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    bicubic = InterpolationMode.BICUBIC
    return torch.cat([TF.resize(chunk, list(size), bicubic, antialias=True) for chunk in images.split(4096)])


class ImageDataModule(L.LightningDataModule):
    """Base for the in-memory datasets. Subclasses set `num_classes`, `in_chans`, `native_size`
    (None where unknown: an image tree of mixed sizes), `mean`, `std` and implement `load(train)`.

    Args:
        data_dir: dataset root.
        img_size: model input size, int or (H, W). Below the native size, the splits are
            downsampled once (`downsample`); above it, each batch is upsampled (bicubic).
        batch_size: per-device batch size.
        augment: `standard` (random crop + flip), `randaugment` / `trivialaugment` (torchvision's
            RandAugment / TrivialAugmentWide, drawn per image and applied batched at the stored size,
            then the crop + flip), `rrc` (random-resized crop + flip, `random_resized_crop`), `none`.
        crop_padding: padding in pixels (at `img_size`) of the random crop.
        hflip: random horizontal flip in every augmentation.
        rrc_scale: `rrc`'s range of the crop's area, as a share of the image's (torchvision's
            default, 0.08, crops too little of a 32 px image).
        rrc_ratio: `rrc`'s range of the crop's aspect ratio, width / height.
        val_size: number of training images held out for validation.
        train_subset: use only the first N remaining training images (short CPU budgets).
        split_seed: seed of the train/val split.
        shuffle_seed: seed of the training order (epoch e uses shuffle_seed + e).
        download: allow downloading when the data is missing.
        device_resident: keep the uint8 splits on the training device and index batches there
            (`DeviceBatches`); `auto` does so on CUDA.
        train_img_sizes: mixed-resolution training (FlexiViT, Beyer et al. 2023): each optimizer
            step resizes its batch to one size of this list (ints or [H, W] pairs), drawn from
            (shuffle_seed, step) alone, so every rank and a resumed run draw the same; validation
            and test stay at `img_size`. None: `img_size` only.
        batch_by_tokens: with `train_img_sizes`, a step at a size larger than `img_size` keeps
            only the first batch_size x (img_size / size)^2 images of its batch, so no step holds
            more tokens than one at `img_size`.
        curriculum: a resolution curriculum, phases [[size, share of the epochs], ...] ending at
            `img_size` (`Curriculum`): every step of an epoch trains at its phase's size; validation
            and test stay at `img_size`. None: `img_size` only.
        curriculum_batch: `fixed` (`batch_size` images per step in every phase) or `tokens` (a
            phase at a smaller size takes batch_size x (img_size / size)^2 images per step).
    """

    name: str
    num_classes: int
    in_chans: int
    native_size: tuple[int, int] | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str = ""  # which copy of the data was read, once loaded (runs record it)

    def __init__(
        self,
        data_dir: str = "data",
        img_size: int | tuple[int, int] = 32,
        batch_size: int = 128,
        augment: str = "standard",
        crop_padding: int = 4,
        hflip: bool = True,
        rrc_scale: list | tuple = (0.35, 1.0),
        rrc_ratio: list | tuple = (3 / 4, 4 / 3),
        val_size: int = 5000,
        train_subset: int | None = None,
        split_seed: int = 0,
        shuffle_seed: int = 0,
        download: bool = True,
        device_resident: bool | str = "auto",
        train_img_sizes: list | None = None,
        batch_by_tokens: bool = False,
        curriculum: list | None = None,
        curriculum_batch: str = "fixed",
    ):
        super().__init__()
        if augment not in AUGMENTS:
            raise ConfigError(f"data.augment={augment!r} is not one of {', '.join(AUGMENTS)}")
        if device_resident not in ("auto", True, False):
            raise ConfigError(f"data.device_resident={device_resident!r} must be auto, true or false")
        if not is_integer(batch_size) or batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size!r} must be a positive integer, e.g. data.batch_size=128")
        if train_subset is not None and (not is_integer(train_subset) or train_subset < 1):
            raise ConfigError(f"data.train_subset={train_subset!r} must be a positive integer or null (all images)")
        self.data_dir = Path(data_dir).expanduser()
        self.img_size = image_size(img_size)
        if train_img_sizes is not None and (isinstance(train_img_sizes, (str, int)) or not len(train_img_sizes)):
            raise ConfigError(
                f"train_img_sizes={train_img_sizes!r} must be a non-empty list of sizes, "
                f"e.g. train_img_sizes=[24,32,40], or null"
            )
        self.train_img_sizes = [
            image_size(size, f"train_img_sizes entry {size!r}", "train_img_sizes=[24,32,40]")
            for size in train_img_sizes or [self.img_size]
        ]
        self.batch_by_tokens = batch_by_tokens
        self.batch_size = batch_size
        self.curriculum = None
        if curriculum is not None:
            if train_img_sizes is not None or batch_by_tokens:
                raise ConfigError(
                    "curriculum and train_img_sizes (or batch_by_tokens) both choose the training sizes; "
                    "set one of them (a curriculum's batch follows curriculum_batch=fixed|tokens)"
                )
            self.curriculum = Curriculum(curriculum, self.img_size, batch_size, curriculum_batch)
        self.augment = augment
        self.crop_padding = crop_padding
        self.hflip = hflip
        self.rrc_scale = rrc_range(rrc_scale, "rrc_scale", "data.rrc_scale=[0.35,1]", most=1.0)
        self.rrc_ratio = rrc_range(rrc_ratio, "rrc_ratio", "data.rrc_ratio=[0.75,1.333]")
        self.val_size = val_size
        self.train_subset = train_subset
        self.split_seed = split_seed
        self.shuffle_seed = shuffle_seed
        self.download = download
        self.device_resident = device_resident
        self.train_set = self.val_set = self.test_set = None
        self._native_splits: dict[str, UInt8ImageDataset] = {}  # val, test as loaded: `use_size` starts there
        self._on_device: dict[str, tuple[Tensor, Tensor]] = {}  # split -> (images, labels) on the device

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        """Return uint8 images (N, C, H, W) and int64 labels (N,) of the train or test split."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = self.load(train=True)
        if not 0 < self.val_size < len(labels):
            raise ConfigError(f"data.val_size={self.val_size} must be between 1 and {len(labels) - 1}")
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(self.split_seed))
        val_index, train_index = order[: self.val_size], order[self.val_size :]
        if self.train_subset:
            train_index = train_index[: self.train_subset]
        largest = self.batch_size if self.curriculum is None else self.curriculum.largest_batch()
        if stage in (None, "fit") and len(train_index) < largest:  # training drops a partial batch
            tokens = f", {largest} at the curriculum's first size" if largest > self.batch_size else ""
            raise ConfigError(
                f"{len(train_index)} training images are fewer than one batch "
                f"(data.batch_size={self.batch_size}{tokens}); raise data.train_subset or lower data.batch_size"
            )
        # one training size at or below the native one: its images are downsampled once, here; several
        # (train_img_sizes, a curriculum) or a larger one: the native images, resized per batch
        train_images = images[train_index]
        if self.curriculum is None and len(set(self.train_img_sizes)) == 1:
            train_images = self.held_at(train_images, self.train_img_sizes[0])
        self.train_set = UInt8ImageDataset(train_images, labels[train_index])
        self._native_splits = {
            "val": UInt8ImageDataset(images[val_index], labels[val_index]),
            "test": UInt8ImageDataset(*self.load(train=False)),
        }
        self.use_size(self.img_size)

    def pixels(self, size=None) -> str:
        """`pixels_label` of `size` (default `img_size`) against this dataset's native size."""
        return pixels_label(size or self.img_size, self.native_size)

    def held_at(self, images: Tensor, size: tuple[int, int]) -> Tensor:
        """A split's native uint8 images as held for inputs of `size`: downsampled once where `size`
        is a downsampling of them, else as they are (upsampled per batch in `preprocess`)."""
        return downsample(images, size) if self.pixels(size) == "downsampled" else images

    def use_size(self, size) -> None:
        """Validate and test at `size` from now on (`vitpos.evaluate`'s sizes): the two splits are
        taken again from their native images, never from another size's."""
        self.img_size = image_size(size)
        self.val_set, self.test_set = (
            UInt8ImageDataset(self.held_at(split.images, self.img_size), split.labels)
            for split in (self._native_splits["val"], self._native_splits["test"])
        )
        self._on_device.pop("val", None)
        self._on_device.pop("test", None)

    def _shard(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _device(self) -> torch.device | None:
        """The training device when batches are drawn there, else None (the DataLoader path)."""
        if self.trainer is None or self.device_resident is False:
            return None
        device = self.trainer.strategy.root_device
        if self.device_resident == "auto" and device.type != "cuda":
            return None
        return device

    def _loader(self, dataset: UInt8ImageDataset, train: bool) -> DataLoader | DeviceBatches:
        rank, world_size = self._shard()
        batch_size = self.train_batch_size() if train else self.batch_size
        sampler = ShardedSampler(
            len(dataset), shuffle=train, seed=self.shuffle_seed, rank=rank, world_size=world_size, equal_shards=train
        )
        device = self._device()
        if device is not None:
            split = "train" if dataset is self.train_set else "val" if dataset is self.val_set else "test"
            if split not in self._on_device:  # one copy per split for the whole run
                self._on_device[split] = (dataset.images.to(device), dataset.labels.to(device))
            return DeviceBatches(*self._on_device[split], sampler, batch_size, drop_last=train)
        loader_class = ResumableDataLoader if train else DataLoader
        return loader_class(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=train,
            generator=torch.Generator(),  # its own: without one, every epoch's iterator draws from the run's RNG
        )

    def curriculum_phase(self, epoch: int | None = None) -> Phase | None:
        """The curriculum's phase of `epoch` (default: the trainer's current epoch), of the trainer's
        `max_epochs`; None without a curriculum."""
        if self.curriculum is None:
            return None
        epoch = self.trainer.current_epoch if epoch is None else epoch
        return self.curriculum.phase_at(epoch, self.trainer.max_epochs)

    def train_batch_size(self, epoch: int | None = None) -> int:
        """Images per training step on one rank in `epoch` (default: the trainer's current epoch)."""
        phase = self.curriculum_phase(epoch)
        return self.batch_size if phase is None else phase.batch_size

    def rebatches_after(self, epoch: int) -> bool:
        """Whether epoch `epoch + 1` steps with another batch size than `epoch` (a curriculum phase's end
        with `curriculum_batch=tokens`)."""
        return self.curriculum is not None and self.train_batch_size(epoch + 1) != self.train_batch_size(epoch)

    def train_batches_per_epoch(self, world_size: int = 1, epoch: int = 0) -> int:
        """Training batches one rank takes in `epoch` (equal shards, last partial batch dropped)."""
        self.setup()
        return (len(self.train_set) // world_size) // self.train_batch_size(epoch)

    def train_dataloader(self) -> DataLoader | DeviceBatches:
        self.train_loader = self._loader(self.train_set, train=True)
        return self.train_loader

    def val_dataloader(self) -> DataLoader | DeviceBatches:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader | DeviceBatches:
        return self._loader(self.test_set, train=False)

    def train_size(self, step: int, epoch: int = 0) -> tuple[int, int]:
        """The training size of optimizer step `step` in `epoch`: the curriculum's phase of the epoch,
        else a function of (shuffle_seed, step) only; the same on every rank and after a resume."""
        phase = self.curriculum_phase(epoch)
        if phase is not None:
            return phase.size
        if len(self.train_img_sizes) == 1:
            return self.train_img_sizes[0]
        generator = torch.Generator().manual_seed(self.shuffle_seed * 1_000_003 + step)
        return self.train_img_sizes[int(torch.randint(len(self.train_img_sizes), (1,), generator=generator))]

    def preprocess(self, images: Tensor, train: bool, size: tuple[int, int] | None = None) -> Tensor:
        """uint8 (B, C, h, w) on the device -> normalised float (B, C, H, W) at `size` (default
        `img_size`). Training: RandAugment / TrivialAugment on the uint8 batch at its stored size,
        then the resize and the crop + flip, whose padding scales with the size (`rrc`: the
        random-resized crop, then the flip)."""
        size = tuple(size or self.img_size)
        if train and self.augment in BATCH_POLICIES:
            images = BATCH_POLICIES[self.augment](images)
        images = images.float().div_(255)
        if tuple(images.shape[-2:]) != size:
            images = F.interpolate(images, size=size, mode="bicubic", antialias=True, align_corners=False).clamp_(0, 1)
        if train and self.augment == "rrc":
            images = random_resized_crop(images, self.rrc_scale, self.rrc_ratio)
            images = random_crop_flip(images, 0, self.hflip)
        elif train and self.augment != "none":
            padding = round(self.crop_padding * size[0] / self.img_size[0])
            images = random_crop_flip(images, padding, self.hflip)
        mean = torch.tensor(self.mean, device=images.device)[None, :, None, None]
        std = torch.tensor(self.std, device=images.device)[None, :, None, None]
        return (images - mean) / std

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        images, labels = batch
        training = self.trainer is not None and self.trainer.training
        if not training:
            return self.preprocess(images, train=False), labels
        self.train_loader.sampler.consumed += len(labels)  # exact resume position (see ShardedSampler)
        size = self.train_size(self.trainer.global_step, self.trainer.current_epoch)
        if self.batch_by_tokens:
            keep = max(1, round(len(labels) * self.img_size[0] * self.img_size[1] / (size[0] * size[1])))
            images, labels = images[:keep], labels[:keep]  # (k, C, h, w): tokens of one img_size step at most
        return self.preprocess(images, train=True, size=size), labels


def rrc_range(value, setting: str, example: str, most: float | None = None) -> tuple[float, float]:
    """A [low, high] range of `data.<setting>`: 0 < low <= high (<= `most`), else a ConfigError."""
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        low = high = float("nan")
    if not (0 < low <= high and (most is None or high <= most)):
        bound = f" <= {most:g}" if most is not None else ""
        raise ConfigError(
            f"data.{setting}={value!r} must be a [low, high] pair with 0 < low <= high{bound}, e.g. {example}"
        )
    return low, high
