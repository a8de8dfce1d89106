"""Image trees as users hand them in: what operating systems and notebooks leave beside the images
is ignored, a tree that cannot define a classification task is one error line, unusual but
plausible images decode (or are refused in one line), and a damaged decode cache is rebuilt."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitpos.data.cache as cache
from vitpos import ConfigError
from vitpos.data import ImageFolderDataModule, load_image_tree

COUNTS = {"train": {"cat": 3, "dog": 2}, "test": {"cat": 1, "dog": 1}}


def write_tree(root: Path, counts=COUNTS, size=(8, 8), suffix=".png", seed=0) -> None:
    rng = np.random.default_rng(seed)
    for split, classes in counts.items():
        for label, count in classes.items():
            (root / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i:03d}{suffix}")


def leave_system_files(root: Path) -> None:
    """What macOS, Windows and Jupyter leave in a tree, at every level of it."""
    for folder in (root, root / "train", root / "train" / "cat", root / "test" / "dog"):
        (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
        (folder / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0")
        (folder / "desktop.ini").write_text("[.ShellClassInfo]\n")
    (root / "train" / "cat" / "._000.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    for checkpoints in (root / "train" / ".ipynb_checkpoints", root / "train" / "cat" / ".ipynb_checkpoints"):
        checkpoints.mkdir()
        shutil.copy(root / "train" / "cat" / "000.png", checkpoints / "000-checkpoint.png")
    (root / "__MACOSX" / "train" / "cat").mkdir(parents=True)
    (root / "__MACOSX" / "train" / "cat" / "._000.png").write_bytes(b"\x00\x05\x16\x07")


def same_splits(a, b) -> bool:
    names = ("train_images", "train_labels", "test_images", "test_labels")
    return all(torch.equal(getattr(a, n), getattr(b, n)) for n in names) and a.classes == b.classes


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_what_systems_and_notebooks_leave_is_ignored(as_zip, tmp_path):
    write_tree(tmp_path / "clean")
    clean = load_image_tree(tmp_path / "clean", None, (8, 8))
    shutil.copytree(tmp_path / "clean", tmp_path / "photos")
    leave_system_files(tmp_path / "photos")
    root = tmp_path / "photos"
    if as_zip:
        root = tmp_path / "photos.zip"
        with zipfile.ZipFile(root, "w") as zipped:
            for file in sorted((tmp_path / "photos").rglob("*")):
                zipped.write(file, file.relative_to(tmp_path / "photos"))
    assert same_splits(load_image_tree(root, None, (8, 8)), clean)


def test_system_files_do_not_invalidate_the_cache(tmp_path, capsys):
    write_tree(tmp_path / "photos")
    load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    leave_system_files(tmp_path / "photos")
    capsys.readouterr()
    load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    assert "decoding" not in capsys.readouterr().out and len(list((tmp_path / "cache").glob("*.pt"))) == 1


def images_at_the_root(root: Path) -> None:
    shutil.rmtree(root)
    write_tree(root, {"cat": {"a": 0}, "dog": {"a": 0}})  # class folders without split folders
    write_tree(root.parent / "flat", {"cat": {"x": 2}})
    shutil.move(root.parent / "flat" / "cat" / "x", root / "cat" / "x")


def hidden_only_class(root: Path) -> None:
    (root / "train" / "emu").mkdir()
    (root / "train" / "emu" / ".DS_Store").write_text("x")


NO_TASK = [  # (how the tree is broken, words of the one line)
    ("no class folders", lambda r: [shutil.rmtree(r / s) or (r / s).mkdir() for s in ("train", "test")], "has no"),
    ("one class", lambda r: [shutil.rmtree(r / s / "dog") for s in ("train", "test")], "train/ has one class folder"),
    ("a class without images", lambda r: (r / "train" / "emu").mkdir(), "class folder train/emu/ holds no image"),
    ("only hidden files in a class", hidden_only_class, "train/emu/ holds no image"),
    ("images directly at the root", images_at_the_root, "holds images outside train/ and test/ folders"),
    ("images in train/", lambda r: shutil.copy(r / "train/cat/000.png", r / "train/0.png"), "a file beside the class"),
    ("mixed nesting", lambda r: write_tree(r / "train" / "dog", {"pups": {"x": 1}}), "lies deeper than train/<class>/"),
]  # fmt: skip


@pytest.mark.parametrize("breaks, message", [c[1:] for c in NO_TASK], ids=[c[0] for c in NO_TASK])
def test_a_tree_that_defines_no_classification_task_is_one_line(breaks, message, tmp_path):
    root = tmp_path / "photos"
    write_tree(root)
    breaks(root)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as refused:
        load_image_tree(root, tmp_path / "cache", (8, 8))
    assert "\n" not in str(refused.value) and str(refused.value).startswith(f"data.root={root}")
    assert not (tmp_path / "cache").exists()


def encoded(pixels: np.ndarray, mode: str, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, fmt, **kwargs)
    return out.getvalue()


RGB = np.random.default_rng(1).integers(0, 256, (6, 10, 3), dtype=np.uint8)
WIDE = np.arange(60, dtype=np.uint16).reshape(6, 10) * 1000  # 16-bit grey


def expected_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


UNUSUAL = [  # (name in the tree, bytes, the pixels they must decode to, (H, W, C))
    ("palette.png", encoded(RGB, "P", "PNG"), None),
    ("rgba.png", encoded(RGB, "RGBA", "PNG"), RGB),
    ("grey-alpha.png", encoded(RGB, "LA", "PNG"), None),
    ("cmyk.jpg", encoded(RGB, "CMYK", "JPEG", quality=100), None),
    ("bilevel.png", encoded(RGB, "1", "PNG"), None),
    ("upper.PNG", encoded(RGB, "RGB", "PNG"), RGB),
    ("upper.JPEG", encoded(RGB, "RGB", "JPEG"), None),
]


@pytest.mark.parametrize("name, data, pixels", UNUSUAL, ids=[u[0] for u in UNUSUAL])
def test_an_unusual_image_decodes_to_the_rgb_a_viewer_shows(name, data, pixels, tmp_path):
    """Palette indices, CMYK ink or an alpha channel never reach the model as colour channels."""
    root = tmp_path / "photos"
    write_tree(root, size=(6, 10))
    (root / "train" / "cat" / name).write_bytes(data)
    tree = load_image_tree(root, None, (6, 10))
    decoded = tree.train_images[tree.train_labels == 0][-1 if name[0] > "0" else 0]
    want = expected_rgb(data) if pixels is None else pixels
    assert tree.in_chans == 3 and decoded.shape == (3, 6, 10)
    tolerance = 3 if name.endswith(("jpg", "JPEG")) else 0  # two JPEG decoders may round apart
    assert (decoded.permute(1, 2, 0).int() - torch.from_numpy(want.copy()).int()).abs().max() <= tolerance


def test_16_bit_and_grey_images_keep_one_channel_scaled_to_8_bits(tmp_path):
    root = tmp_path / "photos"
    for label in ("cat", "dog"):
        for split in ("train", "test"):
            (root / split / label).mkdir(parents=True)
            Image.fromarray(WIDE).save(root / split / label / "wide.png")  # 16-bit
            Image.fromarray(RGB).convert("L").save(root / split / label / "grey.jpg")
    tree = load_image_tree(root, None, (6, 10))
    assert tree.in_chans == 1 and tree.train_images.dtype == torch.uint8
    want = torch.from_numpy((WIDE >> 8).astype(np.int32))
    assert sum(torch.equal(image[0].int(), want) for image in tree.train_images) == 2  # one per class


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (5, 17)], ids=["1x1", "2x3", "5x17"])
def test_tiny_and_non_square_images_train(size, tmp_path):
    root = tmp_path / "photos"
    write_tree(root, {"train": {"cat": 8, "dog": 8}, "test": {"cat": 2, "dog": 2}}, size=size, suffix=".JPG")
    datamodule = ImageFolderDataModule(root=str(root), img_size=8, val_size=4, batch_size=4, data_dir=str(tmp_path))
    datamodule.setup("fit")
    images, labels = next(iter(datamodule.train_dataloader()))
    assert datamodule.preprocess(images, train=True).shape == (4, 3, 8, 8)


def cached_file(tmp_path: Path) -> Path:
    return next((tmp_path / "cache").glob("*.pt"))


def truncate(path: Path, tmp_path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def another_trees_file(path: Path, tmp_path: Path) -> None:
    write_tree(tmp_path / "other", seed=5)
    load_image_tree(tmp_path / "other", tmp_path / "other-cache", (8, 8))
    shutil.copy(next((tmp_path / "other-cache").glob("*.pt")), path)


def rewrite(path: Path, change) -> None:
    saved = dict(torch.load(path, weights_only=True))
    change(saved)
    torch.save(saved, path)


def changed(**fields):
    """Rewrite the cache file with some of its fields changed (a function of the saved dict each)."""
    return lambda path, tmp_path: rewrite(path, lambda saved: saved.update({k: f(saved) for k, f in fields.items()}))


DAMAGE = [
    ("truncated", truncate, "unreadable"),
    ("garbage", lambda p, t: p.write_bytes(b"\x00garbage" * 100), "unreadable"),
    ("empty", lambda p, t: p.write_bytes(b""), "unreadable"),
    ("another tree's file", another_trees_file, "written for another source"),
    ("a tensor, not splits", lambda p, t: torch.save(torch.zeros(3), p), "written for another source"),
    ("labels cut short", changed(train_labels=lambda s: s["train_labels"][:2]), "wrong tensor shapes"),
    ("images of another shape", changed(test_images=lambda s: s["test_images"][:, :1]), "wrong tensor shapes"),
    ("float images", changed(train_images=lambda s: s["train_images"].float()), "wrong tensor types"),
    ("a field missing", lambda p, t: rewrite(p, lambda s: s.pop("classes")), "other fields"),
    ("labels beyond the classes", changed(classes=lambda s: ["cat"]), "labels outside its classes"),
]  # fmt: skip


@pytest.mark.parametrize("damage, why", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_a_damaged_cache_is_rebuilt_with_one_notice(damage, why, tmp_path, capsys):
    write_tree(tmp_path / "photos")
    first = load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    path = cached_file(tmp_path)
    damage(path, tmp_path)
    capsys.readouterr()
    again = load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    assert same_splits(again, first)
    notices = [line for line in capsys.readouterr().out.splitlines() if line.startswith("vitpos:")]
    assert len(notices) == 1 and notices[0].endswith("); rebuilding it")
    assert notices[0].startswith(f"vitpos: the decoded-image cache {path} is damaged ({why}")
    assert cache.read_cache(path, path.stem.split("-")[1])[0] is not None  # whole again
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [path.name]


def test_an_interrupted_write_leaves_no_cache_file_and_a_killed_ones_leftover_goes(tmp_path, monkeypatch):
    write_tree(tmp_path / "photos")
    real_save = torch.save

    def cut_short(obj, target):
        Path(target).write_bytes(b"PK\x03\x04 half")
        raise KeyboardInterrupt

    monkeypatch.setattr(cache.torch, "save", cut_short)
    with pytest.raises(KeyboardInterrupt):
        load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    (tmp_path / "cache").mkdir(exist_ok=True)
    (tmp_path / "cache" / ".photos-0-8x8.pt.tmp999").write_bytes(b"PK half")  # as a SIGKILL leaves it
    monkeypatch.setattr(cache.torch, "save", real_save)
    load_image_tree(tmp_path / "photos", tmp_path / "cache", (8, 8))
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".pt"]
