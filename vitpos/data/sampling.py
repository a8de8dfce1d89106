"""What the loader does on the host: index in-memory uint8 images (`UInt8ImageDataset`), shard and
order them per rank and epoch with a resume position (`ShardedSampler`), save that position in
Lightning's checkpoints (`ResumableDataLoader`), and draw batches from a set held on the training
device (`DeviceBatches`)."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler


class UInt8ImageDataset(Dataset):
    """Indexes in-memory uint8 images."""

    def __init__(self, images: Tensor, labels: Tensor):
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        return self.images[index], self.labels[index]


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

    def __init__(
        self, size: int, shuffle: bool, seed: int = 0, rank: int = 0, world_size: int = 1, equal_shards: bool = False
    ):
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
        return order[self.rank :: self.world_size]

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
    DataLoader with that sampler would collate. Lightning saves and restores its position
    (`state_dict` protocol) and sets the sampler's epoch.

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
            index = order[start : start + self.batch_size]
            yield self.images[index], self.labels[index]

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
