"""Compare runs side by side from their TensorBoard event files.

    python -m vitpos.compare logs/ [data=fashion_mnist] [img_size=32] [out=logs/compare]

Prints one row per run (scheme, data, image size, parameters, best and final val accuracy, test
accuracy, epochs, training images/s, run folder) and writes `compare.md`, `compare.csv` and a bar
chart `compare.png` to `out`.
"""
from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

import yaml
from hydra.utils import get_class
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from .errors import ConfigError, VitposError
from .errors import report as report_error

DEFAULTS = dict(data=None, img_size=None, out=None)
COLUMNS = ("pos", "data", "img_size", "params", "val_acc_best", "val_acc_final", "test_acc", "epochs",
           "images_per_s", "run")


def run_folders(root: Path) -> list[Path]:
    """Every run folder (holding train.py's config.yaml and event files) under `root`."""
    return sorted(p.parent for p in root.rglob("config.yaml") if any(p.parent.glob("events.out.tfevents*")))


def summarize(run: Path, root: Path) -> dict:
    """One comparison row from a run folder's config and scalars."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    hparams_file = run / "hparams.yaml"
    hparams = yaml.safe_load(hparams_file.read_text()) if hparams_file.is_file() else {}
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])

    def values(tag: str) -> list[float]:
        return [event.value for event in events.Scalars(tag)] if tag in tags else []

    val_acc, test_acc = values("val/acc"), values("test/acc")
    speeds = values("train/device/samples_per_sec")
    epochs = values("train/loss_epoch")  # one point per completed training epoch
    size = config["img_size"]
    return dict(
        pos=config["pos"]["name"], data=get_class(config["data"]["_target_"]).name,
        img_size=size if isinstance(size, int) else "x".join(map(str, size)),
        params=hparams.get("params", ""),
        val_acc_best=round(max(val_acc), 4) if val_acc else "",
        val_acc_final=round(val_acc[-1], 4) if val_acc else "",
        test_acc=round(test_acc[-1], 4) if test_acc else "",
        epochs=len(epochs),
        images_per_s=round(statistics.median(speeds)) if speeds else "",
        run=str(run.relative_to(root)) if run != root else run.name,
    )


def compare(root: str | Path, data: str | None = None, img_size: int | str | None = None,
            out: str | Path | None = None) -> list[dict]:
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"no such log folder: {root}; pass the TensorBoard root, e.g. logs/")
    rows = [summarize(run, root) for run in run_folders(root)]
    rows = [r for r in rows if (data is None or r["data"] == data) and (img_size is None or str(r["img_size"]) == str(img_size))]
    if not rows:
        raise ConfigError(f"no finished runs under {root} match data={data} img_size={img_size}")
    rows.sort(key=lambda r: (r["data"], str(r["img_size"]), -(r["test_acc"] or 0)))
    out = Path(out) if out else root / "compare"
    out.mkdir(parents=True, exist_ok=True)
    header = "| " + " | ".join(COLUMNS) + " |"
    lines = [header, "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row[c], c) for c in COLUMNS) + " |")
    table = "\n".join(lines) + "\n"
    (out / "compare.md").write_text(table)
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    _bar_chart(rows, out / "compare.png")
    print(table + f"\nwrote {out / 'compare.md'}, {out / 'compare.csv'}, {out / 'compare.png'}")
    return rows


def _cell(value, column: str) -> str:
    if column.endswith("acc") or column.startswith("val_acc") or column == "test_acc":
        return f"{100 * value:.2f}" if value != "" else "-"
    return str(value)


def _bar_chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['pos']}\n{r['data']} {r['img_size']}" for r in rows]
    figure, axes = plt.subplots(figsize=(max(6, 0.9 * len(rows)), 4))
    axes.bar(range(len(rows)), [100 * (r["test_acc"] or 0) for r in rows], label="test", alpha=0.8)
    axes.scatter(range(len(rows)), [100 * (r["val_acc_best"] or 0) for r in rows], color="k", zorder=3,
                 label="best val")
    axes.set_xticks(range(len(rows)), labels, fontsize=7)
    axes.set_ylabel("accuracy (%)")
    low = min(100 * (r["test_acc"] or 0) for r in rows)
    axes.set_ylim(max(0, low - 10), 100)
    axes.legend()
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str]) -> int:
    positional = [a for a in argv if "=" not in a]
    options = OmegaConf.merge(OmegaConf.create(DEFAULTS), OmegaConf.from_dotlist([a for a in argv if "=" in a]))
    try:
        unknown = set(options) - set(DEFAULTS)
        if unknown or len(positional) != 1:
            raise ConfigError("usage: python -m vitpos.compare <log folder> [data=NAME] [img_size=N] [out=DIR]")
        compare(positional[0], **OmegaConf.to_container(options))
    except VitposError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
