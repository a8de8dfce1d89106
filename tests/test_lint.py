"""The tree passes `ruff check` with the rules configured in pyproject.toml ([tool.ruff])."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(ROOT)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"
