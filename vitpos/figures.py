"""Figures of what a positional scheme encodes, and of how far each attention head looks:

    python -m vitpos.figures ckpt=<checkpoint or run folder> [out=<folder>] [images=64]
    python -m vitpos.figures pos=<scheme> [img_size=32 dim=192 ...]   # a fresh model: the scheme at init

Which figures a model gets follows from the hooks its scheme uses, never from the scheme's name:
- `add` (absolute tables): `similarity.png`, the cosine similarity of each patch's positional
  vector with every other patch, one small map per patch (Dosovitskiy et al. 2021, Fig. 7 centre),
  and `table.png`, the table as a heat map (patch x channel) with a few channels drawn as
  waveforms along the patch index (the sin-cos figures of the seeds);
- `bias`: `bias.png`, the attention-logit bias seen from the centre patch, per layer and head;
- `rotate`: `rotary.png`, the score q_c . k_j that rotation alone gives for q = k = the same
  unit vector at every patch, seen from the centre patch, per layer and head: the rotary
  "kernel" over 2D offsets;
- every scheme: `attention_distance.png`, the mean distance in pixels between a query patch and
  the patches it attends to, weighted by attention, per head and layer, on real images
  (Dosovitskiy et al. 2021, Fig. 7 right). Prefix (cls) tokens are left out and the patch
  attention renormalised.

The same figures are logged to TensorBoard (`figures/<name>`) and saved under
`<run>/figures/` at the end of training by the `PositionalFigures` callback (`figures_at_end`).

Options (key=value): ckpt or pos, out (default: `<run>/figures` for a checkpoint in a run
folder, else logs/figures/<pos>), images (images for the attention distance), split (val or
test), data (a configs/data name, instead of the checkpoint's own), data_dir, img_size, seed,
and for pos= the model arguments (dim, depth, num_heads, patch_size, in_chans, ...).
"""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
import lightning as L
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from omegaconf import OmegaConf
from torch import Tensor

from .errors import ConfigError, VitposError
from .errors import report as report_error
from .model import VisionTransformer, create_model
from .pos.base import Grid

DEFAULTS = dict(ckpt=None, pos=None, out=None, images=64, split="val", data=None, data_dir=None, img_size=32,
                seed=0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def centre_index(grid: Grid) -> int:
    """Row-major index of the centre patch (the lower-right one of the four for an even side)."""
    return (grid[0] // 2) * grid[1] + grid[1] // 2


def positional_table(model: VisionTransformer, grid: Grid) -> Tensor:
    """What the `add` hook adds to the patch tokens: (N, D), read by adding it to zeros."""
    tokens = torch.zeros(1, grid[0] * grid[1], model.config["dim"])
    return model.pos.add(tokens, grid)[0].float()


def mosaic(maps: Tensor, grid: Grid) -> Tensor:
    """N maps (N, H, W) for the N = H*W patches -> one (H*(H+1), W*(W+1)) image, map of patch
    (r, c) at tile (r, c), tiles separated by a NaN line."""
    height, width = grid
    tiles = torch.full((height, width, height + 1, width + 1), float("nan"))
    tiles[:, :, :height, :width] = maps.reshape(height, width, height, width)
    return tiles.permute(0, 2, 1, 3).reshape(height * (height + 1), width * (width + 1))


def similarity_figure(model: VisionTransformer, grid: Grid):
    """Cosine similarity of every patch's positional vector with all others, as a mosaic."""
    plt = _pyplot()
    table = torch.nn.functional.normalize(positional_table(model, grid), dim=-1)
    similarity = table @ table.T  # (N, N)
    figure, axes = plt.subplots(figsize=(6.5, 6))
    image = axes.imshow(mosaic(similarity, grid).numpy(), cmap="viridis", vmin=similarity.min().item(), vmax=1)
    axes.set_xticks([])
    axes.set_yticks([])
    axes.set_title(f"{model.config['pos']}: cosine similarity of positional vectors\n"
                   f"(tile (r, c): patch (r, c) against every patch; {grid[0]} x {grid[1]} grid)")
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return figure


def table_figure(model: VisionTransformer, grid: Grid):
    """The added table as a heat map (patch x channel) and a few channels as waveforms."""
    plt = _pyplot()
    table = positional_table(model, grid)
    dim = table.shape[1]
    channels = sorted({0, dim // 4, dim // 2, 3 * dim // 4})  # for sin-cos: fast and slow, both axes
    figure, (heat, waves) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.2, 1]})
    image = heat.imshow(table.numpy(), aspect="auto", cmap="RdBu_r")
    heat.set_xlabel("channel")
    heat.set_ylabel("patch (row-major)")
    heat.set_title(f"{model.config['pos']}: positional table ({grid[0]} x {grid[1]} patches x {dim})")
    figure.colorbar(image, ax=heat, fraction=0.046)
    for channel in channels:
        waves.plot(table[:, channel].numpy(), label=f"channel {channel}", linewidth=1.2)
    for row in range(1, grid[0]):
        waves.axvline(row * grid[1] - 0.5, color="0.85", linewidth=0.6)
    waves.set_xlabel("patch (row-major; grey lines: new row)")
    waves.set_title("channel waveforms")
    waves.legend(fontsize=7)
    figure.tight_layout()
    return figure


def per_head_figure(maps: Tensor, grid: Grid, title: str, colorbar_label: str):
    """maps (layers, heads, H*W) as a layers x heads panel of H x W images around the centre patch."""
    plt = _pyplot()
    layers, heads = maps.shape[:2]
    figure, axes = plt.subplots(layers, heads, figsize=(1.7 * heads + 1.4, 1.6 * layers + 0.7), squeeze=False,
                                layout="constrained")
    low, high = maps.min().item(), maps.max().item()
    centre = divmod(centre_index(grid), grid[1])
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(maps[layer, head].reshape(grid).numpy(), cmap="magma", vmin=low, vmax=high)
            ax.plot(centre[1], centre[0], marker="+", color="cyan", markersize=6)
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=8)
            if head == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.02, label=colorbar_label)
    return figure


def bias_figure(model: VisionTransformer, grid: Grid):
    """The attention-logit bias from the centre patch to every patch, per layer and head."""
    centre = centre_index(grid)
    maps = torch.stack([model.pos.bias(layer, grid)[:, centre].float() for layer in range(model.config["depth"])])
    return per_head_figure(maps, grid, f"{model.config['pos']}: attention bias from the centre patch (+)",
                           "logit bias")


def rotary_figure(model: VisionTransformer, grid: Grid):
    """q_c . k_j / head_dim after rotation, q = k = ones at every patch, per layer and head: the
    score rotation alone assigns to each offset from the centre patch."""
    heads, num_patches = model.config["num_heads"], grid[0] * grid[1]
    head_dim = model.config["dim"] // heads
    unit = torch.ones(1, heads, num_patches, head_dim)
    centre = centre_index(grid)
    maps = []
    for layer in range(model.config["depth"]):
        q, k = model.pos.rotate(layer, unit, unit, grid)
        maps.append((q[0, :, centre : centre + 1] @ k[0].transpose(-2, -1))[:, 0] / head_dim)  # (heads, N)
    return per_head_figure(torch.stack(maps).float(), grid,
                           f"{model.config['pos']}: rotary score of q = k = 1 from the centre patch (+)",
                           "score / head_dim")


def patch_distances(grid: Grid, patch_size: int) -> Tensor:
    """Euclidean distance in pixels between the centres of every two patches, (N, N)."""
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def attention_distances(model: VisionTransformer, images: Tensor) -> Tensor:
    """Mean attended distance in pixels, (layers, heads): for each query patch, the attention-
    weighted mean Euclidean distance between patch centres, averaged over queries and images."""
    prefix = model.num_prefix_tokens
    distance = patch_distances(model.grid_for(images.shape[-2:]), model.patch_size).to(images.device)
    per_layer = []

    def record(attention, args, kwargs, output):
        q, k, _ = attention.heads(args[0], kwargs.get("rotate"))
        probs = attention.probs(q, k, kwargs.get("bias")).float()[:, :, prefix:, prefix:]  # patches only
        probs = probs / probs.sum(dim=-1, keepdim=True)
        per_layer.append((probs * distance).sum(dim=-1).mean(dim=(0, 2)))  # (heads,)

    handles = [block.attn.register_forward_hook(record, with_kwargs=True) for block in model.blocks]
    try:
        with torch.no_grad():
            model(images)
    finally:
        for handle in handles:
            handle.remove()
    return torch.stack(per_layer).cpu()


def attention_distance_figure(model: VisionTransformer, images: Tensor):
    plt = _pyplot()
    distances = attention_distances(model, images)  # (layers, heads)
    layers, heads = distances.shape
    figure, axes = plt.subplots(figsize=(6.5, 4.2))
    for head in range(heads):
        axes.scatter(torch.arange(layers).numpy(), distances[:, head].numpy(), s=18, label=f"head {head}")
    axes.plot(torch.arange(layers).numpy(), distances.mean(dim=1).numpy(), color="0.3", linewidth=1, label="mean")
    grid = model.grid_for(images.shape[-2:])
    uniform = patch_distances(grid, model.patch_size).mean().item()
    axes.axhline(uniform, color="0.5", linestyle="--", linewidth=1, label="uniform attention")
    axes.set_xlabel("layer")
    axes.set_ylabel("mean attention distance (pixels)")
    axes.set_title(f"{model.config['pos']}: mean attention distance per head\n"
                   f"({len(images)} images, {grid[0]} x {grid[1]} patches of {model.patch_size} px)")
    axes.set_xticks(range(layers))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return figure


def make_figures(model: VisionTransformer, images: Tensor) -> dict:
    """name -> matplotlib figure for `model` on `images` (already preprocessed), at their grid."""
    model.eval()
    grid = model.grid_for(images.shape[-2:])
    figures = {}
    with torch.no_grad():
        if model.pos.uses("add"):
            figures["similarity"] = similarity_figure(model, grid)
            figures["table"] = table_figure(model, grid)
        if model.pos.uses("bias"):
            figures["bias"] = bias_figure(model, grid)
        if model.pos.uses("rotate"):
            figures["rotary"] = rotary_figure(model, grid)
    figures["attention_distance"] = attention_distance_figure(model, images)
    return figures


def save_figures(figures: dict, out: Path) -> list[Path]:
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, figure in figures.items():
        paths.append(out / f"{name}.png")
        figure.savefig(paths[-1], dpi=110)
        plt.close(figure)
    return paths


def sample_images(datamodule, count: int, split: str = "val") -> Tensor:
    """The first `count` images of a split, preprocessed for evaluation (B, C, H, W)."""
    datamodule.setup()
    loader = datamodule.val_dataloader() if split == "val" else datamodule.test_dataloader()
    batches, seen = [], 0
    for images, _ in loader:
        batches.append(images[: count - seen])
        seen += len(batches[-1])
        if seen >= count:
            break
    return datamodule.preprocess(torch.cat(batches), train=False)


class PositionalFigures(L.Callback):
    """At the end of training, logs `make_figures` of the trained model to TensorBoard
    (`figures/<name>`, at the last step) and saves them as PNG under `<run>/figures/`, using the
    first `num_images` validation images."""

    def __init__(self, num_images: int = 64):
        self.num_images = num_images

    @rank_zero_only
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model = pl_module.model
        was_training = model.training
        images = sample_images(trainer.datamodule, self.num_images).to(pl_module.device)
        figures = make_figures(model, images.to(next(model.parameters()).dtype))
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "add_figure"):
            for name, figure in figures.items():
                experiment.add_figure(f"figures/{name}", figure, global_step=trainer.global_step, close=False)
        # the logger's folder, not `trainer.log_dir`: that one is a broadcast, a collective that
        # rank 0 alone (this hook) must not enter under DDP
        log_dir = getattr(trainer.logger, "log_dir", None)
        if log_dir:
            save_figures(figures, Path(log_dir) / "figures")
        else:
            for figure in figures.values():
                _pyplot().close(figure)
        model.train(was_training)


def figures_from_options(options) -> tuple[dict, Path]:
    """Build the model and images named by the command-line options; return (figures, out)."""
    from .evaluate import data_config, find_checkpoints
    from .resize import model_from_checkpoint, read_checkpoint

    torch.manual_seed(options.seed)
    data_dir = {"data_dir": options.data_dir} if options.data_dir else {}
    if options.ckpt:
        path = find_checkpoints(options.ckpt)[0]
        checkpoint = read_checkpoint(path)
        model = model_from_checkpoint(checkpoint)
        data_cfg = data_config(options.data) if options.data else checkpoint["hyper_parameters"].get("data")
        if not data_cfg:
            raise ConfigError(f"{path} records no data config; pass data=<name of configs/data/*.yaml>")
        datamodule = hydra.utils.instantiate(dict(data_cfg, img_size=model.config["img_size"], **data_dir))
        in_run = path.parent.name == "checkpoints"
        default_out = path.parent.parent / "figures" if in_run else Path("logs/figures") / model.config["pos"]
    elif options.pos:
        datamodule = hydra.utils.instantiate(dict(data_config(options.data or "synthetic"), img_size=options.img_size,
                                                  **data_dir))
        model_args = {k: v for k, v in OmegaConf.to_container(options).items() if k not in DEFAULTS}
        model_args = {"in_chans": datamodule.in_chans, "num_classes": datamodule.num_classes, **model_args}
        model = create_model(options.pos, img_size=options.img_size, **model_args)
        default_out = Path("logs/figures") / options.pos
    else:
        raise ConfigError("pass ckpt=<checkpoint or run folder> or pos=<scheme>, e.g. "
                          "python -m vitpos.figures ckpt=logs/2d_sin_cifar10_32px")
    images = sample_images(datamodule, options.images, options.split)
    return make_figures(model, images), Path(options.out) if options.out else default_out


def main(argv: list[str]) -> int:
    options = OmegaConf.merge(OmegaConf.create(DEFAULTS), OmegaConf.from_dotlist(argv))
    try:
        if options.split not in ("val", "test"):
            raise ConfigError(f"split={options.split!r} must be val or test")
        figures, out = figures_from_options(options)
        for path in save_figures(figures, out):
            print(f"wrote {path}")
    except (VitposError, TypeError) as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
