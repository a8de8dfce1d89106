"""What `vitpos.evaluate` writes: the folder it claims, and resolution.md, .csv and .png from its rows."""

from __future__ import annotations

import csv
import itertools
import os
from datetime import datetime
from pathlib import Path

from . import markdown
from .errors import ConfigError
from .plots import pyplot
from .runs import check_out_folder, size_tag

OUTPUTS = ("resolution.md", "resolution.csv", "resolution.png")


def output_folder(out, overwrite: bool) -> tuple[Path, bool]:
    """Where the tables go, and whether it is a new folder to claim when they are written
    (`new_folder`): by default <log dir>/evaluate/<date>_<time> of the evaluation's start, else `out`,
    refused while it holds an earlier evaluation's tables unless `overwrite`."""
    if out is None:
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        return Path(os.environ.get("VITPOS_LOG_DIR") or "logs", "evaluate", stamp), True
    out = Path(out)
    check_out_folder(out)
    earlier = [name for name in OUTPUTS if (out / name).exists()]
    if earlier and not overwrite:
        raise ConfigError(
            f"{out} holds an earlier evaluation's {', '.join(earlier)}; pass another out= (by default each "
            f"evaluation writes a new folder under logs/evaluate/), or overwrite=true to replace them"
        )
    return out, False


def new_folder(stamped: Path) -> Path:
    """The folder `stamped`, made now, or `<stamped>_2`, `_3`, ... where an evaluation started in the
    same second made it first."""
    stamped.parent.mkdir(parents=True, exist_ok=True)
    for number in itertools.count(1):
        folder = stamped if number == 1 else stamped.with_name(f"{stamped.name}_{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder


def conversion_label(mode, temperature) -> str:
    """`resize_mode=ntk attn_temperature=log`: a conversion as the options that select it."""
    return " ".join([*([f"resize_mode={mode}"] if mode else []), f"attn_temperature={temperature}"])


def write_outputs(
    rows: list[dict], sizes: list[tuple[int, int]], out: Path, limit: int | None = None, by_conversion: bool = False
) -> None:
    """resolution.csv (one row per checkpoint and size), resolution.md (one row per checkpoint,
    one column per size) and resolution.png (accuracy vs resolution, one line per checkpoint);
    `by_conversion` (resize_mode=all): a row and a line per checkpoint and conversion. A size's
    `pixels` label heads its column and tick where every checkpoint's data agree, else follows each cell."""
    pyplot()  # without matplotlib: refused before any file is written
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "resolution.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tags = [size_tag(size) for size in sizes]
    shared = {}  # size tag -> the pixels label all rows at that size share ("" where they differ or lack one)
    for tag in tags:
        labels = {row["pixels"] for row in rows if row["img_size"] == tag}
        shared[tag] = labels.pop() if len(labels) == 1 else ""

    def convert(row: dict) -> str:
        return conversion_label(row["resize_mode"], row["attn_temperature"]) if by_conversion else ""

    runs = list(dict.fromkeys((row["run"], convert(row)) for row in rows))
    by_run = {run: {row["img_size"]: row for row in rows if (row["run"], convert(row)) == run} for run in runs}
    names = ["run", "pos", "trained at", *(["conversion"] if by_conversion else [])]
    headers = [f"{tag} {shared[tag]}".strip() for tag in tags]
    body = []
    for run in runs:
        first = next(iter(by_run[run].values()))
        accs = [
            f"{100 * by_run[run][t]['acc']:.2f}" + ("" if shared[t] else f" {by_run[run][t]['pixels']}".rstrip())
            for t in tags
        ]
        body.append([run[0], first["pos"], first["trained_at"], *([run[1]] if by_conversion else []), *accs])
    table = markdown.table([*names, *headers], body, align="l" * len(names) + "r" * len(tags))
    subset = f"\nOn {rows[0]['images']} {rows[0]['split']} images drawn at random (`limit={limit}`, seed 0).\n"
    (out / "resolution.md").write_text(table + (subset if limit else ""))
    plot_resolution(out / "resolution.png", runs, by_run, sizes, shared, rows[0]["split"], limit)
    print(f"wrote {out / 'resolution.md'}, {out / 'resolution.csv'}, {out / 'resolution.png'}")


def plot_resolution(path: Path, runs: list, by_run: dict, sizes: list, shared: dict, split: str, limit) -> None:
    """Accuracy against evaluation resolution, a line per run (and conversion): `by_run[run][size tag]`
    is its row; `shared[size tag]` the pixels label that size's tick carries."""
    plt = pyplot()
    tags = [size_tag(size) for size in sizes]
    figure, axes = plt.subplots(figsize=(8, 5))
    heights = [size[0] for size in sizes]
    colors = plt.get_cmap("tab10").colors  # qualitative: no two neighbouring runs share a hue
    styles = ("-", "--", ":", "-.")
    for index, run in enumerate(runs):
        first = next(iter(by_run[run].values()))
        axes.plot(
            heights,
            [100 * by_run[run][t]["acc"] for t in tags],
            marker="o",
            color=colors[index % 10],
            linestyle=styles[index // 10 % 4],
            label=f"{first['pos']} ({' '.join(filter(None, run))})",
        )
    axes.set_xticks(heights, [f"{tag}\n{shared[tag]}" for tag in tags])
    axes.set_xlabel("evaluation resolution")
    axes.set_ylabel(f"top-1 {split} accuracy (%)")
    subset = f", {limit} images drawn at random" if limit else ""
    axes.set_title(f"Accuracy vs evaluation resolution ({split} split{subset})")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best", ncol=1 if len(runs) <= 8 else 2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
