"""`compare`: the finished runs under a log folder, grouped, printed and written as tables and charts."""

from __future__ import annotations

import csv
from pathlib import Path

from ..config import data_config_names
from ..errors import ConfigError
from ..model import image_size
from ..plots import pyplot
from ..pos import list_pos
from ..runs import RESULTS_FILE, check_out_folder
from .charts import accuracy_figure, epoch_chart, extrapolation_figure, kept_figure, minutes_chart, transfer_chart
from .grouping import (
    accuracy_columns,
    epoch_curves,
    extrapolation_curves,
    group_runs,
    is_extrapolation_grid,
    latest_per_seed,
    mark_differences,
    minutes_curves,
    minutes_to_reach,
    transfer_curves,
)
from .logs import TRANSFER_PREFIX, parse_transfer_column, read_reference, run_folders, summarize, unfinished_runs
from .tables import (
    best_conversions_table,
    epochs_table,
    extrapolation_table,
    markdown_table,
    ranking_table,
    reach_table,
)


def compare(
    root: str | Path | list,
    data: str | None = None,
    pos: str | list | None = None,
    img_size: int | str | None = None,
    out: str | Path | None = None,
    reference: str | Path | None = None,
    reach: float | None = None,
) -> list[dict]:
    """Group the finished runs under `root` (a log folder, or a list of them), print the grouped table
    and write every table and chart of `python -m vitpos.compare` to `out` (default: `compare/` in the
    first folder); return the groups' rows. `data` and `img_size` keep the runs of that data set and
    size, `pos` those of these schemes (a name or a list); `reference` is a CSV of published
    accuracies that ranking.md sets beside ours (`read_reference`); `reach` (a validation accuracy in
    percent) adds minutes_to_reach.md. No finished run: ConfigError."""
    check_reach(reach)
    check_data(data)
    schemes = check_schemes(pos)
    size = image_size(img_size, example="img_size=32 (the training size of the runs to keep)") if img_size else None
    roots = [Path(str(folder)) for folder in (root if isinstance(root, (list, tuple)) else [root])]
    if not roots:
        raise ConfigError("pass the log folder: python -m vitpos.compare logs/ (or logdir=logs/)")
    for folder in roots:
        if not folder.is_dir():
            raise ConfigError(f"no such log folder: {folder}; pass the folder the runs were logged to, e.g. logs/")
    out = Path(out) if out else roots[0] / "compare"
    check_out_folder(out)
    published = read_reference(reference) if reference is not None else {}
    runs = finished_runs(roots, data, size, schemes)
    runs.sort(key=lambda r: (r["experiment"], r["data"], str(r["img_size"]), r["pos"], r["seed"]))
    rows = group_runs(runs)
    rows.sort(key=lambda r: (r["experiment"], r["data"], str(r["img_size"]), -(r["test_acc_mean"] or 0)))
    out.mkdir(parents=True, exist_ok=True)
    mark_differences(rows)
    mark_differences(runs)
    table = markdown_table(rows, table_columns(runs))
    written = write_groups(out, table, rows, runs)
    written += write_ranking(out, rows, published)
    written += write_transfer(out, rows)
    written += write_extrapolation(out, rows)
    written += write_epochs(out, runs)
    written += write_minutes(out, runs, reach)
    print(table + "\nwrote " + ", ".join(map(str, written)))
    return rows


def check_data(data) -> None:
    names = data_config_names()
    if data is not None and data not in names:
        raise ConfigError(f"data={data!r} is not a data set runs are trained on; use one of {', '.join(names)}")


def check_schemes(pos) -> list[str] | None:
    """`pos=` as a list of scheme labels (None: every scheme), as the tables name them: `cpe` for
    plain cpe runs, `cpe+fuzzy` for its fuzzy twins; a label of no scheme: ConfigError."""
    if pos is None:
        return None
    schemes = [str(p) for p in (pos if isinstance(pos, list) else [pos])]
    unknown = [p for p in schemes if p.split("+")[0] not in list_pos()]
    if unknown or not schemes:
        names = ", ".join(list_pos())
        raise ConfigError(f"pos={pos!r} must name schemes runs are trained with, e.g. pos=[none,cpe]; use {names}")
    return schemes


def run_size(img_size: int | str) -> tuple[int, int]:
    """A run row's `img_size` (32, or "32x48") as (H, W)."""
    return (img_size, img_size) if isinstance(img_size, int) else tuple(map(int, str(img_size).split("x")))


def finished_runs(
    roots: list[Path], data: str | None, img_size: tuple[int, int] | None, schemes: list[str] | None = None
) -> list[dict]:
    """A row per finished run under `roots` of `data`, `img_size` and `schemes` (None: any; a scheme
    is its table label: `cpe` keeps plain cpe runs, `cpe+fuzzy` its fuzzy twins), the latest of each
    seed of a group; says which runs it leaves out, and refuses when none is left. With several
    folders a run's name starts with its folder's."""
    runs, unfinished = [], []
    for root in roots:
        for run in run_folders(root):
            row = summarize(run, root)
            runs.append(dict(row, run=_under(root, row["run"], roots)))
        unfinished += [_under(root, str(run.relative_to(root)), roots) for run in unfinished_runs(root)]
    if unfinished:
        print(f"note: left out {len(unfinished)} unfinished run(s) (no {RESULTS_FILE}): {_first_names(unfinished)}")
    runs = [
        r
        for r in runs
        if (data is None or r["data"] == data)
        and (img_size is None or run_size(r["img_size"]) == img_size)
        and (schemes is None or r["pos"] in schemes)
    ]
    if not runs:
        size = None if img_size is None else "x".join(map(str, dict.fromkeys(img_size)))
        given = (("data", data), ("img_size", size), ("pos", schemes and ",".join(schemes)))
        filters = " ".join(f"{k}={v}" for k, v in given if v is not None)
        where = ", ".join(map(str, roots))
        raise ConfigError(
            f"no finished runs (with {RESULTS_FILE}) under {where}" + (f" match {filters}" if filters else "")
        )
    runs, repeated = latest_per_seed(runs)
    if repeated:
        print(
            f"note: left out {len(repeated)} earlier run(s) of a seed that their group has again "
            f"(the latest counts): {_first_names([r['run'] for r in repeated])}"
        )
    return runs


def _under(root: Path, name: str, roots: list[Path]) -> str:
    """A run's name under `root`, with the folder's own name in front when there are several folders."""
    return name if len(roots) == 1 else str(Path(root.name) / name)


def _first_names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")


def table_columns(runs: list[dict]) -> list[str]:
    """compare.md's accuracy columns: all but the extrapolation grid's (in extrapolation.md and compare.csv)."""
    return [
        c
        for c in accuracy_columns(runs)
        if not (c.startswith(TRANSFER_PREFIX) and is_extrapolation_grid(parse_transfer_column(c)[1]))
    ]


def write_groups(out: Path, table: str, rows: list[dict], runs: list[dict]) -> list[Path]:
    """compare.md (`table`), compare.csv (the groups), runs.csv (the runs) and compare.png."""
    (out / "compare.md").write_text(table)
    write_csv(out / "compare.csv", rows)
    write_csv(out / "runs.csv", runs)
    figure = accuracy_figure(rows)
    figure.savefig(out / "compare.png", dpi=120)
    pyplot().close(figure)
    return [out / name for name in ("compare.md", "compare.csv", "runs.csv", "compare.png")]


def write_ranking(out: Path, rows: list[dict], published: dict[str, dict]) -> list[Path]:
    """ranking.md where some group qualifies; says when the reference table's data sets are none of the runs'."""
    compared_data = {row["data"] for row in rows}
    unmatched = sorted({r["data"] for r in published.values()} - compared_data)
    if unmatched:
        print(
            f"note: the reference table's data ({', '.join(unmatched)}) is not these runs' "
            f"({', '.join(sorted(compared_data))}): ranking.md sets none of its rows beside them"
        )
    ranking = ranking_table(rows, published)
    if not ranking:
        return []
    (out / "ranking.md").write_text(ranking)
    return [out / "ranking.md"]


def write_transfer(out: Path, rows: list[dict]) -> list[Path]:
    """transfer.png where groups were evaluated at two or more sizes."""
    curves = transfer_curves(rows)
    if not curves:
        return []
    transfer_chart(curves, out / "transfer.png")
    return [out / "transfer.png"]


def write_extrapolation(out: Path, rows: list[dict]) -> list[Path]:
    """extrapolation.md and .png, and kept.png, where groups were evaluated with an asked-for temperature."""
    conversions = extrapolation_curves(rows)
    if not conversions:
        return []
    (out / "extrapolation.md").write_text(
        extrapolation_table(conversions)
        + "\nThe best conversion at each size:\n\n"
        + best_conversions_table(conversions)
    )
    written = [out / "extrapolation.md"]
    for name, draw in (("extrapolation.png", extrapolation_figure), ("kept.png", kept_figure)):
        figure = draw(conversions)
        figure.savefig(out / name, dpi=110)
        pyplot().close(figure)
        written.append(out / name)
    return written


def write_epochs(out: Path, runs: list[dict]) -> list[Path]:
    """epochs.png and epochs.md where runs validated more than once."""
    curves = epoch_curves(runs)
    if not curves:
        return []
    epoch_chart(curves, out / "epochs.png")
    (out / "epochs.md").write_text(epochs_table(curves))
    return [out / "epochs.png", out / "epochs.md"]


def check_reach(reach) -> None:
    valid = reach is None or (isinstance(reach, (int, float)) and not isinstance(reach, bool) and 0 < reach <= 100)
    if not valid:
        raise ConfigError(f"reach={reach!r} must be a validation accuracy in percent, e.g. reach=80")


def write_minutes(out: Path, runs: list[dict], reach: float | None = None) -> list[Path]:
    """accuracy_vs_minutes.png where runs' event files timed their validations or tests, and with
    `reach` (percent) minutes_to_reach.md."""
    curves = minutes_curves(runs)
    if not curves:
        return []
    minutes_chart(curves, out / "accuracy_vs_minutes.png")
    if reach is None:
        return [out / "accuracy_vs_minutes.png"]
    (out / "minutes_to_reach.md").write_text(reach_table(minutes_to_reach(runs, reach / 100), reach))
    return [out / "accuracy_vs_minutes.png", out / "minutes_to_reach.md"]


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
