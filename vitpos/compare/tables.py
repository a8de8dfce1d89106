"""vitpos.compare's markdown tables: the groups (compare.md), their ranking beside a published table
(ranking.md), validation accuracy per epoch (epochs.md) and the conversions to larger sizes
(extrapolation.md). Accuracies are in percent, `mean ± std` over seeds."""

from __future__ import annotations

from .. import markdown
from ..runs import FUZZY_SUFFIX
from .grouping import (
    curve_order,
    every_curve,
    lasting_leads,
    lrs_differ,
    ranked_conversions,
    recipe_differences,
    size_header,
)
from .logs import BEST_OVER_EPOCHS


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
    body = []
    for row, recipe in zip(rows, recipes):
        shown = dict(row, recipe=" ".join(recipe) or "-")
        cells = [shown[c] for c in keys]
        cells += [percent(row.get(f"{c}_mean", ""), row.get(f"{c}_std", "")) for c in accuracies]
        body.append([*cells, row["images_per_s"], row["fit_minutes"]])
    return markdown.table([*keys, *accuracies, "images_per_s", "fit_minutes"], body)


def percent(mean, std) -> str:
    """An accuracy's mean in percent, `± std` where it has one; "-" for none."""
    if mean == "":
        return "-"
    return f"{100 * mean:.2f}" + (f" ± {100 * std:.2f}" if std != "" else "")


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
    over_epochs = any(row.get(f"{BEST_OVER_EPOCHS}_mean", "") != "" for row in ranked)
    header += ["budget", "rank", "pos", "n", "test %", "best val %"]
    header += ["best test over epochs %"] if over_epochs else []
    header += ["gap to next (points)", "separated from next"]
    if published:
        header += ["published %", "rank among both: ours / published", "ours - published (points)"]
    body = []
    for (experiment, data, size, _, curriculum), block in blocks.items():
        where = [experiment, data, size, *([curriculum] if curricula else [])]
        body += [[*where, *cells] for cells in ranked_block(block, published, data, over_epochs)]
    legend = [RANKING_LEGEND + (OVER_EPOCHS_LEGEND if over_epochs else "")]
    if published:
        legend.append(PUBLISHED_LEGEND + "; ".join(sorted({r["source"] for r in published.values()})))
    return markdown.table(header, body) + "\n" + "\n\n".join(legend) + "\n"


RANKING_LEGEND = (
    "Ranked within each experiment, data set and image size, fuzzy-trained twins (`+fuzzy`) and each "
    "resolution curriculum apart from the rest. test: the test accuracy of each run's "
    "best-validation checkpoint, mean ± std over seeds (n); best val: the best validation accuracy over "
    "the epochs. Separated: the gap to the next row exceeds the sum of the two rows' stds (their "
    "one-std bars do not overlap); n=1: a row has one seed, so no spread to compare."
)
OVER_EPOCHS_LEGEND = (
    " best test over epochs: the best of the tests after every epoch (test_every_epoch=true), the published "
    "ablations' figure; the test split picks it, so it is not held out."
)
PUBLISHED_LEGEND = (
    "Published rows join ours by scheme and data set; the ranks count only the schemes in both tables. "
    "Ours is the best test over epochs where the runs tested after every epoch, as the published figures are, "
    "else the held-out test. Published: "
)


def ranked_block(block: list[dict], published: dict[str, dict], data: str, over_epochs: bool) -> list[list[str]]:
    """The ranking of one block of `ranking_table`, best first: budget, rank, scheme, n, test and
    best validation accuracy (and the best test over epochs if `over_epochs`), the gap to the next
    row and whether it separates them, and the published accuracy of the schemes that `published`
    has for `data`, with both rankings and our gap on the published figure's kind where we have it."""
    block = sorted(block, key=lambda r: -r["test_acc_mean"])
    # the schemes in both tables, ours on the published figure's kind, in our order and in the published one
    ours = {id(r): _like_published(r) for r in block if r["pos"] in published and published[r["pos"]]["data"] == data}
    accuracy = {id(r): published[r["pos"]]["test_acc"] for r in block if id(r) in ours}
    ours_order = sorted(ours, key=ours.get, reverse=True)
    published_order = sorted(accuracy, key=accuracy.get, reverse=True)
    labels = [r["pos"] for r in block]
    lines = []
    for rank, (row, below) in enumerate(zip(block, [*block[1:], None]), start=1):
        label = row["pos"]
        if labels.count(label) > 1:  # one scheme under two settings: say which
            label += f" ({', '.join(filter(None, [row['budget'], row.get('differs', '')]))})"
        cells = [row["budget"], rank, label, row["n"]]
        cells.append(percent(row["test_acc_mean"], row["test_acc_std"]))
        cells.append(percent(row["val_acc_best_mean"], row["val_acc_best_std"]))
        if over_epochs:
            cells.append(percent(row.get(f"{BEST_OVER_EPOCHS}_mean", ""), row.get(f"{BEST_OVER_EPOCHS}_std", "")))
        if below is None:
            cells += ["-", "-"]
        else:
            gap = row["test_acc_mean"] - below["test_acc_mean"]
            stds = (row["test_acc_std"], below["test_acc_std"])
            cells.append(f"{100 * gap:.2f}")
            cells.append("n=1" if "" in stds else ("yes" if gap > sum(stds) else "no"))
        if published and id(row) in accuracy:
            reference = published[row["pos"]]
            cells.append(f"{reference['test_acc']:.1f} ({reference['name']})")
            cells.append(f"{ours_order.index(id(row)) + 1} / {published_order.index(id(row)) + 1}")
            cells.append(f"{100 * ours[id(row)] - reference['test_acc']:+.2f}")
        elif published:
            cells += ["-", "-", "-"]
        lines.append(cells)
    return lines


def _like_published(row: dict) -> float:
    """A group's accuracy on the published figures' kind: its best test over epochs, else its test."""
    best = row.get(f"{BEST_OVER_EPOCHS}_mean", "")
    return row["test_acc_mean"] if best == "" else best


def reach_table(rows: list[dict], target_percent: float) -> str:
    """Markdown of `minutes_to_reach`: per group, how many runs reached the validation accuracy and
    the wall-clock minutes they took (mean +- std over those runs)."""
    title = f"Wall-clock minutes to the first validation at or above {target_percent:g}% accuracy"

    def minutes(row: dict) -> str:
        if row["minutes_mean"] is None:
            return "not reached"
        return f"{row['minutes_mean']:.1f}" + (f" ± {row['minutes_std']:.1f}" if row["minutes_std"] is not None else "")

    body = [[row["label"], f"{row['reached']} of {row['n']}", minutes(row)] for row in rows]
    return f"{title}\n\n" + markdown.table(["group", "runs reached", "minutes"], body, align="lrr")


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
        title = f"{length} epochs: validation accuracy (%) after each epoch, mean over seeds (rank at that epoch)"
        body = [
            [curve["label"], *(f"{100 * m:.1f} ({r})" for m, r in zip(curve["means"], rank))]
            for curve, rank in zip(same, ranks)
        ]
        table = markdown.table(["group", *range(1, length + 1)], body, align="l" + "r" * length)
        leads = [
            f"- {leader['label']} leads {other['label']} from epoch {epoch} on"
            for leader, other, epoch in lasting_leads(same)
        ]
        crossings = "\nWhere curves cross, the latest first:\n\n" + "\n".join(leads) + "\n" if leads else ""
        sections.append(f"{title}\n\n{table}{crossings}")
    return "\n".join(sections)


def _accuracy_at(curve: dict, height: int) -> str:
    """A curve's mean at `height` in percent, with its seed std when it has several runs."""
    i = curve["heights"].index(height)
    return percent(curve["means"][i], curve["stds"][i] if curve["n"] > 1 else "")


def _conversion_name(curve: dict) -> str:
    name = " + ".join([curve["mode"] or "its rule", *(["log temperature"] if curve["temperature"] == "log" else [])])
    return name + (f" ({curve['images']} images)" if curve["images"] else "")


def extrapolation_table(curves: dict[str, list[dict]]) -> str:
    """Markdown: one row per scheme, training variant and conversion, one column per size (mean ± std
    over seeds, n; its head names the pixels, e.g. `32px native`, where the runs recorded their data's
    size), the best of each scheme at each size in bold."""
    heights = sorted({h for scheme_curves in curves.values() for c in scheme_curves for h in c["heights"]})
    body = []
    for scheme, scheme_curves in sorted(curves.items()):
        best = {
            h: max((c["means"][c["heights"].index(h)] for c in scheme_curves if h in c["heights"]), default=None)
            for h in heights
        }
        for curve in sorted(scheme_curves, key=curve_order):
            cells = []
            for h in heights:
                if h not in curve["heights"]:
                    cells.append("-")
                    continue
                cell = _accuracy_at(curve, h)
                cells.append(f"**{cell}**" if curve["means"][curve["heights"].index(h)] == best[h] else cell)
            body.append([scheme, curve["variant"], _conversion_name(curve), curve["n"], *cells])
    header = ["scheme", "trained", "conversion", "n", *(size_header(h, every_curve(curves)) for h in heights)]
    return markdown.table(header, body, align="lllr" + "r" * len(heights))


def best_conversions_table(curves: dict[str, list[dict]]) -> str:
    """Markdown: one row per scheme and training variant, its accuracy at the training size (1x) and,
    at each other size, its best conversion: the mean over seeds (± std), that mean as a share of 1x,
    and its lead over the runner-up conversion."""
    every = every_curve(curves)
    heights = sorted({h for c in every for h in c["heights"] if any(h != d["train_height"] for d in every)})
    body = []
    for scheme, scheme_curves in sorted(curves.items()):
        for variant in sorted({c["variant"] for c in scheme_curves}):
            variant_curves = [c for c in scheme_curves if c["variant"] == variant]
            body.append([scheme, variant, *_best_conversions(variant_curves, heights)])
    header = ["scheme", "trained", "1x", *(f"best at {size_header(h, every)} (% of 1x)" for h in heights)]
    return markdown.table(header, body, align="llr")


def _best_conversions(curves: list[dict], heights: list[int]) -> list[str]:
    """The cells of `best_conversions_table` for one training variant's `curves`: its 1x accuracy,
    then its best conversion at each of `heights` ("-" at its training size)."""
    one_x, ranked = ranked_conversions(curves, heights)
    cells = [f"{100 * one_x:.2f} ({curves[0]['train_height']}px)" if one_x is not None else "-"]
    for h in heights:
        if h not in ranked:
            cells.append("-")
            continue
        (mean, best), runner_up = ranked[h][0], ranked[h][1:2]
        share = f" ({100 * mean / one_x:.0f}%)" if one_x else ""
        lead = f", +{100 * (mean - runner_up[0][0]):.2f} over {_conversion_name(runner_up[0][1])}" if runner_up else ""
        cells.append(f"{_accuracy_at(best, h)}{share} {_conversion_name(best)}{lead}")
    return cells
