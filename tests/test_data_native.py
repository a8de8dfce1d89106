"""Train low, infer native: below a dataset's own resolution each split is downsampled once, as
uint8, by torchvision's antialiased resize; at the native size the stored pixels are used as they
are; above it every batch is upsampled. `pixels_label` names the three, `use_size` re-derives the
evaluation splits from the native images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_data import write_tiny_cifar10
from test_image_folder import COUNTS, write_tree
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from vitpos.data import CIFAR10DataModule, ImageFolderDataModule, describe_pixels, pixels_label
from vitpos.runs import RESULTS_FILE
from vitpos.train import train


def cifar10(root, img_size, **kwargs) -> CIFAR10DataModule:
    datamodule = CIFAR10DataModule(
        data_dir=str(root), img_size=img_size, val_size=10, batch_size=8, download=False, augment="none", **kwargs
    )
    datamodule.setup()
    return datamodule


def unnormalised(datamodule, batch: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(datamodule.mean)[None, :, None, None]
    std = torch.tensor(datamodule.std)[None, :, None, None]
    return batch * std + mean


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_tiny_cifar10(root)
    return root


def test_pixels_labels_on_a_32px_dataset():
    assert [pixels_label(size, (32, 32)) for size in (16, 24, 32, 48, 64)] == [
        "downsampled",
        "downsampled",
        "native",
        "upsampled",
        "upsampled",
    ]
    assert pixels_label((16, 32), (32, 32)) == "downsampled"  # no side larger
    assert pixels_label((16, 48), (32, 32)) == "upsampled"  # a side larger: invented pixels
    assert pixels_label(32, None) == ""  # unknown native size: no label
    assert describe_pixels(16, (32, 32)) == "downsampled from 32px"
    assert describe_pixels(32, (28, 28)) == "upsampled from 28px"
    assert describe_pixels(32, (32, 32)) == "native pixels" and describe_pixels(32, None) == ""


@pytest.mark.parametrize("img_size", [16, 24])
def test_a_lower_training_size_holds_every_split_downsampled_once(cifar_root, img_size):
    """At 16 or 24 px every stored image is torchvision's antialiased bicubic resize of its 32 px
    uint8 image, and a training batch (augment=none) is exactly those pixels: no resize per step."""
    native, low = cifar10(cifar_root, 32), cifar10(cifar_root, img_size)
    assert low.pixels() == "downsampled" and native.pixels() == "native"
    for split in ("train_set", "val_set", "test_set"):
        stored, original = getattr(low, split), getattr(native, split)
        assert stored.images.dtype == torch.uint8 and stored.images.shape[-2:] == (img_size, img_size)
        assert torch.equal(stored.labels, original.labels)
        for image, image32 in zip(stored.images, original.images):  # each image on its own
            expected = TF.resize(image32, [img_size, img_size], InterpolationMode.BICUBIC, antialias=True)
            assert torch.equal(image, expected)
    images, _ = next(iter(low.train_dataloader()))
    batch = unnormalised(low, low.preprocess(images, train=True))
    torch.testing.assert_close(batch, images.float() / 255, atol=1e-6, rtol=0)


def test_evaluation_sizes_come_from_the_native_images(cifar_root):
    """A datamodule of a 16 px model, moved to 32 px, holds the stored 32 px pixels (not its 16 px
    images blown up); at 24 px their downsampling; at 48 px the native images upsampled per batch."""
    native, datamodule = cifar10(cifar_root, 32), cifar10(cifar_root, 16)
    datamodule.use_size(32)
    assert datamodule.pixels() == "native" and torch.equal(datamodule.test_set.images, native.test_set.images)
    batch = unnormalised(datamodule, datamodule.preprocess(datamodule.test_set.images, train=False))
    torch.testing.assert_close(batch, native.test_set.images.float() / 255, atol=1e-6, rtol=0)
    datamodule.use_size(24)
    expected = TF.resize(native.val_set.images, [24, 24], InterpolationMode.BICUBIC, antialias=True)
    assert datamodule.pixels() == "downsampled" and torch.equal(datamodule.val_set.images, expected)
    datamodule.use_size(48)
    assert datamodule.pixels() == "upsampled" and torch.equal(datamodule.test_set.images, native.test_set.images)
    batch = unnormalised(datamodule, datamodule.preprocess(datamodule.test_set.images, train=False))
    upsampled = F.interpolate(native.test_set.images.float() / 255, size=(48, 48), mode="bicubic", antialias=True)
    torch.testing.assert_close(batch, upsampled.clamp(0, 1), atol=1e-5, rtol=0)


def test_several_training_sizes_keep_the_native_images(cifar_root):
    """Mixed-resolution training resizes each step's batch from the native images, as before."""
    mixed = cifar10(cifar_root, 16, train_img_sizes=[16, 24])
    assert mixed.train_set.images.shape[-2:] == (32, 32)
    assert mixed.test_set.images.shape[-2:] == (16, 16)  # evaluated at img_size: downsampled once


def test_an_image_tree_of_one_size_is_native_there_and_a_mixed_one_has_no_label(tmp_path):
    write_tree(tmp_path / "even", COUNTS, size=(12, 12))
    even = ImageFolderDataModule(root=str(tmp_path / "even"), img_size=8, val_size=2, batch_size=4)
    even.setup()
    assert even.native_size == (12, 12) and even.pixels() == "downsampled"
    assert [even.pixels(size) for size in (12, 16)] == ["native", "upsampled"]
    assert even.train_set.images.shape[-2:] == (8, 8)
    write_tree(tmp_path / "mixed", {"train": {"a": 3, "b": 3}, "test": {"a": 1, "b": 1}}, size=(12, 12))
    write_tree(tmp_path / "mixed", {"train": {"a": 1}, "test": {"b": 1}}, size=(10, 14), seed=1)  # overwrites one each
    mixed = ImageFolderDataModule(root=str(tmp_path / "mixed"), img_size=8, val_size=2, batch_size=2)
    mixed.setup()
    assert mixed.native_size is None and mixed.pixels() == "" and mixed.pixels(12) == ""
    assert mixed.train_set.images.shape[-2:] == (8, 8)  # resized once, when decoded


def test_a_run_says_how_its_pixels_relate_to_the_datas(make_config, tiny_overrides, capsys):
    """The start line and results.json say a 16 px run on the 32 px synthetic images is downsampled."""
    metrics = train(make_config([*tiny_overrides, "img_size=16", "test_after_fit=false"]))
    results = json.loads((Path(metrics["log_dir"]) / RESULTS_FILE).read_text())
    assert results["pixels"] == "downsampled" and results["native_size"] == [32, 32]
    assert "4x4 grid (16px, downsampled from 32px, patch 4)" in capsys.readouterr().out
