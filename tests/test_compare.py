"""`python -m vitpos.compare`: runs that differ only by seed are one row, whose statistics are
those of the logged numbers; unfinished runs are not counted."""

from __future__ import annotations

import csv
import json
import os
import shutil
import statistics
from datetime import datetime, timedelta
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from vitpos.compare import main
from vitpos.compare.charts import accuracy_figure, extrapolation_figure, kept_figure
from vitpos.compare.grouping import (
    accuracy_columns,
    epoch_curves,
    extrapolation_curves,
    group_runs,
    lasting_leads,
    latest_per_seed,
    mark_differences,
    minutes_curves,
    minutes_to_reach,
    training_setting,
    transfer_curves,
)
from vitpos.compare.logs import read_reference, run_folders, summarize
from vitpos.compare.report import compare
from vitpos.compare.tables import (
    best_conversions_table,
    epochs_table,
    extrapolation_table,
    markdown_table,
    ranking_table,
    reach_table,
)
from vitpos.config import compose_train_config
from vitpos.errors import ConfigError
from vitpos.plots import pyplot
from vitpos.runs import RESULTS_FILE, conversion_suffix, parse_conversion_suffix, training_recipe
from vitpos.train import train

ROOT = Path(__file__).resolve().parents[1]

KEY = dict(
    experiment="e",
    data="d",
    img_size=28,
    train_sizes="-",
    curriculum="-",
    finetuned_from="-",
    model="m",
    lr=0.001,
    batch_size=8,
    budget="1 epochs",
    recipe="optim=AdamW weight_decay=0.05 label_smoothing=0.1",
)


def run_row(pos: str, seed: int, test_acc, **extra) -> dict:
    return dict(
        KEY,
        pos=pos,
        seed=seed,
        test_acc=test_acc,
        val_acc_best=test_acc,
        val_acc_final=test_acc,
        images_per_s=100,
        fit_minutes=1.0,
        finished="2026-01-01T00:00:00",
        **extra,
    )


def test_grouping_and_statistics_match_hand_computed_values():
    rows = [
        run_row("a", 0, 0.80, **{"test_acc@42px": 0.5}),
        run_row("a", 1, 0.84, **{"test_acc@42px": 0.7}),
        run_row("a", 2, 0.85, **{"test_acc@42px": 0.6}),
        run_row("b", 0, 0.70),
        dict(run_row("a", 3, 0.10), lr=0.1),  # another lr: another group, even with the same scheme
        dict(run_row("a", 4, 0.20), train_sizes="20-28px"),  # mixed-resolution training: another group
        dict(run_row("a", 5, 0.30), recipe=KEY["recipe"] + " mixup_alpha=0.2"),  # another loss: another group
        dict(run_row("a", 6, 0.40), curriculum="16-28px_1-1ep"),  # a resolution curriculum: another group
    ]
    groups = {(g["pos"], g["lr"], g["train_sizes"], g["recipe"], g["curriculum"]): g for g in group_runs(rows)}
    assert len(groups) == 6 and len(group_runs(rows)) == 6
    assert groups["a", 0.001, "-", KEY["recipe"], "16-28px_1-1ep"]["test_acc_mean"] == 0.40
    groups = {key[:3]: g for key, g in groups.items() if key[3:] == (KEY["recipe"], "-")}
    assert set(groups) == {("a", 0.001, "-"), ("b", 0.001, "-"), ("a", 0.1, "-"), ("a", 0.001, "20-28px")}
    a = groups["a", 0.001, "-"]
    assert a["n"] == 3 and a["seeds"] == "0 1 2"
    assert a["test_acc_mean"] == pytest.approx(0.83)  # (0.80 + 0.84 + 0.85) / 3
    # sample std: sqrt(((-0.03)^2 + 0.01^2 + 0.02^2) / 2) = sqrt(0.0007)
    assert a["test_acc_std"] == pytest.approx(0.0265, abs=1e-4)
    assert a["test_acc@42px_mean"] == pytest.approx(0.6) and a["test_acc@42px_std"] == pytest.approx(0.1)
    assert groups["b", 0.001, "-"]["n"] == 1 and groups["b", 0.001, "-"]["test_acc_std"] == ""  # no spread from one run


def test_epoch_curves_average_seeds_epoch_by_epoch_over_the_epochs_all_runs_have():
    rows = [
        run_row("a", 0, 0.8, val_acc_by_epoch="0.5000 0.7000 0.8000"),
        run_row("a", 1, 0.9, val_acc_by_epoch="0.3000 0.9000"),  # stopped after 2 epochs: the curve ends there
        run_row("b", 0, 0.6, val_acc_by_epoch="0.4000 0.6000"),
        run_row("c", 0, 0.6, val_acc_by_epoch="0.4000"),
    ]  # one point: no curve
    curves = {c["label"]: c for c in epoch_curves(rows)}
    assert list(curves) == ["a, trained at 28px (n=2)", "b, trained at 28px (n=1)"]  # best last epoch first
    a = curves["a, trained at 28px (n=2)"]
    assert a["epochs"] == [1, 2] and a["means"] == pytest.approx([0.4, 0.8])
    assert a["stds"] == pytest.approx([0.1414, 0.1414], abs=1e-4)
    assert curves["b, trained at 28px (n=1)"]["stds"] == [0.0, 0.0]


def test_epochs_table_ranks_groups_of_one_schedule_length_epoch_by_epoch():
    rows = [
        run_row("fast", 0, 0.7, val_acc_by_epoch="0.6000 0.6200 0.7000"),
        run_row("slow", 0, 0.8, val_acc_by_epoch="0.4000 0.6000 0.8000"),
        run_row("slow", 1, 0.8, val_acc_by_epoch="0.5000 0.7000 0.8000"),
        run_row("long", 0, 0.9, val_acc_by_epoch="0.1000 0.2000 0.3000 0.9000"),  # ranked apart: 4 epochs
    ]
    tables = epochs_table(epoch_curves(rows)).split("\n\n4 epochs")
    three = tables[0].splitlines()
    assert three[0].startswith("3 epochs:") and three[2] == "| group | 1 | 2 | 3 |"
    # the curves cross after epoch 1: fast leads first, slow after, and the table says from when
    assert three[4] == "| slow, trained at 28px (n=2) | 45.0 (2) | 65.0 (1) | 80.0 (1) |"
    assert three[5] == "| fast, trained at 28px (n=1) | 60.0 (1) | 62.0 (2) | 70.0 (2) |"
    assert three[6:] == [
        "",
        "Where curves cross, the latest first:",
        "",
        "- slow, trained at 28px (n=2) leads fast, trained at 28px (n=1) from epoch 2 on",
    ]
    four = tables[1]
    assert "| long, trained at 28px (n=1) | 10.0 (1) | 20.0 (1) | 30.0 (1) | 90.0 (1) |" in four
    assert "cross" not in four  # one curve of that length: nothing to cross


def test_a_lasting_lead_starts_after_the_last_epoch_the_leader_trailed_or_tied():
    def curve(label, *means):
        return dict(label=label, means=list(means))

    a = curve("a", 0.1, 0.5, 0.3, 0.6, 0.9)  # behind b at 1, ahead at 2, level at 3, ahead from 4 on
    b = curve("b", 0.2, 0.4, 0.3, 0.5, 0.8)
    c = curve("c", 0.0, 0.3, 0.2, 0.4, 0.7)  # behind a and b at every epoch: no crossing
    d = curve("d", 0.9, 0.9, 0.9, 0.9, 0.7)  # ends level with c: their pair settles nothing
    leads = [(x["label"], y["label"], epoch) for x, y, epoch in lasting_leads([a, b, c, d])]
    assert leads == [("a", "d", 5), ("b", "d", 5), ("a", "b", 4)]


def test_transfer_curves_hold_each_settings_mean_and_std_by_size():
    def at(acc28, acc44, acc44_interpolated):
        return {
            "test_acc@28px": acc28,
            "test_acc@44px": acc44,
            "test_acc@28px/interpolate": acc28,
            "test_acc@44px/interpolate": acc44_interpolated,
            "test_acc@28px/ntk_tlog": acc28,  # the extrapolation grid: its own chart, not a transfer curve
            "test_acc@44px/ntk_tlog": 0.1,
        }

    rows = [
        run_row("a", 0, 0.8, **at(0.8, 0.4, 0.7)),
        run_row("a", 1, 0.9, **at(0.9, 0.6, 0.7)),
        dict(run_row("a", 0, 0.8, **{"test_acc@28px": 0.8, "test_acc@44px": 0.78}), train_sizes="20-28-36-44px"),
        run_row("b", 0, 0.7, **{"test_acc@44px": 0.5}),
    ]  # evaluated at one size only: no curve
    curves = transfer_curves(group_runs(rows))
    assert set(curves) == {"a"}
    by_label = {c["label"]: c for c in curves["a"]}
    assert set(by_label) == {
        "trained at 28px (n=2)",
        "trained at 28px, interpolate (n=2)",
        "trained at 20-28-36-44px (n=1)",
    }
    single = by_label["trained at 28px (n=2)"]
    assert single["heights"] == [28, 44] and single["means"] == pytest.approx([0.85, 0.5])
    assert single["stds"] == pytest.approx([0.0707, 0.1414], abs=1e-4)  # sample std of (0.8, 0.9), (0.4, 0.6)
    interpolated = by_label["trained at 28px, interpolate (n=2)"]
    assert interpolated["mode"] == "interpolate" and interpolated["means"] == pytest.approx([0.85, 0.7])
    assert interpolated["stds"][1] == pytest.approx(0.0)
    mixed = by_label["trained at 20-28-36-44px (n=1)"]
    assert mixed["means"] == pytest.approx([0.8, 0.78]) and mixed["stds"] == [0.0, 0.0]  # n = 1: no spread
    assert single["setting"] == interpolated["setting"] == "trained at 28px" != mixed["setting"]  # one colour each


def test_extrapolation_curves_file_fuzzy_twins_under_their_scheme_and_mark_the_best():
    def at(ntk32, ntk64, tlog64, mode="ntk"):  # the columns of evaluate's tags (resize_mode=all)
        none, log = conversion_suffix(mode, "none"), conversion_suffix(mode, "log")
        return {
            f"test_acc@32px/{none}": ntk32,
            f"test_acc@64px/{none}": ntk64,
            f"test_acc@32px/{log}": ntk32,
            f"test_acc@64px/{log}": tlog64,
            "test_acc@64px/interpolate": 0.99,  # a transfer evaluation: not part of the extrapolation grid
        }

    rows = group_runs(
        [
            run_row("2d_sin", 0, 0.8, **at(0.8, 0.5, 0.6)),
            run_row("2d_sin", 1, 0.9, **at(0.9, 0.7, 0.8)),
            run_row("2d_sin+fuzzy", 0, 0.8, **at(0.8, 0.75, 0.5)),
            run_row(
                "none",
                0,
                0.6,
                **{"test_acc@64px": 0.9, **at(0.6, 0.3, 0.35, mode=None)},
            ),
            dict(run_row("2d_sin", 0, 0.8, **at(0.8, 0.7, 0.72)), train_sizes="32-48-64px"),
            run_row("cpe", 0, 0.7, **{"test_acc@32px": 0.7, "test_acc@64px": 0.4}),
        ]
    )  # no temperature
    curves = extrapolation_curves(rows)
    assert set(curves) == {"2d_sin", "none"}
    by_key = {(c["variant"], c["mode"], c["temperature"]): c for c in curves["2d_sin"]}
    assert set(by_key) == {
        (variant, "ntk", temperature)
        for variant in ("exact", "fuzzy", "mixed 32-48-64px")
        for temperature in ("none", "log")
    }
    exact_log = by_key["exact", "ntk", "log"]
    assert exact_log["means"] == pytest.approx([0.85, 0.7]) and exact_log["n"] == 2
    assert {(c["mode"], c["temperature"]) for c in curves["none"]} == {("", "none"), ("", "log")}
    table = extrapolation_table(curves).splitlines()
    assert table[0] == "| scheme | trained | conversion | n | 32px | 64px |"
    # ties are all bold
    assert "| 2d_sin | exact | ntk + log temperature | 2 | **85.00 ± 7.07** | 70.00 ± 14.14 |" in table
    assert "| 2d_sin | fuzzy | ntk | 1 | 80.00 | **75.00** |" in table  # the best of 2d_sin at 64 px
    assert "| none | exact | its rule + log temperature | 1 | **60.00** | **35.00** |" in table
    # the chart: a panel per scheme with a line per curve; each panel names its modes (the colours),
    # the figure names the line styles and the training variants (the markers) once
    figure = extrapolation_figure(curves)
    panels = [axes for axes in figure.axes if axes.get_visible()]
    assert [axes.get_title() for axes in panels] == ["2d_sin", "none"]
    assert [len(axes.containers) for axes in panels] == [6, 2]
    assert [[text.get_text() for text in axes.get_legend().get_texts()] for axes in panels] == [["ntk"], ["its rule"]]
    assert [text.get_text() for text in figure.legends[0].get_texts()] == [
        "no temperature",
        "log temperature",
        "trained exact",
        "trained fuzzy",
        "trained mixed 32-48-64px",
    ]
    markers = {container.lines[0].get_marker() for container in panels[0].containers}
    assert len(markers) == 3  # one per training variant
    assert "images" not in figure.get_suptitle()  # every curve on the whole split


def test_a_conversion_and_a_subset_are_read_back_from_the_tag_evaluate_writes():
    for mode in (None, "interpolate", "ntk"):
        for temperature in (None, "none", "log"):
            for images in (None, 300):
                suffix = conversion_suffix(mode, temperature, images)
                assert parse_conversion_suffix(suffix) == (mode or "", temperature, images)


def test_an_evaluation_of_a_subset_is_its_own_curve_beside_the_whole_split():
    whole, subset = conversion_suffix("ntk", "log"), conversion_suffix("ntk", "log", 300)
    columns = {
        f"test_acc@{h}px/{suffix}": acc
        for suffix, accs in ((whole, (0.8, 0.5)), (subset, (0.9, 0.7)))
        for h, acc in zip((32, 64), accs)
    }
    curves = extrapolation_curves(group_runs([dict(run_row("2d_sin", 0, 0.8, **columns), img_size=32)]))
    assert sorted((c["images"] or 0, c["means"][1]) for c in curves["2d_sin"]) == [(0, 0.5), (300, 0.7)]
    table = extrapolation_table(curves)
    assert "| ntk + log temperature | 1 | 80.00 | 50.00 |" in table  # the whole split keeps its own figure
    assert "| ntk + log temperature (300 images) | 1 | **90.00** | **70.00** |" in table
    # in the chart the two are two colours, each named with its subset; no subset in the title
    figure = extrapolation_figure(curves)
    (axes,) = [axes for axes in figure.axes if axes.get_visible()]
    assert len({container.lines[0].get_color() for container in axes.containers}) == 2
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["ntk", "ntk (300 images)"]
    assert "images" not in figure.get_suptitle()


def test_best_conversions_table_names_each_sizes_best_conversion_and_its_share_of_1x():
    def grid(mode, temperature, at32, at48, at64):
        suffix = conversion_suffix(mode, temperature)
        return {f"test_acc@{h}px/{suffix}": acc for h, acc in ((32, at32), (48, at48), (64, at64))}

    def run(pos, seed, **columns):
        return dict(run_row(pos, seed, columns[next(iter(columns))]), img_size=32, **columns)

    rows = group_runs(
        [
            run("2d_sin", 0, **grid("yarn", "none", 0.8, 0.6, 0.4), **grid("yarn", "log", 0.8, 0.64, 0.25)),
            run("2d_sin", 1, **grid("yarn", "none", 0.6, 0.4, 0.2), **grid("yarn", "log", 0.6, 0.44, 0.25)),
            dict(run("2d_sin", 0, **grid("yarn", "none", 0.7, 0.63, 0.56)), train_sizes="32-48-64px"),
        ]
    )
    table = best_conversions_table(extrapolation_curves(rows)).splitlines()
    assert (
        table[0]
        == "| scheme | trained | 1x | best at 48px (% of 1x) | best at 64px (% of 1x) |"  # 32 px: 1x of every run
    )
    # exact: 1x = 70%; at 48 px the temperature wins (54% = 77% of 1x, 4 points ahead), at 64 px it loses
    assert (
        "| 2d_sin | exact | 70.00 (32px) | 54.00 ± 14.14 (77%) yarn + log temperature, +4.00 over yarn "
        "| 30.00 ± 14.14 (43%) yarn, +5.00 over yarn + log temperature |" in table
    )
    assert "| 2d_sin | mixed 32-48-64px | 70.00 (32px) | 63.00 (90%) yarn | 56.00 (80%) yarn |" in table  # n=1, one
    # kept.png: per variant, the best conversion's mean as a share of 1x, one bar colour per larger size
    figure = kept_figure(extrapolation_curves(rows))
    (axes,) = figure.axes
    assert [tick.get_text() for tick in axes.get_xticklabels()] == ["2d_sin\nexact", "2d_sin\nmixed 32-48-64px"]
    assert [text.get_text() for text in axes.get_legend().get_texts()] == ["48px", "64px"]
    at48, at64 = ([round(bar.get_height(), 6) for bar in container] for container in axes.containers)
    assert at48 == [round(100 * 54 / 70, 6), 90.0] and at64 == [round(100 * 30 / 70, 6), 80.0]
    assert any(line.get_ydata()[0] == 100 for line in axes.lines)  # the 100% line
    assert axes.get_ylim()[0] == 30 and "starts at 30%" in figure.get_suptitle()  # 10 below the lowest, 42.9%


def test_runs_trained_low_name_each_evaluated_sizes_pixels_and_their_size_and_augmentation():
    """Train low, infer native: the columns say which sizes are the data's own pixels; runs of two
    training sizes and an augmentation twin are three variants of each scheme."""

    def run(seed, img_size, augment, at16, at24, at32):
        suffix = conversion_suffix("interpolate", "none")
        columns = {f"test_acc@{h}px/{suffix}": acc for h, acc in ((16, at16), (24, at24), (32, at32))}
        recipe = f"optim=AdamW augment={augment}"
        return dict(run_row("2d_sin", seed, at16), img_size=img_size, recipe=recipe, native_size="32x32", **columns)

    rows = group_runs(
        [
            run(0, 16, "standard", 0.6, 0.59, 0.55),
            run(1, 16, "standard", 0.62, 0.61, 0.57),
            run(0, 24, "standard", 0.6, 0.65, 0.64),
            run(0, 16, "rrc", 0.58, 0.6, 0.61),
        ]
    )
    assert {row["native_size"] for row in rows} == {"32x32"}
    # a fine-tune of another size and recipe, evaluated at its size only, changes none of the variants
    rows += group_runs([dict(run_row("2d_sin", 0, 0.7), img_size=32, lr=1e-4, recipe="optim=SGD")])
    curves = extrapolation_curves(rows)
    assert [c["variant"] for c in curves["2d_sin"]] == [
        "16px augment=standard",
        "24px augment=standard",
        "16px augment=rrc",
    ]
    table = extrapolation_table(curves).splitlines()
    assert table[0] == "| scheme | trained | conversion | n | 16px downsampled | 24px downsampled | 32px native |"
    assert "| 2d_sin | 16px augment=rrc | interpolate | 1 | 58.00 | 60.00 | 61.00 |" in table
    best = best_conversions_table(curves).splitlines()
    assert best[0].endswith("| best at 24px downsampled (% of 1x) | best at 32px native (% of 1x) |")
    assert (
        "| 2d_sin | 16px augment=rrc | 58.00 (16px) | - | 60.00 (103%) interpolate | 61.00 (105%) interpolate |" in best
    )
    figure = extrapolation_figure(curves)
    (axes,) = [axes for axes in figure.axes if axes.get_visible()]
    assert [tick.get_text() for tick in axes.get_xticklabels()] == ["16\ndownsampled", "24\ndownsampled", "32\nnative"]
    # kept.png: a panel per training size; trained at 24 px, only 32 px lies above it
    low, high = kept_figure(curves).axes
    assert [low.get_title(), high.get_title()] == ["trained at 16px", "trained at 24px"]
    assert [t.get_text() for t in low.get_xticklabels()] == [
        "2d_sin\n16px augment=rrc",
        "2d_sin\n16px augment=standard",
    ]
    assert [t.get_text() for t in high.get_legend().get_texts()] == ["32px native"]
    (at32,) = ([round(bar.get_height(), 6) for bar in container] for container in high.containers)
    assert at32 == [round(100 * 64 / 65, 6)]  # 64% at 32 px of its 65% at 24 px
    # runs that disagree on their data's size, or that did not record it, leave the sizes unlabelled
    rows[0]["native_size"] = "28x28"
    assert extrapolation_table(extrapolation_curves(rows)).splitlines()[0].endswith("| 16px | 24px | 32px |")
    mixed = group_runs([run(0, 16, "standard", 0.6, 0.59, 0.55), dict(run(1, 16, "standard", 0.6, 0.6, 0.6))])
    assert mixed[0]["native_size"] == "32x32"
    older = run(1, 16, "standard", 0.6, 0.6, 0.6)
    del older["native_size"]
    assert group_runs([run(0, 16, "standard", 0.6, 0.59, 0.55), older])[0]["native_size"] == ""


@pytest.fixture
def three_runs(make_config, tiny_overrides):
    extra = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.log_every_n_steps=1"]
    return [
        train(make_config([f"pos={pos}", f"seed={seed}", *tiny_overrides, *extra]))
        for pos, seed in (("none", 0), ("none", 1), ("rel_bias", 0))
    ]


def test_compare_reports_the_logged_numbers(three_runs, tmp_path):
    logs = tmp_path / "logs"
    unfinished = logs / "cpe_synthetic_32px_seed0" / "version_0"  # a run that died: no results.json
    shutil.copytree(three_runs[2]["log_dir"], unfinished)
    (unfinished / RESULTS_FILE).unlink()
    rows = compare(logs, out=tmp_path / "out")
    assert sorted((row["pos"], row["n"]) for row in rows) == [("none", 2), ("rel_bias", 1)]
    none = next(r for r in rows if r["pos"] == "none")
    logged = [json.loads((tmp_path / m["log_dir"] / RESULTS_FILE).read_text()) for m in three_runs[:2]]
    assert none["test_acc_mean"] == pytest.approx(statistics.fmean(r["test/acc"] for r in logged), abs=1e-4)
    assert none["val_acc_best_mean"] == pytest.approx(statistics.fmean(r["val/acc_best"] for r in logged), abs=1e-4)
    assert none["data"] == "synthetic" and none["img_size"] == 32 and none["seeds"] == "0 1"
    assert none["native_size"] == "32x32"  # from results.json: the synthetic set's own size labels the pixels
    with open(tmp_path / "out" / "runs.csv") as f:
        assert len(list(csv.DictReader(f))) == 3
    with open(tmp_path / "out" / "compare.csv") as f:
        assert len(list(csv.DictReader(f))) == 2
    assert (tmp_path / "out" / "compare.md").read_text().count("\n") == 4  # header, rule, two groups
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0
    assert not (tmp_path / "out" / "transfer.png").exists()  # no run was evaluated at other sizes
    assert (tmp_path / "out" / "epochs.png").stat().st_size > 0  # two validations per run: a curve each
    assert (tmp_path / "out" / "epochs.md").read_text().startswith("2 epochs: validation accuracy")
    assert none["val_acc_best_mean"] == pytest.approx(
        statistics.fmean(
            max(float(v) for v in run["val_acc_by_epoch"].split())
            for run in csv.DictReader(open(tmp_path / "out" / "runs.csv"))
            if run["pos"] == "none"
        ),
        abs=1e-4,
    )
    assert [r["pos"] for r in compare(logs, data="synthetic", img_size=32, out=tmp_path / "o2")] == [
        r["pos"] for r in rows
    ]
    with pytest.raises(Exception, match="no finished runs"):
        compare(logs, img_size=48, out=tmp_path / "o3")
    assert [r["pos"] for r in compare(logs, pos="rel_bias", out=tmp_path / "o4")] == ["rel_bias"]
    assert [r["pos"] for r in compare(logs, pos=["none", "cpe"], out=tmp_path / "o5")] == ["none"]
    with pytest.raises(ConfigError, match="match pos=cpe"):
        compare(logs, pos="cpe", out=tmp_path / "o6")


def test_several_log_folders_compare_as_one_and_name_each_runs_folder(three_runs, tmp_path, capsys):
    together = compare(tmp_path / "logs", out=tmp_path / "together")
    study, published = tmp_path / "study", tmp_path / "published"
    for folder, run in ((study, three_runs[0]), (published, three_runs[1]), (published, three_runs[2])):
        shutil.copytree(tmp_path / run["log_dir"], folder / Path(run["log_dir"]).parent.name / "version_0")
    assert main([str(study), str(published), f"out={tmp_path / 'apart'}"]) == 0  # the folders unnamed, one by one
    with open(tmp_path / "apart" / "compare.csv") as f:
        apart = {row["pos"]: row for row in csv.DictReader(f)}
    assert {pos: (int(row["n"]), float(row["test_acc_mean"])) for pos, row in apart.items()} == {
        row["pos"]: (row["n"], pytest.approx(row["test_acc_mean"])) for row in together
    }  # none's two seeds group across the folders
    with open(tmp_path / "apart" / "runs.csv") as f:
        assert sorted(row["run"].split("/")[0] for row in csv.DictReader(f)) == ["published", "published", "study"]
    capsys.readouterr()
    assert main([f"logdir=[{study},{tmp_path / 'missing'}]", f"out={tmp_path / 'never'}"]) == 2
    assert capsys.readouterr().err == f"error: no such log folder: {tmp_path / 'missing'}; " + (
        "pass the folder the runs were logged to, e.g. logs/\n"
    )
    assert not (tmp_path / "never").exists()


def test_compare_cli_errors_are_one_line(tmp_path):
    result = forked_cli.run(["-m", "vitpos.compare", str(tmp_path / "missing")])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: no such log folder")


@pytest.mark.parametrize(
    "option, message",
    [
        ("img_size=abc", "error: img_size='abc' must be a positive integer or an [H, W] pair of them"),
        ("img_size=[1,2,3]", "error: img_size=[1, 2, 3] must be a positive integer or an [H, W] pair of them"),
        ("data=nosuch", "error: data='nosuch' is not a data set runs are trained on; use one of cifar10,"),
        ("pos=[none,nosuch]", "error: pos=['none', 'nosuch'] must name schemes runs are trained with, e.g. pos=[none,"),
        ("out={file}", "error: cannot write to out= ({file}: File exists); pass a writable folder"),
        ("out={file}/below", "error: cannot write to out= ({file}/below: Not a directory)"),
    ],
)
def test_a_bad_compare_option_is_one_line_before_any_run_is_read(three_runs, tmp_path, capsys, option, message):
    """Checked up front: with a folder of good runs, a bad filter or out= still writes nothing."""
    file = tmp_path / "taken.txt"
    file.write_text("mine")
    logs = tmp_path / "logs"
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main([str(logs), option.format(file=file)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(file=file))
    assert sorted(p for p in tmp_path.rglob("*")) == before and file.read_text() == "mine"


def test_compare_keeps_the_runs_of_a_size_given_as_a_pair(three_runs, tmp_path):
    logs = tmp_path / "logs"  # the three runs trained at 32 px
    assert compare(logs, img_size=[32, 32], out=tmp_path / "pair") == compare(logs, img_size=32, out=tmp_path / "int")


def test_compare_says_which_runs_it_left_out(three_runs, tmp_path, capsys):
    root = tmp_path / "left_out"
    shutil.copytree(three_runs[0]["log_dir"], root / "done" / "version_0")
    training = root / "training" / "version_0"
    training.mkdir(parents=True)
    with SummaryWriter(training) as writer:
        writer.add_scalar("val/acc", 0.5, 1)
    rows = compare(root, out=tmp_path / "out")
    assert len(rows) == 1 and rows[0]["n"] == 1
    assert "note: left out 1 unfinished run(s) (no results.json): training/version_0" in capsys.readouterr().out


def test_a_copied_run_keeps_its_own_finish_time_precision_and_device(three_runs, tmp_path):
    """A study archived into the repository and checked out elsewhere: every file's time is the
    checkout's, but runs.csv still says when and on what each run trained."""
    copy = tmp_path / "archive" / "run" / "version_0"
    shutil.copytree(three_runs[0]["log_dir"], copy)
    os.utime(copy / RESULTS_FILE, (0, 0))  # 1970: what no run's own time is
    results = json.loads((copy / RESULTS_FILE).read_text())
    compare(tmp_path / "archive", out=tmp_path / "out")
    with open(tmp_path / "out" / "runs.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["finished"] == results["finished_at"] and row["finished"] > "2026"
    assert row["precision"] == results["precision"] == "32-true"  # tiny_overrides train in fp32
    assert row["device"] == results["device"] and row["device"].startswith("CPU ")


def test_a_copied_run_without_its_finish_time_takes_its_last_logged_scalars_time(three_runs, tmp_path):
    """A run saved before results.json recorded its time: runs.csv takes the time its last training
    scalar was logged, so a checkout's file times never rewrite the table."""
    copy = tmp_path / "archive" / "run" / "version_0"
    shutil.copytree(three_runs[0]["log_dir"], copy)
    results = json.loads((copy / RESULTS_FILE).read_text())
    finished_at = datetime.fromisoformat(results.pop("finished_at"))
    (copy / RESULTS_FILE).write_text(json.dumps(results))
    finished = []
    for file_time in (0, 10**9):  # two checkouts, 1970 and 2001
        for path in copy.iterdir():
            os.utime(path, (file_time, file_time))
        compare(tmp_path / "archive", out=tmp_path / "out")
        with open(tmp_path / "out" / "runs.csv") as f:
            (row,) = csv.DictReader(f)
        finished.append(row["finished"])
    assert finished[0] == finished[1]
    # the last scalar is logged at the fit's end, before results.json; a second of the file name's rounding
    assert timedelta(0) <= finished_at - datetime.fromisoformat(finished[0]) < timedelta(seconds=30)


def test_images_per_second_is_the_runs_own_figure(three_runs, tmp_path):
    """compare reports the img/s that the run's closing summary printed and results.json holds."""
    rows = compare(three_runs[0]["log_dir"], out=tmp_path / "out")
    assert rows[0]["images_per_s"] == round(three_runs[0]["images_per_s"])


def test_a_resumed_run_that_validated_a_step_twice_counts_each_epoch_once(three_runs, tmp_path):
    """A run killed after a validation and resumed from an earlier checkpoint validates that step
    again: the epoch curve and counts keep one point per step, the later one."""
    run = tmp_path / "resumed" / "none_synthetic_32px_seed0" / "version_0"
    shutil.copytree(three_runs[0]["log_dir"], run)
    for events in run.glob("events.out.tfevents*"):
        events.unlink()
    for part in ([(10, 0.5), (20, 0.6)], [(20, 0.65), (30, 0.7)]):  # the second process re-validates step 20
        with SummaryWriter(run) as writer:
            for step, acc in part:
                writer.add_scalar("val/acc", acc, step)
                writer.add_scalar("train/loss_epoch", 1.0, step)
    compare(run.parents[1], out=tmp_path / "out")
    with open(tmp_path / "out" / "runs.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["val_acc_by_epoch"] == "0.5000 0.6500 0.7000" and row["epochs_done"] == "3"
    assert row["val_acc_best"] == row["val_acc_final"] == "0.7"


def test_images_per_second_of_older_runs_counts_every_rank(three_runs, tmp_path):
    """Runs saved before results.json held img/s: ThroughputMonitor logs each device's speed, and
    the run's only with several devices: compare reports the run's, which for one device is the
    device's."""
    for ranks in (1, 2):
        run = tmp_path / f"ranks{ranks}" / "none_synthetic_32px_seed0" / "version_0"
        shutil.copytree(three_runs[0]["log_dir"], run)
        results = json.loads((run / RESULTS_FILE).read_text())
        (run / RESULTS_FILE).write_text(json.dumps({k: v for k, v in results.items() if k != "images_per_s"}))
        for events in run.glob("events.out.tfevents*"):
            events.unlink()
        with SummaryWriter(run) as writer:
            writer.add_scalar("val/acc", 0.5, 1)
            for step, speed in enumerate([90.0, 100.0, 110.0]):
                writer.add_scalar("train/device/samples_per_sec", speed, step)
                if ranks > 1:
                    writer.add_scalar("train/samples_per_sec", ranks * speed, step)
        compare(run.parents[1], out=tmp_path / f"out{ranks}")
        with open(tmp_path / f"out{ranks}" / "runs.csv") as f:
            assert [row["images_per_s"] for row in csv.DictReader(f)] == [str(100 * ranks)]


def test_the_table_names_the_lr_and_recipe_words_that_tell_its_rows_apart():
    plain, mixup = run_row("a", 0, 0.8), dict(run_row("a", 1, 0.7), recipe=KEY["recipe"] + " mixup_alpha=0.2")
    fast = dict(run_row("a", 2, 0.6), lr=0.01)
    table = markdown_table(group_runs([plain, mixup, fast]), ["test_acc"])
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    assert "lr" in header and "recipe" in header
    cells = [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in table.splitlines()[2:]]
    assert sorted((row["lr"], row["recipe"]) for row in cells) == [
        ("0.001", "-"),
        ("0.001", "mixup_alpha=0.2"),
        ("0.01", "-"),
    ]
    same = markdown_table(group_runs([plain, run_row("b", 0, 0.5)]), ["test_acc"])
    assert "recipe" not in same and "| lr |" not in same  # one lr, one recipe: no column for them


def test_the_recipe_names_the_optimizer_schedule_and_loss_and_tells_their_settings_apart():
    today = OmegaConf.to_container(compose_train_config(["experiment=cifar10_study"]))
    words = training_recipe(today).split()
    assert words[0] == "optim=AdamW" and "schedule=warmup_cosine_schedule" in words and "label_smoothing=0.1" in words
    smoother = dict(today, loss=dict(today["loss"], label_smoothing=0.2))
    assert training_recipe(smoother) != training_recipe(today)
    averaged = dict(today, ema_decay=0.999, test_flip=True)  # never averaged with a run evaluated otherwise
    assert training_recipe(averaged).split()[-2:] == ["ema_decay=0.999", "test_flip=True"]
    assert not any(w.startswith(("ema_", "test_flip")) for w in words)


def test_a_run_logged_with_logger_csv_is_compared_from_its_metrics_csv(make_config, tiny_overrides, tmp_path):
    two_epochs = ["trainer.max_steps=-1", "trainer.max_epochs=2", "logger=csv", "callbacks.figures=null"]
    metrics = train(make_config([*tiny_overrides, *two_epochs]))
    run = tmp_path / metrics["log_dir"]
    assert not list(run.glob("events.out.tfevents*"))
    (row,) = compare(tmp_path / "logs", out=tmp_path / "out")
    assert row["n"] == 1 and row["test_acc_mean"] == pytest.approx(metrics["test/acc"], abs=1e-4)
    assert row["val_acc_best_mean"] == pytest.approx(metrics["val/acc_best"], abs=1e-4)
    (listed,) = csv.DictReader(open(tmp_path / "out" / "runs.csv"))
    assert len(listed["val_acc_by_epoch"].split()) == 2 and listed["epochs_done"] == "2"


def test_the_accuracy_chart_makes_room_for_long_labels():
    """Groups told apart by many long settings: no two labels overlap, and every label is inside the figure."""
    rows = group_runs([run_row(pos, 0, 0.7) for pos in ("none", "cpe", "rel_shaw", "rope_axial", "cpb", "fire")])
    for row in rows:  # what tells the groups apart, a line each under the group's name
        row["differs"] = " ".join(f"a_long_setting_{i}={row['pos']}" for i in range(14))
    figure = accuracy_figure(rows)
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer) for label in figure.axes[0].get_xticklabels()]
    assert len(boxes) == 6 and all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))
    inside = figure.bbox
    assert all(inside.x0 <= b.x0 and b.x1 <= inside.x1 and inside.y0 <= b.y0 for b in boxes)
    pyplot().close(figure)


def test_chart_labels_name_the_lr_and_recipe_words_that_tell_groups_apart():
    adamw = KEY["recipe"]  # optim=AdamW weight_decay=0.05 label_smoothing=0.1
    rows = group_runs(
        [run_row("a", 0, 0.8), dict(run_row("a", 1, 0.7), lr=0.01), dict(run_row("a", 2, 0.6), recipe="optim=SGD")]
    )
    mark_differences(rows)
    assert sorted(" ".join(training_setting(row)) for row in rows) == [
        f"trained at 28px lr=0.001 {adamw}",
        "trained at 28px lr=0.001 optim=SGD",
        f"trained at 28px lr=0.01 {adamw}",
    ]
    alike = group_runs([run_row("a", 0, 0.8), run_row("b", 0, 0.7)])
    mark_differences(alike)
    assert [training_setting(row) for row in alike] == [["trained at 28px"]] * 2  # nothing tells them apart


def test_a_seed_run_twice_counts_once_the_latest():
    first, again = run_row("a", 0, 0.5, run="a/version_0"), run_row("a", 0, 0.7, run="a/version_1")
    again["finished"] = "2026-01-02T00:00:00"
    other = run_row("a", 1, 0.9, run="a1/version_0")
    kept, left_out = latest_per_seed([first, again, other])
    assert kept == [again, other] and left_out == [first]
    (group,) = group_runs(kept)
    assert group["n"] == 2 and group["seeds"] == "0 1" and group["test_acc_mean"] == pytest.approx(0.8)


def test_compare_leaves_out_the_earlier_run_of_a_repeated_seed(three_runs, tmp_path, capsys):
    logs = tmp_path / "logs"
    earlier = tmp_path / three_runs[0]["log_dir"]
    shutil.copytree(earlier, earlier.parent / "version_9")
    os.utime(earlier / RESULTS_FILE, (1_000_000_000, 1_000_000_000))  # the copy is the later run
    rows = compare(logs, out=tmp_path / "out")
    assert sorted((row["pos"], row["n"], row["seeds"]) for row in rows) == [("none", 2, "0 1"), ("rel_bias", 1, "0")]
    note = "left out 1 earlier run(s) of a seed that their group has again (the latest counts): "
    assert note + str(earlier.relative_to(logs)) in capsys.readouterr().out


def write_reference(path, rows) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["pos", "name", "data", "test_acc", "source"])
        writer.writerows(rows)


def table_cells(lines: list[str]) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_ranking_orders_by_test_accuracy_separates_by_seed_spread_and_joins_the_published_table(tmp_path):
    rows = group_runs(
        [
            *(run_row("none", seed, acc) for seed, acc in enumerate((0.80, 0.84, 0.85))),  # 83.0 +- 2.65
            *(run_row("cpe", seed, acc) for seed, acc in enumerate((0.81, 0.81, 0.81))),  # 81.0 +- 0
            *(run_row("2d_sin", seed, acc) for seed, acc in enumerate((0.70, 0.72, 0.74))),  # 72.0 +- 2.0
            run_row("rel_bias", 0, 0.60),  # one seed: no spread
            dict(run_row("cpe", 0, 0.82), pos="cpe+fuzzy"),  # a fuzzy twin: ranked apart, never between none and cpe
            dict(run_row("cpb", 0, 0.99), train_sizes="20-28px"),  # mixed-resolution twin: not ranked
            dict(run_row("alibi_2d", 0, 0.99), finetuned_from="28px"),  # fine-tuned: not ranked
            dict(run_row("rel_bias", 0, 0.5), data="other"),  # another data set: its own ranking, no published row
        ]
    )
    write_reference(
        tmp_path / "ref.csv",
        [
            ["none", "A | B", "d", "86.1", "paper X"],
            ["2d_sin", "C", "d", "90.6", "paper X"],
            ["cpe", "E", "x", "99", "Y"],  # another data set
        ],
    )
    lines = ranking_table(rows, read_reference(tmp_path / "ref.csv")).splitlines()
    body = table_cells(lines[2:8])
    assert [r[1] for r in body] == ["d", "d", "d", "d", "d", "other"]
    assert [r[4:7] for r in body] == [
        ["1", "none", "3"],
        ["2", "cpe", "3"],
        ["3", "2d_sin", "3"],
        ["4", "rel_bias", "1"],
        ["1", "cpe+fuzzy", "1"],  # the twins' own ranking
        ["1", "rel_bias", "1"],  # the other data set's ranking
    ]
    # none - cpe = 2.00 < 2.65 + 0: not separated; cpe - 2d_sin = 9.00 > 0 + 2.00: separated; rel_bias has no spread
    assert [r[9:11] for r in body[:4]] == [["2.00", "no"], ["9.00", "yes"], ["12.00", "n=1"], ["-", "-"]]
    # the published order of none and 2d_sin is the reverse of ours; cpe's published row is of another data set
    assert [r[11:] for r in body] == [
        ["86.1 (A \\| B)", "1 / 2", "-3.10"],
        ["-", "-", "-"],
        ["90.6 (C)", "2 / 1", "-18.60"],
        ["-", "-", "-"],
        ["-", "-", "-"],
        ["-", "-", "-"],
    ]
    assert len(lines) == 2 + 6 + 4 and "Published: Y; paper X" in lines[-1]  # cpb, alibi_2d not ranked; the legend
    assert "published" not in ranking_table(rows, {}).splitlines()[0]  # no reference: our columns only
    assert ranking_table([r for r in rows if r["pos"] in ("cpb", "alibi_2d")], {}) == ""  # nothing to rank


def test_a_run_that_tested_every_epoch_has_the_best_of_those_tests_and_their_curve(
    make_config, tiny_overrides, tmp_path
):
    config = OmegaConf.to_container(make_config(tiny_overrides), resolve=True)
    run = tmp_path / "logs" / "version_0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(config))
    (run / RESULTS_FILE).write_text("{}")
    writer = SummaryWriter(str(run))
    for step, (val, each) in enumerate([(0.5, 0.52), (0.7, 0.74), (0.6, 0.71)], 1):
        writer.add_scalar("val/acc", val, step)
        writer.add_scalar("test_each_epoch/acc", each, step)
    writer.add_scalar("test/acc", 0.73, 3)  # the best-validation checkpoint's, held out
    writer.close()
    row = summarize(run, tmp_path / "logs")
    assert row["test_acc"] == pytest.approx(0.73) and row["test_acc_best_over_epochs"] == pytest.approx(0.74)
    assert row["test_each_epoch_by_epoch"] == "0.5200 0.7400 0.7100"
    assert "test_acc_best_over_epochs" in accuracy_columns([row])
    assert "test_acc_best_over_epochs" not in accuracy_columns([run_row("a", 0, 0.8)])  # not logged: no column


def test_ranking_sets_the_best_test_over_epochs_beside_the_published_figure_of_that_kind(tmp_path):
    rows = group_runs(
        [
            run_row("none", 0, 0.80, test_acc_best_over_epochs=0.82),
            run_row("none", 1, 0.78, test_acc_best_over_epochs=0.80),  # none: test 79.0, best over epochs 81.0 +- 1.41
            run_row("cpe", 0, 0.79, test_acc_best_over_epochs=0.84),  # below none on the test, above over epochs
        ]
    )
    write_reference(tmp_path / "ref.csv", [["none", "A", "d", "83.0", "paper"], ["cpe", "B", "d", "82.5", "paper"]])
    lines = ranking_table(rows, read_reference(tmp_path / "ref.csv")).splitlines()
    assert table_cells(lines[:1])[0][7:10] == ["test %", "best val %", "best test over epochs %"]
    body = table_cells(lines[2:4])
    assert [r[5] for r in body] == ["none", "cpe"]  # ranked by the held-out test
    assert [r[9] for r in body] == ["81.00 ± 1.41", "84.00"]
    # the published comparison is on the published figure's kind: ours over epochs, ranked by it
    assert [r[12:] for r in body] == [["83.0 (A)", "2 / 1", "-2.00"], ["82.5 (B)", "1 / 2", "+1.50"]]
    assert "not held out" in lines[-3] and "best test over epochs where the runs tested" in lines[-1]
    plain = group_runs([run_row("none", 0, 0.80)])  # no test after every epoch: the held-out test, no extra column
    plain_lines = ranking_table(plain, read_reference(tmp_path / "ref.csv")).splitlines()
    assert "over epochs %" not in plain_lines[0] and table_cells(plain_lines[2:3])[0][-1] == "-3.00"


def test_ranking_names_the_setting_of_a_scheme_ranked_twice():
    rows = group_runs([run_row("a", 0, 0.8), dict(run_row("a", 0, 0.9), budget="35 epochs"), run_row("b", 0, 0.7)])
    body = table_cells(ranking_table(rows, {}).splitlines()[2:5])
    assert [r[5] for r in body] == ["a (35 epochs)", "a (1 epochs)", "b"]


def test_ranking_ranks_each_curriculum_in_a_block_of_its_own():
    curriculum = "16-28px_1-1ep"
    rows = group_runs(
        [
            run_row("a", 0, 0.8),
            run_row("b", 0, 0.7),
            dict(run_row("a", 0, 0.75), curriculum=curriculum),  # between a and b, but ranked apart
            dict(run_row("b", 0, 0.78), curriculum=curriculum),
        ]
    )
    body = table_cells(ranking_table(rows, {}).splitlines()[2:6])
    assert [(r[3], r[5], r[6]) for r in body] == [
        ("-", "1", "a"),
        ("-", "2", "b"),
        (curriculum, "1", "b"),
        (curriculum, "2", "a"),
    ]


def test_a_bad_reference_table_is_one_error_line(tmp_path, capsys):
    header = "pos,name,data,test_acc,source\n"
    tables = {
        "nan.csv": header + "none,none,cifar10,nan,paper\n",
        "word.csv": header + "none,none,cifar10,high,paper\n",
        "fraction.csv": header + "none,none,cifar10,0.861,paper\n",
        "columns.csv": "scheme,accuracy\nnone,79.6\n",
        "empty.csv": header,
        "short.csv": header + "none,none\n",
        "long.csv": header + "none,none,cifar10,79.6,paper,extra\n",
        "blank.csv": header + "none,,cifar10,79.6,paper\n",
        "unknown.csv": header + "foo_bar,foo,cifar10,79.6,paper\n",
        "twice.csv": header + "none,a,cifar10,79.6,p\nnone,b,cifar10,80.0,q\n",
    }
    for name, text in tables.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "latin1.csv").write_bytes(header.encode() + "none,caf\xe9,cifar10,79.6,p\n".encode("latin-1"))
    for reference, message in (
        ("", "error: reference= has no value"),
        (tmp_path / "missing.csv", "error: no such reference table"),
        (tmp_path, "error: no such reference table"),
        (tmp_path / "columns.csv", "has the columns ['scheme', 'accuracy']; a reference table has pos,name,data"),
        (tmp_path / "nan.csv", "test_acc='nan' is not a percentage in (1, 100]"),
        (tmp_path / "word.csv", "test_acc='high' is not a percentage"),
        (tmp_path / "fraction.csv", "write accuracies in percent (86.1, not 0.861)"),
        (tmp_path / "empty.csv", "has no rows"),
        (tmp_path / "short.csv", "line 2: every row needs exactly the 5 cells"),
        (tmp_path / "long.csv", "line 2: every row needs exactly the 5 cells"),
        (tmp_path / "blank.csv", "line 2: every row needs exactly the 5 cells, none empty"),
        (tmp_path / "unknown.csv", "pos='foo_bar' is none of our schemes (1d_learned"),
        (tmp_path / "twice.csv", "line 3: pos=none appears twice"),
        (tmp_path / "latin1.csv", "is not a UTF-8 CSV file"),
    ):
        out = tmp_path / "out"
        assert main([str(tmp_path), f"reference={reference}", f"out={out}"]) == 2, reference
        error = capsys.readouterr().err
        assert len(error.splitlines()) == 1 and error.startswith("error: ") and message in error, error
        assert not out.exists()  # nothing written


def test_a_spreadsheets_byte_order_mark_is_read(tmp_path):
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbfpos,name,data,test_acc,source\nnone,none,cifar10,79.6,p\n")
    assert read_reference(tmp_path / "bom.csv")["none"]["test_acc"] == 79.6


def test_the_published_ablation_table_reads(tmp_path):
    published = read_reference(ROOT / "docs" / "results" / "published" / "cifar10_small_vit_ablation.csv")
    assert {pos: row["test_acc"] for pos, row in published.items()} == {
        "none": 79.6,
        "1d_learned": 86.5,
        "2d_sin": 86.1,
        "rel_shaw": 90.6,
        "rope_axial": 88.5,
    }


def test_accuracy_against_minutes_is_drawn_at_the_times_of_the_logged_events(make_config, tiny_overrides, tmp_path):
    """accuracy_vs_minutes.png: a point's x is its event's wall time after the run's first event, in
    minutes (no logger keeps per-epoch time), the mean over the group's seeds; its y the mean accuracy."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = OmegaConf.to_container(make_config(tiny_overrides), resolve=True)
    seconds = {0: ([60, 150, 300], 330), 1: ([120, 210, 420], 450)}  # after the first event: validations, test
    for seed, (validations, test) in seconds.items():
        run = tmp_path / "logs" / f"seed{seed}" / "version_0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(OmegaConf.to_yaml(dict(config, seed=seed)))
        (run / RESULTS_FILE).write_text("{}")
        writer = SummaryWriter(str(run))  # opens its event file: the run's first event
        writer.flush()
        first = EventAccumulator(str(run))
        first.Reload()
        start = first.FirstEventTimestamp()
        for step, after in enumerate(validations, 1):
            writer.add_scalar("val/acc", 0.5 + 0.1 * step + 0.01 * seed, step, walltime=start + after)
        writer.add_scalar("test/acc", 0.8 + 0.01 * seed, 3, walltime=start + test)
        writer.close()
    runs = [summarize(run, tmp_path / "logs") for run in run_folders(tmp_path / "logs")]
    validation, test = minutes_curves(runs)
    assert validation["split"] == "val" and validation["minutes"] == pytest.approx([1.5, 3.0, 6.0], abs=0.01)
    assert validation["means"] == pytest.approx([0.605, 0.705, 0.805]) and validation["label"].endswith("(n=2)")
    assert test["split"] == "test" and test["minutes"] == pytest.approx([6.5], abs=0.01)
    assert test["means"] == pytest.approx([0.805]) and test["stds"] == pytest.approx([0.00707], abs=1e-4)
    compare(tmp_path / "logs", out=tmp_path / "out", reach=75)
    assert (tmp_path / "out" / "accuracy_vs_minutes.png").stat().st_size > 0
    # minutes to 75%: each seed at its 3rd validation, 5 and 7 minutes after its start
    (reached,) = minutes_to_reach(runs, 0.75)
    assert (reached["n"], reached["reached"]) == (2, 2) and reached["minutes_mean"] == pytest.approx(6.0, abs=0.01)
    assert reached["minutes_std"] == pytest.approx(1.414, abs=1e-2)
    assert "| 2 of 2 | 6.0 ± 1.4 |" in (tmp_path / "out" / "minutes_to_reach.md").read_text()
    (unreached,) = minutes_to_reach(runs, 0.9)
    assert unreached["reached"] == 0 and "not reached" in reach_table([unreached], 90)
    with pytest.raises(ConfigError, match="reach=120 must be"):
        compare(tmp_path / "logs", out=tmp_path / "out", reach=120)
    # a run without event files (logger=csv) has no times: no curve
    untimed = [dict(run, val_minutes_by_epoch="", test_minutes_by_epoch="") for run in runs]
    assert minutes_curves(untimed) == []
