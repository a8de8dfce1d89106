"""Datasets: the real CIFAR-10 on-disk format, the missing-data message, the synthetic task and
the batched augmentation, the device-resident batches."""

from __future__ import annotations

import pickle
import tarfile

import numpy as np
import pytest
import torch

import vitpos
from vitpos import DataNotFoundError
from vitpos.data import (
    CIFAR10_ARCHIVE,
    CIFAR10_FOLDER,
    DIRECTIONS,
    CIFAR10DataModule,
    DeviceBatches,
    FashionMNISTDataModule,
    SyntheticDataModule,
    make_synthetic,
    random_crop_flip,
)
from vitpos.errors import ConfigError


def write_tiny_cifar10(root, per_batch: int = 8, seed: int = 0):
    """Write CIFAR-10's pickled batches (data: (N, 3072) uint8 rows R,G,B planes; labels) as
    torchvision downloads them; return the images and labels written."""
    rng = np.random.default_rng(seed)
    folder = root / CIFAR10_FOLDER
    folder.mkdir(parents=True)
    written = {}
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        with open(folder / name, "wb") as f:
            pickle.dump({"batch_label": name.encode(), "data": data, "labels": labels, "filenames": []}, f)
        written[name] = (data, labels)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072}, f)
    return written


def test_cifar10_reads_the_pickled_batches(tmp_path):
    written = write_tiny_cifar10(tmp_path)
    datamodule = CIFAR10DataModule(data_dir=str(tmp_path), val_size=10, batch_size=16, download=False)
    datamodule.setup()
    assert len(datamodule.train_set) == 30 and len(datamodule.val_set) == 10 and len(datamodule.test_set) == 8
    test_data, test_labels = written["test_batch"]
    image = datamodule.test_set.images[3]
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
    # row layout: 1024 red values, then green, then blue, each row-major 32x32
    assert torch.equal(image[1, 2, 5], torch.tensor(test_data[3, 1024 + 2 * 32 + 5]))
    assert datamodule.test_set.labels.tolist() == test_labels
    all_train = torch.cat([datamodule.train_set.labels, datamodule.val_set.labels]).sort().values
    expected = torch.tensor(sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])).sort().values
    assert torch.equal(all_train, expected)  # the split partitions the training batches
    images, labels = next(iter(datamodule.train_dataloader()))
    batch = datamodule.preprocess(images, train=True)
    assert batch.shape == (16, 3, 32, 32) and batch.dtype == torch.float32 and labels.shape == (16,)


def test_cifar10_missing_names_folder_archive_and_alternative(tmp_path):
    datamodule = CIFAR10DataModule(data_dir=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(DataNotFoundError) as error:
        datamodule.prepare_data()
    message = str(error.value)
    assert "\n" not in message
    assert str((tmp_path / "nowhere").resolve()) in message and "cifar-10-python.tar.gz" in message
    assert "data=fashion_mnist" in message


@pytest.mark.parametrize("copy", ["official archive in data_dir", "data.root=archive", "data.root=folder"])
def test_cifar10_reads_the_official_archive_and_its_folder_alike(copy, tmp_path):
    write_tiny_cifar10(tmp_path / "extracted")
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / CIFAR10_ARCHIVE, "w:gz") as tar:
        tar.add(tmp_path / "extracted" / CIFAR10_FOLDER, arcname=CIFAR10_FOLDER)
    root = {
        "official archive in data_dir": None,
        "data.root=archive": str(tmp_path / "data" / CIFAR10_ARCHIVE),
        "data.root=folder": str(tmp_path / "extracted"),
    }[copy]
    datamodule = CIFAR10DataModule(
        root=root, data_dir=str(tmp_path / "data"), val_size=10, batch_size=8, download=False
    )
    datamodule.setup()
    reference = CIFAR10DataModule(data_dir=str(tmp_path / "extracted"), val_size=10, batch_size=8, download=False)
    reference.setup()
    for split in ("train_set", "val_set", "test_set"):
        assert torch.equal(getattr(datamodule, split).images, getattr(reference, split).images)
        assert torch.equal(getattr(datamodule, split).labels, getattr(reference, split).labels)
    assert datamodule.source.startswith("archive" if "archive" in copy else "pickled batches")


def test_fashion_mnist_missing_everywhere_is_clear(tmp_path):
    datamodule = FashionMNISTDataModule(system_dir=str(tmp_path / "none"), data_dir=str(tmp_path), download=False)
    with pytest.raises(DataNotFoundError, match="dataset-fashion-mnist"):
        datamodule.prepare_data()


def test_synthetic_is_deterministic_and_needs_position():
    images, labels = make_synthetic(256, seed=3)
    again, labels_again = make_synthetic(256, seed=3)
    assert torch.equal(images, again) and torch.equal(labels, labels_again)
    assert not torch.equal(make_synthetic(256, seed=4)[0], images)
    assert set(labels.tolist()) == {0, 1, 2, 3}
    # Each shape fills exactly one aligned 4x4 patch; the label is B's direction from A.
    red = images[:, 0] > 200  # (N, 32, 32) the square A
    green = images[:, 1] > 200  # the cross B
    for i in range(len(labels)):
        (ra, ca), (rb, cb) = red[i].nonzero().float().mean(0), green[i].nonzero().float().mean(0)
        drow, dcol = rb - ra, cb - ca
        step = DIRECTIONS[labels[i]]
        along = drow * step[0] + dcol * step[1]
        across = abs(drow * step[1]) + abs(dcol * step[0])
        assert along >= 8 and across <= 4  # >= 2 cells along the label's axis, <= 1 cell across
    # Bag of patches: the multiset of patch types is the same for every class.
    patches = images.unfold(2, 4, 4).unfold(3, 4, 4)  # (N, 3, 8, 8, 4, 4)
    red_patches = (patches[:, 0] > 200).flatten(3).all(-1).sum((1, 2))
    assert torch.equal(red_patches, torch.ones_like(red_patches))


def test_synthetic_datamodule_sizes():
    datamodule = SyntheticDataModule(num_train=300, num_test=50, val_size=100)
    datamodule.setup()
    assert (len(datamodule.train_set), len(datamodule.val_set), len(datamodule.test_set)) == (200, 100, 50)
    assert datamodule.augment == "none"


def test_random_crop_flip_is_a_shift_or_mirror_per_sample():
    torch.manual_seed(0)
    images = torch.rand(64, 3, 16, 16) + 1.0  # strictly positive, so zero padding is visible
    out = random_crop_flip(images, padding=2, hflip=True)
    assert out.shape == images.shape
    for original, cropped in zip(images, out):
        found = False
        for candidate in (original, original.flip(-1)):
            padded = torch.nn.functional.pad(candidate, (2, 2, 2, 2))
            for dy in range(5):
                for dx in range(5):
                    found |= torch.equal(padded[:, dy : dy + 16, dx : dx + 16], cropped)
        assert found
    assert not torch.equal(out, images)  # the draw differs between samples
    assert torch.equal(random_crop_flip(images, padding=0, hflip=False), images)
    assert out.is_contiguous()  # the default layout, as every other batch has


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_an_augmented_batchs_gradients_have_their_parameters_layout(pos):
    """DDP copies each gradient into a bucket laid out like its parameter; a gradient in another
    layout (cpe's convolution after a channels-last batch) costs a strided copy and a warning."""
    torch.manual_seed(0)
    model = vitpos.create_model(pos=pos, img_size=16, patch_size=4, dim=32, depth=2, num_heads=2, num_classes=4)
    model(random_crop_flip(torch.rand(4, 3, 16, 16), padding=2, hflip=True)).sum().backward()
    assert {n: p.grad.stride() for n, p in model.named_parameters() if p.grad is not None} == {
        n: p.stride() for n, p in model.named_parameters() if p.grad is not None
    }


def test_preprocess_resizes_to_img_size():
    datamodule = SyntheticDataModule(img_size=(48, 64), num_train=10, num_test=10, val_size=2)
    batch = datamodule.preprocess(torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8), train=False)
    assert batch.shape == (2, 3, 48, 64)


def write_idx_gz(path, array: np.ndarray) -> None:
    """IDX format (MNIST): 0x0000, dtype 0x08 (uint8), ndim, big-endian sizes, then the bytes."""
    import gzip

    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_tiny_fashion_mnist(folder, train: int, test: int, seed: int = 0) -> dict:
    """Random images and labels as Debian's dataset-fashion-mnist files; returns the arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    arrays = {}
    for prefix, count in (("train", train), ("t10k", test)):
        arrays[prefix] = rng.integers(0, 256, (count, 28, 28)), rng.integers(0, 10, count)
        write_idx_gz(folder / f"{prefix}-images-idx3-ubyte.gz", arrays[prefix][0])
        write_idx_gz(folder / f"{prefix}-labels-idx1-ubyte.gz", arrays[prefix][1])
    return arrays


def test_fashion_mnist_reads_debian_idx_files(tmp_path):
    arrays = write_tiny_fashion_mnist(tmp_path, train=12, test=5)
    datamodule = FashionMNISTDataModule(
        system_dir=str(tmp_path), data_dir=str(tmp_path / "unused"), val_size=2, download=False, batch_size=4
    )
    datamodule.setup()
    assert datamodule.test_set.images.shape == (5, 1, 28, 28)
    assert torch.equal(datamodule.test_set.images[:, 0], torch.as_tensor(arrays["t10k"][0], dtype=torch.uint8))
    assert datamodule.test_set.labels.tolist() == arrays["t10k"][1].tolist()
    assert len(datamodule.train_set) + len(datamodule.val_set) == 12
    assert datamodule.preprocess(datamodule.test_set.images, train=False).shape == (5, 1, 32, 32)


class _Trainer:
    """What the DataModule reads of a Trainer: rank, world size, the device, whether it trains, the step and epoch."""

    def __init__(self, rank: int = 0, world_size: int = 1):
        self.global_rank, self.world_size, self.training, self.global_step = rank, world_size, True, 0
        self.current_epoch = 0
        self.strategy = type("Strategy", (), {"root_device": torch.device("cpu")})()


def epoch_batches(datamodule, epoch: int, stop_after: int | None = None, state: dict | None = None):
    """One training epoch's batches (a new loader, at `state`'s position if given) and the final position."""
    loader = datamodule.train_dataloader()
    if state is not None:
        loader.load_state_dict(state)
    loader.sampler.set_epoch(epoch)
    batches = []
    for images, labels in loader:
        datamodule.on_after_batch_transfer((images, labels), 0)  # counts the consumed samples, as in training
        batches.append((images.clone(), labels.clone()))
        if len(batches) == stop_after:
            break
    return batches, loader.state_dict()


@pytest.mark.parametrize("rank, world_size", [(0, 1), (1, 2)])
def test_device_resident_batches_equal_the_dataloaders_and_resume_mid_epoch(rank, world_size):
    def datamodule(device_resident):
        module = SyntheticDataModule(
            num_train=700, num_test=64, val_size=100, batch_size=64, device_resident=device_resident, shuffle_seed=3
        )
        module.trainer = _Trainer(rank, world_size)
        module.setup()
        return module

    loader_path, device_path = datamodule(False), datamodule(True)
    assert isinstance(device_path.train_dataloader(), DeviceBatches)
    assert not isinstance(loader_path.train_dataloader(), DeviceBatches)
    assert len(device_path.train_dataloader()) == len(loader_path.train_dataloader()) == (600 // world_size) // 64
    for epoch in (0, 1):
        expected, _ = epoch_batches(loader_path, epoch)
        got, _ = epoch_batches(device_path, epoch)
        assert len(got) == len(expected) and all(
            torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, expected)
        )
    # stop after 2 batches of epoch 1, restore the position in a new DataModule: the rest of the epoch follows
    _, state = epoch_batches(device_path, 1, stop_after=2)
    assert state == {"epoch": 1, "consumed": 128}
    rest, _ = epoch_batches(datamodule(True), 1, state=state)
    full, _ = epoch_batches(loader_path, 1)
    assert len(rest) == len(full) - 2 and all(torch.equal(a[0], b[0]) for a, b in zip(rest, full[2:]))


def test_device_resident_is_auto_on_cuda_only_and_serves_every_policy():
    module = SyntheticDataModule(num_train=300, val_size=100, batch_size=64)
    module.trainer = _Trainer()
    module.setup()
    assert not isinstance(module.train_dataloader(), DeviceBatches)  # auto on a CPU device: the DataLoader
    for augment in ("randaugment", "trivialaugment"):  # batched on the device: no workers to keep
        module = SyntheticDataModule(num_train=300, val_size=100, batch_size=64, augment=augment, device_resident=True)
        module.trainer = _Trainer()
        module.setup()
        assert isinstance(module.train_dataloader(), DeviceBatches)
    with pytest.raises(ConfigError, match="auto, true or false"):
        SyntheticDataModule(device_resident="yes")


def test_mixed_resolution_draws_one_size_per_step_from_seed_and_step_only():
    sizes = [24, 32, [40, 48]]
    module = SyntheticDataModule(
        img_size=32, train_img_sizes=sizes, shuffle_seed=7, num_train=300, val_size=100, batch_size=64
    )
    draws = [module.train_size(step) for step in range(60)]
    assert set(draws) == {(24, 24), (32, 32), (40, 48)}
    again = SyntheticDataModule(img_size=32, train_img_sizes=sizes, shuffle_seed=7)
    assert [again.train_size(step) for step in range(60)] == draws  # same on every rank and after a resume
    other_seed = SyntheticDataModule(img_size=32, train_img_sizes=sizes, shuffle_seed=8)
    assert [other_seed.train_size(step) for step in range(60)] != draws
    assert SyntheticDataModule(img_size=32).train_size(5) == (32, 32)

    module.trainer = _Trainer()
    module.setup()
    images, labels = next(iter(module.train_dataloader()))
    for step in range(6):
        module.trainer.global_step = step
        batch, batch_labels = module.on_after_batch_transfer((images, labels), 0)
        assert tuple(batch.shape[-2:]) == draws[step] and len(batch_labels) == 64
    module.trainer.training = False  # validation and test stay at img_size
    assert module.on_after_batch_transfer((images, labels), 0)[0].shape[-2:] == (32, 32)


def test_batch_by_tokens_caps_the_tokens_of_a_step():
    module = SyntheticDataModule(
        img_size=32, train_img_sizes=[16, 64], batch_by_tokens=True, num_train=300, val_size=100, batch_size=64
    )
    module.trainer = _Trainer()
    module.setup()
    images, labels = next(iter(module.train_dataloader()))
    seen = {}
    for step in range(20):
        module.trainer.global_step = step
        batch, batch_labels = module.on_after_batch_transfer((images, labels), 0)
        seen[batch.shape[-1]] = (len(batch), len(batch_labels))
    assert seen == {16: (64, 64), 64: (16, 16)}  # 64 x (32/64)^2 = 16 images at 64 px; no more than 64 at 16 px
