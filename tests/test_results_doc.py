"""docs/RESULTS.md's CIFAR-10 tables hold figures read from the tables `scripts/study.sh tables`
writes (docs/results/cifar10_study/): every figure they quote must be the generated one, so a new
archive that regenerates those tables fails here until RESULTS is read again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = (ROOT / "docs" / "RESULTS.md").read_text()
STUDY = ROOT / "docs" / "results" / "cifar10_study"
EXTRAPOLATION = (STUDY / "extrapolation.md").read_text()
FULL_GRID, BEST_GRID = EXTRAPOLATION.split("The best conversion at each size:")
SIZES = ("48px", "64px", "96px")
IMAGES = " (2000 images)"  # how the generated tables name the evaluation subset after a conversion


def table_after(text: str, phrase: str) -> tuple[list[str], list[list[str]]]:
    """The header and the body rows (cells stripped of `**` and backticks) of the first markdown
    table after `phrase`."""
    assert phrase in text, f"no {phrase!r} in the document"
    rows, started = [], False
    for line in text[text.index(phrase) + len(phrase) :].splitlines():
        if line.startswith("|"):
            started = True
            if not re.fullmatch(r"\|[-:| ]+\|", line.strip()):  # not the |---|---:| line
                rows.append([c.strip().replace("**", "").strip("`") for c in line.strip().strip("|").split(" | ")])
        elif started:
            break
    header, *body = rows
    return header, body


def short_method(generated: str) -> str:
    """'yarn + log temperature (2000 images)' -> 'yarn + log T', the way RESULTS names a conversion."""
    return generated.replace(IMAGES, "").replace(" + log temperature", " + log T").replace("its rule", "rule")


def trained_as_generated(trained: str) -> str:
    """RESULTS' 'mixed 32-48-64px (1 seed)' -> the generated tables' 'mixed 32-48-64px'."""
    return re.sub(r" \(\d+ seeds?\)$", "", trained)


def best_conversions() -> dict[tuple[str, str], dict[str, str]]:
    """(scheme, trained) -> '1x' and each size -> 'acc[ ± std] (share%, method)' as RESULTS writes it."""
    best = {}
    for scheme, trained, one, *cells in table_after(BEST_GRID, "")[1]:
        row = {"1x": one.split(" (")[0]}
        for size, cell in zip(SIZES, cells):
            figure, share, method = re.match(r"(.*?) \((\d+%)\) (.*?), \+[\d.]+ over ", cell).groups()
            row[size] = f"{figure} ({share}, {short_method(method)})"
        best[scheme, trained] = row
    return best


BEST_PHRASE = "The best training-free conversion of each scheme at each size"
MODES_PHRASE = "At 2x, each of the four resize modes"


def test_the_best_conversion_table_quotes_the_generated_one():
    best = best_conversions()
    quoted = table_after(RESULTS, BEST_PHRASE)[1]
    assert {(scheme, trained_as_generated(trained)) for scheme, trained, *_ in quoted} == set(best)
    none_at_2x = float(best["none", "exact"]["64px"].split()[0])
    for scheme, trained, one, *cells, above_none in quoted:
        generated = best[scheme, trained_as_generated(trained)]
        assert [one, *cells] == [generated[k] for k in ("1x", *SIZES)], (scheme, trained)
        gap = float(generated["64px"].split()[0]) - none_at_2x
        assert float(above_none) == pytest.approx(round(gap, 1), abs=0.051), (scheme, trained)


def test_the_2x_mode_table_quotes_the_generated_grid():
    grid = {  # a grid row: scheme | trained | conversion | n | 32px | 48px | 64px | 96px
        (scheme, trained, conversion.replace(IMAGES, "")): at_64
        for scheme, trained, conversion, _n, _at_32, _at_48, at_64, _at_96 in table_after(FULL_GRID, "")[1]
    }
    quoted = table_after(RESULTS, MODES_PHRASE)[1]
    four_mode = {(s, t) for s, t, c in grid if c == "ntk"}
    assert {(scheme, trained_as_generated(trained)) for scheme, trained, *_ in quoted} == four_mode
    for scheme, trained, *cells in quoted:
        trained = trained_as_generated(trained)
        for mode, cell in zip(("extrapolate", "interpolate", "ntk", "yarn"), cells):
            expected = f"{grid[scheme, trained, mode]} / {grid[scheme, trained, mode + ' + log temperature']}"
            assert cell == expected, (scheme, trained, mode)


def generated_rows(path: Path, keep) -> dict[str, dict[str, str]]:
    """A generated markdown table -> pos -> its row (column -> cell), for the rows `keep(row)` holds."""
    columns, body = table_after(path.read_text(), "")
    rows = [dict(zip(columns, cells)) for cells in body]
    return {row["pos"]: row for row in rows if keep(row)}


def test_the_headline_table_quotes_the_generated_comparison():
    study = "cifar10_study"
    plain = generated_rows(
        STUDY / "compare.md",
        lambda row: (
            row["experiment"] == study
            and row["train_sizes"] == "-"
            and row.get("curriculum", "-") == "-"  # the curriculum runs are a table of their own
            and "+" not in row["pos"]
        ),
    )
    ranked = generated_rows(
        STUDY / "ranking.md", lambda row: row["experiment"] == study and row.get("curriculum", "-") == "-"
    )
    finetuned = generated_rows(STUDY.parent / "cifar10_finetune" / "compare.md", lambda row: True)

    def transfer(row: dict, size: int) -> str:
        interpolated = row[f"test_acc@{size}px/interpolate"]
        return row[f"test_acc@{size}px"] + ("" if interpolated == "-" else f" / {interpolated}")

    quoted = table_after(RESULTS, "Mean ± std over the three seeds:")[1]
    assert [cells[0] for cells in quoted] == sorted(plain, key=lambda pos: -float(plain[pos]["test_acc"].split()[0]))
    for scheme, n, test, best_val, gap, at_48, at_64, after_finetune in quoted:
        row, rank = plain[scheme], ranked[scheme]
        generated = [
            row["n"],
            row["test_acc"],
            row["val_acc_best"],
            "-"
            if rank["gap to next (points)"] == "-"
            else f"{rank['gap to next (points)']} ({rank['separated from next']})",
            transfer(row, 48),
            transfer(row, 64),
            finetuned[scheme]["test_acc"] if scheme in finetuned else "-",
        ]
        assert [n, test, best_val, gap, at_48, at_64, after_finetune] == generated, scheme
