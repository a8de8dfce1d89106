"""Datasets as LightningDataModules, held in memory as uint8 tensors.

Every dataset is loaded once into `(N, C, H, W)` uint8 images and `(N,)` int64 labels. The
standard augmentation (random crop with padding, horizontal flip), the resize to `img_size` and
the normalisation run batched on the training device in `on_after_batch_transfer`, so the loader
only indexes tensors. With `device_resident` (the default on CUDA) the uint8 set itself lives on
the training device and each batch is one indexing of it (`DeviceBatches`): no per-sample Python,
no collate, no host-to-device copy per step. The `randaugment` / `trivialaugment` policies run per
sample in the DataLoader workers, so they keep the DataLoader.

- `cifar10`: CIFAR-10 from the pickled batches (torchvision's download), the official archive or
  an image tree of it (e.g. a JPEG copy), whichever `data.root` or the data folder holds.
- `image_folder`: any `train/<class>/` + `test/<class>/` tree of JPEG/PNG files, or its archive.
- `fashion_mnist`: Debian's `dataset-fashion-mnist` files when installed, else torchvision's
  download; resized to `img_size`, 1 channel.
- `synthetic`: generated in memory, deterministic by seed; the label is the relative placement of
  two shapes, so a model without positions cannot beat chance.
"""
from __future__ import annotations

import gzip
import pickle
import tarfile
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from .errors import ConfigError, DataNotFoundError, check_setting, is_integer
from .image_folder import load_image_tree
from .model import image_size

AUGMENTS = ("none", "standard", "randaugment", "trivialaugment")
PER_SAMPLE_AUGMENTS = ("randaugment", "trivialaugment")


class UInt8ImageDataset(Dataset):
    """Indexes in-memory uint8 images; an optional per-sample transform runs in the workers."""

    def __init__(self, images: Tensor, labels: Tensor, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, self.labels[index]


class ShardedSampler(Sampler[int]):
    """Indices of one rank's shard, in an order that depends only on (seed, epoch), with no sample
    repeated across ranks (unlike DistributedSampler's padding, so evaluation counts each sample
    once), and a resume position: after `load_state_dict`, the epoch it was saved in continues with
    the first sample not yet consumed.

    With world size W, rank r takes positions r, r+W, ... of the epoch's order, so W ranks with
    batch b see, step by step, the same samples as one process with batch W*b.

    Args:
        size: dataset length.
        shuffle: a new permutation each epoch (seeded by seed + epoch) or the natural order.
        seed: permutation seed.
        rank, world_size: this process's shard.
        equal_shards: trim the order to a multiple of world_size so every rank has as many
            samples (training: every rank must take the same number of optimizer steps).
    """

    def __init__(self, size: int, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1,
                 equal_shards: bool = False):
        self.size, self.shuffle, self.seed = size, shuffle, seed
        self.rank, self.world_size, self.equal_shards = rank, world_size, equal_shards
        self.epoch = 0
        self.consumed = 0  # samples of this epoch used by training steps (counted by the DataModule)
        self._resume: tuple[int, int] | None = None  # (epoch, samples consumed) from a checkpoint

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _order(self) -> Tensor:
        if self.shuffle:
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.size)
        if self.equal_shards:
            order = order[: self.size - self.size % self.world_size]
        return order[self.rank:: self.world_size]

    def __len__(self) -> int:
        return len(self._order())

    def remaining(self) -> Tensor:
        """This epoch's indices from the resume position on (starts the epoch's bookkeeping)."""
        skip = 0
        if self._resume is not None and self._resume[0] == self.epoch:
            skip = self._resume[1]
        self._resume = None
        self.consumed = skip
        return self._order()[skip:]

    def __iter__(self):
        yield from self.remaining().tolist()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self._resume = (int(state["epoch"]), int(state["consumed"]))


class ResumableDataLoader(DataLoader):
    """A DataLoader whose position Lightning saves in checkpoints and restores on resume (it
    implements the `state_dict` / `load_state_dict` protocol Lightning looks for), delegated to its
    `ShardedSampler`."""

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


class DeviceBatches:
    """Batches drawn from a dataset held on the training device: each is one indexing of the
    images and labels with the next `batch_size` indices of `sampler`'s order, the exact batches a
    DataLoader with that sampler (no workers, no per-sample transform) would collate. Lightning
    saves and restores its position (`state_dict` protocol) and sets the sampler's epoch.

    images: uint8 (N, C, H, W) and labels (N,), both already on the device.
    """

    batch_sampler = None  # Lightning's loops read it beside `sampler`, as on a DataLoader

    def __init__(self, images: Tensor, labels: Tensor, sampler: ShardedSampler, batch_size: int, drop_last: bool):
        self.images, self.labels, self.sampler = images, labels, sampler
        self.batch_size, self.drop_last = batch_size, drop_last

    def __len__(self) -> int:
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self):
        order = self.sampler.remaining().to(self.images.device)
        stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
        for start in range(0, stop, self.batch_size):
            index = order[start: start + self.batch_size]
            yield self.images[index], self.labels[index]

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def random_crop_flip(images: Tensor, padding: int, hflip: bool) -> Tensor:
    """Batched random crop with zero padding and random horizontal flip, one draw per sample.

    images: (B, C, H, W) float. Uses the global torch RNG of the images' device.
    """
    batch, _, height, width = images.shape
    if padding > 0:
        padded = F.pad(images, (padding, padding, padding, padding))  # (B, C, H+2p, W+2p)
        dy = torch.randint(0, 2 * padding + 1, (batch,), device=images.device)
        dx = torch.randint(0, 2 * padding + 1, (batch,), device=images.device)
        rows = dy[:, None] + torch.arange(height, device=images.device)  # (B, H)
        cols = dx[:, None] + torch.arange(width, device=images.device)  # (B, W)
        batch_index = torch.arange(batch, device=images.device)[:, None, None]
        # advanced indexing on dims 0, 2, 3 -> (B, H, W, C)
        images = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if hflip:
        flip = torch.rand(batch, device=images.device) < 0.5
        images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    return images


class ImageDataModule(L.LightningDataModule):
    """Base for the in-memory datasets. Subclasses set `num_classes`, `in_chans`, `native_size`,
    `mean`, `std` and implement `load(train)`.

    Args:
        data_dir: dataset root.
        img_size: model input size, int or (H, W); images are resized (bicubic) from native size.
        batch_size: per-device batch size.
        num_workers: DataLoader workers (only useful with `augment=randaugment`).
        augment: `standard` (random crop + flip), `randaugment` / `trivialaugment` (standard +
            RandAugment / TrivialAugmentWide, per sample), `none`.
        crop_padding: padding in pixels (at `img_size`) of the random crop.
        hflip: random horizontal flip in the standard augmentation.
        val_size: number of training images held out for validation.
        train_subset: use only the first N remaining training images (short CPU budgets).
        split_seed: seed of the train/val split.
        shuffle_seed: seed of the training order (epoch e uses shuffle_seed + e).
        download: allow downloading when the data is missing.
        device_resident: keep the uint8 splits on the training device and index batches there
            (`DeviceBatches`); `auto` does so on CUDA unless a per-sample policy needs workers.
        train_img_sizes: mixed-resolution training (FlexiViT, Beyer et al. 2023): each optimizer
            step resizes its batch to one size of this list (ints or [H, W] pairs), drawn from
            (shuffle_seed, step) alone, so every rank and a resumed run draw the same; validation
            and test stay at `img_size`. None: `img_size` only.
        batch_by_tokens: with `train_img_sizes`, a step at a size larger than `img_size` keeps
            only the first batch_size x (img_size / size)^2 images of its batch, so no step holds
            more tokens than one at `img_size`.
    """

    name: str
    num_classes: int
    in_chans: int
    native_size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str = ""  # which copy of the data was read, once loaded (runs record it)

    def __init__(self, data_dir: str = "data", img_size: int | tuple[int, int] = 32, batch_size: int = 128,
                 num_workers: int = 0, augment: str = "standard", crop_padding: int = 4, hflip: bool = True,
                 val_size: int = 5000, train_subset: int | None = None, split_seed: int = 0,
                 shuffle_seed: int = 0, download: bool = True, device_resident: bool | str = "auto",
                 train_img_sizes: list | None = None, batch_by_tokens: bool = False):
        super().__init__()
        if augment not in AUGMENTS:
            raise ConfigError(f"data.augment={augment!r} is not one of {', '.join(AUGMENTS)}")
        if device_resident not in ("auto", True, False):
            raise ConfigError(f"data.device_resident={device_resident!r} must be auto, true or false")
        if device_resident is True and augment in PER_SAMPLE_AUGMENTS:
            raise ConfigError(f"data.augment={augment} runs per sample in DataLoader workers; "
                              f"use data.device_resident=false (or auto)")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size!r} must be a positive integer, e.g. data.batch_size=128")
        if train_subset is not None and (not isinstance(train_subset, int) or train_subset < 1):
            raise ConfigError(f"data.train_subset={train_subset!r} must be a positive integer or null (all images)")
        self.data_dir = Path(data_dir).expanduser()
        self.img_size = image_size(img_size)
        if train_img_sizes is not None and (isinstance(train_img_sizes, (str, int)) or not len(train_img_sizes)):
            raise ConfigError(f"train_img_sizes={train_img_sizes!r} must be a non-empty list of sizes, "
                              f"e.g. train_img_sizes=[24,32,40], or null")
        self.train_img_sizes = [image_size(size, f"train_img_sizes entry {size!r}", "train_img_sizes=[24,32,40]")
                                for size in train_img_sizes or [self.img_size]]
        self.batch_by_tokens = batch_by_tokens
        self.batch_size = batch_size
        check_setting("data.num_workers", num_workers, is_integer(num_workers) and num_workers >= 0,
                      "be a whole number >= 0 (DataLoader worker processes), e.g. data.num_workers=0")
        self.num_workers = num_workers
        self.augment = augment
        self.crop_padding = crop_padding
        self.hflip = hflip
        self.val_size = val_size
        self.train_subset = train_subset
        self.split_seed = split_seed
        self.shuffle_seed = shuffle_seed
        self.download = download
        self.device_resident = device_resident
        self.train_set = self.val_set = self.test_set = None
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
        val_index, train_index = order[: self.val_size], order[self.val_size:]
        if self.train_subset:
            train_index = train_index[: self.train_subset]
        if len(train_index) < self.batch_size:
            raise ConfigError(f"{len(train_index)} training images are fewer than one batch "
                              f"(data.batch_size={self.batch_size}); raise data.train_subset or lower data.batch_size")
        self.train_set = UInt8ImageDataset(images[train_index], labels[train_index], self._sample_transform())
        self.val_set = UInt8ImageDataset(images[val_index], labels[val_index])
        self.test_set = UInt8ImageDataset(*self.load(train=False))

    def _sample_transform(self):
        """The per-sample policy on uint8 images (DataLoader workers), before the batched crop/flip."""
        from torchvision.transforms import v2

        policies = {"randaugment": v2.RandAugment, "trivialaugment": v2.TrivialAugmentWide}
        return policies.get(self.augment, lambda: None)()

    def _shard(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _device(self) -> torch.device | None:
        """The training device when batches are drawn there, else None (the DataLoader path)."""
        if self.trainer is None or self.device_resident is False:
            return None
        device = self.trainer.strategy.root_device
        if self.device_resident == "auto" and (device.type != "cuda" or self.augment in PER_SAMPLE_AUGMENTS):
            return None
        return device

    def _loader(self, dataset: UInt8ImageDataset, train: bool) -> DataLoader | DeviceBatches:
        rank, world_size = self._shard()
        sampler = ShardedSampler(len(dataset), shuffle=train, seed=self.shuffle_seed, rank=rank,
                                 world_size=world_size, equal_shards=train)
        device = self._device()
        if device is not None:
            split = "train" if dataset is self.train_set else "val" if dataset is self.val_set else "test"
            if split not in self._on_device:  # one copy per split for the whole run
                self._on_device[split] = (dataset.images.to(device), dataset.labels.to(device))
            return DeviceBatches(*self._on_device[split], sampler, self.batch_size, drop_last=train)
        loader_class = ResumableDataLoader if train else DataLoader
        return loader_class(dataset, batch_size=self.batch_size, sampler=sampler, drop_last=train,
                            num_workers=self.num_workers, persistent_workers=self.num_workers > 0,
                            generator=torch.Generator().manual_seed(self.shuffle_seed + rank))

    def train_batches_per_epoch(self, world_size: int = 1) -> int:
        """Training batches one rank takes per epoch (equal shards, last partial batch dropped)."""
        self.setup()
        return (len(self.train_set) // world_size) // self.batch_size

    def train_dataloader(self) -> DataLoader | DeviceBatches:
        self.train_loader = self._loader(self.train_set, train=True)
        return self.train_loader

    def val_dataloader(self) -> DataLoader | DeviceBatches:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader | DeviceBatches:
        return self._loader(self.test_set, train=False)

    def train_size(self, step: int) -> tuple[int, int]:
        """The training size of optimizer step `step`: a function of (shuffle_seed, step) only."""
        if len(self.train_img_sizes) == 1:
            return self.train_img_sizes[0]
        generator = torch.Generator().manual_seed(self.shuffle_seed * 1_000_003 + step)
        return self.train_img_sizes[int(torch.randint(len(self.train_img_sizes), (1,), generator=generator))]

    def preprocess(self, images: Tensor, train: bool, size: tuple[int, int] | None = None) -> Tensor:
        """uint8 (B, C, h, w) on the device -> normalised float (B, C, H, W) at `size` (default
        `img_size`); the crop padding scales with the size."""
        size = tuple(size or self.img_size)
        images = images.float().div_(255)
        if tuple(images.shape[-2:]) != size:
            images = F.interpolate(images, size=size, mode="bicubic", antialias=True,
                                   align_corners=False).clamp_(0, 1)
        if train and self.augment != "none":
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
        size = self.train_size(self.trainer.global_step)
        if self.batch_by_tokens:
            keep = max(1, round(len(labels) * self.img_size[0] * self.img_size[1] / (size[0] * size[1])))
            images, labels = images[:keep], labels[:keep]  # (k, C, h, w): tokens of one img_size step at most
        return self.preprocess(images, train=True, size=size), labels


CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10_IMAGE_TREES = ("cifar10-jpeg", "cifar10-jpeg.tar.gz", "cifar10", "cifar10.tar.gz", "cifar10.zip")


def read_cifar10(folder: Path, train: bool) -> tuple[Tensor, Tensor]:
    """Read CIFAR-10's pickled batches (the format torchvision downloads) as uint8 tensors."""
    names = CIFAR10_BATCHES[:5] if train else CIFAR10_BATCHES[5:]
    return unpickle_cifar10([(folder / name).read_bytes() for name in names])


def read_cifar10_archive(path: Path) -> dict[str, tuple[Tensor, Tensor]]:
    """Both splits from the official `cifar-10-python.tar.gz`, read in one pass without extracting."""
    batches = {}
    with tarfile.open(path) as archive:
        for member in archive:
            if member.isfile() and Path(member.name).name in CIFAR10_BATCHES:
                batches[Path(member.name).name] = archive.extractfile(member).read()
    missing = [name for name in CIFAR10_BATCHES if name not in batches]
    if missing:
        raise DataNotFoundError(f"{path} lacks {', '.join(missing)}; it is not a complete {CIFAR10_ARCHIVE}, "
                                f"download it again")
    return {"train": unpickle_cifar10([batches[n] for n in CIFAR10_BATCHES[:5]]),
            "test": unpickle_cifar10([batches[CIFAR10_BATCHES[5]]])}


def unpickle_cifar10(batches: list[bytes]) -> tuple[Tensor, Tensor]:
    images, labels = [], []
    for raw in batches:
        entry = pickle.loads(raw, encoding="latin1")
        images.append(torch.as_tensor(entry["data"], dtype=torch.uint8).reshape(-1, 3, 32, 32))  # rows: R, G, B planes
        labels.append(torch.as_tensor(entry["labels"], dtype=torch.int64))
    return torch.cat(images), torch.cat(labels)


def is_cifar10_archive(path: Path) -> bool:
    """Whether `path` is the official archive (its first entry is the batches folder)."""
    try:
        with tarfile.open(path) as archive:
            first = archive.next()
    except (tarfile.TarError, OSError):
        return False
    return first is not None and first.name.split("/")[0] == CIFAR10_FOLDER


class CIFAR10DataModule(ImageDataModule):
    """CIFAR-10 (Krizhevsky 2009): 50k train / 10k test, 32x32 RGB, 10 classes, from any of its
    usual copies: the pickled batches (torchvision's download), the official archive, or an image
    tree of it (folder or archive, e.g. a JPEG copy; see `vitpos.image_folder`).

    Args:
        root: the copy to read (a folder or an archive); None searches `data_dir` for
            cifar-10-batches-py/, cifar-10-python.tar.gz, then cifar10-jpeg/ or its archive, then
            downloads (with `download`).
        cache_dir: where an image tree's decoded tensors are kept (None: decode every run).
    """

    name = "cifar10"
    num_classes, in_chans, native_size = 10, 3, (32, 32)
    mean = (0.4914, 0.4822, 0.4465)
    std = (0.2470, 0.2435, 0.2616)

    def __init__(self, root: str | None = None, cache_dir: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.root = Path(root).expanduser() if root else None
        self.cache_dir = cache_dir
        self.source = ""  # which copy was read, set by load(): runs record it
        self._splits: dict[str, tuple[Tensor, Tensor]] = {}

    def _find(self) -> tuple[str, Path] | None:
        """(kind, path) of the copy to read: kind is `batches`, `archive` or `tree`."""
        if self.root is not None:
            if not self.root.exists():
                raise DataNotFoundError(f"data.root={self.root} does not exist; pass CIFAR-10's folder or archive "
                                        f"({CIFAR10_FOLDER}/, {CIFAR10_ARCHIVE}, or an image tree of it)")
            for folder in (self.root / CIFAR10_FOLDER, self.root):
                if all((folder / name).is_file() for name in CIFAR10_BATCHES):
                    return "batches", folder
            return ("archive" if self.root.is_file() and is_cifar10_archive(self.root) else "tree"), self.root
        if all((self.data_dir / CIFAR10_FOLDER / name).is_file() for name in CIFAR10_BATCHES):
            return "batches", self.data_dir / CIFAR10_FOLDER
        if (self.data_dir / CIFAR10_ARCHIVE).is_file():
            return "archive", self.data_dir / CIFAR10_ARCHIVE
        for name in CIFAR10_IMAGE_TREES:
            if (self.data_dir / name).exists():
                return "tree", self.data_dir / name
        return None

    def prepare_data(self) -> None:
        if self._find() is not None:
            return
        reason = "download disabled (data.download=false)"
        if self.download:
            from torchvision.datasets import CIFAR10

            try:
                CIFAR10(str(self.data_dir), train=True, download=True)
                return
            except Exception as error:  # torchvision raises URLError, HTTPError, RuntimeError, OSError...
                reason = f"download failed: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
        raise DataNotFoundError(
            f"CIFAR-10 not found in {(self.data_dir / CIFAR10_FOLDER).resolve()} ({reason}). "
            f"Place {CIFAR10_ARCHIVE} (https://www.cs.toronto.edu/~kriz/{CIFAR10_ARCHIVE}) in "
            f"{self.data_dir.resolve()}/ or extract it there, pass data.root=<a copy: that archive, its "
            f"folder, or an image tree train/<class>/ + test/<class>/ or its archive>, or set "
            f"paths.data_dir=<folder holding one>; offline alternatives: data=fashion_mnist or data=synthetic."
        )

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        if not self._splits:
            self.prepare_data()
            kind, path = self._find()
            if kind == "batches":
                self._splits = {"train": read_cifar10(path, True), "test": read_cifar10(path, False)}
                self.source = f"pickled batches {path.resolve()}"
            elif kind == "archive":
                self._splits = read_cifar10_archive(path)
                self.source = f"archive {path.resolve()}"
            else:
                tree = load_image_tree(path, self.cache_dir, self.native_size)
                if tuple(tree.classes) != CIFAR10_CLASSES or tree.in_chans != 3 or tree.native_size != self.native_size:
                    raise ConfigError(f"{path} is not CIFAR-10: classes {', '.join(tree.classes)}, {tree.in_chans} "
                                      f"channels, {tree.native_size} px; for another image tree use data=image_folder "
                                      f"data.root={path}")
                self._splits = {"train": (tree.train_images, tree.train_labels),
                                "test": (tree.test_images, tree.test_labels)}
                self.source = tree.source
        return self._splits["train" if train else "test"]


class ImageFolderDataModule(ImageDataModule):
    """Any image tree `train/<class>/*` + `test/<class>/*` (or `val/`) of JPEG/PNG files, a folder
    or an archive (see `vitpos.image_folder`): classes are the sorted folder names of train/, the
    channel mean and std are the training split's, `num_classes` and `in_chans` come from the data.
    Images of mixed sizes are resized to `img_size` once, when decoded.

    Args:
        root: the folder or archive.
        cache_dir: where the decoded tensors are kept (None: decode every run).
    """

    name = "image_folder"

    def __init__(self, root: str | None = None, cache_dir: str | None = None, **kwargs):
        super().__init__(**kwargs)
        if not root:
            raise ConfigError("data=image_folder needs data.root=<folder or .tar/.tar.gz/.zip holding "
                              "train/<class>/ and test/<class>/ image folders>")
        self.root, self.cache_dir = Path(root).expanduser(), cache_dir
        self._tree = None

    @property
    def tree(self):
        if self._tree is None:
            self._tree = load_image_tree(self.root, self.cache_dir, self.img_size)
        return self._tree

    num_classes = property(lambda self: len(self.tree.classes))
    in_chans = property(lambda self: self.tree.in_chans)
    native_size = property(lambda self: self.tree.native_size)
    mean = property(lambda self: self.tree.mean)
    std = property(lambda self: self.tree.std)
    source = property(lambda self: self.tree.source)
    classes = property(lambda self: self.tree.classes)

    def prepare_data(self) -> None:
        """Read (and check) the tree; the first process decodes it into the cache, others wait."""
        self.load(train=True)

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        tree = self.tree
        return (tree.train_images, tree.train_labels) if train else (tree.test_images, tree.test_labels)


DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> Tensor:
    """Read an IDX file (MNIST format), gzipped or not, as a uint8 tensor."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
        ndim = data[3]
        shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
        return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)
    except (OSError, EOFError, IndexError, RuntimeError) as error:  # truncated gzip / header / payload
        raise DataNotFoundError(f"cannot read {path}: truncated or corrupt ({type(error).__name__}); reinstall it "
                                f"(apt-get install --reinstall dataset-fashion-mnist) or delete it") from None


class FashionMNISTDataModule(ImageDataModule):
    """Fashion-MNIST (Xiao et al. 2017): 60k train / 10k test, 28x28 grey, 10 classes.

    Reads Debian's `dataset-fashion-mnist` files when present (works offline), else torchvision's
    download into `data_dir`. Images are resized to `img_size`.
    """

    name = "fashion_mnist"
    num_classes, in_chans, native_size = 10, 1, (28, 28)
    mean = (0.2860,)
    std = (0.3530,)

    def __init__(self, system_dir: str | None = str(DEBIAN_FASHION_MNIST), **kwargs):
        super().__init__(**kwargs)
        self.system_dir = Path(system_dir) if system_dir else None

    def _system_files(self, train: bool) -> tuple[Path, Path] | None:
        if self.system_dir is None:
            return None
        prefix = "train" if train else "t10k"
        images = self.system_dir / f"{prefix}-images-idx3-ubyte.gz"
        labels = self.system_dir / f"{prefix}-labels-idx1-ubyte.gz"
        return (images, labels) if images.is_file() and labels.is_file() else None

    def prepare_data(self) -> None:
        if self._system_files(True) and self._system_files(False):
            return
        from torchvision.datasets import FashionMNIST

        try:
            for train in (True, False):
                FashionMNIST(str(self.data_dir), train=train, download=self.download)
        except Exception as error:
            raise DataNotFoundError(
                f"Fashion-MNIST not found in {self.system_dir} nor {self.data_dir.resolve()}/FashionMNIST "
                f"({str(error).splitlines()[0] if str(error) else type(error).__name__}). "
                f"Install Debian's package (apt-get install dataset-fashion-mnist) or run online once; "
                f"data=synthetic needs no files."
            ) from None

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        self.prepare_data()
        files = self._system_files(train)
        if files:
            images, labels = (read_idx(p) for p in files)
        else:
            from torchvision.datasets import FashionMNIST

            dataset = FashionMNIST(str(self.data_dir), train=train, download=False)
            images, labels = dataset.data, dataset.targets
        return images[:, None].contiguous(), labels.long()  # (N, 1, 28, 28)


DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0))  # label = where shape B lies from shape A: right, left, below, above


def make_synthetic(num_samples: int, seed: int, size: int = 32, cell: int = 4) -> tuple[Tensor, Tensor]:
    """Images with a red square A and a green cross B, each filling one `cell` x `cell` patch of an
    aligned grid; the label is B's direction from A (right/left/below/above), with B two to four
    cells away along that axis and at most one cell off it. Both shapes and the background noise
    are the same for every class, so the bag of patches carries no label information: only
    positions do. Deterministic in `seed`. Returns uint8 (N, 3, size, size), int64 (N,).
    """
    generator = torch.Generator().manual_seed(seed)
    cells = size // cell
    labels = torch.randint(0, 4, (num_samples,), generator=generator)
    directions = torch.tensor(DIRECTIONS)[labels]  # (N, 2) unit step (drow, dcol)
    along = torch.randint(2, 5, (num_samples, 1), generator=generator)
    across = torch.randint(-1, 2, (num_samples, 1), generator=generator)
    offset = directions * along + directions.flip(1).abs() * across  # (N, 2) B - A in cells
    low = (-offset).clamp(min=0)
    high = cells - 1 - offset.clamp(min=0)
    a = low + (torch.rand(num_samples, 2, generator=generator) * (high - low + 1)).long()  # A's cell
    b = a + offset
    images = (torch.rand(num_samples, 3, size, size, generator=generator) * 40).to(torch.uint8)
    square = torch.zeros(3, cell, cell, dtype=torch.uint8)
    square[0] = 230
    cross = torch.zeros(3, cell, cell, dtype=torch.uint8)
    cross[1, cell // 2 - 1: cell // 2 + 1, :] = 230
    cross[1, :, cell // 2 - 1: cell // 2 + 1] = 230
    for i in range(num_samples):
        (ra, ca), (rb, cb) = (a[i] * cell).tolist(), (b[i] * cell).tolist()
        images[i, :, ra:ra + cell, ca:ca + cell] = square
        images[i, :, rb:rb + cell, cb:cb + cell] = torch.maximum(images[i, :, rb:rb + cell, cb:cb + cell], cross)
    return images, labels


class SyntheticDataModule(ImageDataModule):
    """Relative-arrangement task (4 classes) that needs position: see `make_synthetic`.

    Args:
        num_train: training images generated (before the validation split).
        num_test: test images generated (with another seed).
        seed: generation seed.
    """

    name = "synthetic"
    num_classes, in_chans, native_size = 4, 3, (32, 32)
    mean = (0.5, 0.5, 0.5)
    std = (0.5, 0.5, 0.5)

    def __init__(self, num_train: int = 4096, num_test: int = 1024, seed: int = 0, **kwargs):
        kwargs.setdefault("augment", "none")
        kwargs.setdefault("val_size", 512)
        super().__init__(**kwargs)
        self.num_train, self.num_test, self.seed = num_train, num_test, seed

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        if train:
            return make_synthetic(self.num_train, self.seed)
        return make_synthetic(self.num_test, self.seed + 1_000_003)
