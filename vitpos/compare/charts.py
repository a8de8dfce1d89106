"""vitpos.compare's charts (matplotlib): test accuracy per group (compare.png), against evaluation
size (transfer.png), per conversion to larger sizes (extrapolation.png), the share of 1x accuracy
the best conversion keeps (kept.png) and validation accuracy per epoch (epochs.png). Accuracies are
in percent, error bars and bands one std over seeds."""

from __future__ import annotations

from pathlib import Path

from ..plots import pyplot
from .grouping import curve_order, every_curve, pixels_at, ranked_conversions, size_header, training_setting


def accuracy_figure(rows: list[dict]):
    """Test accuracy per group: a dot with one-std error bars (a bar from zero when n = 1), each
    group's label under it, the figure as wide and tall as the labels need."""
    plt = pyplot()
    labels = ["\n".join([r["pos"], r["data"], *training_setting(r), f"n={r['n']}"]) for r in rows]
    means = [100 * (r["test_acc_mean"] or 0) for r in rows]
    stds = [100 * (r["test_acc_std"] or 0) for r in rows]
    # a label holds a line per setting that tells the groups apart: room for its lines and its longest one
    lines = [line for label in labels for line in label.splitlines()]
    width = len(rows) * max(1.0, 0.07 * max(map(len, lines)))  # ~0.07 inch per character at font size 7
    height = 3.5 + 0.15 * max(label.count("\n") + 1 for label in labels)
    figure, axes = plt.subplots(figsize=(max(6, width), height))
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
    return figure


def transfer_chart(curves: dict[str, list[dict]], path: Path) -> None:
    """One panel per scheme: test accuracy against evaluation size, error bars of one std."""
    # a single panel still holds the title and its legend
    figure, panels = _scheme_panels(len(curves), panel_width=4, panel_height=3.4)
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
        _size_axes(axes, pos, scheme_curves)
        axes.legend(fontsize=6, loc="lower left")
    figure.suptitle("Test accuracy at each evaluation size, per training setting (mean ± std over seeds)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot().close(figure)


def extrapolation_figure(curves: dict[str, list[dict]]):
    """One panel per scheme: test accuracy against evaluation size, a colour per conversion (resize mode,
    and image subset where the curves differ in it; named in the panel's legend), solid without and
    dashed with the log temperature, a marker per training variant (both named once, above the
    panels); error bars of one std."""
    from matplotlib.lines import Line2D

    # a legend entry per line would cover a panel once a scheme has twins (24 lines for three variants
    # of four modes): colours are keyed per panel, styles and markers once for the figure
    every = every_curve(curves)
    variants = sorted({c["variant"] for c in every})
    markers = dict(zip(variants, "oxs^Dv*P"))
    subsets = {c["images"] or 0 for c in every}  # 0: the whole split
    per_subset = len(subsets) > 1  # the colours name each curve's subset; otherwise the title names it
    # a single panel still holds the title, and 0.6 inch above the panels hold the figure's legend
    figure, panels = _scheme_panels(len(curves), panel_width=4.2, panel_height=3.6, above=0.6)
    for axes, (scheme, scheme_curves) in zip(panels.flat, sorted(curves.items())):
        _extrapolation_panel(axes, scheme, scheme_curves, markers, per_subset)
    style_keys = [
        Line2D([], [], color="0.3", linestyle="-", label="no temperature"),
        Line2D([], [], color="0.3", linestyle="--", label="log temperature"),
        *(Line2D([], [], color="0.3", linestyle="none", marker=markers[v], label=f"trained {v}") for v in variants),
    ]
    figure.legend(handles=style_keys, loc="upper center", ncol=len(style_keys), fontsize=8, bbox_to_anchor=(0.5, 0.96))
    n = sorted({c["n"] for c in every})
    on = f" on {max(subsets)} test images" if not per_subset and max(subsets) else ""
    seeds = "one seed, no spread" if n == [1] else f"mean ± std over {'/'.join(map(str, n))} seeds"
    figure.suptitle(f"Training-free conversions to larger inputs, no fine-tune{on} ({seeds})", fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.75 / figure.get_figheight()))
    return figure


def kept_figure(curves: dict[str, list[dict]]):
    """Bars: per scheme and training variant, the share of its 1x accuracy that its best training-free
    conversion keeps at each size above its training size, one colour per size; a line at 100%.
    Runs trained at several sizes get one panel per training size, smallest first."""
    every = every_curve(curves)
    heights = sorted({h for c in every for h in c["heights"] if h > c["train_height"]})
    variants = {c["variant"] for c in every}
    panels = {}  # training height -> [(label, {height: share in percent})]
    for scheme, scheme_curves in sorted(curves.items()):
        for variant in sorted({c["variant"] for c in scheme_curves}):
            of_variant = [c for c in scheme_curves if c["variant"] == variant]
            one_x, ranked = ranked_conversions(of_variant, heights)
            if one_x:
                label = scheme if len(variants) == 1 else f"{scheme}\n{variant}"
                shares = {h: 100 * pairs[0][0] / one_x for h, pairs in ranked.items()}
                panels.setdefault(of_variant[0]["train_height"], []).append((label, shares))
    widest = max((len(bars) for bars in panels.values()), default=0)
    figure, panel_axes = pyplot().subplots(
        len(panels) or 1,
        1,
        figsize=(max(8, 0.45 * widest * max(2, len(heights))), 5 * max(1, len(panels))),
        squeeze=False,
    )
    # the shares of interest lie near 100%: the axis starts 10 points below the lowest, at a multiple of 10
    every_share = [share for bars in panels.values() for _, shares in bars for share in shares.values()]
    bottom = max(0, 10 * (min(every_share, default=0) // 10) - 10)
    top = max(110, max(every_share, default=0) + 5)
    for axes, (train_height, bars) in zip(panel_axes[:, 0], sorted(panels.items())):
        _kept_panel(axes, bars, heights, every)
        axes.set_ylim(bottom, top)
        axes.set_xlim(-0.6, widest - 0.4)  # one bar width in every panel
        if len(panels) > 1:
            axes.set_title(f"trained at {train_height}px", fontsize=9)
    n = sorted({c["n"] for c in every})
    seeds = "one seed" if n == [1] else f"means over {'/'.join(map(str, n))} seeds"
    note = f"; the axis starts at {bottom:.0f}%" if bottom else ""
    figure.suptitle(
        f"Share of 1x accuracy kept by each scheme's best training-free conversion ({seeds}{note})", fontsize=10
    )
    figure.tight_layout()
    return figure


def _kept_panel(axes, bars: list[tuple[str, dict]], heights: list[int], every: list[dict]) -> None:
    """One panel of `kept_figure`: a group of bars per label, one colour per evaluated height."""
    width = 0.8 / max(1, len(heights))
    for i, h in enumerate(heights):
        x = [j + (i - (len(heights) - 1) / 2) * width for j, (_, shares) in enumerate(bars) if h in shares]
        if x:
            axes.bar(
                x,
                [shares[h] for _, shares in bars if h in shares],
                width,
                color=f"C{i % 10}",
                alpha=0.85,
                label=size_header(h, every),
            )
    axes.axhline(100, color="0.3", linewidth=1, linestyle="--")
    axes.set_xticks(range(len(bars)), [label for label, _ in bars], fontsize=7, rotation=30, ha="right")
    axes.set_ylabel("% of 1x accuracy kept")
    axes.grid(axis="y", alpha=0.3)
    # beside the axes: inside, it would hide the last bars
    axes.legend(fontsize=8, title="evaluated at", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _extrapolation_panel(axes, scheme: str, curves: list[dict], markers: dict[str, str], per_subset: bool) -> None:
    """One scheme's panel of `extrapolation_figure`, its legend naming the colours' conversions."""
    from matplotlib.lines import Line2D

    def conversion(curve: dict) -> tuple:  # what a colour stands for
        return curve["mode"], (curve["images"] or 0) if per_subset else 0

    conversions = sorted({conversion(c) for c in curves})
    for curve in sorted(curves, key=curve_order):
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
    _size_axes(axes, scheme, curves)
    colour_keys = [
        Line2D([], [], color=f"C{i % 10}", label=(mode or "its rule") + (f" ({images} images)" if images else ""))
        for i, (mode, images) in enumerate(conversions)
    ]
    axes.legend(handles=colour_keys, fontsize=6.5, loc="upper right")


def _scheme_panels(count: int, panel_width: float, panel_height: float, above: float = 0.0):
    """A figure of `count` panels, four to a row, sharing the accuracy axis (labelled on the left),
    at least 8 inches wide and `above` inches higher for a legend above them; the unused panels hidden."""
    columns = min(4, count)
    rows = -(-count // columns)
    size = (max(panel_width * columns, 8), panel_height * rows + above)
    figure, panels = pyplot().subplots(rows, columns, figsize=size, squeeze=False, sharey=True)
    for axes in panels.flat[count:]:
        axes.set_visible(False)
    for axes in panels[:, 0]:
        axes.set_ylabel("top-1 test accuracy (%)")
    return figure, panels


def _size_axes(axes, title: str, curves: list[dict]) -> None:
    """A panel of accuracy against evaluation size: its title, the sizes of `curves` as ticks (each with its
    pixels, e.g. `32 native`, where the curves name their data's size), a grid."""
    axes.set_title(title, fontsize=10)
    heights = sorted({h for c in curves for h in c["heights"]})
    pixels = [pixels_at(h, curves) for h in heights]
    axes.set_xticks(heights, [f"{h}\n{p}" for h, p in zip(heights, pixels)] if any(pixels) else None)
    axes.set_xlabel("evaluation size (px)")
    axes.grid(alpha=0.3)


def epoch_chart(curves: list[dict], path: Path) -> None:
    """Validation accuracy against epoch, one line per group (best last epoch first in the legend),
    a band of one std over seeds. Schedules of very different lengths (4x or more, e.g. 15 and 200
    epochs) share a log-scaled epoch axis, so that the short ones are not squeezed into its start."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    palette = 10 if len(curves) <= 10 else 20  # the colours of _group_color
    for index, curve in enumerate(curves):
        means = [100 * m for m in curve["means"]]
        stds = [100 * s for s in curve["stds"]]
        color = _group_color(index, len(curves))
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
    title = "Validation accuracy per epoch (mean ± std over seeds)"
    lengths = [len(curve["epochs"]) for curve in curves]
    if max(lengths) >= 4 * min(lengths):
        axes.set_xscale("log")
        title += ", epochs on a log scale"
    _finish_line_chart(figure, axes, path, "epoch", "top-1 validation accuracy (%)", title)


def minutes_chart(curves: list[dict], path: Path) -> None:
    """Validation accuracy (a line and a band of one std) and test accuracy (dots with error bars)
    against wall-clock minutes since each run's start, a colour per group, means over seeds."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    groups = list(dict.fromkeys(c["label"] for c in curves))
    named = set()  # a group's name once in the legend, on its first curve
    for curve in curves:
        index = groups.index(curve["label"])
        color = _group_color(index, len(groups))
        label = None if curve["label"] in named else curve["label"]
        named.add(curve["label"])
        means = [100 * m for m in curve["means"]]
        stds = [100 * s for s in curve["stds"]]
        if curve["split"] == "val":
            axes.plot(curve["minutes"], means, marker=".", color=color, label=label)
            lower, upper = [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)]
            axes.fill_between(curve["minutes"], lower, upper, color=color, alpha=0.15)
        else:
            axes.errorbar(
                curve["minutes"], means, yerr=stds, color=color, marker="o", linestyle=":", capsize=3, label=label
            )
    title = "Validation (line) and test (dots) accuracy against time, mean ± std over seeds"
    _finish_line_chart(figure, axes, path, "wall-clock minutes since the run's start", "top-1 accuracy (%)", title)


def _group_color(index: int, groups: int):
    """The colour of the index-th of `groups` lines: matplotlib's 10 default colours, or tab20's."""
    return f"C{index % 10}" if groups <= 10 else pyplot().get_cmap("tab20")(index % 20)


def _finish_line_chart(figure, axes, path: Path, xlabel: str, ylabel: str, title: str) -> None:
    """Label, grid and legend a one-panel chart of lines per group, save it to `path` and close it."""
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=6, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot().close(figure)
