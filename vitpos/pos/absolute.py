"""Absolute positional embeddings, added to the patch tokens once (the `add` hook).

- `1d_learned`: one learned vector per token, as in ViT (Dosovitskiy et al. 2021, "An Image is
  Worth 16x16 Words").
- `2d_learned`: learned row and column tables, concatenated (half the channels each).
- `1d_sin`: the fixed sinusoids of "Attention Is All You Need" (Vaswani et al. 2017) over the
  row-major token index.
- `2d_sin`: fixed sin-cos of row and column, half the channels each (MoCo v3, Chen et al. 2021;
  "Better plain ViT baselines", Beyer et al. 2022). Built by timm's `build_sincos2d_pos_embed`.

On a grid other than the one the model was built for, learned tables are resampled (timm's
`resample_abs_pos_embed` for the 1D table, 1D interpolation per axis for row/col tables) and
fixed tables are recomputed for the new grid. All tables are made in fp32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import build_sincos2d_pos_embed, resample_abs_pos_embed, trunc_normal_
from torch import Tensor, nn

from .base import Grid, PositionalEncoding, check_choice, check_divisible
from .registry import register


class AdditiveEncoding(PositionalEncoding):
    """An additive scheme: `table(grid)` gives (H*W, D) in fp32; `add` adds it to the tokens."""

    def table(self, grid: Grid) -> Tensor:
        raise NotImplementedError

    def add(self, x: Tensor, grid: Grid) -> Tensor:
        return x + self.table(grid)


@register("1d_learned")
class Learned1d(AdditiveEncoding):
    """A learned vector per token position (ViT). Resampled as an (H, W) image on other grids.

    Args:
        resize_mode: interpolation for other grids, `bicubic` or `bilinear`.
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "bicubic"):
        super().__init__(dim, num_heads, depth, grid)
        check_choice("1d_learned", "resize_mode", resize_mode, ("bicubic", "bilinear"))
        self.resize_mode = resize_mode
        self.embedding = nn.Parameter(torch.zeros(1, self.grid[0] * self.grid[1], dim))  # (1, H*W, D)
        trunc_normal_(self.embedding, std=0.02)

    def table(self, grid: Grid) -> Tensor:
        embedding = self.embedding
        if tuple(grid) != self.grid:
            embedding = resample_abs_pos_embed(
                embedding, new_size=list(grid), old_size=list(self.grid), num_prefix_tokens=0,
                interpolation=self.resize_mode,
            )
        return embedding[0]


@register("2d_learned")
class Learned2d(AdditiveEncoding):
    """Learned row and column tables, (H, D/2) and (W, D/2), concatenated per token.

    Args:
        resize_mode: 1D interpolation per axis for other grids (`linear`).
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "linear"):
        super().__init__(dim, num_heads, depth, grid)
        check_divisible("2d_learned", dim, 2, "half the channels for rows, half for columns")
        check_choice("2d_learned", "resize_mode", resize_mode, ("linear", "nearest"))
        self.resize_mode = resize_mode
        self.rows = nn.Parameter(torch.zeros(self.grid[0], dim // 2))
        self.cols = nn.Parameter(torch.zeros(self.grid[1], dim // 2))
        trunc_normal_(self.rows, std=0.02)
        trunc_normal_(self.cols, std=0.02)

    def _axis(self, table: Tensor, size: int) -> Tensor:
        if table.shape[0] == size:
            return table
        # (L, C) -> (1, C, L) -> interpolate along L -> (size, C)
        resized = F.interpolate(table.T[None], size=size, mode=self.resize_mode, align_corners=False)
        return resized[0].T

    def table(self, grid: Grid) -> Tensor:
        height, width = grid
        rows = self._axis(self.rows, height)[:, None, :].expand(height, width, -1)  # (H, W, D/2)
        cols = self._axis(self.cols, width)[None, :, :].expand(height, width, -1)  # (H, W, D/2)
        return torch.cat([rows, cols], dim=-1).reshape(height * width, self.dim)


def sincos_1d(positions: Tensor, dim: int, temperature: float = 10000.0) -> Tensor:
    """Vaswani et al.: PE[n, 2i] = sin(n / T^(2i/D)), PE[n, 2i+1] = cos(n / T^(2i/D)). (N,) -> (N, D)."""
    inv_freq = temperature ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (D/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (N, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(len(positions), dim)


class FixedSincos(AdditiveEncoding):
    """A fixed sin-cos table: cached as a non-persistent buffer for the built grid, recomputed
    (positions 0..H'-1, 0..W'-1) for any other grid."""

    divisor = 2
    why = "sin and cos pairs"

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, temperature: float = 10000.0):
        super().__init__(dim, num_heads, depth, grid)
        check_divisible(self.scheme_name, dim, self.divisor, self.why)
        self.temperature = temperature
        self.register_buffer("cached", self._compute(self.grid), persistent=False)

    def _compute(self, grid: Grid) -> Tensor:
        raise NotImplementedError

    def table(self, grid: Grid) -> Tensor:
        if tuple(grid) == self.grid:
            return self.cached
        return self._compute(grid).to(self.cached)  # the buffer's device and dtype


@register("1d_sin")
class Sincos1d(FixedSincos):
    """Fixed 1D sinusoids over the row-major token index n = row * W + col (Vaswani et al. 2017)."""

    def _compute(self, grid: Grid) -> Tensor:
        return sincos_1d(torch.arange(grid[0] * grid[1]), self.dim, self.temperature)


@register("2d_sin")
class Sincos2d(FixedSincos):
    """Fixed 2D sin-cos: a quarter of the channels each for sin(row), sin(col), cos(row), cos(col)."""

    divisor = 4
    why = "sin and cos of row and column"

    def _compute(self, grid: Grid) -> Tensor:
        return build_sincos2d_pos_embed(list(grid), dim=self.dim, temperature=self.temperature)  # (H*W, D)
