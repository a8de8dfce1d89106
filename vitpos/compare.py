"""Compare finished runs from their logged metrics (event files, or metrics.csv of logger=csv), with seed statistics.

    python -m vitpos.compare logs/ [data=fashion_mnist] [img_size=32] [out=logs/compare] [reference=<published.csv>]
    (the folder may also be given as logdir=logs/)

Runs that differ only by `seed` form one group (the same scheme, data, size or curriculum, model, lr, batch,
budget and recipe: optimizer, schedule, loss and augmentation settings); a seed run twice counts
once, its latest run. Each group is one row with the number of runs `n` and the mean +- sample
standard deviation of every accuracy: best and final validation, test, and the resolution-transfer
accuracies that `vitpos.evaluate` logged into the run (`test_acc@42px`, `test_acc@42px/interpolate`,
`test_acc@42px/interpolate_1000img` for an evaluation of a subset, ...); the table names lr and the
recipe words that tell its rows apart when they differ. Writes to `out`: `compare.md` (the table),
`compare.csv` (mean and std columns), `runs.csv` (one row per run), `compare.png` (accuracy per
group, error bars of one std), `epochs.png` (validation accuracy per epoch, one line per group) and
`epochs.md` (the same means, each with the group's rank at that epoch) when runs validated more than
once, `transfer.png` (accuracy against evaluation size, one panel per scheme, one line per training
setting and resize mode) when runs were evaluated at two or more sizes, and, for evaluations that
asked for an attention temperature (`resize_mode=all`, each `scripts/study.sh` run's extrapolation
step), `extrapolation.md` (every conversion at every size, the best per scheme and size in bold;
then each scheme's best conversion per size as a share of its 1x accuracy) and `extrapolation.png`
(one panel per scheme, one line per conversion, fuzzy-trained twins in the same panel) instead of
table columns. `ranking.md` ranks the groups trained at one size and not fine-tuned (written when
there are some) by test accuracy, each with its gap to the next and whether the two are separated
(their one-std bars do not overlap: gap > std + std); with `reference=` (a CSV of
`pos,name,data,test_acc,source`, e.g. a published ablation, accuracies in percent) it joins each
scheme's published accuracy and rank beside ours, for runs of that data set. A run counts once it
has finished (`results.json`).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

import yaml
from hydra.utils import get_class
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from .cli import parse_options
from .data.curriculum import curriculum_tag
from .errors import ConfigError, VitposError
from .errors import report as report_error
from .plots import pyplot
from .pos import list_pos
from .runs import (
    FUZZY_SUFFIX,
    RESULTS_FILE,
    budget,
    devices,
    parse_conversion_suffix,
    scheme_label,
    sizes_tag,
    training_recipe,
)

DEFAULTS = dict(logdir=None, data=None, img_size=None, out=None, reference=None)
GROUP_BY = (
    "experiment",
    "pos",
    "data",
    "img_size",
    "train_sizes",
    "curriculum",
    "finetuned_from",
    "model",
    "lr",
    "batch_size",
    "budget",
    "recipe",
)
ACCURACIES = ("test_acc", "val_acc_best", "val_acc_final")
CSV_METRICS = "metrics.csv"  # logger=csv: Lightning's CSVLogger
RESOLUTION_TAG = "resolution/test_acc"  # vitpos.evaluate: step = image height, suffix _<mode> if one was forced
TRANSFER_PREFIX = "test_acc@"  # transfer columns: test_acc@<height>px, or test_acc@<height>px/<mode>


def transfer_column(height: int, mode: str = "") -> str:
    return f"{TRANSFER_PREFIX}{height}px" + (f"/{mode}" if mode else "")


def parse_transfer_column(column: str) -> tuple[int, str]:
    """`transfer_column`'s inverse: (height, mode), mode "" for the scheme's default."""
    size, _, mode = column.removeprefix(TRANSFER_PREFIX).partition("/")
    return int(size.removesuffix("px")), mode


def has_metrics(folder: Path) -> bool:
    """Whether `folder` holds a run's logged metrics: TensorBoard event files or (logger=csv) metrics.csv."""
    return (folder / CSV_METRICS).is_file() or any(folder.glob("events.out.tfevents*"))


def run_folders(root: Path) -> list[Path]:
    """Every finished run folder (train.py's results.json beside its logged metrics) under `root`."""
    return sorted(p.parent for p in root.rglob(RESULTS_FILE) if has_metrics(p.parent))


def unfinished_runs(root: Path) -> list[Path]:
    """Run folders under `root` with logged metrics but no results.json (still training, or stopped)."""
    logs = [*root.rglob("events.out.tfevents*"), *root.rglob(CSV_METRICS)]
    return sorted(
        {p.parent for p in logs if p.parent.name.startswith("version_") and not (p.parent / RESULTS_FILE).is_file()}
    )


def logged_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar a run logged, tag -> [(step, value)] in logging order: its TensorBoard event
    files, and for a logger=csv run its metrics.csv (vitpos.evaluate writes event files either way)."""
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    if (run / CSV_METRICS).is_file():
        with open(run / CSV_METRICS, newline="") as f:
            for row in csv.DictReader(f):  # one row per logging call, blank where a tag was not logged
                for tag, value in row.items():
                    if tag != "step" and value != "":
                        scalars.setdefault(tag, []).append((int(row["step"]), float(value)))
    return scalars


def summarize(run: Path, root: Path) -> dict:
    """One row per run: its hparams (the group key), accuracies, speed and transfer accuracies."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    hparams_file = run / "hparams.yaml"
    hparams = yaml.safe_load(hparams_file.read_text()) if hparams_file.is_file() else {}
    results = json.loads((run / RESULTS_FILE).read_text())
    scalars = logged_scalars(run)

    def values(tag: str) -> list[float]:  # by step; a step logged again (a resumed run) keeps its latest value
        return [value for _, value in sorted(dict(scalars.get(tag, [])).items())]

    val_acc, test_acc = values("val/acc"), values("test/acc")
    # the run's own figure (results.json); runs saved before it: the median of ThroughputMonitor's
    # (logged beside each device's only with several devices)
    speeds = values("train/samples_per_sec") or values("train/device/samples_per_sec")
    size = config["img_size"]
    row = dict(
        experiment=config.get("experiment") or "-",
        pos=scheme_label(config["pos"]),
        data=get_class(config["data"]["_target_"]).name,
        img_size=size if isinstance(size, int) else "x".join(map(str, size)),
        train_sizes=sizes_tag(config["train_img_sizes"]) if config.get("train_img_sizes") else "-",
        curriculum=curriculum_tag(config),
        finetuned_from=hparams.get("finetuned_from", ""),
        model=model_key(hparams.get("model", "")),
        lr=config["optim"]["lr"],
        batch_size=config["data"]["batch_size"] * devices(config["trainer"]),
        budget=budget(config["trainer"]),
        recipe=training_recipe(config),
        seed=config["seed"],
        params=results.get("params", hparams.get("params", "")),
        val_acc_best=round(max(val_acc), 4) if val_acc else "",
        val_acc_final=round(val_acc[-1], 4) if val_acc else "",
        test_acc=round(test_acc[-1], 4) if test_acc else "",
        epochs_done=len(values("train/loss_epoch")),  # one point per completed training epoch
        val_acc_by_epoch=" ".join(f"{acc:.4f}" for acc in val_acc),
        images_per_s=round(results["images_per_s"])
        if "images_per_s" in results
        else round(statistics.median(speeds))
        if speeds
        else "",
        fit_minutes=round(results["fit_seconds"] / 60, 2) if "fit_seconds" in results else "",
        precision=results.get("precision", ""),
        device=results.get("device", ""),
        # results.json's own time (older runs: its file's, which a git checkout resets)
        finished=results.get("finished_at")
        or datetime.fromtimestamp((run / RESULTS_FILE).stat().st_mtime).isoformat(timespec="seconds"),
        run=str(run.relative_to(root)) if run != root else run.name,
    )
    for tag in sorted(t for t in scalars if t.startswith(RESOLUTION_TAG)):
        mode = tag.removeprefix(RESOLUTION_TAG).removeprefix("_")
        latest = dict(scalars[tag])  # step -> value: a re-evaluation replaces
        for height, acc in sorted(latest.items()):
            row[transfer_column(height, mode)] = round(acc, 4)
    return row


def latest_per_seed(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Runs -> (the latest finished run of each group and seed, the earlier ones): a command run
    twice is one sample of its seed, not two."""
    latest: dict[tuple, dict] = {}
    for run in sorted(runs, key=lambda r: r["finished"]):
        latest[(*(str(run[k]) for k in GROUP_BY), run["seed"])] = run
    kept = {id(run) for run in latest.values()}
    return [run for run in runs if id(run) in kept], [run for run in runs if id(run) not in kept]


def model_key(model) -> str:
    """The architecture as a group key: the model arguments the run recorded."""
    return str(model)


def group_runs(rows: list[dict]) -> list[dict]:
    """Runs equal in every GROUP_BY key -> one row: n, seeds, `<acc>_mean` and `<acc>_std`
    (sample std, n - 1; blank for n = 1) of every accuracy column, mean speed and time."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row[k]) for k in GROUP_BY), []).append(row)
    grouped = []
    for members in groups.values():
        out = {k: members[0][k] for k in GROUP_BY}
        out["n"] = len(members)
        out["seeds"] = " ".join(str(s) for s in sorted(m["seed"] for m in members))
        for column in accuracy_columns(members):
            values = [m[column] for m in members if m.get(column, "") != ""]
            out[f"{column}_mean"] = round(statistics.fmean(values), 4) if values else ""
            out[f"{column}_std"] = round(statistics.stdev(values), 4) if len(values) > 1 else ""
        for column in ("images_per_s", "fit_minutes"):
            values = [m[column] for m in members if m[column] != ""]
            out[column] = round(statistics.fmean(values), 2) if values else ""
        grouped.append(out)
    return grouped


def accuracy_columns(rows: list[dict]) -> list[str]:
    """The accuracy columns present in `rows`: the fixed ones, then transfer ones by height."""
    transfer = {k for row in rows for k in row if k.startswith(TRANSFER_PREFIX)}
    return list(ACCURACIES) + sorted(transfer, key=lambda k: (parse_transfer_column(k)[0], k))


def compare(
    root: str | Path,
    data: str | None = None,
    img_size: int | str | None = None,
    out: str | Path | None = None,
    reference: str | Path | None = None,
) -> list[dict]:
    """Print and write the grouped table of the finished runs under `root`; return its rows."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"no such log folder: {root}; pass the folder the runs were logged to, e.g. logs/")
    published = read_reference(reference) if reference is not None else {}
    runs = [summarize(run, root) for run in run_folders(root)]
    unfinished = unfinished_runs(root)
    if unfinished:
        names = ", ".join(str(run.relative_to(root)) for run in unfinished[:5])
        names += " ..." if len(unfinished) > 5 else ""
        print(f"note: left out {len(unfinished)} unfinished run(s) (no {RESULTS_FILE}): {names}")
    runs = [
        r
        for r in runs
        if (data is None or r["data"] == data) and (img_size is None or str(r["img_size"]) == str(img_size))
    ]
    if not runs:
        filters = " ".join(f"{k}={v}" for k, v in (("data", data), ("img_size", img_size)) if v is not None)
        raise ConfigError(
            f"no finished runs (with {RESULTS_FILE}) under {root}" + (f" match {filters}" if filters else "")
        )
    runs, repeated = latest_per_seed(runs)
    if repeated:
        names = ", ".join(r["run"] for r in repeated[:5]) + (" ..." if len(repeated) > 5 else "")
        print(
            f"note: left out {len(repeated)} earlier run(s) of a seed that their group has again "
            f"(the latest counts): {names}"
        )
    runs.sort(key=lambda r: (r["experiment"], r["data"], str(r["img_size"]), r["pos"], r["seed"]))
    rows = group_runs(runs)
    rows.sort(key=lambda r: (r["experiment"], r["data"], str(r["img_size"]), -(r["test_acc_mean"] or 0)))
    out = Path(out) if out else root / "compare"
    out.mkdir(parents=True, exist_ok=True)
    mark_differences(rows)
    mark_differences(runs)
    shown = [  # the extrapolation grid's columns are in extrapolation.md (and compare.csv)
        c
        for c in accuracy_columns(runs)
        if not (c.startswith(TRANSFER_PREFIX) and is_extrapolation_grid(parse_transfer_column(c)[1]))
    ]
    table = markdown_table(rows, shown)
    (out / "compare.md").write_text(table)
    _write_csv(out / "compare.csv", rows)
    _write_csv(out / "runs.csv", runs)
    _accuracy_chart(rows, out / "compare.png")
    compared_data = {row["data"] for row in rows}
    unmatched = sorted({r["data"] for r in published.values()} - compared_data)
    if unmatched:
        print(
            f"note: the reference table's data ({', '.join(unmatched)}) is not these runs' "
            f"({', '.join(sorted(compared_data))}): ranking.md sets none of its rows beside them"
        )
    written = [out / name for name in ("compare.md", "compare.csv", "runs.csv", "compare.png")]
    ranking = ranking_table(rows, published)
    if ranking:
        (out / "ranking.md").write_text(ranking)
        written.append(out / "ranking.md")
    curves = transfer_curves(rows)
    if curves:
        _transfer_chart(curves, out / "transfer.png")
        written.append(out / "transfer.png")
    conversions = extrapolation_curves(rows)
    if conversions:
        (out / "extrapolation.md").write_text(
            extrapolation_table(conversions)
            + "\nThe best conversion at each size:\n\n"
            + best_conversions_table(conversions)
        )
        figure = extrapolation_figure(conversions)
        figure.savefig(out / "extrapolation.png", dpi=110)
        pyplot().close(figure)
        written += [out / "extrapolation.md", out / "extrapolation.png"]
    by_epoch = epoch_curves(runs)
    if by_epoch:
        _epoch_chart(by_epoch, out / "epochs.png")
        (out / "epochs.md").write_text(epochs_table(by_epoch))
        written += [out / "epochs.png", out / "epochs.md"]
    print(table + "\nwrote " + ", ".join(map(str, written)))
    return rows


REFERENCE_COLUMNS = ("pos", "name", "data", "test_acc", "source")


def read_reference(path: str | Path) -> dict[str, dict]:
    """A published table to set beside ours: a CSV with a row per scheme, `pos` (our scheme's name),
    `name` (the source's), `data` (the data set as our runs name it, e.g. cifar10), `test_acc`
    (percent) and `source` (where it comes from and how it was measured) -> pos -> row."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no such reference table: {path}; pass a CSV with the columns {','.join(REFERENCE_COLUMNS)}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # utf-8-sig: a spreadsheet's byte-order mark
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as error:
        raise ConfigError(f"{path} is not a UTF-8 CSV file ({error}); save it as CSV (UTF-8)") from None
    if sorted(columns) != sorted(REFERENCE_COLUMNS):
        raise ConfigError(f"{path} has the columns {columns}; a reference table has {','.join(REFERENCE_COLUMNS)}")
    if not rows:
        raise ConfigError(f"{path} has no rows; give one row per published scheme")
    schemes = list_pos()
    published = {}
    for line, row in enumerate(rows, start=2):
        where = f"{path}, line {line}"
        if None in row or None in row.values() or not all(row.values()):
            raise ConfigError(f"{where}: every row needs exactly the {len(REFERENCE_COLUMNS)} cells, none empty")
        if row["pos"].partition("+")[0] not in schemes:
            raise ConfigError(f"{where}: pos={row['pos']!r} is none of our schemes ({', '.join(schemes)})")
        if row["pos"] in published:
            raise ConfigError(f"{where}: pos={row['pos']} appears twice; give each scheme one row")
        try:
            accuracy = float(row["test_acc"])
        except ValueError:
            accuracy = float("nan")
        if not 1 < accuracy <= 100:  # also refuses nan
            raise ConfigError(
                f"{where}: test_acc={row['test_acc']!r} is not a percentage in (1, 100]; write accuracies in "
                "percent (86.1, not 0.861)"
            )
        published[row["pos"]] = dict(row, test_acc=accuracy)
    return published


def ranking_table(rows: list[dict], published: dict[str, dict]) -> str:
    """The groups trained at one size or under one curriculum and not fine-tuned, ranked by mean test
    accuracy within each experiment, data set and size (fuzzy-trained twins, and each curriculum, in a
    block of their own): gap to the next, whether the two are separated (gap > the sum of their stds;
    "n=1" when either lacks a spread), and, for schemes in `published` on the same data set, the
    published accuracy and both rankings of the schemes in both tables. Ends with a legend; "" when no
    group qualifies."""
    ranked = [r for r in rows if r["train_sizes"] == "-" and r["finetuned_from"] in ("", "-") and r["test_acc_mean"]]
    if not ranked:
        return ""
    blocks: dict[tuple, list[dict]] = {}
    for row in ranked:  # fuzzy twins, a curriculum's runs: ranked among themselves (a gap compares one way of training)
        key = (row["experiment"], row["data"], str(row["img_size"]), row["pos"].endswith(FUZZY_SUFFIX))
        blocks.setdefault((*key, row["curriculum"]), []).append(row)
    curricula = any(row["curriculum"] != "-" for row in ranked)
    header = ["experiment", "data", "img_size", *(["curriculum"] if curricula else [])]
    header += ["budget", "rank", "pos", "n", "test %", "best val %"]
    header += ["gap to next (points)", "separated from next"]
    if published:
        header += ["published %", "rank among both: ours / published", "ours - published (points)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (experiment, data, size, _, curriculum), block in blocks.items():
        block = sorted(block, key=lambda r: -r["test_acc_mean"])
        # the schemes in both tables, in our order and in the published one
        accuracy = {
            id(r): published[r["pos"]]["test_acc"]
            for r in block
            if r["pos"] in published and published[r["pos"]]["data"] == data
        }
        ours_order, published_order = list(accuracy), sorted(accuracy, key=accuracy.get, reverse=True)
        labels = [r["pos"] for r in block]
        for rank, (row, below) in enumerate(zip(block, [*block[1:], None]), start=1):
            label = row["pos"]
            if labels.count(label) > 1:  # one scheme under two settings: say which
                label += f" ({', '.join(filter(None, [row['budget'], row.get('differs', '')]))})"
            cells = [experiment, data, size, *([curriculum] if curricula else [])]
            cells += [row["budget"], str(rank), label, str(row["n"])]
            cells.append(_percent(row["test_acc_mean"], row["test_acc_std"]))
            cells.append(_percent(row["val_acc_best_mean"], row["val_acc_best_std"]))
            if below is None:
                cells += ["-", "-"]
            else:
                gap = row["test_acc_mean"] - below["test_acc_mean"]
                stds = (row["test_acc_std"], below["test_acc_std"])
                cells.append(f"{100 * gap:.2f}")
                cells.append("n=1" if "" in stds else ("yes" if gap > sum(stds) else "no"))
            if published and id(row) in accuracy:
                reference = published[row["pos"]]
                cells.append(f"{reference['test_acc']:.1f} ({reference['name']})".replace("|", "\\|"))
                cells.append(f"{ours_order.index(id(row)) + 1} / {published_order.index(id(row)) + 1}")
                cells.append(f"{100 * row['test_acc_mean'] - reference['test_acc']:+.2f}")
            elif published:
                cells += ["-", "-", "-"]
            lines.append("| " + " | ".join(cells) + " |")
    legend = [
        "",
        "Ranked within each experiment, data set and image size, fuzzy-trained twins (`+fuzzy`) and each "
        "resolution curriculum apart from the rest. test: the test accuracy of each run's "
        "best-validation checkpoint, mean ± std over seeds (n); best val: the best validation accuracy over "
        "the epochs. Separated: the gap to the next row exceeds the sum of the two rows' stds (their "
        "one-std bars do not overlap); n=1: a row has one seed, so no spread to compare.",
    ]
    if published:
        legend += [
            "",
            "Published rows join ours by scheme and data set; the ranks count only the schemes in both tables. "
            "Published: " + "; ".join(sorted({r["source"] for r in published.values()})),
        ]
    return "\n".join(lines + legend) + "\n"


def training_setting(row: dict) -> list[str]:
    """How a group was trained, for the charts' labels: its size(s), what it was fine-tuned from,
    and the settings that tell it apart from the other groups (`differs`)."""
    sizes = row["train_sizes"] if row["train_sizes"] != "-" else f"{row['img_size']}px"
    if row["curriculum"] != "-":
        sizes = f"curriculum {row['curriculum']}"
    finetuned = row["finetuned_from"] not in ("", "-")
    setting = [f"trained at {sizes}", *([f"fine-tuned from {row['finetuned_from']}"] if finetuned else [])]
    return setting + row.get("differs", "").split()


def transfer_points(row: dict) -> dict[str, list[tuple[int, float, float]]]:
    """A grouped row's transfer accuracies by mode (the tag suffix, "" for the scheme's default):
    {mode: [(height, mean, std)]}, std 0.0 for one run."""
    points: dict[str, list[tuple[int, float, float]]] = {}
    for key, mean in row.items():
        if key.startswith(TRANSFER_PREFIX) and key.endswith("_mean") and mean != "":
            column = key.removesuffix("_mean")
            height, mode = parse_transfer_column(column)
            points.setdefault(mode, []).append((height, mean, row[f"{column}_std"] or 0.0))
    return points


def is_extrapolation_grid(label: str) -> bool:
    """Whether a transfer label (a tag suffix) is an evaluation that asked for a temperature (the
    extrapolation grid: `extrapolation.md`/`.png`, not the transfer table and chart)."""
    return parse_conversion_suffix(label)[1] is not None


def transfer_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """Grouped rows -> {scheme: [curve]}, a curve per group and resize mode evaluated at >= 2 sizes:
    `label`, `setting` (how it was trained), `mode` ("" for the scheme's default), `heights`, `means`,
    `stds` (n = 1: stds of 0)."""
    curves: dict[str, list[dict]] = {}
    for row in rows:
        for mode, points in transfer_points(row).items():
            if len(points) < 2 or is_extrapolation_grid(mode):
                continue
            trained = ", ".join(training_setting(row))
            heights, means, stds = zip(*sorted(points))
            curves.setdefault(row["pos"], []).append(
                dict(
                    label=trained + (f", {mode}" if mode else "") + f" (n={row['n']})",
                    setting=trained,
                    mode=mode,
                    heights=list(heights),
                    means=list(means),
                    stds=list(stds),
                )
            )
    return curves


def extrapolation_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """Grouped rows of runs evaluated with an asked-for temperature (`attn_temperature=`,
    `resize_mode=all`) -> {scheme: [curve]}: one curve per training `variant` (`exact`, `fuzzy`,
    `mixed <sizes>`, `curriculum <tag>`) and conversion (`mode`: a resize mode or "" for the scheme's
    only rule; `temperature`: none or log; `images`: the subset evaluated, None for the whole split)
    with its `heights`, `means`, `stds`, `n` and `train_height` (the run's `img_size`: 1x); {} when
    no run has such an evaluation. Fuzzy-trained twins are filed under their scheme."""
    curves: dict[str, list[dict]] = {}
    for row in rows:
        points = {  # (mode, temperature, images) -> points of the extrapolation grid's evaluations
            parse_conversion_suffix(label): label_points
            for label, label_points in transfer_points(row).items()
            if is_extrapolation_grid(label)
        }
        if not points:
            continue
        scheme = row["pos"].removesuffix(FUZZY_SUFFIX)
        variant = (
            "fuzzy"
            if row["pos"].endswith(FUZZY_SUFFIX)
            else f"mixed {row['train_sizes']}"
            if row["train_sizes"] != "-"
            else f"curriculum {row['curriculum']}"
            if row["curriculum"] != "-"
            else "exact"
        )
        for (mode, temperature, images), mode_points in sorted(
            points.items(), key=lambda item: (item[0][0], item[0][1] or "", item[0][2] or 0)
        ):
            heights, means, stds = zip(*sorted(mode_points))
            curves.setdefault(scheme, []).append(
                dict(
                    variant=variant,
                    train_height=int(str(row["img_size"]).split("x")[0]),
                    mode=mode,
                    temperature=temperature,
                    images=images,
                    heights=list(heights),
                    means=list(means),
                    stds=list(stds),
                    n=row["n"],
                )
            )
    return curves


def _curve_order(curve: dict) -> tuple:
    """The order of a scheme's curves in the table and the chart: variant, mode, temperature, subset."""
    return curve["variant"], curve["mode"], curve["temperature"] == "log", curve["images"] or 0


def _accuracy_at(curve: dict, height: int) -> str:
    """A curve's mean at `height` in percent, with its seed std when it has several runs."""
    i = curve["heights"].index(height)
    return _percent(curve["means"][i], curve["stds"][i] if curve["n"] > 1 else "")


def _conversion_name(curve: dict) -> str:
    name = " + ".join([curve["mode"] or "its rule", *(["log temperature"] if curve["temperature"] == "log" else [])])
    return name + (f" ({curve['images']} images)" if curve["images"] else "")


def extrapolation_table(curves: dict[str, list[dict]]) -> str:
    """Markdown: one row per scheme, training variant and conversion, one column per size (mean ± std
    over seeds, n), the best of each scheme at each size in bold."""
    heights = sorted({h for scheme_curves in curves.values() for c in scheme_curves for h in c["heights"]})
    lines = [
        "| scheme | trained | conversion | n | " + " | ".join(f"{h}px" for h in heights) + " |",
        "|---|---|---|---:|" + "---:|" * len(heights),
    ]
    for scheme, scheme_curves in sorted(curves.items()):
        best = {
            h: max((c["means"][c["heights"].index(h)] for c in scheme_curves if h in c["heights"]), default=None)
            for h in heights
        }
        for curve in sorted(scheme_curves, key=_curve_order):
            cells = []
            for h in heights:
                if h not in curve["heights"]:
                    cells.append("-")
                    continue
                cell = _accuracy_at(curve, h)
                cells.append(f"**{cell}**" if curve["means"][curve["heights"].index(h)] == best[h] else cell)
            lines.append(
                f"| {scheme} | {curve['variant']} | {_conversion_name(curve)} | "
                f"{curve['n']} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n"


def best_conversions_table(curves: dict[str, list[dict]]) -> str:
    """Markdown: one row per scheme and training variant, its accuracy at the training size (1x) and,
    at each other size, its best conversion: the mean over seeds (± std), that mean as a share of 1x,
    and its lead over the runner-up conversion."""
    every = [c for scheme_curves in curves.values() for c in scheme_curves]
    heights = sorted({h for c in every for h in c["heights"] if any(h != d["train_height"] for d in every)})
    lines = [
        "| scheme | trained | 1x | " + " | ".join(f"best at {h}px (% of 1x)" for h in heights) + " |",
        "|---|---|---:|" + "---|" * len(heights),
    ]
    for scheme, scheme_curves in sorted(curves.items()):
        for variant in sorted({c["variant"] for c in scheme_curves}):
            variant_curves = [c for c in scheme_curves if c["variant"] == variant]
            train_height = variant_curves[0]["train_height"]
            one_x = max(
                (c["means"][c["heights"].index(train_height)] for c in variant_curves if train_height in c["heights"]),
                default=None,
            )
            cells = []
            for h in heights:
                at_h = sorted(
                    ((c["means"][c["heights"].index(h)], c) for c in variant_curves if h in c["heights"]),
                    key=lambda pair: -pair[0],
                )
                if h == train_height or not at_h:
                    cells.append("-")
                    continue
                (mean, best), runner_up = at_h[0], at_h[1:2]
                share = f" ({100 * mean / one_x:.0f}%)" if one_x else ""
                lead = (
                    f", +{100 * (mean - runner_up[0][0]):.2f} over {_conversion_name(runner_up[0][1])}"
                    if runner_up
                    else ""
                )
                cells.append(f"{_accuracy_at(best, h)}{share} {_conversion_name(best)}{lead}")
            first = f"{100 * one_x:.2f} ({train_height}px)" if one_x is not None else "-"
            lines.append(f"| {scheme} | {variant} | {first} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def epoch_curves(runs: list[dict]) -> list[dict]:
    """Runs -> one curve per group (GROUP_BY) with >= 2 validation points: `label`, `epochs`
    (1..E), `means` and `stds` of validation accuracy over the group's runs, epoch by epoch, over
    the epochs every run of the group has."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(tuple(str(run[k]) for k in GROUP_BY), []).append(run)
    curves = []
    for members in groups.values():
        series = [[float(v) for v in m["val_acc_by_epoch"].split()] for m in members]
        length = min(len(values) for values in series)
        if length < 2:
            continue
        by_epoch = [[values[e] for values in series] for e in range(length)]
        curves.append(
            dict(
                label=f"{members[0]['pos']}, {', '.join(training_setting(members[0]))} (n={len(members)})",
                epochs=list(range(1, length + 1)),
                means=[statistics.fmean(v) for v in by_epoch],
                stds=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in by_epoch],
            )
        )
    return sorted(curves, key=lambda c: -c["means"][-1])


def recipe_differences(rows: list[dict]) -> list[list[str]]:
    """Each row's recipe words that not every row shares: what tells the rows' recipes apart."""
    recipes = [row["recipe"].split() for row in rows]
    shared = set.intersection(*map(set, recipes)) if recipes else set()
    return [[word for word in words if word not in shared] for words in recipes]


def lrs_differ(rows: list[dict]) -> bool:
    return len({str(row["lr"]) for row in rows}) > 1


def mark_differences(rows: list[dict]) -> None:
    """Set each row's `differs`: its lr (when the rows' lrs differ) and recipe words that tell it
    apart from the other rows, for the charts' labels and the CSV files ("" when nothing does)."""
    show_lr = lrs_differ(rows)
    for row, recipe in zip(rows, recipe_differences(rows)):
        row["differs"] = " ".join([*([f"lr={row['lr']}"] if show_lr else []), *recipe])


def markdown_table(rows: list[dict], accuracies: list[str]) -> str:
    """Accuracies in percent as `mean +- std`; columns no row has are left out."""
    accuracies = [c for c in accuracies if any(r.get(f"{c}_mean", "") != "" for r in rows)]
    keys = ["pos", "experiment", "data", "img_size", "train_sizes", "curriculum", "finetuned_from", "budget"]
    keys += ["batch_size", "n"]
    for key in ("train_sizes", "curriculum"):
        if all(row[key] == "-" for row in rows):
            keys.remove(key)
    if lrs_differ(rows):
        keys.insert(keys.index("batch_size"), "lr")
    recipes = recipe_differences(rows)
    if any(recipes):
        keys.insert(keys.index("n"), "recipe")
    header = [*keys, *accuracies, "images_per_s", "fit_minutes"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row, recipe in zip(rows, recipes):
        shown = dict(row, recipe=" ".join(recipe) or "-")
        cells = [str(shown[c]) for c in keys]
        cells += [_percent(row.get(f"{c}_mean", ""), row.get(f"{c}_std", "")) for c in accuracies]
        cells += [str(row["images_per_s"]), str(row["fit_minutes"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _percent(mean, std) -> str:
    if mean == "":
        return "-"
    return f"{100 * mean:.2f}" + (f" ± {100 * std:.2f}" if std != "" else "")


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)


def _accuracy_chart(rows: list[dict], path: Path) -> None:
    """Test accuracy per group: a dot with one-std error bars (a bar from zero when n = 1)."""
    plt = pyplot()
    labels = ["\n".join([r["pos"], r["data"], *training_setting(r), f"n={r['n']}"]) for r in rows]
    means = [100 * (r["test_acc_mean"] or 0) for r in rows]
    stds = [100 * (r["test_acc_std"] or 0) for r in rows]
    figure, axes = plt.subplots(figsize=(max(6, 1.0 * len(rows)), 4.5))
    x = range(len(rows))
    if all(r["n"] > 1 for r in rows):
        axes.errorbar(x, means, yerr=stds, fmt="o", capsize=4, color="tab:blue", label="test (mean ± std)")
        spread = max(m + s for m, s in zip(means, stds)) - min(m - s for m, s in zip(means, stds))
        axes.set_ylim(
            min(m - s for m, s in zip(means, stds)) - max(1, 0.2 * spread),
            min(100, max(m + s for m, s in zip(means, stds)) + max(1, 0.2 * spread)),
        )
        axes.set_title(
            "Test accuracy by scheme, mean ± std over seeds\n(the y-axis does not start at zero)", fontsize=10
        )
    else:
        axes.bar(x, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8, label="test")
        axes.set_ylim(0, 100)
        axes.set_title("Test accuracy by scheme", fontsize=10)
    axes.set_xticks(list(x), labels, fontsize=7)
    axes.set_ylabel("top-1 test accuracy (%)")
    axes.legend(loc="lower right")
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _transfer_chart(curves: dict[str, list[dict]], path: Path) -> None:
    """One panel per scheme: test accuracy against evaluation size, error bars of one std."""
    plt = pyplot()
    columns = min(4, len(curves))
    rows = -(-len(curves) // columns)
    width = max(4 * columns, 8)  # a single panel still holds the title and its legend
    figure, panels = plt.subplots(rows, columns, figsize=(width, 3.4 * rows), squeeze=False, sharey=True)
    # one colour per training setting in every panel; the resize mode is the line style
    settings = list(dict.fromkeys(c["setting"] for scheme_curves in curves.values() for c in scheme_curves))
    for axes, (pos, scheme_curves) in zip(panels.flat, sorted(curves.items())):
        for curve in scheme_curves:
            axes.errorbar(
                curve["heights"],
                [100 * m for m in curve["means"]],
                yerr=[100 * s for s in curve["stds"]],
                marker="o",
                capsize=3,
                label=curve["label"],
                linestyle="--" if curve["mode"] else "-",
                color=f"C{settings.index(curve['setting']) % 10}",
            )
        axes.set_title(pos, fontsize=10)
        axes.set_xticks(sorted({h for c in scheme_curves for h in c["heights"]}))
        axes.set_xlabel("evaluation size (px)")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=6, loc="lower left")
    for axes in panels.flat[len(curves) :]:
        axes.set_visible(False)
    for axes in panels[:, 0]:
        axes.set_ylabel("top-1 test accuracy (%)")
    figure.suptitle("Test accuracy at each evaluation size, per training setting (mean ± std over seeds)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def extrapolation_figure(curves: dict[str, list[dict]]):
    """One panel per scheme: test accuracy against evaluation size, a colour per conversion (resize mode,
    and image subset where the curves differ in it; named in the panel's legend), solid without and
    dashed with the log temperature, a marker per training variant (both named once, above the
    panels); error bars of one std."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    # a legend entry per line would cover a panel once a scheme has twins (24 lines for three variants
    # of four modes): colours are keyed per panel, styles and markers once for the figure
    every_curve = [c for scheme_curves in curves.values() for c in scheme_curves]
    variants = sorted({c["variant"] for c in every_curve})
    markers = dict(zip(variants, "oxs^Dv*P"))
    subsets = {c["images"] or 0 for c in every_curve}  # 0: the whole split
    per_subset = len(subsets) > 1  # the colours name each curve's subset; otherwise the title names it

    def conversion(curve: dict) -> tuple:  # what a colour stands for
        return curve["mode"], (curve["images"] or 0) if per_subset else 0

    columns = min(4, len(curves))
    rows = -(-len(curves) // columns)
    width = max(4.2 * columns, 8)  # a single panel still holds the title
    height = 3.6 * rows + 0.6  # and 0.6 inch above the panels for the figure's legend
    figure, panels = plt.subplots(rows, columns, figsize=(width, height), squeeze=False, sharey=True)
    for axes, (scheme, scheme_curves) in zip(panels.flat, sorted(curves.items())):
        conversions = sorted({conversion(c) for c in scheme_curves})
        for curve in sorted(scheme_curves, key=_curve_order):
            axes.errorbar(
                curve["heights"],
                [100 * m for m in curve["means"]],
                yerr=[100 * s for s in curve["stds"]],
                marker=markers[curve["variant"]],
                markersize=4,
                capsize=2,
                linestyle="--" if curve["temperature"] == "log" else "-",
                color=f"C{conversions.index(conversion(curve)) % 10}",
                alpha=0.85,
            )
        axes.set_title(scheme, fontsize=10)
        axes.set_xticks(sorted({h for c in scheme_curves for h in c["heights"]}))
        axes.set_xlabel("evaluation size (px)")
        axes.grid(alpha=0.3)
        colour_keys = [
            Line2D([], [], color=f"C{i % 10}", label=(mode or "its rule") + (f" ({images} images)" if images else ""))
            for i, (mode, images) in enumerate(conversions)
        ]
        axes.legend(handles=colour_keys, fontsize=6.5, loc="upper right")
    for axes in panels.flat[len(curves) :]:
        axes.set_visible(False)
    for axes in panels[:, 0]:
        axes.set_ylabel("top-1 test accuracy (%)")
    style_keys = [
        Line2D([], [], color="0.3", linestyle="-", label="no temperature"),
        Line2D([], [], color="0.3", linestyle="--", label="log temperature"),
        *(Line2D([], [], color="0.3", linestyle="none", marker=markers[v], label=f"trained {v}") for v in variants),
    ]
    figure.legend(handles=style_keys, loc="upper center", ncol=len(style_keys), fontsize=8, bbox_to_anchor=(0.5, 0.96))
    n = sorted({c["n"] for c in every_curve})
    on = f" on {max(subsets)} test images" if not per_subset and max(subsets) else ""
    figure.suptitle(
        f"Training-free conversions to larger inputs, no fine-tune{on} (mean ± std over {'/'.join(map(str, n))} seeds)",
        fontsize=11,
    )
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.75 / height))
    return figure


def epochs_table(curves: list[dict]) -> str:
    """Markdown of `epoch_curves`: validation accuracy (%) per epoch, the mean over seeds, and in
    brackets the group's rank at that epoch among the groups with as many epochs (one table per
    number of epochs, since a schedule's length shapes its curve): where ranks change, curves cross."""
    sections = []
    for length in sorted({len(c["epochs"]) for c in curves}):
        same = [c for c in curves if len(c["epochs"]) == length]
        ranks = [[0] * length for _ in same]
        for epoch in range(length):
            for rank, index in enumerate(sorted(range(len(same)), key=lambda i: -same[i]["means"][epoch]), 1):
                ranks[index][epoch] = rank
        lines = [
            f"{length} epochs: validation accuracy (%) after each epoch, mean over seeds (rank at that epoch)",
            "",
            "| group | " + " | ".join(str(e) for e in range(1, length + 1)) + " |",
            "|---|" + "---:|" * length,
        ]
        for curve, rank in zip(same, ranks):
            cells = [f"{100 * m:.1f} ({r})" for m, r in zip(curve["means"], rank)]
            lines.append(f"| {curve['label']} | " + " | ".join(cells) + " |")
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def _epoch_chart(curves: list[dict], path: Path) -> None:
    """Validation accuracy against epoch, one line per group (best last epoch first in the legend),
    a band of one std over seeds."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    palette = 10 if len(curves) <= 10 else 20  # matplotlib's 10 default colours, or tab20's
    for index, curve in enumerate(curves):
        means = [100 * m for m in curve["means"]]
        stds = [100 * s for s in curve["stds"]]
        color = f"C{index % 10}" if palette == 10 else plt.get_cmap("tab20")(index % 20)
        axes.plot(
            curve["epochs"],
            means,
            marker=".",
            color=color,
            label=curve["label"],
            linestyle="-" if index < palette else "--",  # dashed once the colours repeat
        )
        axes.fill_between(
            curve["epochs"],
            [m - s for m, s in zip(means, stds)],
            [m + s for m, s in zip(means, stds)],
            color=color,
            alpha=0.15,
        )
    axes.set_xlabel("epoch")
    axes.set_ylabel("top-1 validation accuracy (%)")
    axes.set_title("Validation accuracy per epoch (mean ± std over seeds)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=6, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str]) -> int:
    if argv and "=" not in argv[0] and not argv[0].startswith("-"):
        argv = [f"logdir={argv[0]}", *argv[1:]]  # the log folder may come first, unnamed
    try:
        options = parse_options(argv, DEFAULTS, __doc__)
        if not options.logdir:
            raise ConfigError("pass the log folder: python -m vitpos.compare logs/ (or logdir=logs/)")
        compare(options.logdir, **{k: v for k, v in OmegaConf.to_container(options).items() if k != "logdir"})
    except VitposError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
