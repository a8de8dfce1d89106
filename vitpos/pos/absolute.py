"""Absolute positional embeddings, added to the patch tokens once (the `add` hook).

- `1d_learned`: a learned vector per token (ViT, Dosovitskiy et al. 2021).
- `2d_learned`: learned row and column tables, half the channels each.
- `1d_sin`: fixed sinusoids over the row-major token index (Vaswani et al. 2017).
- `2d_sin`: fixed sin-cos of row and column (MoCo v3, Chen et al. 2021; Beyer et al. 2022), timm's
  `build_sincos2d_pos_embed`.

Other grids: learned tables are resampled, fixed ones recomputed in fp32 (`resize_mode`; the rules
and fuzzy positions are in docs/DESIGN.md, section 2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import build_sincos2d_pos_embed, resample_abs_pos_embed, trunc_normal_
from torch import Tensor, nn

from .arguments import Argument
from .base import Grid, PositionalEncoding, axis_positions, check_divisible, token_positions
from .registry import register
from .scaling import FREQUENCY_MODES, axis_frequencies, band_range


class AdditiveEncoding(PositionalEncoding):
    """An additive scheme: `table(grid)` gives (H*W, D); `add` adds it to the tokens."""

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

    resize_modes = ("bicubic", "bilinear")
    supports_fuzzy = True

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "bicubic"):
        super().__init__(dim, num_heads, depth, grid, resize_mode)
        self.embedding = nn.Parameter(torch.zeros(1, self.grid[0] * self.grid[1], dim))  # (1, H*W, D)
        trunc_normal_(self.embedding, std=0.02)

    def resampled(self, grid: Grid, mode: str) -> Tensor:
        """The table resampled to `grid`, (1, H'*W', D); the old grid is explicit, never sqrt(N)."""
        return resample_abs_pos_embed(
            self.embedding, new_size=list(grid), old_size=list(self.grid), num_prefix_tokens=0, interpolation=mode
        )

    def sampled(self, grid: Grid) -> Tensor:
        """The table (resampled to `grid`) read bilinearly at every image's jittered token
        coordinates: (B, H*W, D). Coordinates are in `grid`'s patch units; beyond the border the
        edge value is kept."""
        height, width = grid
        table = self.embedding if tuple(grid) == self.grid else self.resampled(grid, self.resize_mode)
        table = table.reshape(1, height, width, self.dim).permute(0, 3, 1, 2)  # (1, H*W, D) -> (1, D, H, W)
        rows, cols = self.jittered(*token_positions(grid, device=table.device))  # (B, N) each
        # grid_sample's (x, y) in [-1, 1], corners at the outer patch centres (align_corners=True)
        where = torch.stack([2 * cols / max(width - 1, 1) - 1, 2 * rows / max(height - 1, 1) - 1], dim=-1)
        sampled = F.grid_sample(
            table.expand(len(where), -1, -1, -1),
            where[:, None].to(table.dtype),
            mode="bilinear",
            padding_mode="border",
            align_corners=True,
        )  # (B, D, 1, N)
        return sampled[:, :, 0].transpose(1, 2)  # (B, N, D)

    def table(self, grid: Grid) -> Tensor:
        if self.jitter is not None and self.training:
            return self.sampled(grid)
        if tuple(grid) == self.grid:
            return self.embedding[0]
        return self.per_grid(grid, lambda: self.resampled(grid, self.resize_mode)[0])

    def resize_state(self, grid: Grid) -> None:
        self.embedding = nn.Parameter(self.resampled(grid, self.resize_mode).detach())


@register("2d_learned")
class Learned2d(AdditiveEncoding):
    """Learned row and column tables, (H, D/2) and (W, D/2), concatenated per token.

    Args:
        resize_mode: 1D interpolation of each axis for other grids, `linear` or `nearest`.
    """

    resize_modes = ("linear", "nearest")
    supports_fuzzy = True

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "linear"):
        super().__init__(dim, num_heads, depth, grid, resize_mode)
        check_divisible("2d_learned", dim, 2, "half the channels for rows, half for columns")
        self.rows = nn.Parameter(torch.zeros(self.grid[0], dim // 2))
        self.cols = nn.Parameter(torch.zeros(self.grid[1], dim // 2))
        trunc_normal_(self.rows, std=0.02)
        trunc_normal_(self.cols, std=0.02)

    @staticmethod
    def resampled(table: Tensor, size: int, mode: str) -> Tensor:
        """One axis table (L, C) resampled to (size, C)."""
        if table.shape[0] == size:
            return table
        align = False if mode == "linear" else None
        resized = F.interpolate(table.T[None], size=size, mode=mode, align_corners=align)  # (1, C, size)
        return resized[0].T

    @staticmethod
    def read_between(table: Tensor, positions: Tensor) -> Tensor:
        """A table (L, C) read linearly at fractional `positions` (B, N): (B, N, C); beyond the ends
        the edge entries are kept."""
        positions = positions.clamp(0, table.shape[0] - 1)
        below = positions.floor().long()
        above = (below + 1).clamp(max=table.shape[0] - 1)
        weight = (positions - below)[..., None].to(table.dtype)
        return table[below] * (1 - weight) + table[above] * weight

    def table(self, grid: Grid) -> Tensor:
        height, width = grid
        if self.jitter is not None and self.training:  # fuzzy: each image's tokens read between entries
            rows, cols = self.jittered(*token_positions(grid, device=self.rows.device))  # (B, N) each
            return torch.cat(
                [
                    self.read_between(self.resampled(self.rows, height, self.resize_mode), rows),
                    self.read_between(self.resampled(self.cols, width, self.resize_mode), cols),
                ],
                dim=-1,
            )
        rows = self.resampled(self.rows, height, self.resize_mode)[:, None, :].expand(height, width, -1)
        cols = self.resampled(self.cols, width, self.resize_mode)[None, :, :].expand(height, width, -1)
        return torch.cat([rows, cols], dim=-1).reshape(height * width, self.dim)  # (H, W, D) -> (H*W, D)

    def resize_state(self, grid: Grid) -> None:
        self.rows = nn.Parameter(self.resampled(self.rows, grid[0], self.resize_mode).detach().clone())
        self.cols = nn.Parameter(self.resampled(self.cols, grid[1], self.resize_mode).detach().clone())


def sincos_1d(positions: Tensor, dim: int, temperature: float = 10000.0) -> Tensor:
    """Vaswani et al.: PE[n, 2i] = sin(n / T^(2i/D)), PE[n, 2i+1] = cos(n / T^(2i/D)). (N,) -> (N, D)."""
    inv_freq = temperature ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (D/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (N, D/2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(len(positions), dim)  # (N, D/2, 2) -> (N, D)


class FixedSincos(AdditiveEncoding):
    """A fixed sin-cos table (H*W, D): the buffer `cached` for the built grid, computed for others.

    Args:
        temperature: the frequency base (10000 in Vaswani et al.).
        resize_mode: positions on a grid other than `ref_grid`: `extrapolate` (0..H'-1, as if the
            image were larger) or `interpolate` (rescaled into the reference grid's range, as if the
            same image were sampled more finely); `2d_sin` also `ntk` and `yarn` (0..H'-1 with each
            axis' frequencies rescaled).
        ref_grid: the grid positions are measured in (the training grid); default: the built grid.
    """

    resize_modes = ("extrapolate", "interpolate")
    measures_in_ref_grid = True
    arguments = {"temperature": Argument("the frequency base", low=0, low_open=True)}
    divisor = 2
    why = "sin and cos pairs"

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        temperature: float = 10000.0,
        resize_mode: str = "extrapolate",
        ref_grid: Grid | None = None,
    ):
        super().__init__(dim, num_heads, depth, grid, resize_mode, ref_grid)
        check_divisible(self.scheme_name, dim, self.divisor, self.why)
        self.temperature = temperature
        self.build_buffers()

    def positions(self, grid: Grid) -> tuple[Tensor, Tensor]:
        """Row and column coordinates (H,), (W,) of `grid` under the resize mode, in fp32."""
        return axis_positions(grid, self.ref_grid, self.resize_mode)

    def _compute(self, grid: Grid) -> Tensor:
        """The table of `grid`, (H*W, D) fp32 on the CPU."""
        raise NotImplementedError

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        return {"cached": self._compute(grid)}  # on the CPU whatever `device`: the same table on every device

    def table(self, grid: Grid) -> Tensor:
        return self.grid_buffers(grid)["cached"]

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "temperature": self.temperature}


@register("1d_sin")
class Sincos1d(FixedSincos):
    """Fixed 1D sinusoids over the row-major token index n = row * W + col (Vaswani et al. 2017);
    under `interpolate`, n = row' * W_ref + col' with row', col' rescaled into the reference grid."""

    def _compute(self, grid: Grid) -> Tensor:
        rows, cols = self.positions(grid)
        width = self.ref_grid[1] if self.resize_mode == "interpolate" else grid[1]
        index = (rows[:, None] * width + cols[None, :]).flatten()  # (H*W,) row-major
        return sincos_1d(index, self.dim, self.temperature)


@register("2d_sin")
class Sincos2d(FixedSincos):
    """Fixed 2D sin-cos: a quarter of the channels each for sin(row), sin(col), cos(row), cos(col)."""

    resize_modes = ("extrapolate", "interpolate", *FREQUENCY_MODES)
    supports_fuzzy = True
    divisor = 4
    why = "sin and cos of row and column"

    def _compute(self, grid: Grid) -> Tensor:
        if self.resize_mode == "extrapolate":
            return build_sincos2d_pos_embed(list(grid), dim=self.dim, temperature=self.temperature)  # (H*W, D)
        return self.embed(*token_positions(grid, self.ref_grid, self.resize_mode), grid)

    def table(self, grid: Grid) -> Tensor:
        if self.jitter is not None and self.training:
            return self.fuzzy_table(grid)
        return super().table(grid)

    def fuzzy_table(self, grid: Grid) -> Tensor:
        """The sinusoids at every image's jittered token coordinates, (B, H*W, D)."""
        rows, cols = self.jittered(*token_positions(grid, self.ref_grid, self.resize_mode, device=self.cached.device))
        return self.embed(rows, cols, grid).to(self.cached.dtype)  # rows, cols: (B, N) each

    def embed(self, rows: Tensor, cols: Tensor, grid: Grid) -> Tensor:
        """Token coordinates (..., N) each -> (..., N, D) in timm's layout [sin(row w), sin(col w),
        cos(row w), cos(col w)], the frequencies w of each axis under the resize mode."""
        num_bands = self.dim // 4
        bands = self.temperature ** (-torch.arange(num_bands, dtype=torch.float32, device=rows.device) / num_bands)
        row_bands, col_bands = axis_frequencies(
            bands, self.resize_mode, grid, self.ref_grid, band_range(self.temperature, num_bands)
        )
        row_angles, col_angles = rows[..., None] * row_bands, cols[..., None] * col_bands  # (..., N, D/4) each
        return torch.cat([row_angles.sin(), col_angles.sin(), row_angles.cos(), col_angles.cos()], dim=-1)
