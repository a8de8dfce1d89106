"""Learned tables indexed by the offset between query and key (the `bias` hook).

- `rel_bias`: Swin's relative position bias (Liu et al. 2021): a learned table of (2H-1)*(2W-1)
  entries per head and layer, indexed by the 2D offset between query and key (timm's `RelPosBias`).
- `rel_shaw`: Shaw et al. 2018's relative position representations on the keys, in 2D: learned
  row- and column-offset vectors per layer, offsets clipped to +-max_distance; the bias depends on q.

Why each is built as it is: docs/DESIGN.md, "The schemes, as built here".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import RelPosBias, gen_relative_position_index, resize_rel_pos_bias_table, trunc_normal_
from torch import Tensor, nn

from .arguments import Argument
from .base import Grid, PositionalEncoding
from .registry import register


@register("rel_bias")
class RelativePositionBias(PositionalEncoding):
    """One learned relative-position table per layer, ((2H-1)*(2W-1), heads); bias (heads, N, N).

    Args:
        resize_mode: the table on other grids: `bicubic` (resampled as a (2H-1) x (2W-1) image per
            head, corner offsets aligned) or `geometric` (timm's `resize_rel_pos_bias_table`, BEiT).
    """

    resize_modes = ("bicubic", "geometric")

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "bicubic"):
        super().__init__(dim, num_heads, depth, grid, resize_mode)
        self.layers = nn.ModuleList(RelPosBias(window_size=self.grid, num_heads=num_heads) for _ in range(depth))

    def resampled_table(self, layer: int, grid: Grid, mode: str) -> Tensor:
        """Layer's table resampled to `grid`: ((2H'-1)*(2W'-1), heads)."""
        table = self.layers[layer].relative_position_bias_table
        new_size = (2 * grid[0] - 1, 2 * grid[1] - 1)
        if mode == "geometric":
            return resize_rel_pos_bias_table(
                table,
                new_window_size=grid,
                old_window_size=self.grid,
                new_bias_shape=(new_size[0] * new_size[1], self.num_heads),
            )
        old_size = (2 * self.grid[0] - 1, 2 * self.grid[1] - 1)
        image = table.T.reshape(1, self.num_heads, *old_size)  # (1, heads, 2H-1, 2W-1)
        resized = F.interpolate(image.float(), size=new_size, mode="bicubic", align_corners=True)
        return resized.reshape(self.num_heads, -1).T.to(table.dtype)  # ((2H'-1)*(2W'-1), heads)

    def _bias_from(self, table: Tensor, grid: Grid) -> Tensor:
        index = gen_relative_position_index(grid, device=table.device).view(-1)  # (N*N,)
        num_tokens = grid[0] * grid[1]
        return table[index].view(num_tokens, num_tokens, self.num_heads).permute(2, 0, 1)  # (heads, N, N)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        if tuple(grid) == self.grid:
            return self.layers[layer].get_bias()[0]  # (heads, N, N)
        return self.per_grid(
            (layer, tuple(grid)), lambda: self._bias_from(self.resampled_table(layer, grid, self.resize_mode), grid)
        )

    def resize_state(self, grid: Grid) -> None:
        tables = [self.resampled_table(i, grid, self.resize_mode).detach() for i in range(self.depth)]
        self.layers = nn.ModuleList(
            RelPosBias(window_size=tuple(grid), num_heads=self.num_heads, device=table.device) for table in tables
        )
        for rel, table in zip(self.layers, tables):
            rel.relative_position_bias_table.data.copy_(table)


def clipped_offsets(grid: Grid, max_distance: int, device=None) -> tuple[Tensor, Tensor]:
    """Row and column offset of every key from every query (key - query, as Shaw's clip(j - i)),
    clipped to [-max_distance, max_distance] and shifted to 0..2*max_distance: (N, N) each, int64,
    tokens row-major."""
    rows, cols = torch.meshgrid(
        torch.arange(grid[0], device=device), torch.arange(grid[1], device=device), indexing="ij"
    )

    def clipped(position: Tensor) -> Tensor:  # position (N,) -> [query i, key j] = clip(p_j - p_i) + K
        return (position[None, :] - position[:, None]).clamp(-max_distance, max_distance) + max_distance

    return clipped(rows.flatten()), clipped(cols.flatten())


@register("rel_shaw")
class ShawRelativePosition(PositionalEncoding):
    """Shaw et al. 2018's relative position representations on the keys (their a^K), in 2D.

    Per layer, row and column tables (2K+1, head_dim), K = max_distance, shared over heads. Query i
    and key j at offset (dr, dc) = key - query get q_i . (a_row[clip(dr)] + a_col[clip(dc)]) /
    sqrt(head_dim): a (B, heads, N, N) bias from q (B, heads, N, head_dim). Buffers `row_index`,
    `col_index` (N, N). Any grid clips into the same 2K+1 offsets: nothing to resize.

    Args:
        max_distance: K, the largest offset per axis told apart (2 in the small-ViT CIFAR-10
            ablation of s-chh/2D-Positional-Encoding-Vision-Transformer).
    """

    arguments = {"max_distance": Argument("the largest offset per axis told apart", kind="integer", low=1)}

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, max_distance: int = 2):
        super().__init__(dim, num_heads, depth, grid)
        self.max_distance = max_distance
        self.head_dim = dim // num_heads
        self.layers = nn.ModuleList(
            nn.ParameterDict(
                {axis: nn.Parameter(torch.empty(2 * max_distance + 1, self.head_dim)) for axis in ("rows", "cols")}
            )
            for _ in range(depth)
        )
        for table in self.parameters():
            trunc_normal_(table, std=0.02)
        self.build_buffers()

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        """`row_index`, `col_index`: (N, N) each, into the row and the column table."""
        row_index, col_index = clipped_offsets(grid, self.max_distance, device=device)
        return {"row_index": row_index, "col_index": col_index}

    def bias(self, layer: int, grid: Grid, q: Tensor) -> Tensor:
        fixed = self.grid_buffers(grid)
        row_index, col_index = fixed["row_index"], fixed["col_index"]
        tables = self.layers[layer]
        q = q * self.head_dim**-0.5
        shape = (*q.shape[:-1], row_index.shape[-1])  # (B, heads, N, N)
        row_terms = q @ tables["rows"].T  # (B, heads, N, 2K+1): q_i . a_row[offset] for every offset
        col_terms = q @ tables["cols"].T
        return row_terms.gather(-1, row_index.expand(shape)) + col_terms.gather(-1, col_index.expand(shape))

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "max_distance": self.max_distance}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, max_distance={self.max_distance}"
