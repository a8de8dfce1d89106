"""Library modules below, command-line modules above: no library module imports a CLI module,
no import circle, and every module imports alone in a fresh interpreter."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "vitpos"
CLI_MODULES = {"__main__", "evaluate", "compare", "diagnose", "figures"}  # `python -m vitpos[.<name>]`
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def local_imports(module: str) -> set[str]:
    """vitpos modules that `module` imports, at any depth of its code (function-local ones too)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vitpos."):
            found.add(node.module.split(".")[1])
    return found & (set(MODULES) | {"pos"})


def test_cli_modules_are_the_ones_with_a_main():
    with_main = {m for m in MODULES if "def main(" in (PACKAGE / f"{m}.py").read_text()}
    assert with_main == CLI_MODULES


@pytest.mark.parametrize("module", sorted(set(MODULES) - CLI_MODULES))
def test_library_module_imports_no_cli_module(module):
    assert not local_imports(module) & CLI_MODULES


def test_no_import_circle():
    graph = {m: local_imports(m) - {"pos"} for m in MODULES}

    def visit(module: str, path: list[str]) -> None:
        for imported in graph[module]:
            assert imported not in path, "import circle: " + " -> ".join(path[path.index(imported):] + [imported])
            visit(imported, path + [imported])

    for module in MODULES:
        visit(module, [module])


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

    private = {name for cls in (torch.nn.Module, L.LightningModule, L.LightningDataModule, L.Callback)
               for name in dir(cls) if name.startswith("_") and not name.startswith("__")}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            # (`_target_` / `_partial_` are Hydra's config keys, not private names)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.endswith("_"):
                assert isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"), \
                    f"{path.name}:{node.lineno} reads {node.attr} of another object"
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        assert item.name not in private, f"{path.name}:{item.lineno} overrides {item.name}"


def test_no_private_attribute_of_torch_or_lightning():
    """Public APIs only: no `torch.<...>._name` / `lightning.<...>._name` access or import."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("torch", "lightning"):
                assert not any(part.startswith("_") for part in node.module.split(".")), (path, node.module)
                assert not any(a.name.startswith("_") for a in node.names), (path, node.module)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                assert not (isinstance(base, ast.Name) and base.id in ("torch", "L", "lightning", "trainer")), \
                    f"{path.name}:{node.lineno} uses {node.attr}"
