"""The synthetic task: generated in memory, deterministic by seed; the label is the relative
placement of two shapes, so a model without positions cannot beat chance."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import check_setting, is_integer
from .datamodule import ImageDataModule

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
    cross[1, cell // 2 - 1 : cell // 2 + 1, :] = 230
    cross[1, :, cell // 2 - 1 : cell // 2 + 1] = 230
    for i in range(num_samples):
        (ra, ca), (rb, cb) = (a[i] * cell).tolist(), (b[i] * cell).tolist()
        images[i, :, ra : ra + cell, ca : ca + cell] = square
        images[i, :, rb : rb + cell, cb : cb + cell] = torch.maximum(
            images[i, :, rb : rb + cell, cb : cb + cell], cross
        )
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
        for setting, value in (("num_train", num_train), ("num_test", num_test)):
            check_setting(f"data.{setting}", value, is_integer(value) and value > 0, "be a positive integer")
        check_setting("data.seed", seed, is_integer(seed) and 0 <= seed < 2**32, "be an integer with 0 <= seed < 2**32")
        super().__init__(**kwargs)
        self.num_train, self.num_test, self.seed = num_train, num_test, seed

    def load(self, train: bool) -> tuple[Tensor, Tensor]:
        if train:
            return make_synthetic(self.num_train, self.seed)
        return make_synthetic(self.num_test, self.seed + 1_000_003)
