"""Library modules below, command-line modules above: no library module imports a CLI module,
no import circle, and every module imports alone in a fresh interpreter. Modules are named by
their path in the package: `errors`, `pos` (pos/__init__.py), `pos.base`, `data.sampling`, ..."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitpos"
CLI_MODULES = {"__main__", "evaluate", "compare", "diagnose", "figures"}  # `python -m vitpos[.<name>]`
PACKAGE_RUNNERS = {"compare.__main__"}  # `python -m vitpos.compare`: runs the package's main


def module_name(path: Path) -> str:
    """`vitpos/data/sampling.py` -> `data.sampling`, `vitpos/pos/__init__.py` -> `pos`."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "__init__.py"}
MODULES = sorted(FILES)
SUBPACKAGES = sorted(m for m, p in FILES.items() if p.name == "__init__.py")


def package_of(module: str) -> list[str]:
    """The package a module's relative imports start from (a subpackage's __init__ is its own)."""
    parts = module.split(".")
    return parts if FILES[module].name == "__init__.py" else parts[:-1]


def resolve(name: list[str]) -> str | None:
    """The longest prefix of `name` that is a vitpos module (`data.cifar10.X` -> `data.cifar10`)."""
    for end in range(len(name), 0, -1):
        if ".".join(name[:end]) in FILES:
            return ".".join(name[:end])
    return None


def imported_names(module: str) -> set[str]:
    """vitpos modules that `module` names in an import, at any depth of its code (function-local
    ones too): `from .x import y` is `x`, or `x.y` when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(FILES[module].read_text())):
        targets = []
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package_of(module)[: len(package_of(module)) - (node.level - 1)]
            source = base + (node.module.split(".") if node.module else [])
            targets = [source + [alias.name] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "vitpos":
            targets = [node.module.split(".")[1:] + [alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name.split(".")[1:] for alias in node.names if alias.name.split(".")[0] == "vitpos"]
        found.update(resolve(target) for target in targets)
    return found - {None}


def local_imports(module: str) -> set[str]:
    """What importing `module` runs: the modules it imports and, for a module of a subpackage it
    is not itself in, that subpackage's __init__ too (Python runs it first)."""
    found = set()
    own = package_of(module)
    for imported in imported_names(module):
        parts = imported.split(".")
        found.add(imported)
        found.update(".".join(parts[:end]) for end in range(1, len(parts)) if parts[:end] != own[:end])
    return found - {module}


def test_modules_are_found_in_subpackages():
    assert {"pos", "data"} <= set(SUBPACKAGES)
    assert {"pos.base", "data.sampling", "data.datamodule"} <= set(MODULES)
    assert "data.datamodule" in local_imports("data.cifar10") and "data" not in local_imports("data.cifar10")
    assert {"pos", "pos.base"} <= local_imports("plots")  # `from .pos.base import Grid` runs pos/__init__ first


def test_cli_modules_are_the_ones_with_a_main():
    with_main = {m for m in MODULES if "def main(" in FILES[m].read_text()}
    assert with_main == CLI_MODULES


@pytest.mark.parametrize("module", sorted(set(MODULES) - CLI_MODULES - PACKAGE_RUNNERS))
def test_library_module_imports_no_cli_module(module):
    assert not local_imports(module) & CLI_MODULES


def test_no_import_circle():
    graph = {m: local_imports(m) for m in MODULES}

    def visit(module: str, path: list[str]) -> None:
        for imported in graph[module]:
            assert imported not in path, "import circle: " + " -> ".join(path[path.index(imported) :] + [imported])
            visit(imported, path + [imported])

    for module in MODULES:
        visit(module, [module])


def test_data_package_reexports_every_datamodule():
    """Configs and the checkpoints saved before vitpos.data became a package name the datasets
    `vitpos.data.<Class>` (`_target_`): every datamodule of the package answers to that name."""
    import vitpos.data
    from vitpos.data import ImageDataModule

    for module in (m for m in MODULES if m.startswith("data.")):
        for name, value in vars(__import__(f"vitpos.{module}", fromlist=["_"])).items():
            if isinstance(value, type) and issubclass(value, ImageDataModule):
                assert getattr(vitpos.data, name, None) is value, f"vitpos.data does not re-export {module}.{name}"


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Each module imported first, with no other vitpos module loaded: no import order can hide a
    circle. One fresh interpreter; vitpos is unloaded between modules (torch and Lightning stay
    loaded, which keeps this cheap: a circle lies among vitpos's own modules)."""
    script = f"""
import importlib, sys
for name in {MODULES!r}:
    for loaded in [m for m in sys.modules if m == "vitpos" or m.startswith("vitpos.")]:
        del sys.modules[loaded]
    importlib.import_module("vitpos." + name)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_no_private_attribute_of_another_object_and_no_override_of_a_private_method():
    """No `x._name` on anything but `self` / `cls` (e.g. a tensor's `_version`), and no method named
    like a private method of torch's Module or Lightning's classes (e.g. `_apply`): both are torch's
    or Lightning's internals, which change between releases."""
    import lightning as L
    import torch

    private = {
        name
        for cls in (torch.nn.Module, L.LightningModule, L.LightningDataModule, L.Callback)
        for name in dir(cls)
        if name.startswith("_") and not name.startswith("__")
    }
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        for node in ast.walk(ast.parse(path.read_text())):
            # (`_target_` / `_partial_` are Hydra's config keys, not private names)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("_"):
                assert isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"), (
                    f"{where}:{node.lineno} reads {node.attr} of another object"
                )
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        assert item.name not in private, f"{where}:{item.lineno} overrides {item.name}"


def test_no_private_attribute_of_torch_or_lightning():
    """Public APIs only: no `torch.<...>._name` / `lightning.<...>._name` access or import."""
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("torch", "lightning"):
                assert not any(part.startswith("_") for part in node.module.split(".")), (path, node.module)
                assert not any(a.name.startswith("_") for a in node.names), (path, node.module)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                assert not (isinstance(base, ast.Name) and base.id in ("torch", "L", "lightning", "trainer")), (
                    f"{where}:{node.lineno} uses {node.attr}"
                )
