"""Image trees read from folders and archives: labels, counts, resize, the decode cache, every
copy of CIFAR-10, and one clear error per kind of broken tree. The trees are written here."""

from __future__ import annotations

import re
import tarfile
import zipfile
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
import torch
from torchvision.io import encode_jpeg, encode_png

import vitpos.data.image_folder as image_folder
from vitpos import VitposError
from vitpos.data import CIFAR10_CLASSES, CIFAR10DataModule, ImageFolderDataModule, load_image_tree

ROOT = Path(__file__).resolve().parents[1]


def write_image(path: Path, image: torch.Tensor) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    encoded = encode_png(image) if path.suffix == ".png" else encode_jpeg(image, quality=95)
    path.write_bytes(encoded.numpy().tobytes())


def write_tree(
    root: Path, counts: dict[str, dict[str, int]], suffix: str = ".png", size=(8, 8), channels: int = 3, seed: int = 0
) -> dict[str, list[torch.Tensor]]:
    """counts: split folder -> class -> number of images. Each image is noise plus its class index
    in pixel (0, 0) of channel 0, so a test can read labels back from pixels."""
    generator = torch.Generator().manual_seed(seed)
    written = {}
    for split, classes in counts.items():
        for label, count in classes.items():
            for i in range(count):
                image = torch.randint(0, 256, (channels, *size), dtype=torch.uint8, generator=generator)
                image[0, 0, 0] = sorted(classes).index(label) * 20
                write_image(root / split / label / f"{i:03d}{suffix}", image)
                written.setdefault(split, []).append(image)
    return written


COUNTS = {"train": {"cat": 5, "ant": 3, "dog": 4}, "test": {"cat": 2, "ant": 1, "dog": 2}}


def archive(folder: Path, path: Path) -> Path:
    """`folder`'s contents as a .tar.gz or .zip at `path`, under one top folder named like it."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as zipped:
            for file in sorted(folder.rglob("*")):
                zipped.write(file, Path(folder.name, file.relative_to(folder)))
    else:
        with tarfile.open(path, "w:gz") as tarred:
            tarred.add(folder, arcname=folder.name)
    return path


def test_labels_follow_sorted_folder_names_and_counts(tmp_path):
    write_tree(tmp_path / "tree", COUNTS)
    tree = load_image_tree(tmp_path / "tree", None, (8, 8))
    assert tree.classes == ["ant", "cat", "dog"]
    assert torch.bincount(tree.train_labels).tolist() == [3, 5, 4]
    assert torch.bincount(tree.test_labels).tolist() == [1, 2, 2]
    assert tree.train_images.dtype == torch.uint8 and tree.train_images.shape == (12, 3, 8, 8)
    # PNG is lossless: the class index written into pixel (0, 0) reads back as the label
    assert torch.equal(tree.train_images[:, 0, 0, 0].long(), tree.train_labels * 20)
    assert "(JPEG" not in tree.source
    pixels = tree.train_images.float() / 255
    assert torch.allclose(torch.tensor(tree.mean), pixels.mean(dim=(0, 2, 3)), atol=1e-6)
    assert torch.allclose(torch.tensor(tree.std), pixels.std(dim=(0, 2, 3)), atol=1e-6)


def test_val_folder_is_the_test_split_and_grey_images_give_one_channel(tmp_path):
    write_tree(tmp_path / "tree", {"train": {"a": 2, "b": 2}, "val": {"a": 1, "b": 1}}, suffix=".jpg", channels=1)
    datamodule = ImageFolderDataModule(
        root=str(tmp_path / "tree"), data_dir=str(tmp_path), img_size=8, val_size=1, batch_size=1
    )
    datamodule.setup()
    assert (datamodule.num_classes, datamodule.in_chans, len(datamodule.test_set)) == (2, 1, 2)
    assert datamodule.source.endswith("(JPEG: lossy)")


def test_mixed_sizes_are_resized_to_img_size(tmp_path):
    write_tree(tmp_path / "tree", {"train": {"a": 2}, "test": {"a": 1}}, size=(8, 8))
    write_tree(tmp_path / "tree", {"train": {"b": 2}, "test": {"b": 1}}, size=(16, 12), seed=1)
    tree = load_image_tree(tmp_path / "tree", None, (12, 12))
    assert tree.train_images.shape == (4, 3, 12, 12) and tree.test_images.shape == (2, 3, 12, 12)


@pytest.mark.parametrize("suffix", [".tar.gz", ".zip"])
def test_archive_and_folder_give_identical_tensors(suffix, tmp_path):
    write_tree(tmp_path / "photos", COUNTS, suffix=".jpg")
    from_folder = load_image_tree(tmp_path / "photos", None, (8, 8))
    from_archive = load_image_tree(archive(tmp_path / "photos", tmp_path / f"photos{suffix}"), None, (8, 8))
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(from_folder, name), getattr(from_archive, name)), name
    assert (from_folder.classes, from_folder.mean, from_folder.std) == (
        from_archive.classes,
        from_archive.mean,
        from_archive.std,
    )


def test_cache_is_reused_and_rebuilt_when_a_file_changes(tmp_path, monkeypatch):
    write_tree(tmp_path / "tree", COUNTS)
    cache = tmp_path / "cache"
    first = load_image_tree(tmp_path / "tree", cache, (8, 8))
    assert len(list(cache.glob("*.pt"))) == 1
    builds = []
    real_build = image_folder.build
    monkeypatch.setattr(image_folder, "build", lambda *a: builds.append(a) or real_build(*a))
    again = load_image_tree(tmp_path / "tree", cache, (8, 8))
    assert builds == [] and torch.equal(again.train_images, first.train_images)
    changed = torch.full((3, 8, 8), 7, dtype=torch.uint8)
    write_image(tmp_path / "tree" / "train" / "ant" / "000.png", changed)
    rebuilt = load_image_tree(tmp_path / "tree", cache, (8, 8))
    assert len(builds) == 1 and torch.equal(rebuilt.train_images[0], changed)
    assert not list(cache.glob(".*tmp*")), "a temporary file of the cache was left behind"


def remove_test_split(root: Path) -> None:
    for path in sorted((root / "test").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (root / "test").rmdir()


def remove_class(root: Path, split: str, label: str) -> None:
    for path in (root / split / label).iterdir():
        path.unlink()
    (root / split / label).rmdir()


BROKEN = [  # (what is wrong, how to break a good tree, words the message must contain)
    ("missing root", lambda root: root.rename(root.with_name("elsewhere")), "does not exist"),
    ("no test split", remove_test_split, "has no test/<class>/ or val/<class>/ folder"),
    (
        "test class not in train",
        lambda root: write_tree(root, {"test": {"zebra": 1}}),
        "test class 'zebra' has no folder in train/",
    ),
    ("empty class folder", lambda root: (root / "train" / "emu").mkdir(), "class folder train/emu/ holds no image"),
    (
        "corrupt image",
        lambda root: (root / "train" / "cat" / "003.png").write_bytes(b"not a png"),
        "train/cat/003.png cannot be decoded as an image",
    ),
    (
        "non-image file",
        lambda root: (root / "train" / "cat" / "notes.txt").write_text("x"),
        "train/cat/notes.txt is not an image",
    ),
    (
        "image in a subfolder of a class",
        lambda root: write_tree(root / "train" / "cat", {"kittens": {"x": 1}}),
        "train/cat/kittens/x/000.png lies deeper than train/<class>/; images go directly in their class folder",
    ),
    (
        "one class",
        lambda root: [remove_class(root, split, label) for split in COUNTS for label in ("ant", "dog")],
        "train/ has one class folder (cat/); a classification task needs two or more",
    ),
]


@pytest.mark.parametrize("what, breaks, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_tree_is_one_error_line_and_leaves_no_cache(what, breaks, message, tmp_path):
    root = tmp_path / "tree"
    write_tree(root, COUNTS)
    breaks(root)
    with pytest.raises(VitposError, match=re.escape(message)) as error:
        load_image_tree(root, tmp_path / "cache", (8, 8))
    assert "\n" not in str(error.value)
    assert not (tmp_path / "cache").exists()


def test_a_file_that_is_no_archive_is_named(tmp_path):
    (tmp_path / "photos.tar.gz").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(VitposError, match="is neither a folder nor a .tar / .tar.gz / .zip archive"):
        load_image_tree(tmp_path / "photos.tar.gz", None, (8, 8))


def test_an_archive_cut_short_is_named(tmp_path):
    write_tree(tmp_path / "photos", COUNTS)
    whole = archive(tmp_path / "photos", tmp_path / "photos.tar.gz").read_bytes()
    (tmp_path / "photos.tar.gz").write_bytes(whole[: len(whole) // 2])  # an interrupted download
    with pytest.raises(VitposError, match="photos.tar.gz is truncated or corrupt") as error:
        load_image_tree(tmp_path / "photos.tar.gz", None, (8, 8))
    assert "\n" not in str(error.value)


def cifar10_tree(root: Path, per_class: int = 2) -> Path:
    write_tree(
        root,
        {"train": dict.fromkeys(CIFAR10_CLASSES, per_class), "test": dict.fromkeys(CIFAR10_CLASSES, 1)},
        suffix=".jpg",
        size=(32, 32),
    )
    return root


def test_cifar10_reads_an_image_tree_archive_in_data_dir_and_records_the_copy(tmp_path):
    (tmp_path / "data").mkdir()
    archive(cifar10_tree(tmp_path / "cifar10-jpeg"), tmp_path / "data" / "cifar10-jpeg.tar.gz")
    datamodule = CIFAR10DataModule(
        data_dir=str(tmp_path / "data"), cache_dir=str(tmp_path / "cache"), val_size=4, batch_size=4, download=False
    )
    datamodule.setup()
    assert (len(datamodule.train_set), len(datamodule.val_set), len(datamodule.test_set)) == (16, 4, 10)
    assert datamodule.test_set.labels.tolist() == list(range(10))  # CIFAR-10's label order
    assert "cifar10-jpeg.tar.gz (JPEG: lossy)" in datamodule.source


def test_cifar10_refuses_an_image_tree_of_other_classes(tmp_path):
    write_tree(tmp_path / "tree", COUNTS, size=(32, 32))
    with pytest.raises(VitposError, match="is not CIFAR-10: classes ant, cat, dog.*use data=image_folder"):
        CIFAR10DataModule(root=str(tmp_path / "tree"), download=False).setup()


def test_train_on_a_folder_of_ones_own_images_from_the_command_line(tmp_path):
    write_tree(
        tmp_path / "photos",
        {"train": {"bird": 24, "fish": 24}, "test": {"bird": 4, "fish": 4}},
        suffix=".jpg",
        size=(20, 24),
    )
    command = [
        str(ROOT / "train.py"),
        "data=image_folder",
        f"data.root={tmp_path / 'photos'}",
        "data.val_size=8",
        "data.batch_size=8",
        "img_size=16",
        "model=vit_70k",
        "trainer.max_steps=2",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "trainer.enable_progress_bar=false",
        "callbacks.figures=null",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.data_dir={tmp_path / 'data'}",
    ]
    result = forked_cli.run(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "data=image_folder from image folder" in result.stdout and "(JPEG: lossy)" in result.stdout
    run = next((tmp_path / "logs").rglob("results.json")).parent
    assert "image folder" in (run / "hparams.yaml").read_text()
    (tmp_path / "photos" / "test" / "fish" / "000.jpg").write_bytes(b"truncated")
    result = forked_cli.run(command, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{tmp_path / 'photos'}: test/fish/000.jpg cannot be decoded" in errors[0]
    assert errors[0].endswith("remove or replace it")


def test_the_readme_fine_tune_command_reads_the_copy_its_checkpoint_was_trained_on(make_config, tmp_path):
    """`python train.py experiment=cifar10_finetune pos=cpe finetune_from=<run>` after a run on
    `data.root=<a copy>`: the experiment's data group names no copy, the checkpoint's carries over."""
    from omegaconf import OmegaConf

    from vitpos.train import train

    copy = cifar10_tree(tmp_path / "cifar10-jpeg", per_class=4)
    small = ["data.val_size=8", "data.batch_size=8", "data.download=false", "trainer.precision=32-true"]
    trained = train(
        make_config(
            ["pos=cpe", "model=vit_70k", f"data.root={copy}", *small, "trainer.max_steps=2", "callbacks.figures=null"]
        )
    )
    command = [
        str(ROOT / "train.py"),
        "experiment=cifar10_finetune",
        "pos=cpe",
        f"finetune_from={Path(trained['log_dir']).parent}",
        *small,
        "trainer.max_steps=1",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "trainer.enable_progress_bar=false",
        "callbacks.figures=null",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.data_dir={tmp_path / 'data'}",
    ]
    result = forked_cli.run(command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"fine-tuning on data.root={copy}, the copy " in result.stdout
    run = next((tmp_path / "logs" / "cifar10_finetune").rglob("results.json")).parent
    assert OmegaConf.load(run / "config.yaml").data.root == str(copy)
