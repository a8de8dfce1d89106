"""`python -m vitpos.compare`: the table's numbers are the logged ones."""
from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from vitpos.compare import compare
from vitpos.train import train


@pytest.fixture
def two_runs(make_config, tiny_overrides):
    extra = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    return [train(make_config([f"pos={pos}", *tiny_overrides, *extra])) for pos in ("none", "rel_bias")]


def test_compare_reports_the_logged_numbers(two_runs, tmp_path):
    logs = tmp_path / "logs"
    rows = compare(logs, out=tmp_path / "out")
    assert {row["pos"] for row in rows} == {"none", "rel_bias"}
    for metrics in two_runs:
        row = next(r for r in rows if r["run"] in metrics["log_dir"])
        assert row["data"] == "synthetic" and row["img_size"] == 32 and row["params"] > 0
        assert row["val_acc_best"] == round(metrics["val/acc_best"], 4)
        assert row["test_acc"] == round(metrics["test/acc"], 4)
        assert row["images_per_s"] == "" or row["images_per_s"] > 0
    with open(tmp_path / "out" / "compare.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    assert (tmp_path / "out" / "compare.md").read_text().count("\n") == 4  # header, rule, two rows
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0
    assert [r["pos"] for r in compare(logs, data="synthetic", img_size=32, out=tmp_path / "o2")] != []


def test_compare_cli_errors_are_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "vitpos.compare", str(tmp_path / "missing")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no such log folder")
