"""Markdown pipe tables: the one table writer of vitpos.compare and vitpos.evaluate.

Written by hand: tabulate and pandas pad every cell to its column's width, and the tables under
docs/results keep the unpadded form, which diffs line by line.
"""

from __future__ import annotations

from collections.abc import Iterable

RULES = {"l": "---", "r": "---:"}  # l: markdown's default alignment (left), r: right


def table(header: list, rows: Iterable[list], align: str = "") -> str:
    """`header` and `rows` (lists of cells, each written with str, a `|` in it escaped) -> the table,
    each line ending in a newline. `align` has a letter per column, `l` or `r`; missing letters are `l`."""
    rule = "|" + "".join(RULES[letter] + "|" for letter in align.ljust(len(header), "l"))
    return "\n".join([_line(header), rule, *map(_line, rows)]) + "\n"


def _line(cells: list) -> str:
    return "| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |"
