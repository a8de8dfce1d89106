"""CIFAR-10 from any of its usual copies: the pickled batches (torchvision's download), the official
archive (read in one pass without extracting) or an image tree of it (e.g. a JPEG copy)."""

from __future__ import annotations

import pickle
import tarfile
from pathlib import Path

import torch
from torch import Tensor

from ..errors import ConfigError, DataNotFoundError
from .datamodule import ImageDataModule
from .image_folder import load_image_tree

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
        raise DataNotFoundError(
            f"{path} lacks {', '.join(missing)}; it is not a complete {CIFAR10_ARCHIVE}, download it again"
        )
    return {
        "train": unpickle_cifar10([batches[n] for n in CIFAR10_BATCHES[:5]]),
        "test": unpickle_cifar10([batches[CIFAR10_BATCHES[5]]]),
    }


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
    tree of it (folder or archive, e.g. a JPEG copy; see `vitpos.data.image_folder`).

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
                raise DataNotFoundError(
                    f"data.root={self.root} does not exist; pass CIFAR-10's folder or archive "
                    f"({CIFAR10_FOLDER}/, {CIFAR10_ARCHIVE}, or an image tree of it)"
                )
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
                    raise ConfigError(
                        f"{path} is not CIFAR-10: classes {', '.join(tree.classes)}, {tree.in_chans} "
                        f"channels, {tree.native_size} px; for another image tree use data=image_folder "
                        f"data.root={path}"
                    )
                self._splits = {
                    "train": (tree.train_images, tree.train_labels),
                    "test": (tree.test_images, tree.test_labels),
                }
                self.source = tree.source
        return self._splits["train" if train else "test"]
