"""The figures of `scripts/gpu_check.sh`, written into its output folder after each step (so a step
that fails or times out later loses nothing earlier) and summed up in summary.json.

    python scripts/gpu_check_report.py <step> <work folder> <output folder> [planned epochs]

Steps and what they write: throughput -> throughput.csv (one row per model and mode, from the
work folder's throughput_*.json); ablation, strongest -> <step>.csv (one row per run: accuracies,
epochs done of those planned, fit time) and their rows of epochs.csv (per epoch: validation and
test-each-epoch accuracy); transfer -> resolution.csv; every step -> summary.json (each step's
status, time and budget from steps.tsv, the CSVs' rows, GPU utilisation per step).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path

import yaml

# The published numbers experiment=cifar10_published compares with (best test accuracy over 200 epochs)
PUBLISHED = {"none": 79.6, "1d_learned": 86.5, "2d_sin": 86.1, "rel_shaw": 90.6, "rope_axial": 88.5}


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def throughput(work: Path, out: Path) -> None:
    rows = []
    for path in sorted(work.glob("throughput_*.json")):
        result = json.loads(path.read_text())
        model, models = result["model"], result["models"]
        timm = models["timm (default)"]["train_img_s"]  # eager, fused attention
        for name, figures in models.items():
            rows.append(
                dict(
                    size=result.get("model_name") or "vit_tiny",
                    mode=name.partition(" compiled ")[2] or "eager",
                    model=name,
                    dim=model["dim"],
                    depth=model["depth"],
                    heads=model["num_heads"],
                    mlp_ratio=model["mlp_ratio"],
                    batch=result["batch"],
                    precision=result["precision"],
                    train_img_s=round(figures["train_img_s"], 1),
                    eval_img_s=round(figures["eval_img_s"], 1),
                    vs_timm=round(figures["train_img_s"] / timm, 3),
                    peak_mem_mib=round(figures["peak_mem_mib"]),
                    mfu_pct=round(100 * figures["mfu"], 2),
                    file=path.name,
                )
            )
        for loader, rate in result.get("loader_img_s", {}).items():
            rows.append(dict(size="-", file=path.name, model=f"loader ({loader})", train_img_s=round(rate)))
    if rows:
        write_csv(out / "throughput.csv", rows)
        for size in dict.fromkeys(r["size"] for r in rows if r["model"].startswith("vitpos")):
            best = max(
                (r for r in rows if r["size"] == size and r["model"].startswith("vitpos")),
                key=lambda r: r["train_img_s"],
            )
            print(
                f"  {size}: fastest {best['model']} ({best['mode']}), {best['train_img_s']} train img/s, "
                f"{best['vs_timm']}x timm (eager)"
            )


def scalars(run: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # slow to import

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def runs(step: str, work: Path, out: Path, planned: int) -> None:
    """One row per run folder of the step (finished or not), and its epochs into epochs.csv."""
    rows, epochs = [], [r for r in read_csv(out / "epochs.csv") if r["step"] != step]
    for run in sorted({p.parent for p in (work / "logs" / step).rglob("events.out.tfevents*")}):
        values = scalars(run)
        config = yaml.safe_load((run / "config.yaml").read_text())
        results = json.loads((run / "results.json").read_text()) if (run / "results.json").is_file() else {}
        pos, val = config["pos"]["name"], values.get("val/acc", [])
        each = values.get("test_each_epoch/acc", [])
        percent = lambda v: round(100 * v, 2) if v not in (None, "") else ""  # noqa: E731
        fit = results.get("fit_seconds")
        row = dict(
            pos=pos,
            epochs_planned=planned,
            epochs_done=len(val),
            finished=bool(results),
            val_acc_best=percent(max(val, default=None)),
            test_acc=percent(results.get("test/acc")),  # the best-by-validation checkpoint
            test_each_epoch_best=percent(max(each, default=None)),
            test_each_epoch_last=percent(each[-1] if each else None),
            fit_s=fit or "",
            s_per_epoch=round(fit / len(val), 2) if fit and val else "",
            params=results.get("params", ""),
            model=f"d{config['model']['dim']}xL{config['model']['depth']}",
            batch=config["data"]["batch_size"],
            run=str(run.relative_to(work)),
        )
        if step == "ablation":
            row["published_best_test"] = PUBLISHED.get(pos, "")
        else:
            minutes = (fit or 0) / 60
            row["test_acc_per_gpu_minute"] = (
                round(row["test_acc"] / minutes, 2) if minutes and row["test_acc"] != "" else ""
            )
        rows.append(row)
        epochs += [
            dict(
                step=step,
                pos=pos,
                epoch=i + 1,
                val_acc=percent(v),
                test_each_epoch_acc=percent(each[i]) if i < len(each) else "",
            )
            for i, v in enumerate(val)
        ]
        shown = {
            key: "-" if row[key] == "" else row[key]
            for key in ("test_acc", "test_each_epoch_best", "val_acc_best", "fit_s")
        }
        print(
            f"  {step} {pos}: {len(val)} of {planned} planned epochs{'' if results else ' (unfinished)'}, "
            f"test acc {shown['test_acc']} (best-val checkpoint), best test over epochs "
            f"{shown['test_each_epoch_best']}, val best {shown['val_acc_best']}, fit {shown['fit_s']} s"
        )
    if rows:
        write_csv(out / f"{step}.csv", rows)
    if epochs:
        write_csv(out / "epochs.csv", epochs)


def transfer(work: Path, out: Path) -> None:
    rows = read_csv(work / "evaluate" / "resolution.csv")
    if rows:
        write_csv(out / "resolution.csv", rows)


def gpu_utilisation(out: Path, start: float, end: float) -> dict:
    """Mean and max GPU utilisation and the max memory used between two times (nvidia-smi's CSV)."""
    samples = []
    for row in read_csv(out / "gpu_util.csv"):
        row = {k.split("[")[0].strip(): (v or "").strip() for k, v in row.items() if k}  # headers may carry units
        try:
            when = datetime.strptime(row["timestamp"], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((when, float(row["utilization.gpu"]), float(row["memory.used"])))
        except (KeyError, ValueError):  # a line cut short when the sampler was stopped
            continue
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return {}
    return dict(
        gpu_util_mean_pct=round(statistics.fmean(s[1] for s in inside), 1),
        gpu_util_max_pct=max(s[1] for s in inside),
        gpu_mem_max_mib=max(s[2] for s in inside),
    )


def summary(work: Path, out: Path) -> None:
    steps = []
    for line in (work / "steps.tsv").read_text().splitlines():
        name, status, start, end, budget = line.split("\t")
        steps.append(
            dict(
                step=name,
                status=status,
                seconds=int(end) - int(start),
                budget_s=int(budget),
                **gpu_utilisation(out, float(start), float(end)),
            )
        )
    device = json.loads((work / "device.json").read_text())
    tables = {path.stem: read_csv(path) for path in sorted(out.glob("*.csv")) if path.name != "gpu_util.csv"}
    (out / "summary.json").write_text(json.dumps(dict(device=device, steps=steps, **tables), indent=1) + "\n")


def main(argv: list[str]) -> int:
    step, work, out = argv[0], Path(argv[1]), Path(argv[2])
    if step == "throughput":
        throughput(work, out)
    elif step in ("ablation", "strongest"):
        runs(step, work, out, int(argv[3]))
    elif step == "transfer":
        transfer(work, out)
    summary(work, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
