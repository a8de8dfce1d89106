"""The decode cache of image trees (`data.cache_dir`, `<stem>-<fingerprint>-<H>x<W>.pt`): written
whole and then renamed, so a run stopped while writing leaves no damaged file, and read back only
when it is whole and consistent with the source it was written for; otherwise it is rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor

FIELDS = (
    "train_images",
    "train_labels",
    "test_images",
    "test_labels",
    "classes",
    "mean",
    "std",
    "source",
    "mixed_sizes",
)


def write_cache(path: Path, fingerprint: str, fields: dict) -> None:
    """Save `fields` (an `ImageSplits`' fields) and the source's `fingerprint` to `path`, atomically."""
    temporary = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save({"fingerprint": fingerprint, **fields}, temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def remove_unfinished(folder: Path) -> None:
    """Delete the temporary files of writes that were cut short (a process killed while writing);
    called under the cache folder's lock, which every writer holds."""
    for unfinished in folder.glob(".*.tmp*"):
        unfinished.unlink(missing_ok=True)


def read_cache(path: Path, fingerprint: str) -> tuple[dict | None, str | None]:
    """(the fields cached at `path`, None); or (None, what is wrong with the file) where it cannot
    be read back whole and consistent; or (None, None) where there is no file."""
    if not path.is_file():
        return None, None
    try:
        saved = torch.load(path, mmap=True, weights_only=True)
    except Exception as error:  # torch.load's errors on a damaged file have many types
        return None, f"unreadable: {type(error).__name__}"
    if not isinstance(saved, dict) or saved.get("fingerprint") != fingerprint:
        return None, "written for another source"
    fields = {key: value for key, value in saved.items() if key != "fingerprint"}
    if set(fields) != set(FIELDS):
        return None, "other fields"
    problem = inconsistency(fields)
    return (None, problem) if problem else (fields, None)


def inconsistency(fields: dict) -> str | None:
    """What makes cached splits inconsistent (types, shapes, labels, statistics), or None."""
    pairs = ((fields["train_images"], fields["train_labels"]), (fields["test_images"], fields["test_labels"]))
    if not all(isinstance(tensor, Tensor) for pair in pairs for tensor in pair):
        return "not tensors"
    if any(images.dtype != torch.uint8 or labels.dtype != torch.int64 for images, labels in pairs):
        return "wrong tensor types"
    if any(images.dim() != 4 or labels.dim() != 1 or len(images) != len(labels) for images, labels in pairs):
        return "wrong tensor shapes"
    if pairs[0][0].shape[1:] != pairs[1][0].shape[1:]:
        return "wrong tensor shapes"
    channels = pairs[0][0].shape[1]
    if len(fields["mean"]) != channels or len(fields["std"]) != channels:
        return "statistics of another channel count"
    if not isinstance(fields["mixed_sizes"], bool):
        return "a size record that is no flag"
    classes = len(fields["classes"])
    if any(len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < classes for _, labels in pairs):
        return "labels outside its classes"
    return None
