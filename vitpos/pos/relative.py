"""Relative position bias, added to the attention logits (the `bias` hook).

`rel_bias`: Swin Transformer (Liu et al. 2021, "Swin Transformer: Hierarchical Vision Transformer
using Shifted Windows"): a learned table of (2H-1)*(2W-1) entries per head and per layer, indexed
by the 2D offset between query and key patches. Built on timm's `RelPosBias` (table + index).
On another grid the table is resampled with timm's `resize_rel_pos_bias_table`.
"""
from __future__ import annotations

import torch
from timm.layers import RelPosBias, gen_relative_position_index, resize_rel_pos_bias_table
from torch import Tensor, nn

from .base import Grid, PositionalEncoding
from .registry import register


@register("rel_bias")
class RelativePositionBias(PositionalEncoding):
    """One learned relative-position table per layer, shape ((2H-1)*(2W-1), heads)."""

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid):
        super().__init__(dim, num_heads, depth, grid)
        self.layers = nn.ModuleList(RelPosBias(window_size=self.grid, num_heads=num_heads) for _ in range(depth))

    def bias(self, layer: int, grid: Grid) -> Tensor:
        rel = self.layers[layer]
        if tuple(grid) == self.grid:
            return rel.get_bias()[0]  # (heads, N, N)
        height, width = grid
        table = resize_rel_pos_bias_table(
            rel.relative_position_bias_table, new_window_size=grid,
            new_bias_shape=((2 * height - 1) * (2 * width - 1), self.num_heads), old_window_size=self.grid,
        )
        index = gen_relative_position_index(grid, device=table.device).view(-1)  # (N*N,)
        num_tokens = height * width
        return table[index].view(num_tokens, num_tokens, self.num_heads).permute(2, 0, 1)
