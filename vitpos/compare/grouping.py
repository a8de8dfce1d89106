"""How vitpos.compare groups runs: the latest run of each seed, runs that differ only by seed as one
row with mean and std, what tells the groups apart, and the groups' curves (per epoch, per
evaluation size, per conversion to a larger size)."""

from __future__ import annotations

import statistics

from ..data import pixels_label
from ..runs import FUZZY_SUFFIX, parse_conversion_suffix
from .logs import BEST_OVER_EPOCHS, TRANSFER_PREFIX, parse_transfer_column

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


def latest_per_seed(runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """Runs -> (the latest finished run of each group and seed, the earlier ones): a command run
    twice is one sample of its seed, not two."""
    latest: dict[tuple, dict] = {}
    for run in sorted(runs, key=lambda r: r["finished"]):
        latest[(*(str(run[k]) for k in GROUP_BY), run["seed"])] = run
    kept = {id(run) for run in latest.values()}
    return [run for run in runs if id(run) in kept], [run for run in runs if id(run) not in kept]


def group_runs(rows: list[dict]) -> list[dict]:
    """Runs equal in every GROUP_BY key -> one row: n, seeds, the data's `native_size` where the runs
    recorded one, `<acc>_mean` and `<acc>_std` (sample std, n - 1; blank for n = 1) of every accuracy
    column, mean speed and time."""
    grouped = []
    for members in groups_of(rows):
        out = {k: members[0][k] for k in GROUP_BY}
        out["n"] = len(members)
        out["seeds"] = " ".join(str(s) for s in sorted(m["seed"] for m in members))
        native = {m.get("native_size", "") for m in members}
        if native != {""}:  # "" where its runs disagree
            out["native_size"] = native.pop() if len(native) == 1 else ""
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
    """The accuracy columns present in `rows`: the fixed ones, the best test over epochs where a row
    has one, then transfer ones by height."""
    tested_each_epoch = any(row.get(BEST_OVER_EPOCHS, "") != "" for row in rows)
    transfer = {k for row in rows for k in row if k.startswith(TRANSFER_PREFIX)}
    fixed = [*ACCURACIES, *([BEST_OVER_EPOCHS] if tested_each_epoch else [])]
    return fixed + sorted(transfer, key=lambda k: (parse_transfer_column(k)[0], k))


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
    for row, differs in zip(rows, differences(rows)):
        row["differs"] = differs


def differences(rows: list[dict]) -> list[str]:
    """Each row's lr (when the rows' lrs differ) and the recipe words that tell it apart from the other rows."""
    show_lr = lrs_differ(rows)
    return [
        " ".join([*([f"lr={row['lr']}"] if show_lr else []), *recipe])
        for row, recipe in zip(rows, recipe_differences(rows))
    ]


def training_setting(row: dict) -> list[str]:
    """How a group was trained, for the charts' labels: its size(s), what it was fine-tuned from,
    and the settings that tell it apart from the other groups (`differs`)."""
    sizes = row["train_sizes"] if row["train_sizes"] != "-" else f"{row['img_size']}px"
    if row["curriculum"] != "-":
        sizes = f"curriculum {row['curriculum']}"
    finetuned = row["finetuned_from"] not in ("", "-")
    setting = [f"trained at {sizes}", *([f"fine-tuned from {row['finetuned_from']}"] if finetuned else [])]
    return setting + row.get("differs", "").split()


def epoch_curves(runs: list[dict]) -> list[dict]:
    """Runs -> one curve per group (GROUP_BY) with >= 2 validation points: `label`, `epochs`
    (1..E), `means` and `stds` of validation accuracy over the group's runs, epoch by epoch, over
    the epochs every run of the group has."""
    curves = []
    for members in groups_of(runs):
        by_epoch = _point_by_point([m["val_acc_by_epoch"] for m in members])
        if len(by_epoch) < 2:
            continue
        curves.append(
            dict(
                label=_curve_label(members),
                epochs=list(range(1, len(by_epoch) + 1)),
                means=[statistics.fmean(v) for v in by_epoch],
                stds=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in by_epoch],
            )
        )
    return sorted(curves, key=lambda c: -c["means"][-1])


def lasting_leads(curves: list[dict]) -> list[tuple[dict, dict, int]]:
    """Curves of one length -> (leader, other, epoch) for every pair whose order changed: the leader
    is ahead at the last epoch and stays ahead from `epoch` on, after trailing or tying at epoch - 1.
    Ordered by that epoch, latest first: where the final ranking was settled."""
    leads = []
    for a in curves:
        for b in curves:
            if a["means"][-1] <= b["means"][-1]:
                continue  # each pair once, from the one ahead at the end; a tie at the end settles nothing
            behind = [e for e, (x, y) in enumerate(zip(a["means"], b["means"]), 1) if x <= y]
            if behind:
                leads.append((a, b, behind[-1] + 1))
    return sorted(leads, key=lambda lead: -lead[2])


def minutes_curves(runs: list[dict]) -> list[dict]:
    """Runs -> one curve per group (GROUP_BY) and split, validation (>= 2 points) and test (where
    logged), over the runs whose event files timed it (`logs.logged_scalars`): `label`, `split`,
    `minutes` (the mean over the runs of each point's wall-clock minutes since the run's start),
    `means` and `stds` of the accuracy, point by point over the points every such run has."""
    curves = []
    for members in groups_of(runs):
        for split, fewest in (("val", 2), ("test", 1)):
            timed = [m for m in members if m.get(f"{split}_minutes_by_epoch")]
            accuracies = _point_by_point([m[f"{split}_acc_by_epoch"] for m in timed])
            if len(accuracies) < fewest:
                continue
            minutes = _point_by_point([m[f"{split}_minutes_by_epoch"] for m in timed])
            curves.append(
                dict(
                    label=_curve_label(timed),
                    split=split,
                    minutes=[statistics.fmean(v) for v in minutes],
                    means=[statistics.fmean(v) for v in accuracies],
                    stds=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in accuracies],
                )
            )
    return curves


def minutes_to_reach(runs: list[dict], target: float) -> list[dict]:
    """Runs -> one row per group (GROUP_BY) whose event files timed its validations: `label`, `n`
    (timed runs), `reached` (those whose validation accuracy came to `target`, a fraction) and the
    mean and std of their minutes to the first validation at or above it (None where none or one did)."""
    rows = []
    for members in groups_of(runs):
        timed = [m for m in members if m.get("val_minutes_by_epoch")]
        if not timed:
            continue
        minutes = []
        for run in timed:
            points = zip(_numbers(run["val_acc_by_epoch"]), _numbers(run["val_minutes_by_epoch"]))
            first = next((time for acc, time in points if acc >= target), None)
            minutes += [first] if first is not None else []
        rows.append(
            dict(
                label=_curve_label(timed),
                n=len(timed),
                reached=len(minutes),
                minutes_mean=statistics.fmean(minutes) if minutes else None,
                minutes_std=statistics.stdev(minutes) if len(minutes) > 1 else None,
            )
        )
    return rows


def _numbers(text: str) -> list[float]:
    return [float(v) for v in text.split()]


def groups_of(rows: list[dict]) -> list[list[dict]]:
    """`rows` (runs) in groups equal in every GROUP_BY key, in order of first appearance."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(str(row[k]) for k in GROUP_BY), []).append(row)
    return list(groups.values())


def _point_by_point(series: list[str]) -> list[list[float]]:
    """Space-separated numbers of each run (a `*_by_epoch` column) -> for each point that every run
    has, the runs' values at it; [] without runs."""
    values = [[float(v) for v in text.split()] for text in series]
    length = min(map(len, values), default=0)
    return [[run[point] for run in values] for point in range(length)]


def _curve_label(members: list[dict]) -> str:
    return f"{members[0]['pos']}, {', '.join(training_setting(members[0]))} (n={len(members)})"


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


def pixels_at(height: int, curves: list[dict]) -> str:
    """What the images at `height` were to the curves' data: `native`, `downsampled` or `upsampled`
    (`data.pixels_label`); "" unless every curve names the same `native_size` (runs saved before
    results.json recorded it, or data sets of different sizes)."""
    native = {c.get("native_size", "") for c in curves}
    if len(native) != 1 or "" in native:
        return ""
    return pixels_label(height, [int(side) for side in native.pop().split("x")])


def size_header(height: int, curves: list[dict]) -> str:
    """`32px`, or `32px native` / `48px upsampled` where the curves name their data's size (`pixels_at`)."""
    return " ".join(filter(None, [f"{height}px", pixels_at(height, curves)]))


def every_curve(curves: dict[str, list[dict]]) -> list[dict]:
    """{scheme: [curve]} -> every curve of every scheme."""
    return [c for scheme_curves in curves.values() for c in scheme_curves]


def transfer_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """Grouped rows -> {scheme: [curve]}, a curve per group and resize mode evaluated at >= 2 sizes:
    `label`, `setting` (how it was trained), `mode` ("" for the scheme's default), `heights`, `means`,
    `stds` (n = 1: stds of 0), `native_size` (the data's, "" where unknown: `pixels_at`)."""
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
                    native_size=row.get("native_size", ""),
                )
            )
    return curves


def extrapolation_curves(rows: list[dict]) -> dict[str, list[dict]]:
    """Grouped rows of runs evaluated with an asked-for temperature (`attn_temperature=`,
    `resize_mode=all`) -> {scheme: [curve]}: one curve per training `variant` (`exact`, `fuzzy`,
    `mixed <sizes>`, `curriculum <tag>`; then, among the rows with such evaluations, the training size
    where their sizes differ and the `differences` of lr and recipe, which replace `exact`: e.g.
    `16px augment=rrc`, `fuzzy 16px`) and conversion
    (`mode`: a resize mode or "" for the scheme's only rule; `temperature`: none or log; `images`:
    the subset evaluated, None for the whole split) with its `heights`, `means`, `stds`, `n`,
    `train_height` (the run's `img_size`: 1x) and `native_size` (`pixels_at`); {} when no run has
    such an evaluation. Fuzzy-trained twins are filed under their scheme."""
    curves: dict[str, list[dict]] = {}
    graded = {  # id(row) -> (mode, temperature, images) -> points of the extrapolation grid's evaluations
        id(row): {
            parse_conversion_suffix(label): label_points
            for label, label_points in transfer_points(row).items()
            if is_extrapolation_grid(label)
        }
        for row in rows
    }
    rows = [row for row in rows if graded[id(row)]]
    sizes_differ = len({str(row["img_size"]) for row in rows}) > 1
    for row, differs in zip(rows, differences(rows)):
        points = graded[id(row)]
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
        size = f"{row['img_size']}px" if sizes_differ else ""
        named = " ".join(filter(None, [size, differs]))  # "exact" (one training size) only where nothing else names it
        variant = named if variant == "exact" and named else " ".join(filter(None, [variant, named]))
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
                    native_size=row.get("native_size", ""),
                )
            )
    return curves


def ranked_conversions(
    curves: list[dict], heights: list[int]
) -> tuple[float | None, dict[int, list[tuple[float, dict]]]]:
    """One training variant's `curves` -> its 1x mean (the best curve at its training size; None if not
    evaluated there) and, at each of `heights` other than its training size, its conversions as
    (mean, curve) pairs, best first (no entry where none was evaluated)."""
    train_height = curves[0]["train_height"]
    one_x = max(
        (c["means"][c["heights"].index(train_height)] for c in curves if train_height in c["heights"]),
        default=None,
    )
    ranked = {}
    for h in heights:
        at_h = sorted(
            ((c["means"][c["heights"].index(h)], c) for c in curves if h in c["heights"]), key=lambda pair: -pair[0]
        )
        if h != train_height and at_h:
            ranked[h] = at_h
    return one_x, ranked


def curve_order(curve: dict) -> tuple:
    """The order of a scheme's curves in the table and the chart: variant, mode, temperature, subset."""
    return curve["variant"], curve["mode"], curve["temperature"] == "log", curve["images"] or 0
