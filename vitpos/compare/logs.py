"""What vitpos.compare reads: the finished run folders under a log folder, each run's logged scalars
(event files, or metrics.csv of logger=csv) summarized as one row, and a published reference table."""

from __future__ import annotations

import csv
import json
import statistics
from datetime import datetime
from pathlib import Path

import yaml
from hydra.utils import get_class
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ..data.curriculum import curriculum_tag
from ..errors import ConfigError
from ..pos import list_pos
from ..runs import RESULTS_FILE, budget, devices, scheme_label, sizes_tag, training_recipe

CSV_METRICS = "metrics.csv"  # logger=csv: Lightning's CSVLogger
RESOLUTION_TAG = "resolution/test_acc"  # vitpos.evaluate: step = image height, suffix _<mode> if one was forced
TRANSFER_PREFIX = "test_acc@"  # transfer columns: test_acc@<height>px, or test_acc@<height>px/<mode>
REFERENCE_COLUMNS = ("pos", "name", "data", "test_acc", "source")
# the best of the tests after every epoch (test_every_epoch=true): the published ablations' figure, not held out
BEST_OVER_EPOCHS = "test_acc_best_over_epochs"


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


def logged_scalars(run: Path) -> dict[str, list[tuple[int, float, float | None]]]:
    """Every scalar a run logged, tag -> [(step, value, minutes)] in logging order: its TensorBoard
    event files, and for a logger=csv run its metrics.csv (vitpos.evaluate writes event files either
    way). `minutes`: the event's wall time after the run's first event, the opening of its first
    event file at the start of the fit, pauses of a resumed run included; None from metrics.csv,
    which keeps no time. The event's wall time stands in for per-epoch time, which no logger keeps."""
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    start = events.FirstEventTimestamp() if tags else 0.0
    scalars = {tag: [(e.step, e.value, (e.wall_time - start) / 60) for e in events.Scalars(tag)] for tag in tags}
    if (run / CSV_METRICS).is_file():
        with open(run / CSV_METRICS, newline="") as f:
            for row in csv.DictReader(f):  # one row per logging call, blank where a tag was not logged
                for tag, value in row.items():
                    if tag != "step" and value != "":
                        scalars.setdefault(tag, []).append((int(row["step"]), float(value), None))
    return scalars


def by_step(scalars: dict[str, list[tuple]]) -> dict[str, dict[int, tuple[float, float | None]]]:
    """`logged_scalars` -> tag -> {step: (value, minutes)} in step order; a step logged again (a
    resumed run, a re-evaluation) keeps its latest value."""
    return {
        tag: dict(sorted({step: (value, t) for step, value, t in points}.items())) for tag, points in scalars.items()
    }


def summarize(run: Path, root: Path) -> dict:
    """One row per run: its settings (the group key), seed and size, accuracies (per epoch with their
    minutes, and in the end), speed and time, the data's own size where results.json records it
    (`native_size`, which labels each evaluated size's pixels), then its transfer accuracies."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    hparams_file = run / "hparams.yaml"
    hparams = yaml.safe_load(hparams_file.read_text()) if hparams_file.is_file() else {}
    results = json.loads((run / RESULTS_FILE).read_text())
    series = by_step(logged_scalars(run))
    row = dict(
        run_settings(config, hparams),
        seed=config["seed"],
        params=results.get("params", hparams.get("params", "")),
        **logged_accuracies(series),
        **run_record(run, results, series),
        run=str(run.relative_to(root)) if run != root else run.name,
    )
    if results.get("native_size"):  # runs saved before it was recorded: no label
        row["native_size"] = "x".join(map(str, results["native_size"]))  # (H, W) -> 32x32
    for tag in sorted(t for t in series if t.startswith(RESOLUTION_TAG)):
        mode = tag.removeprefix(RESOLUTION_TAG).removeprefix("_")
        for height, (acc, _) in series[tag].items():  # step = height
            row[transfer_column(height, mode)] = round(acc, 4)
    return row


def run_settings(config: dict, hparams: dict) -> dict:
    """A run's settings that group it (GROUP_BY), from its config.yaml and hparams.yaml."""
    size = config["img_size"]
    return dict(
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
    )


def logged_accuracies(series: dict[str, dict[int, tuple]]) -> dict:
    """Best and final validation and the test accuracy, completed epochs, and the accuracies per
    validation (and test) with their minutes since the run's start ("" where not timed). A run that
    tested after every epoch (test_every_epoch=true) also has the best of those tests, and their curve."""
    val_acc, test_acc = _values(series, "val/acc"), _values(series, "test/acc")
    each_epoch = _values(series, "test_each_epoch/acc")
    return dict(
        val_acc_best=round(max(val_acc), 4) if val_acc else "",
        val_acc_final=round(val_acc[-1], 4) if val_acc else "",
        test_acc=round(test_acc[-1], 4) if test_acc else "",
        **(
            {BEST_OVER_EPOCHS: round(max(each_epoch), 4), "test_each_epoch_by_epoch": _accuracies(each_epoch)}
            if each_epoch
            else {}
        ),
        epochs_done=len(series.get("train/loss_epoch", {})),  # one point per completed training epoch
        val_acc_by_epoch=_accuracies(val_acc),
        val_minutes_by_epoch=_minutes(series, "val/acc"),
        test_acc_by_epoch=_accuracies(test_acc),
        test_minutes_by_epoch=_minutes(series, "test/acc"),
    )


def run_record(run: Path, results: dict, series: dict[str, dict[int, tuple]]) -> dict:
    """What results.json records beside the accuracies: speed, fit time, precision, device, when it finished."""
    # the run's own figure (results.json); runs saved before it: the median of ThroughputMonitor's
    # (logged beside each device's only with several devices)
    speeds = _values(series, "train/samples_per_sec") or _values(series, "train/device/samples_per_sec")
    return dict(
        images_per_s=round(results["images_per_s"])
        if "images_per_s" in results
        else round(statistics.median(speeds))
        if speeds
        else "",
        fit_minutes=round(results["fit_seconds"] / 60, 2) if "fit_seconds" in results else "",
        precision=results.get("precision", ""),
        device=results.get("device", ""),
        # results.json's own time; older runs: their last training scalar's; runs without event files:
        # results.json's file time, which a git checkout resets
        finished=results.get("finished_at")
        or last_logged_time(run, series)
        or datetime.fromtimestamp((run / RESULTS_FILE).stat().st_mtime).isoformat(timespec="seconds"),
    )


def last_logged_time(run: Path, series: dict[str, dict[int, tuple]]) -> str | None:
    """When the run logged its last training scalar (evaluate's transfer scalars left out): its first
    event file's creation time, which the file's name holds, plus that scalar's minutes. It survives a
    copy, unlike file times. None: no event file or no timed scalar."""
    created = [int(p.name.split(".")[3]) for p in run.glob("events.out.tfevents.*")]
    minutes = [
        t
        for tag, points in series.items()
        if not tag.startswith(RESOLUTION_TAG)
        for _, t in points.values()
        if t is not None
    ]
    if not created or not minutes:
        return None
    return datetime.fromtimestamp(min(created) + max(minutes) * 60).isoformat(timespec="seconds")


def _values(series: dict[str, dict[int, tuple]], tag: str) -> list[float]:
    return [value for value, _ in series.get(tag, {}).values()]


def _accuracies(values: list[float]) -> str:
    return " ".join(f"{acc:.4f}" for acc in values)


def _minutes(series: dict[str, dict[int, tuple]], tag: str) -> str:
    minutes = [t for _, t in series.get(tag, {}).values()]
    return " ".join(f"{t:.2f}" for t in minutes) if minutes and None not in minutes else ""


def model_key(model) -> str:
    """The architecture as a group key: the model arguments the run recorded."""
    return str(model)


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
