"""vitpos.markdown.table: a pipe table whose every line splits back into the cells it was given."""

from __future__ import annotations

from vitpos import markdown


def cells(line: str) -> list[str]:
    """A table line's cells, split at the pipes between them (an escaped one, `\\|`, is read back as `|`)."""
    assert line.startswith("| ") and line.endswith(" |"), line
    return [cell.replace("\\|", "|") for cell in line[2:-2].split(" | ")]


def test_every_row_reads_back_as_its_cells_with_the_header_and_alignment():
    header = ["scheme", "n", "32px"]
    rows = [["2d_sin", 3, "81.20 ± 0.30"], ["Sin | 2D (a source's name)", 1, "-"]]
    lines = markdown.table(header, rows, align="lr").splitlines()
    assert cells(lines[0]) == header
    assert lines[1] == "|---|---:|---|"  # a letter per column; the letters missing are l
    assert [cells(line) for line in lines[2:]] == [[str(cell) for cell in row] for row in rows]
    assert markdown.table(header, []).endswith("|---|---|---|\n")  # no rows: the header alone, a line each
