"""Figures of what a positional scheme encodes and how far attention looks (drawn by hooks, never
by scheme name), and the one pyplot set-up every plot of the project uses. `python -m
vitpos.figures` and the `PositionalFigures` callback draw these."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from .model import VisionTransformer
from .pos.base import Grid


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (no display needed: servers, CI, workers)."""
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
    plt = pyplot()
    table = torch.nn.functional.normalize(positional_table(model, grid), dim=-1)
    similarity = table @ table.T  # (N, N)
    figure, axes = plt.subplots(figsize=(6.5, 6))
    image = axes.imshow(mosaic(similarity, grid).numpy(), cmap="viridis", vmin=similarity.min().item(), vmax=1)
    axes.set_xticks([])
    axes.set_yticks([])
    axes.set_title(
        f"{model.config['pos']}: cosine similarity of positional vectors\n"
        f"(tile (r, c): patch (r, c) against every patch; {grid[0]} x {grid[1]} grid)"
    )
    figure.colorbar(image, ax=axes, fraction=0.046)
    figure.tight_layout()
    return figure


def table_figure(model: VisionTransformer, grid: Grid):
    """The added table as a heat map (patch x channel) and a few channels as waveforms."""
    plt = pyplot()
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
    """maps (layers, heads, H*W) as a layers x heads panel of H x W images around the centre patch;
    NaN entries (a masked key) in grey, outside the colour scale."""
    plt = pyplot()
    layers, heads = maps.shape[:2]
    figure, axes = plt.subplots(
        layers, heads, figsize=(1.7 * heads + 1.4, 1.6 * layers + 0.7), squeeze=False, layout="constrained"
    )
    shown = maps[~maps.isnan()]
    low, high = (shown.min().item(), shown.max().item()) if shown.numel() else (0.0, 1.0)
    colours = plt.get_cmap("magma").with_extremes(bad="0.8")
    centre = divmod(centre_index(grid), grid[1])
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(maps[layer, head].reshape(grid).numpy(), cmap=colours, vmin=low, vmax=high)
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


def bias_figure(model: VisionTransformer, images: Tensor):
    """The attention-logit bias from the centre patch to every patch, per layer and head, as the
    blocks see it on `images` (mean over them: a query-dependent bias differs per image); a key the
    bias masks (-inf) in grey."""
    grid = model.grid_for(images.shape[-2:])
    query = model.num_prefix_tokens + centre_index(grid)

    def centre_row(attention, q, k, bias):  # bias (heads, T, T) or (B, heads, T, T) -> (heads, N)
        return bias.float().reshape(-1, *bias.shape[-3:]).mean(dim=0)[:, query, model.num_prefix_tokens :]

    maps = torch.stack(record_attention(model, images, centre_row)).cpu()
    masked = maps == float("-inf")
    return per_head_figure(
        maps.masked_fill(masked, float("nan")),
        grid,
        f"{model.config['pos']}: attention bias from the centre patch (+), mean over {len(images)} images"
        + (" (grey: masked)" if masked.any() else ""),
        "logit bias",
    )


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
    return per_head_figure(
        torch.stack(maps).float(),
        grid,
        f"{model.config['pos']}: rotary score of q = k = 1 from the centre patch (+)",
        "score / head_dim",
    )


def patch_distances(grid: Grid, patch_size: int) -> Tensor:
    """Euclidean distance in pixels between the centres of every two patches, (N, N)."""
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float() * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def record_attention(model: VisionTransformer, images: Tensor, read) -> list:
    """`read(attention, q, k, bias)` of every block on `images`, in block order: q and k
    (B, heads, T, head_dim) after rotation, bias the additive logit bias or None, T counting the
    prefix tokens."""
    results = []

    def record(attention, args, kwargs, output):
        q, k, _ = attention.heads(args[0], kwargs.get("rotate"))
        bias = kwargs.get("bias")
        results.append(read(attention, q, k, None if bias is None else bias(q)))

    handles = [block.attn.register_forward_hook(record, with_kwargs=True) for block in model.blocks]
    try:
        with torch.no_grad():
            model(images)
    finally:
        for handle in handles:
            handle.remove()
    return results


def attention_distances(model: VisionTransformer, images: Tensor) -> Tensor:
    """Mean attended distance in pixels, (layers, heads): for each query patch, the attention-
    weighted mean Euclidean distance between patch centres, averaged over queries and images."""
    prefix = model.num_prefix_tokens
    distance = patch_distances(model.grid_for(images.shape[-2:]), model.patch_size).to(images.device)

    def mean_distance(attention, q, k, bias):
        probs = attention.probs(q, k, bias).float()[:, :, prefix:, prefix:]  # patches only
        probs = probs / probs.sum(dim=-1, keepdim=True)
        return (probs * distance).sum(dim=-1).mean(dim=(0, 2))  # (heads,)

    return torch.stack(record_attention(model, images, mean_distance)).cpu()


def attention_distance_figure(model: VisionTransformer, images: Tensor):
    plt = pyplot()
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
    axes.set_title(
        f"{model.config['pos']}: mean attention distance per head\n"
        f"({len(images)} images, {grid[0]} x {grid[1]} patches of {model.patch_size} px)"
    )
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
            figures["bias"] = bias_figure(model, images)
        if model.pos.uses("rotate"):
            figures["rotary"] = rotary_figure(model, grid)
    figures["attention_distance"] = attention_distance_figure(model, images)
    return figures


def save_figures(figures: dict, out: Path) -> list[Path]:
    plt = pyplot()
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
