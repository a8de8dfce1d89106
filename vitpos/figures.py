"""Figures of what a positional scheme encodes, and of how far each attention head looks:

    python -m vitpos.figures ckpt=<checkpoint or run folder> [out=<folder>] [images=64]
    python -m vitpos.figures pos=<scheme> [img_size=32 dim=192 ...]   # a fresh model: the scheme at init

Which figures a model gets follows from the hooks its scheme uses, never from the scheme's name:
- `add` (absolute tables): `similarity.png`, the cosine similarity of each patch's positional
  vector with every other patch, one small map per patch (Dosovitskiy et al. 2021, Fig. 7 centre),
  and `table.png`, the table as a heat map (patch x channel) with a few channels drawn as
  waveforms along the patch index (the sin-cos figures of the seeds);
- `bias`: `bias.png`, the attention-logit bias seen from the centre patch, per layer and head, as
  the blocks see it on the images (their mean: a query-dependent bias, `rel_shaw`, differs per image);
- `rotate`: `rotary.png`, the score q_c . k_j that rotation alone gives for q = k = the same
  unit vector at every patch, seen from the centre patch, per layer and head: the rotary
  "kernel" over 2D offsets;
- every scheme: `attention_distance.png`, the mean distance in pixels between a query patch and
  the patches it attends to, weighted by attention, per head and layer, on real images
  (Dosovitskiy et al. 2021, Fig. 7 right). Prefix (cls) tokens are left out and the patch
  attention renormalised.

The same figures are logged to TensorBoard (`figures/<name>`) and saved under
`<run>/figures/` at the end of training by the `PositionalFigures` callback (`callbacks.figures`).

Options (key=value): ckpt or pos, out (default: `<run>/figures` for a checkpoint in a run
folder, else logs/figures/<pos>), images (images for the attention distance), split (val or
test), data (a configs/data name, instead of the checkpoint's own) or data.<key> (one of its
settings, e.g. data.root=<a copy of the data set>), data_dir, img_size, seed,
and for pos= the model arguments (dim, depth, num_heads, patch_size, in_chans, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from .cli import parse_options, refuse_beside_ckpt
from .config import data_config, data_settings, instantiate
from .errors import ConfigError, VitposError
from .errors import report as report_error
from .model import MODEL_ARGS, create_model
from .options import Option, check_options
from .plots import make_figures, sample_images, save_figures
from .resize import model_from_checkpoint, read_checkpoint
from .runs import check_out_folder, find_checkpoints, run_dir

DEFAULTS = dict(ckpt=None, pos=None, out=None, images=64, split="val", data=None, data_dir=None, img_size=32, seed=0)
OPTIONS = {
    "images": Option("count", "images=64"),
    "split": Option("choice", "split=test", choices=("val", "test")),
    "seed": Option("seed", "seed=0"),
}


def figures_from_options(options) -> tuple[dict, Path]:
    """Build the model and images named by the command-line options; return (figures, out)."""
    torch.manual_seed(options.seed)
    data_dir = {"data_dir": options.data_dir} if options.data_dir else {}
    if options.ckpt:
        path = find_checkpoints(options.ckpt)[0]
        checkpoint = read_checkpoint(path)
        model = model_from_checkpoint(checkpoint)
        data_cfg = data_settings(options.data, checkpoint["hyper_parameters"].get("data"), str(path))
        datamodule = instantiate(dict(data_cfg, img_size=model.config["img_size"], **data_dir))
        run = run_dir(path)
        default_out = run / "figures" if run else Path("logs/figures") / model.config["pos"]
    elif options.pos:
        data_cfg = data_settings(options.data, data_config("synthetic"), "data=synthetic")  # synthetic by default
        datamodule = instantiate(dict(data_cfg, img_size=options.img_size, **data_dir))
        model_args = {k: v for k, v in OmegaConf.to_container(options).items() if k in MODEL_ARGS}
        model_args = {"in_chans": datamodule.in_chans, "num_classes": datamodule.num_classes, **model_args}
        model = create_model(options.pos, img_size=options.img_size, **model_args)
        default_out = Path("logs/figures") / options.pos
    else:
        raise ConfigError(
            "pass ckpt=<checkpoint or run folder> or pos=<scheme>, e.g. "
            "python -m vitpos.figures ckpt=logs/2d_sin_cifar10_32px"
        )
    images = sample_images(datamodule, options.images, options.split)
    return make_figures(model, images), Path(options.out) if options.out else default_out


def main(argv: list[str]) -> int:
    try:
        options = parse_options(argv, DEFAULTS, __doc__, extra_keys=MODEL_ARGS)
        check_options(options, OPTIONS)
        if options.out:
            check_out_folder(Path(options.out))
        refuse_beside_ckpt(argv, {"pos", "img_size", *MODEL_ARGS})  # a checkpoint's figures: at its own size
        figures, out = figures_from_options(options)
        for path in save_figures(figures, out):
            print(f"wrote {path}")
    except VitposError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
