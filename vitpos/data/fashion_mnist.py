"""Fashion-MNIST from Debian's `dataset-fashion-mnist` files (IDX, offline) or torchvision's
download."""

from __future__ import annotations

import gzip
from pathlib import Path

import torch
from torch import Tensor

from ..errors import DataNotFoundError
from .datamodule import ImageDataModule

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> Tensor:
    """Read an IDX file (MNIST format), gzipped or not, as a uint8 tensor."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
        ndim = data[3]
        shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
        return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape)
    except (OSError, EOFError, IndexError, RuntimeError) as error:  # truncated gzip / header / payload
        raise DataNotFoundError(
            f"cannot read {path}: truncated or corrupt ({type(error).__name__}); reinstall it "
            f"(apt-get install --reinstall dataset-fashion-mnist) or delete it"
        ) from None


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
