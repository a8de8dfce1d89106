"""Relative position bias, added to the attention logits (the `bias` hook).

`rel_bias`: Swin Transformer (Liu et al. 2021, "Swin Transformer: Hierarchical Vision Transformer
using Shifted Windows"): a learned table of (2H-1)*(2W-1) entries per head and per layer, indexed
by the 2D offset between query and key patches. Built on timm's `RelPosBias` (table + index).

Resize rule: the table, seen per head as a (2H-1) x (2W-1) image of offsets, is resampled to
(2H'-1) x (2W'-1): `bicubic` interpolates it with the corner offsets aligned (offsets scale with
the grid, as when the same image is sampled more finely); `geometric` is timm's
`resize_rel_pos_bias_table` (BEiT's geometric spacing: small offsets keep their values, large
ones are stretched).
"""
from __future__ import annotations

import torch.nn.functional as F
from timm.layers import RelPosBias, gen_relative_position_index, resize_rel_pos_bias_table
from torch import Tensor, nn

from .base import Grid, PositionalEncoding, check_choice
from .registry import register


@register("rel_bias")
class RelativePositionBias(PositionalEncoding):
    """One learned relative-position table per layer, shape ((2H-1)*(2W-1), heads).

    Args:
        resize_mode: `bicubic` or `geometric` (see the module docstring).
    """

    resize_modes = ("bicubic", "geometric")

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "bicubic"):
        super().__init__(dim, num_heads, depth, grid)
        check_choice("rel_bias", "resize_mode", resize_mode, self.resize_modes)
        self.resize_mode = resize_mode
        self.layers = nn.ModuleList(RelPosBias(window_size=self.grid, num_heads=num_heads) for _ in range(depth))

    def resampled_table(self, layer: int, grid: Grid, mode: str) -> Tensor:
        """Layer's table resampled to `grid`: ((2H'-1)*(2W'-1), heads)."""
        table = self.layers[layer].relative_position_bias_table
        new_size = (2 * grid[0] - 1, 2 * grid[1] - 1)
        if mode == "geometric":
            return resize_rel_pos_bias_table(table, new_window_size=grid, old_window_size=self.grid,
                                             new_bias_shape=(new_size[0] * new_size[1], self.num_heads))
        old_size = (2 * self.grid[0] - 1, 2 * self.grid[1] - 1)
        image = table.T.reshape(1, self.num_heads, *old_size)  # (1, heads, 2H-1, 2W-1)
        resized = F.interpolate(image.float(), size=new_size, mode="bicubic", align_corners=True)
        return resized.reshape(self.num_heads, -1).T.to(table.dtype)  # ((2H'-1)*(2W'-1), heads)

    def _bias_from(self, table: Tensor, grid: Grid) -> Tensor:
        index = gen_relative_position_index(grid, device=table.device).view(-1)  # (N*N,)
        num_tokens = grid[0] * grid[1]
        return table[index].view(num_tokens, num_tokens, self.num_heads).permute(2, 0, 1)  # (heads, N, N)

    def bias(self, layer: int, grid: Grid) -> Tensor:
        if tuple(grid) == self.grid:
            return self.layers[layer].get_bias()[0]  # (heads, N, N)
        return self.per_grid((layer, tuple(grid)), lambda: self._bias_from(
            self.resampled_table(layer, grid, self.resize_mode), grid))

    def resize_to(self, grid: Grid, mode: str | None = None) -> dict:
        self.check_resize_mode(mode)
        self.resize_mode = mode or self.resize_mode
        tables = [self.resampled_table(i, grid, self.resize_mode).detach() for i in range(self.depth)]
        self.layers = nn.ModuleList(
            RelPosBias(window_size=tuple(grid), num_heads=self.num_heads, device=table.device) for table in tables)
        for rel, table in zip(self.layers, tables):
            rel.relative_position_bias_table.data.copy_(table)
        return super().resize_to(grid)

    def init_kwargs(self) -> dict:
        return {"resize_mode": self.resize_mode}
