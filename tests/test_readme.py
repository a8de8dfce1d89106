"""The README's and the guide pages' commands paste, and the README's first commands work as written.

Every `python train.py ...` and `python -m vitpos.<tool> ...` line of their code blocks, and every such
command inline in their prose that is not a usage form (`<arg>`, `[option=...]`), composes with Hydra
or parses with the tool's options as written (no placeholder, no glob), so a command cannot drift
from the code. Nothing is trained or evaluated there.

The README's CIFAR-10 commands are then run up to the data they read: the online one against a
stubbed torchvision download, the offline one on a small stand-in of the official archive and on
the shared JPEG copy that CI has beside the checkout. Its links resolve, its install and test
lines are the ones CI runs, and it stays a quickstart."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
import torchvision
from conftest import compose_config
from test_data import write_tiny_cifar10

from vitpos.__main__ import sweep_variants
from vitpos.config import instantiate
from vitpos.data import CIFAR10_ARCHIVE, CIFAR10_FOLDER

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the measured records and design notes: their commands name the copies and folders of their own runs
RECORDS = {"RESULTS.md", "PERFORMANCE.md", "DESIGN.md"}
GUIDES = [README, *(page for page in sorted((ROOT / "docs").glob("*.md")) if page.name not in RECORDS)]


def shared_copy() -> Path:
    """The shared JPEG copy: CI lays shared/ beside the checkout; a clone of a checkout elsewhere finds
    it beside the checkout it was cloned from."""
    origin = subprocess.run(
        ["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"], capture_output=True, text=True
    ).stdout.strip()
    beside = [ROOT.parent] + ([Path(origin).parent] if origin and Path(origin).is_dir() else [])
    candidates = [folder / "shared" / "data" / "cifar10-jpeg.tar.gz" for folder in beside]
    return next((path for path in candidates if path.is_file()), candidates[0])


SHARED_COPY = shared_copy()

TEMPLATE = re.compile(r"<|\.\.\.|\s\|\s|\[[a-z]")  # a usage form in prose: <arg>, ..., a | b, [option=...]


def doc_commands(path: Path) -> list[str]:
    """The commands of a page's code blocks (continuation lines joined, comments dropped) and the
    inline ones of its prose that are commands rather than usage forms (TEMPLATE)."""
    commands, in_block, pending = [], False, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not in_block and not line.startswith("```"):
            commands += [
                span
                for span in re.findall(r"`(python (?:train\.py|-m vitpos)[^`]*)`", line)
                if not TEMPLATE.search(span)
            ]
        if line.startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        text = f"{pending} {line.strip()}" if pending else line.strip()
        if text.endswith("\\"):
            pending = text[:-1].strip()
            continue
        pending = ""
        code = re.split(r"\s#\s", f"{text} ", maxsplit=1)[0].strip()
        if code.startswith(("python train.py", "python -m vitpos")):
            commands.append(code)
    return commands


COMMANDS = sorted({command for page in GUIDES for command in doc_commands(page)})


def test_the_guides_are_the_site_pages_beside_the_records():
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert {ROOT / "docs" / page for page in nav} == {*GUIDES[1:], *(ROOT / "docs" / name for name in RECORDS)}


def test_guides_have_commands_of_every_kind():
    kinds = {" ".join(shlex.split(c)[:3]) if c.startswith("python -m") else "python train.py" for c in COMMANDS}
    assert {
        "python train.py",
        "python -m vitpos.compare",
        "python -m vitpos.evaluate",
        "python -m vitpos.figures",
    } <= kinds


# the function each tool's main() hands its parsed options to (replaced: nothing runs)
WORK = {"vitpos.compare": "compare", "vitpos.evaluate": "evaluate", "vitpos.figures": "figures_from_options"}


@pytest.mark.parametrize("command", COMMANDS)
def test_command_is_pasteable_and_composes(command, tmp_path, monkeypatch):
    assert not re.search(r"<[^>]*>|\.\.\.|\*", command), f"placeholder or glob in a command to paste: {command}"
    words = shlex.split(command)
    if words[1] == "train.py":
        # the launcher plugins are Hydra's own config (hydra/launcher=...): composition checks the rest
        overrides = [w for w in words[2:] if w != "-m" and not w.startswith(("hydra/", "hydra."))]
        for variant in sweep_variants(overrides):
            cfg = compose_config(variant, tmp_path)
            assert cfg.pos.name and cfg.data._target_
        return
    tool, calls = importlib.import_module(words[2]), []

    def work(*args, **kwargs):
        calls.append((args, kwargs))
        return {}, tmp_path  # what figures_from_options returns; compare and evaluate's results are unused

    monkeypatch.setattr(tool, WORK[words[2]], work)
    assert tool.main(words[3:]) == 0, command
    assert len(calls) == 1  # the options parsed and reached the tool's work


# --- the README's CIFAR-10 commands, run up to the data they read ----------------------------------

PER_BATCH = 1020  # images per stand-in batch: 5,100 training images, the default val_size of 5,000 and a batch


def readme_cifar10_command(offline: bool) -> list[str]:
    """The overrides of the README's first CIFAR-10 training command without `data.root=` (online)
    or with it (offline)."""
    for command in doc_commands(README):
        words = shlex.split(command)
        if words[1] == "train.py" and "-m" not in words and any(w.startswith("data.root=") for w in words) == offline:
            return words[2:]
    raise AssertionError(f"README.md has no {'offline' if offline else 'online'} CIFAR-10 training command")


def readme_datamodule(overrides: list[str], tmp_path: Path):
    """The data module that README's command builds, as `vitpos.train.train` builds it, set up."""
    cfg = compose_config(overrides, tmp_path)
    assert cfg.data._target_ == "vitpos.data.CIFAR10DataModule", overrides
    datamodule = instantiate(cfg.data)
    datamodule.setup()
    return datamodule


def test_readme_first_run_downloads_cifar10_into_the_data_folder(tmp_path, monkeypatch):
    overrides = readme_cifar10_command(offline=False)
    downloads = []

    class StubCIFAR10:  # torchvision.datasets.CIFAR10 with the network replaced: writes what it would download
        def __init__(self, root, train=True, download=False, **kwargs):
            downloads.append((Path(root), download))
            self.written = write_tiny_cifar10(Path(root), per_batch=PER_BATCH)

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", StubCIFAR10)
    datamodule = readme_datamodule(overrides, tmp_path)
    assert downloads == [(tmp_path / "data", True)]  # downloaded once, into paths.data_dir, with no flag to pass
    assert datamodule.source == f"pickled batches {(tmp_path / 'data' / CIFAR10_FOLDER).resolve()}"
    assert len(datamodule.train_set) + len(datamodule.val_set) == 5 * PER_BATCH
    assert len(datamodule.test_set) == PER_BATCH
    readme_datamodule(overrides, tmp_path)  # a second run finds the copy and downloads nothing
    assert len(downloads) == 1


def no_network(*args, **kwargs):
    raise AssertionError("the offline command tried to download CIFAR-10")


def test_readme_offline_command_reads_the_official_archive(tmp_path, monkeypatch):
    overrides = readme_cifar10_command(offline=True)
    (root,) = [w.split("=", 1)[1] for w in overrides if w.startswith("data.root=")]
    assert Path(root).name == CIFAR10_ARCHIVE, "the README's offline command names the official archive"
    written = write_tiny_cifar10(tmp_path / "extracted", per_batch=PER_BATCH)
    here = tmp_path / "here"
    here.mkdir()
    with tarfile.open(here / root, "w:gz") as archive:  # the official archive's layout: cifar-10-batches-py/...
        archive.add(tmp_path / "extracted" / CIFAR10_FOLDER, arcname=CIFAR10_FOLDER)
    monkeypatch.chdir(here)  # the command runs where the archive was copied
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", no_network)
    datamodule = readme_datamodule(overrides, tmp_path)
    assert datamodule.source == f"archive {(here / root).resolve()}"
    data, labels = written["test_batch"]
    assert torch.equal(datamodule.test_set.images.reshape(PER_BATCH, -1), torch.as_tensor(data))
    assert datamodule.test_set.labels.tolist() == labels
    assert not (tmp_path / "data").exists()  # read as it is: nothing extracted, nothing downloaded


@pytest.mark.slow
def test_readme_offline_command_reads_the_shared_jpeg_copy(tmp_path, monkeypatch):
    """The same command with `data.root=` naming the shared JPEG copy (decoded without a cache here)."""
    assert SHARED_COPY.is_file(), f"shared/ lies beside the checkout in CI; {SHARED_COPY} is missing"
    overrides = [w for w in readme_cifar10_command(offline=True) if not w.startswith("data.root=")]
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", no_network)
    datamodule = readme_datamodule([*overrides, f"data.root={SHARED_COPY}", "data.cache_dir=null"], tmp_path)
    assert (len(datamodule.train_set), len(datamodule.val_set), len(datamodule.test_set)) == (45000, 5000, 10000)
    assert datamodule.test_set.images.shape[1:] == (3, 32, 32)
    assert "JPEG: lossy" in datamodule.source  # a result on it says so


# --- the README as a page: links, install and test lines, length ----------------------------------


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "README.md links to no page of the docs"
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_readme_install_and_test_lines_are_the_ones_ci_runs():
    readme, ci = README.read_text(encoding="utf-8"), (ROOT / ".ci" / "run").read_text()
    pins = re.compile(r"^python -m pip install -q (torch==\S+ torchvision==\S+)$", re.M)
    (ci_pins,) = pins.findall(ci)
    assert f"pip install {ci_pins} " in readme  # README's install line pins what CI installs
    (test_line,) = [line for line in ci.splitlines() if line.startswith("python -m pytest")]
    assert f"\n{test_line}\n" in readme


def test_readme_is_a_quickstart():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines: move reference material to the pages under docs/"
