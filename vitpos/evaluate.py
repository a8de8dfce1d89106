"""Evaluate checkpoints at several resolutions without retraining.

    python -m vitpos.evaluate ckpt=<ckpt, run folder or log root> img_sizes=[32,48,64]

Each model is converted to every size with its scheme's resize rule (`resize_mode=` picks the
mode, `attn_temperature=log` scales the logits by log N / log N_train) and evaluated on the test
split (`split=val` for validation); the patch size stays fixed. Images come from the dataset's
native ones: at a smaller size downsampled once (antialiased), at a larger one upsampled (bicubic),
so a model trained on downsampled images meets the native pixels at the native size; every row
says which (`pixels`: native, downsampled or upsampled, see `data.pixels_label`).
`resize_mode=best` tries every mode of the scheme with and without the temperature (unless
`attn_temperature=` is given) on the validation split, prints the best per size and evaluates
only that one on `split`, which thus plays no part in the choice;
`resize_mode=all` evaluates every one of those conversions on `split` (a line each).
Says on stderr what it evaluates (checkpoint, size, split; a bar over the batches on a terminal),
prints each accuracy in percent, writes `resolution.md`, `resolution.csv` and `resolution.png`
(accuracy vs resolution, one line per checkpoint, or per checkpoint and conversion under
`resize_mode=all`) to `out=`, a new folder per evaluation by default, and logs
`resolution/<split>_acc` (step = image height; a tag per conversion asked for and per subset, see
`runs.conversion_suffix`) into each checkpoint's TensorBoard run.

Options (key=value): ckpt (a path or a list [a,b]; a folder means the latest best-*.ckpt of every
run under it, or last.ckpt where a run has no best), img_sizes (ints or [H,W] pairs), resize_mode
(a mode of the scheme, best or all), attn_temperature (none or log; default: the checkpoint's), split,
limit (this many images of the split, drawn at random with seed 0: the same ones every time),
batch_size, data (a configs/data name, instead of the checkpoint's own data config) or data.<key>
(a setting of the checkpoint's data config, e.g. data.root=<another copy of the data set>), data_dir
(the folder data sets are found and cached in, as train.py's paths.data_dir; a data.root the
checkpoint records comes first), out (default: a new folder logs/evaluate/<date>_<time>, under
$VITPOS_LOG_DIR in place of logs where it is set; an out= that holds an earlier evaluation's tables
is refused), overwrite (true: replace the tables in out=), device, test_flip (true: average each image's
logits with its mirror's, as training's test_flip).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torchmetrics.classification import MulticlassAccuracy
from tqdm import tqdm

from .cli import keyword_defaults, parse_options
from .config import data_settings, instantiate
from .data import describe_pixels
from .errors import ConfigError, VitposError, print_line
from .errors import report as report_error
from .model import ATTN_TEMPERATURES, check_attn_temperature, image_size
from .options import Option, check_options
from .pos import get_pos_class
from .precision import bf16_supported, chosen_device
from .resize import model_from_checkpoint, read_checkpoint
from .resolution_report import conversion_label, new_folder, output_folder, write_outputs
from .runs import RESULTS_FILE, conversion_suffix, find_checkpoints, run_dir, run_label, scheme_label, size_tag
from .tta import predict

BEST = "best"  # resize_mode=best: the conversion chosen on the validation split
ALL = "all"  # resize_mode=all: every conversion, each evaluated on the split
OPTIONS = {  # what `evaluate`'s own options take (the sizes, modes and data: their own checks)
    "split": Option("choice", "split=val", choices=("test", "val")),
    "limit": Option("count", "limit=1000", optional=True),
    "overwrite": Option("flag", "overwrite=true", needs="out", unset=False),
}


def subset_mask(size: int, limit: int | None) -> torch.Tensor | None:
    """`limit` of a split's `size` images drawn at random (seed 0: the same images for every
    checkpoint, size and conversion; every class, also when a split is stored class by class), as a
    boolean mask over the split's order; None for the whole split."""
    if limit is None or limit >= size:
        return None
    mask = torch.zeros(size, dtype=torch.bool)
    mask[torch.randperm(size, generator=torch.Generator().manual_seed(0))[:limit]] = True
    return mask


def split_size(datamodule, split: str) -> int:
    """The number of images of `datamodule`'s `split` (test or val)."""
    return len(datamodule.test_set if split == "test" else datamodule.val_set)


def split_subset(datamodule, split: str, limit: int | None) -> torch.Tensor | None:
    """The `subset_mask` of `limit` images of `datamodule`'s `split` (None: the whole split)."""
    return subset_mask(split_size(datamodule, split), limit)


def accuracy(model, datamodule, split: str, device, mask: torch.Tensor | None, doing: str = "", flip=False) -> float:
    """Top-1 accuracy of `model` on a split of `datamodule` at its current `img_size` (on the images
    `mask` keeps, see `split_subset`; None: all). `doing` (which checkpoint, size and conversion) goes
    to stderr first, then a bar over the batches where stderr is a terminal."""
    loader = datamodule.test_dataloader() if split == "test" else datamodule.val_dataloader()
    metric = MulticlassAccuracy(datamodule.num_classes, top_k=1, average="micro").to(device)
    count = int(mask.sum()) if mask is not None else split_size(datamodule, split)
    print_line(f"vitpos.evaluate: {doing}{split} split, {count} images")
    batches = tqdm(
        loader, total=len(loader), unit="batch", leave=False, file=sys.stderr, disable=not sys.stderr.isatty()
    )
    start = 0
    bf16 = bf16_supported(device.type)
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for images, labels in batches:  # the split in its stored order (evaluation loaders do not shuffle)
            if mask is not None:
                keep = mask[start : start + len(labels)]
                start += len(labels)
                if not keep.any():
                    continue
                images, labels = images[keep.to(images.device)], labels[keep.to(labels.device)]
            images = datamodule.preprocess(images.to(device), train=False)
            metric.update(predict(model, images, flip).float(), labels.to(device))
    return float(metric.compute())


def conversions(pos: str, resize_mode, attn_temperature) -> list[tuple]:
    """The (resize_mode, attn_temperature) pairs to evaluate a checkpoint of scheme `pos` with:
    the given pair, or under `resize_mode=best` / `all` every mode of the scheme with each temperature."""
    if resize_mode not in (BEST, ALL):
        return [(resize_mode, attn_temperature)]
    temperatures = [attn_temperature] if attn_temperature is not None else list(ATTN_TEMPERATURES)
    return [(mode, temperature) for mode in get_pos_class(pos).resize_modes or (None,) for temperature in temperatures]


def evaluate(
    ckpt,
    img_sizes,
    resize_mode=None,
    attn_temperature=None,
    split="test",
    limit=None,
    batch_size=256,
    data=None,
    data_dir=None,
    out=None,
    overwrite=False,
    device="auto",
    test_flip=False,
) -> list[dict]:
    """Evaluate each checkpoint at each size; write the table, CSV and plot; return the rows."""
    check_options(dict(split=split, limit=limit, overwrite=overwrite, out=out), OPTIONS)
    out, fresh = output_folder(out, overwrite)
    if attn_temperature is not None:
        check_attn_temperature(attn_temperature)
    request = Request(resize_mode, attn_temperature, split, limit, chosen_device(device), test_flip)
    if not isinstance(img_sizes, (list, tuple)) or not img_sizes:
        raise ConfigError(f"img_sizes={img_sizes!r} must be a list of sizes, e.g. img_sizes=[32,48,64]")
    sizes = [image_size(size) for size in img_sizes]
    twice = sorted({size_tag(size) for size in sizes if sizes.count(size) > 1})
    if twice:
        raise ConfigError(f"img_sizes lists {', '.join(twice)} more than once; give each size once")
    rows, subsetted = [], False
    paths = find_checkpoints(ckpt)
    for number, path in enumerate(paths, 1):
        checkpoint = read_checkpoint(path)
        datamodule = checkpoint_datamodule(checkpoint, path, data, batch_size, data_dir)
        subsetted |= split_subset(datamodule, split, limit) is not None
        writer = _tensorboard_writer(path)
        for size in sizes:
            pixels = describe_pixels(size, datamodule.native_size)
            doing = f"{run_label(path)} (checkpoint {number}/{len(paths)}) at {size_tag(size)}"
            doing += f" ({pixels}), " if pixels else ", "
            rows += evaluate_at_size(checkpoint, path, datamodule, size, request, writer, doing)
        if writer is not None:
            writer.close()
    out = new_folder(out) if fresh else out
    write_outputs(rows, sizes, out, limit if subsetted else None, by_conversion=resize_mode == ALL)
    return rows


@dataclass(frozen=True)
class Request:
    """What an evaluation asks of every checkpoint and size: the conversion options, split, subset and device."""

    resize_mode: str | None
    attn_temperature: str | None
    split: str
    limit: int | None
    device: torch.device
    test_flip: bool


def checkpoint_datamodule(checkpoint: dict, path: Path, data, batch_size: int, data_dir):
    """The data the checkpoint was trained on (or `data`, a configs/data name), set up for evaluation."""
    data_cfg = data_settings(data, checkpoint["hyper_parameters"].get("data"), str(path))
    data_cfg = dict(data_cfg, batch_size=batch_size, **({"data_dir": data_dir} if data_dir else {}))
    datamodule = instantiate(data_cfg)
    datamodule.setup("test")  # no training batch to fill: a small data set evaluates at any batch_size
    return datamodule


def evaluate_at_size(
    checkpoint: dict, path: Path, datamodule, size: tuple[int, int], request: Request, writer, doing: str
) -> list[dict]:
    """The rows of checkpoint `path` at `size`: one per conversion under `resize_mode=all`, else one,
    of the conversion asked for or of the one `choose_conversion` picks."""
    datamodule.use_size(size)
    trained = checkpoint["hyper_parameters"]["model"]
    candidates = conversions(trained["pos"], request.resize_mode, request.attn_temperature)

    def row(conversion: tuple, forced, note: str = "", doing: str = doing) -> dict:
        model = model_from_checkpoint(checkpoint, size, *conversion).to(request.device)  # the file is read once
        split, device, limit = request.split, request.device, request.limit
        args = (model, path, trained, datamodule, split, device, limit, writer, forced, note, doing)
        return evaluate_one(*args, flip=request.test_flip)

    if request.resize_mode == ALL:
        return [
            row(conversion, conversion, doing=f"{doing}{conversion_label(*conversion)} ({index}/{len(candidates)}), ")
            for index, conversion in enumerate(candidates, 1)
        ]
    chosen, note, chosen_on = choose_conversion(checkpoint, datamodule, size, candidates, request, doing)
    forced = None if request.resize_mode == BEST else (request.resize_mode, request.attn_temperature)
    return [dict(row(chosen, forced, note), chosen_on=chosen_on)]


def choose_conversion(checkpoint: dict, datamodule, size, candidates: list[tuple], request: Request, doing: str):
    """(conversion, note for its printed line, what it was chosen on) at `size`: the only candidate;
    the first at the trained size; else the best on the validation split."""
    if len(candidates) == 1:
        return candidates[0], "", ""
    if size == image_size(checkpoint["hyper_parameters"]["model"]["img_size"]):
        # every resize rule and the temperature are the identity at the trained grid (tests)
        return candidates[0], "  (the trained size: every conversion is the model as trained)", "trained size"
    val_mask = split_subset(datamodule, "val", request.limit)
    val_accs = {
        conversion: accuracy(
            model_from_checkpoint(checkpoint, size, *conversion).to(request.device),
            datamodule,
            "val",
            request.device,
            val_mask,
            doing=f"{doing}choosing: {conversion_label(*conversion)} ({index}/{len(candidates)}), ",
            flip=request.test_flip,
        )
        for index, conversion in enumerate(candidates, 1)
    }
    chosen = max(val_accs, key=val_accs.get)  # the first of equals: candidates are in a fixed order
    note = f"  (best of {len(candidates)} on val: {conversion_label(*chosen)}, val acc {percent(val_accs[chosen])})"
    return chosen, note, "val"


def percent(fraction: float) -> str:
    """`81.23%`: an accuracy as training's summary prints it."""
    return f"{100 * fraction:.2f}%"


def evaluate_one(
    model, path: Path, trained: dict, datamodule, split, device, limit, writer, forced, note="", doing="", flip=False
) -> dict:
    """One converted model (of checkpoint `path`, trained with model arguments `trained`) on `split`:
    its row of resolution.csv, printed, and its accuracy logged into the run; a conversion the user
    forced (`forced`: the resize_mode and attn_temperature asked for) and a subset (`limit`) get their
    own tag, so every conversion of one checkpoint stays readable (`runs.conversion_suffix`)."""
    mask = split_subset(datamodule, split, limit)
    acc = accuracy(model, datamodule, split, device, mask, doing=doing, flip=flip)
    size = model.config["img_size"]
    row = dict(
        run=run_label(path),
        pos=scheme_label({"name": trained["pos"], **trained["pos_kwargs"]}),  # as compare names it
        trained_at=size_tag(trained["img_size"]),
        img_size=size_tag(size),
        pixels=datamodule.pixels(size),
        resize_mode=model.config["pos_kwargs"].get("resize_mode", ""),
        attn_temperature=model.config["attn_temperature"],
        chosen_on="",
        split=split,
        images=int(mask.sum()) if mask is not None else split_size(datamodule, split),
        acc=round(acc, 4),
        checkpoint=str(path),
    )
    conversion = f" {conversion_label(row['resize_mode'], row['attn_temperature'])}" if forced else ""
    print(
        f"{row['run']:<50} {row['pos']:<12} {row['img_size']:>9} {row['pixels']:<11}{conversion}  "
        f"{split} acc {percent(acc)}{note}",
        flush=True,
    )
    if writer is not None:
        suffix = conversion_suffix(*(forced or (None, None)), limit if mask is not None else None)
        writer.add_scalar(f"resolution/{split}_acc" + (f"_{suffix}" if suffix else ""), acc, global_step=size[0])
    return row


def _tensorboard_writer(path: Path):
    """A writer into the checkpoint's run, or None: a loose file has no run, and a run that has not
    finished (no results.json: still training, or stopped) is only read, never written into."""
    from torch.utils.tensorboard import SummaryWriter

    run = run_dir(path)
    if run is None:
        return None
    if not (run / RESULTS_FILE).is_file():
        print(
            f"note: {run_label(path)} has not finished (no {RESULTS_FILE}): its checkpoint {path.name} is "
            f"evaluated, nothing is logged into the run",
            flush=True,
        )
        return None
    return SummaryWriter(log_dir=str(run), filename_suffix=".resolution")


def main(argv: list[str]) -> int:
    try:
        defaults = dict(ckpt=None, img_sizes=[32, 48, 64], **keyword_defaults(evaluate))
        options = parse_options(argv, defaults, __doc__)
        if not options.ckpt:
            raise ConfigError(
                "pass ckpt=<checkpoint, run folder or log root>, e.g. "
                "python -m vitpos.evaluate ckpt=logs img_sizes=[32,48,64]"
            )
        evaluate(**OmegaConf.to_container(options, resolve=True))
    except VitposError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
