"""Image trees (`train/<class>/*`, `test/<class>/*` or `val/<class>/*`) read from a folder or an
archive into uint8 tensors, decoded once and cached, and their datamodule (`data=image_folder`).

The layout is torchvision's `ImageFolder` (classes = sorted folder names of `train/`); the tree
may sit at the root or under one top folder (`cifar10-jpeg/train/...`). JPEG and PNG files are
decoded with `torchvision.io` to RGB (palette, CMYK, 16-bit and alpha images included), or to one
channel where every image is grey. What operating systems and notebooks leave (hidden entries such
as `.DS_Store`, `.ipynb_checkpoints/` and `._name.jpg`, `__MACOSX/`, `Thumbs.db`, `desktop.ini`) is
skipped; any other file is an error naming it. The decoded splits are saved under `cache_dir`,
keyed by the source's path, size and modification time (every file's, for a folder), so later runs
and DDP ranks load tensors instead of decoding; a file lock makes one process build while the
others wait, and a damaged cache file is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import lzma
import os
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import ConfigError, DataNotFoundError
from .cache import read_cache, remove_unfinished, write_cache
from .datamodule import ImageDataModule

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
SPLIT_FOLDERS = {"train": ("train",), "test": ("test", "val")}
SPLIT_NAMES = sum(SPLIT_FOLDERS.values(), ())
CACHE_FORMAT = 3  # bump when the cached tensors' meaning changes
LEFT_BY_SYSTEMS = {"__macosx", "thumbs.db", "ehthumbs.db", "desktop.ini"}  # lower case; hidden names too


def left_by_system(name: str) -> bool:
    """Whether an entry's path holds a part that an operating system or a notebook left there."""
    return any(part.startswith(".") or part.lower() in LEFT_BY_SYSTEMS for part in PurePosixPath(name).parts)


@dataclass
class ImageSplits:
    """A decoded tree: uint8 images (N, C, H, W) and int64 labels (N,) per split, the class names
    (label order), the training split's channel mean and std (0..1 scale), a description of
    the source (path, and whether it was lossy JPEG) and whether its images differed in size
    (then all were resized to one: the tree has no native size)."""

    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    classes: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    source: str
    mixed_sizes: bool

    @property
    def in_chans(self) -> int:
        return int(self.train_images.shape[1])

    @property
    def native_size(self) -> tuple[int, int]:
        return int(self.train_images.shape[2]), int(self.train_images.shape[3])


@dataclass
class TreeFile:
    split: str  # "train" or "test"
    label: str  # class folder name
    name: str  # path inside the source, for messages
    key: object  # what `Source.read_all` needs to return the bytes (a path, a zip name, a tar's bytes)


class Source:
    """A folder or an archive (.tar, .tar.gz/.tgz/.tar.xz/.tar.bz2, .zip) holding an image tree."""

    def __init__(self, root: Path):
        self.root = root
        if not root.exists():
            raise DataNotFoundError(
                f"data.root={root} does not exist; pass a folder holding train/<class>/ and "
                f"test/<class>/ image folders, or a .tar / .tar.gz / .zip archive of one"
            )
        self.kind = "folder" if root.is_dir() else "zip" if zipfile.is_zipfile(root) else "tar"
        if self.kind == "tar" and not is_tarfile(root):
            raise ConfigError(
                f"data.root={root} is neither a folder nor a .tar / .tar.gz / .zip archive; "
                f"pass an image folder or an archive of one"
            )

    def members(self) -> list[tuple[str, object, bool]]:
        """(posix path relative to the root, read key, is a folder) of every entry but those
        `left_by_system`."""
        with self.reading():
            return [entry for entry in self._members() if not left_by_system(entry[0])]

    def _members(self) -> list[tuple[str, object, bool]]:
        if self.kind == "folder":
            entries = []
            for folder, dirs, files in os.walk(self.root):
                dirs.sort()
                relative = PurePosixPath(Path(folder).relative_to(self.root).as_posix())
                entries += [(str(relative / d), None, True) for d in dirs]
                entries += [(str(relative / f), Path(folder, f), False) for f in sorted(files)]
            return entries
        if self.kind == "zip":
            with zipfile.ZipFile(self.root) as archive:
                return [(info.filename.rstrip("/"), info.filename, info.is_dir()) for info in archive.infolist()]
        with tarfile.open(self.root) as archive:  # a compressed tar reads in one pass: keep the bytes now
            return [
                (member.name, archive.extractfile(member).read() if member.isfile() else None, member.isdir())
                for member in archive
                if member.isdir() or member.isfile()
            ]

    def read_all(self, files: list[TreeFile]) -> list[bytes]:
        """The bytes of `files`, in their order."""
        with self.reading():
            return self._read_all(files)

    def _read_all(self, files: list[TreeFile]) -> list[bytes]:
        if self.kind == "folder":
            return [Path(f.key).read_bytes() for f in files]
        if self.kind == "zip":
            with zipfile.ZipFile(self.root) as archive:
                return [archive.read(f.key) for f in files]
        return [f.key for f in files]  # a tar's bytes, read with its listing

    @contextlib.contextmanager
    def reading(self):
        """An archive cut short or damaged is a user error naming it, not a traceback."""
        try:
            yield
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as error:
            raise ConfigError(
                f"data.root={self.root} is truncated or corrupt ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else 'no detail'}); fetch it again"
            ) from None

    def fingerprint(self) -> str:
        """A hash of the source's path, size and mtime (each file's, for a folder, whose own mtime
        changes with entries the tree ignores)."""
        stats = [(str(self.root.resolve()), self.root.stat().st_size, self.root.stat().st_mtime_ns)]
        if self.kind == "folder":
            stats = [str(self.root.resolve())]
            stats += [
                (name, os.stat(key).st_size, os.stat(key).st_mtime_ns)
                for name, key, is_dir in self.members()
                if not is_dir
            ]
        return hashlib.sha256(repr((CACHE_FORMAT, stats)).encode()).hexdigest()[:16]


def is_tarfile(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def find_tree(source: Source, listing: list[tuple[str, object, bool]]) -> list[TreeFile]:
    """The image files of the tree, checked: train/ and test/ (or val/) under one prefix, every
    test class in train/, no empty class folder, nothing but images."""
    where = f"data.root={source.root}"
    files: list[TreeFile] = []
    class_dirs: dict[tuple[str, str], int] = {}  # (split, class) -> image count
    prefixes = set()
    astray = []  # images outside every split folder
    for name, key, is_dir in listing:
        parts = PurePosixPath(name).parts
        if not is_dir and name.lower().endswith(IMAGE_SUFFIXES) and not set(parts[:2]) & set(SPLIT_NAMES):
            astray.append(name)
        for depth in (0, 1):  # the tree at the root, or under one top folder
            if len(parts) > depth + 3 and parts[depth] in SPLIT_NAMES and not is_dir:
                raise ConfigError(
                    f"{where}: {name} lies deeper than {parts[depth]}/<class>/; images go directly in their "
                    f"class folder ({'/'.join(parts[: depth + 2])}/), move them up or remove the subfolder"
                )
            if len(parts) not in (depth + 2, depth + 3) or parts[depth] not in SPLIT_NAMES:
                continue
            split = next(s for s, names in SPLIT_FOLDERS.items() if parts[depth] in names)
            prefixes.add((parts[:depth], parts[depth]))
            label = parts[depth + 1]
            if len(parts) == depth + 2:
                if is_dir:
                    class_dirs.setdefault((split, label), 0)
                else:
                    raise ConfigError(
                        f"{where}: {name} is a file beside the class folders of {parts[depth]}/; "
                        f"images go in {parts[depth]}/<class>/, remove or move it"
                    )
            elif not is_dir:
                if not parts[-1].lower().endswith(IMAGE_SUFFIXES):
                    raise ConfigError(
                        f"{where}: {name} is not an image ({', '.join(IMAGE_SUFFIXES)}); remove it from the tree"
                    )
                class_dirs[(split, label)] = class_dirs.get((split, label), 0) + 1
                files.append(TreeFile(split, label, name, key))
            break
    check_splits(where, prefixes, astray, class_dirs)
    return files


def check_splits(where: str, prefixes: set, astray: list[str], class_dirs: dict[tuple[str, str], int]) -> None:
    """The tree's split folders (`prefixes`: (top folder, split folder) pairs) and class folders
    (`class_dirs`: (split, class) -> images) define one classification task, or one ConfigError."""
    if not prefixes and astray:
        raise ConfigError(
            f"{where} holds images outside train/ and test/ folders (e.g. {astray[0]}); arrange them as "
            f"train/<class>/*.jpg and test/<class>/*.jpg, one folder per class"
        )
    tops = {prefix for prefix, _ in prefixes}
    if len(tops) > 1:
        trees = ", ".join("/".join(t) or "." for t in sorted(tops))
        raise ConfigError(f"{where} holds more than one image tree ({trees}); pass the folder of one")
    splits = {next(s for s, names in SPLIT_FOLDERS.items() if folder in names) for _, folder in prefixes}
    for split, names in SPLIT_FOLDERS.items():
        if split not in splits:
            raise ConfigError(
                f"{where} has no {' or '.join(f'{n}/<class>/' for n in names)} folder of images; "
                f"a tree needs train/<class>/*.jpg|png and test/<class>/ (or val/<class>/)"
            )
    test_folders = {folder for _, folder in prefixes if folder in SPLIT_FOLDERS["test"]}
    if len(test_folders) > 1:
        raise ConfigError(f"{where} has both test/ and val/; keep one of them (it is the test split)")
    for (split, label), count in sorted(class_dirs.items()):
        if count == 0:
            raise ConfigError(f"{where}: class folder {split}/{label}/ holds no image; add images or remove it")
    train_classes = {label for split, label in class_dirs if split == "train"}
    if len(train_classes) < 2:
        raise ConfigError(
            f"{where}: train/ has one class folder ({', '.join(train_classes)}/); a classification task "
            f"needs two or more, one folder per class"
        )
    missing = sorted({label for split, label in class_dirs if split == "test"} - train_classes)
    if missing:
        raise ConfigError(
            f"{where}: test class {missing[0]!r} has no folder in train/ (train/ has "
            f"{', '.join(sorted(train_classes))}); a class must be in both"
        )


def decode(files: list[TreeFile], data: list[bytes], size: tuple[int, int], where: str) -> tuple[Tensor, bool]:
    """Decode to one uint8 (N, C, H, W) tensor and whether the images differed in size (then all are
    resized to `size`). RGB: a palette, CMYK, 16-bit or alpha image is converted by torchvision;
    one channel where every image is grey."""
    from torchvision.io import ImageReadMode, decode_image
    from torchvision.transforms.v2.functional import to_dtype

    images = []
    for file, raw in zip(files, data):
        try:
            image = decode_image(torch.frombuffer(bytearray(raw), dtype=torch.uint8), ImageReadMode.RGB)
        except (RuntimeError, ValueError) as error:
            raise ConfigError(
                f"{where}: {file.name} cannot be decoded as an image ({str(error).splitlines()[0]}); "
                f"remove or replace it"
            ) from None
        images.append(to_dtype(image, torch.uint8, scale=True))  # 16-bit PNGs decode to uint16
    if all(torch.equal(image[0], image[1]) and torch.equal(image[1], image[2]) for image in images):
        images = [image[:1] for image in images]  # grey: one channel
    mixed_sizes = len({tuple(image.shape[1:]) for image in images}) > 1
    if mixed_sizes:
        images = [resize(image, size) for image in images]
    return torch.stack(images), mixed_sizes


def resize(image: Tensor, size: tuple[int, int]) -> Tensor:
    if tuple(image.shape[1:]) == tuple(size):
        return image
    resized = F.interpolate(image[None].float(), size=size, mode="bicubic", antialias=True, align_corners=False)
    return resized[0].round().clamp(0, 255).to(torch.uint8)


def build(source: Source, size: tuple[int, int]) -> ImageSplits:
    files = find_tree(source, source.members())
    classes = sorted({f.label for f in files if f.split == "train"})
    index = {label: i for i, label in enumerate(classes)}
    images, mixed_sizes = decode(files, source.read_all(files), size, f"data.root={source.root}")
    labels = torch.tensor([index[f.label] for f in files], dtype=torch.int64)
    is_train = torch.tensor([f.split == "train" for f in files])
    train_images = images[is_train].contiguous()
    pixels = train_images.float().div_(255)
    mean = tuple(pixels.mean(dim=(0, 2, 3)).tolist())
    std = tuple(pixels.std(dim=(0, 2, 3)).tolist())
    lossy = any(f.name.lower().endswith((".jpg", ".jpeg")) for f in files)
    described = f"image {'folder' if source.kind == 'folder' else 'archive'} {source.root.resolve()}"
    return ImageSplits(
        train_images,
        labels[is_train],
        images[~is_train].contiguous(),
        labels[~is_train],
        classes,
        mean,
        std,
        described + (" (JPEG: lossy)" if lossy else ""),
        mixed_sizes,
    )


def load_image_tree(root: str | Path, cache_dir: str | Path | None, size: tuple[int, int]) -> ImageSplits:
    """Read the image tree at `root` (folder or archive), from `cache_dir` when it holds this
    version of the source; `size` is used only when the images differ in size. A cache file that
    cannot be read back whole (cut short, overwritten, another tree's) is rebuilt, with a notice."""
    source = Source(Path(root).expanduser())
    if cache_dir is None:
        return build(source, size)
    cache_dir = Path(cache_dir).expanduser()
    stem = source.root.name.split(".")[0] or "images"
    fingerprint = source.fingerprint()
    cached = cache_dir / f"{stem}-{fingerprint}-{size[0]}x{size[1]}.pt"
    fields, damage = read_cache(cached, fingerprint)
    if fields is not None:
        return ImageSplits(**fields)
    created = not cache_dir.exists()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(cache_dir, os.O_RDONLY)  # the folder itself is the lock: no lock file to leave behind
    except OSError as error:
        print(
            f"vitpos: cannot write the decoded-image cache to {cache_dir} ({error.strerror}); decoding "
            f"without it (set data.cache_dir=<writable folder>)",
            flush=True,
        )
        return build(source, size)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process decodes, the others wait and then load its cache
        fields, damage = read_cache(cached, fingerprint) if damage is None else (None, damage)
        if fields is not None:
            return ImageSplits(**fields)
        remove_unfinished(cache_dir)
        if damage:
            print(f"vitpos: the decoded-image cache {cached} is damaged ({damage}); rebuilding it", flush=True)
        else:
            print(f"vitpos: decoding {source.root} once into {cached}", flush=True)
        splits = build(source, size)
        write_cache(cached, fingerprint, vars(splits))
        return splits
    except BaseException:
        if created and not any(cache_dir.iterdir()):
            cache_dir.rmdir()  # a tree that failed to read leaves no cache folder behind
        raise
    finally:
        os.close(lock)


class ImageFolderDataModule(ImageDataModule):
    """Any image tree `train/<class>/*` + `test/<class>/*` (or `val/`) of JPEG/PNG files, a folder
    or an archive (see `load_image_tree`): classes are the sorted folder names of train/, the
    channel mean and std are the training split's, `num_classes` and `in_chans` come from the data.
    Images of mixed sizes are resized to `img_size` once, when decoded: such a tree has no native
    size (`native_size` None, no `pixels_label`); images of one size are its native size.

    Args:
        root: the folder or archive.
        cache_dir: where the decoded tensors are kept (None: decode every run).
    """

    name = "image_folder"

    def __init__(self, root: str | None = None, cache_dir: str | None = None, **kwargs):
        super().__init__(**kwargs)
        if not root:
            raise ConfigError(
                "data=image_folder needs data.root=<folder or .tar/.tar.gz/.zip holding "
                "train/<class>/ and test/<class>/ image folders>"
            )
        self.root, self.cache_dir = Path(root).expanduser(), cache_dir
        self._tree = None

    @property
    def tree(self):
        if self._tree is None:
            self._tree = load_image_tree(self.root, self.cache_dir, self.img_size)
        return self._tree

    num_classes = property(lambda self: len(self.tree.classes))
    in_chans = property(lambda self: self.tree.in_chans)
    native_size = property(lambda self: None if self.tree.mixed_sizes else self.tree.native_size)
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
