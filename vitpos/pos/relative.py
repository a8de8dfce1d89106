"""Position biases added to the attention logits (the `bias` hook), one family in one file.

- `rel_bias`: Swin Transformer (Liu et al. 2021, "Swin Transformer: Hierarchical Vision Transformer
  using Shifted Windows"): a learned table of (2H-1)*(2W-1) entries per head and per layer, indexed
  by the 2D offset between query and key patches. Built on timm's `RelPosBias` (table + index).
  Resize rule: the table, seen per head as a (2H-1) x (2W-1) image of offsets, is resampled to
  (2H'-1) x (2W'-1): `bicubic` interpolates it with the corner offsets aligned (offsets scale with
  the grid, as when the same image is sampled more finely); `geometric` is timm's
  `resize_rel_pos_bias_table` (BEiT's geometric spacing: small offsets keep their values, large
  ones are stretched).
- `cpb`: SwinV2's continuous position bias (Liu et al. 2022, "Swin Transformer V2: Scaling Up
  Capacity and Resolution"): a small MLP per layer maps the log-spaced 2D offset to a bias per head.
  Offsets are normalised by the training grid, so any grid uses the same MLP: nothing to resize.
- `alibi_2d`: ALiBi (Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases
  Enables Input Length Extrapolation") on the patch grid: -slope_h * (Euclidean distance between the
  patches), fixed slopes, no parameters, any grid as it is.
- `rel_shaw`: Shaw et al. 2018 ("Self-Attention with Relative Position Representations"), key side,
  in 2D: learned row-offset and column-offset vectors per layer, offsets clipped to +-max_distance,
  added to the keys, so the bias depends on the query. Any grid clips into the same tables: nothing
  to resize.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from timm.layers import RelPosBias, gen_relative_position_index, resize_rel_pos_bias_table, trunc_normal_
from timm.layers.pos_embed_rel import gen_relative_log_coords
from torch import Tensor, nn

from ..errors import ConfigError
from .base import Grid, PositionalEncoding
from .registry import register


@register("rel_bias")
class RelativePositionBias(PositionalEncoding):
    """One learned relative-position table per layer, shape ((2H-1)*(2W-1), heads).

    Args:
        resize_mode: `bicubic` or `geometric` (see the module docstring).
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

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        if tuple(grid) == self.grid:
            return self.layers[layer].get_bias()[0]  # (heads, N, N)
        return self.per_grid((layer, tuple(grid)), lambda: self._bias_from(
            self.resampled_table(layer, grid, self.resize_mode), grid))

    def resize_state(self, grid: Grid) -> None:
        tables = [self.resampled_table(i, grid, self.resize_mode).detach() for i in range(self.depth)]
        self.layers = nn.ModuleList(
            RelPosBias(window_size=tuple(grid), num_heads=self.num_heads, device=table.device) for table in tables)
        for rel, table in zip(self.layers, tables):
            rel.relative_position_bias_table.data.copy_(table)


@register("cpb")
class ContinuousPositionBias(PositionalEncoding):
    """SwinV2's log-spaced continuous position bias, one MLP per layer (Liu et al. 2022, sec. 3.3).

    For the offset (drow, dcol) between two patches, each axis is normalised by the reference
    (training) grid and log-spaced as in SwinV2:
        u = 8 * d / (ref - 1),   input = sign(u) * log2(1 + |u|) / log2(8)
    (so the largest training offset maps to about +-1.06), and the bias of every head is
    16 * sigmoid(MLP(input)), MLP = Linear(2, hidden) -> ReLU -> Linear(hidden, heads, no bias),
    initialised like SwinV2 (weights trunc-normal std 0.02, zero bias: the bias starts near 8 for
    every offset, a constant that softmax ignores). SwinV2's scaled cosine attention is a separate
    idea and not part of this scheme. The MLPs are excluded from weight decay (as in SwinV2/timm).
    Note for `pool=cls`: the cls token's bias is 0 (it gets no position), the minimum of
    16*sigmoid, so patch queries see the cls key ~8 logits below the patches at init (SwinV2 has
    no cls token; with `gap` this does not arise).

    Resolution transfer needs no resizing and offers no choice (`resize_modes` = ()): offsets are
    always measured in units of the reference grid (SwinV2's `pretrained_window_size`), so a larger
    grid feeds the same MLP offsets beyond the training range, log-spaced so they grow slowly
    (8 x 8 -> 16 x 16: the largest input goes from 1.06 to 1.40). The offsets the grids share keep
    exactly their bias. The MLP runs in the parameters' dtype with autocast off (it is tiny).

    Uses timm's `gen_relative_log_coords` (mode 'swin') and `gen_relative_position_index`, written
    around them by hand: timm's `RelPosMlp` fixes its grid at construction (buffers; changing it
    means `set_window_size`, mutating the module), so it cannot give the bias of another grid on the
    fly, and its MLP adds a dropout (0.125) that SwinV2 does not have.

    Args:
        hidden_dim: hidden width of each MLP (512 in SwinV2).
        ref_grid: the grid offsets are normalised by (the training grid); default: the built grid.
    """

    measures_in_ref_grid = True

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, hidden_dim: int = 512,
                 ref_grid: Grid | None = None):
        super().__init__(dim, num_heads, depth, grid, ref_grid=ref_grid)
        self.hidden_dim = int(hidden_dim)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(2, self.hidden_dim), nn.ReLU(), nn.Linear(self.hidden_dim, num_heads, bias=False))
            for _ in range(depth))
        for mlp in self.layers:
            trunc_normal_(mlp[0].weight, std=0.02)
            nn.init.zeros_(mlp[0].bias)
            trunc_normal_(mlp[2].weight, std=0.02)
        coords, index = self.offsets(self.grid)
        self.register_buffer("coords", coords, persistent=False)  # (2H-1, 2W-1, 2) MLP inputs
        self.register_buffer("index", index, persistent=False)  # (N*N,) into the flattened offsets

    def offsets(self, grid: Grid, device=None) -> tuple[Tensor, Tensor]:
        """Log-spaced MLP inputs of every offset of `grid`, (2H-1, 2W-1, 2) fp32, and the index
        (N*N,) from each (query, key) pair to its offset."""
        # (ref - 1) is the divisor; a reference axis of one patch has no offsets, so divide by 1 there
        ref = tuple(max(s, 2) for s in self.ref_grid)
        coords = gen_relative_log_coords(tuple(grid), ref, mode="swin", device=device, dtype=torch.float32)
        index = gen_relative_position_index(tuple(grid), device=device).view(-1)
        return coords, index

    def _bias_from(self, layer: int, coords: Tensor, index: Tensor, grid: Grid) -> Tensor:
        mlp = self.layers[layer]
        device_type = coords.device.type  # e.g. `meta` (FLOP counting) has no autocast to turn off
        no_autocast = torch.autocast(device_type, enabled=False) if torch.amp.is_autocast_available(device_type) \
            else contextlib.nullcontext()
        with no_autocast:
            table = mlp(coords.to(mlp[0].weight.dtype)).view(-1, self.num_heads)  # ((2H-1)*(2W-1), heads)
        table = 16 * torch.sigmoid(table)
        num_tokens = grid[0] * grid[1]
        return table[index].view(num_tokens, num_tokens, self.num_heads).permute(2, 0, 1)  # (heads, N, N)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        grid = tuple(grid)

        def compute() -> Tensor:
            if grid == self.grid:
                coords, index = self.coords, self.index
            else:
                coords, index = self.offsets(grid, device=self.index.device)
            return self._bias_from(layer, coords, index, grid)

        return self.per_grid((layer, grid), compute)

    def rebuild_buffers(self) -> None:
        coords, index = self.offsets(self.grid, device=self.index.device)
        self.coords, self.index = coords.to(self.coords.dtype), index

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "hidden_dim": self.hidden_dim}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, ref_grid={self.ref_grid}"


def alibi_slopes(num_heads: int, bias_max: float = 8.0) -> Tensor:
    """ALiBi's head slopes, the geometric sequence 2^(-bias_max * h / heads), h = 1..heads, fp32."""
    return 2.0 ** (-bias_max * torch.arange(1, num_heads + 1, dtype=torch.float32) / num_heads)


@register("alibi_2d")
class Alibi2d(PositionalEncoding):
    """2D ALiBi (Press et al. 2022, moved from the token line to the patch grid): the bias of head h
    between patches p and q is -slope_h * ||p - q||, with p, q (row, col) in patch units.

    Slopes: the geometric sequence 2^(-8h / heads), h = 1..heads, of the ALiBi paper (for 8 heads
    1/2, 1/4, ..., 1/256); `bias_max` (MPT's `alibi_bias_max`) replaces the 8. The paper's code
    builds non-power-of-two head counts by interleaving two power-of-two sequences; the closed form
    is used here for every head count (identical for powers of two). Fixed, no parameters.

    Distance: Euclidean, not Manhattan. Euclidean is the 2D analogue of ALiBi's |i - j|, isotropic
    (a diagonal neighbour is 1.41 patches away, not 2: attention decays the same in every image
    direction, so the bias prefers no axis) and is what 2D-ALiBi in vision uses (CROMA, Fuller et
    al. 2023). Manhattan would be separable (a row ALiBi plus a column ALiBi) and favour the axes.

    A bias of the distance alone is symmetric and relative, defined for any grid: nothing to resize
    (`resize_modes` = ()); larger grids simply have larger distances, as longer texts do in ALiBi.
    The built grid's bias is a non-persistent buffer; other grids are computed (memoised while
    the model evaluates).

    Args:
        bias_max: exponent range of the slopes (8 in ALiBi).
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, bias_max: float = 8.0):
        super().__init__(dim, num_heads, depth, grid)
        self.bias_max = float(bias_max)
        self.register_buffer("cached", self._compute(self.grid), persistent=False)  # (heads, N, N)

    def _compute(self, grid: Grid) -> Tensor:
        coords = torch.stack(torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij"))
        coords = coords.flatten(1).T.to(torch.float32)  # (N, 2) row-major
        # exact: integer squares, one sqrt (torch.cdist may take a matmul shortcut)
        distance = (coords[:, None, :] - coords[None, :, :]).pow(2).sum(-1).sqrt()  # (N, N)
        return -alibi_slopes(self.num_heads, self.bias_max)[:, None, None] * distance  # (heads, N, N)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        if tuple(grid) == self.grid:
            return self.cached
        return self.per_grid(tuple(grid), lambda: self._compute(grid).to(self.cached))

    def rebuild_buffers(self) -> None:
        self.cached = self._compute(self.grid).to(self.cached)

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "bias_max": self.bias_max}


def clipped_offsets(grid: Grid, max_distance: int, device=None) -> tuple[Tensor, Tensor]:
    """Row and column offset of every key from every query (key - query, as Shaw's clip(j - i)),
    clipped to [-max_distance, max_distance] and shifted to 0..2*max_distance: (N, N) each, int64,
    tokens row-major."""
    rows, cols = torch.meshgrid(torch.arange(grid[0], device=device), torch.arange(grid[1], device=device),
                                indexing="ij")

    def clipped(position: Tensor) -> Tensor:  # position (N,) -> [query i, key j] = clip(p_j - p_i) + K
        return (position[None, :] - position[:, None]).clamp(-max_distance, max_distance) + max_distance

    return clipped(rows.flatten()), clipped(cols.flatten())


@register("rel_shaw")
class ShawRelativePosition(PositionalEncoding):
    """Shaw et al. 2018's relative position representations on the keys (their a^K), in 2D.

    Per layer, a row table and a column table of 2K+1 vectors of size head_dim (K = max_distance),
    shared over heads as in Shaw. Query i and key j, at row/column offset (dr, dc) = key - query,
    get the logit term q_i . (a_row[clip(dr)] + a_col[clip(dc)]) / sqrt(head_dim), the scale of the
    q.k term, so that logit_ij = q_i . (k_j + a_ij) / sqrt(head_dim). Computed as q @ table^T
    (B, heads, N, 2K+1) gathered with the (N, N) clipped-offset index: a (B, heads, N, N) bias.
    Tables start trunc-normal (std 0.02). A grid of any size clips into the same 2K+1 offsets:
    nothing to resize (`resize_modes` = ()).

    Args:
        max_distance: K, the largest offset per axis told apart (2 in the small-ViT CIFAR-10
            ablation of s-chh/2D-Positional-Encoding-Vision-Transformer).
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, max_distance: int = 2):
        super().__init__(dim, num_heads, depth, grid)
        if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 1:
            raise ConfigError(f"pos=rel_shaw needs max_distance to be a positive integer (the largest offset "
                              f"per axis told apart), e.g. max_distance=2; got max_distance={max_distance!r}")
        self.max_distance = max_distance
        self.head_dim = dim // num_heads
        self.layers = nn.ModuleList(
            nn.ParameterDict({axis: nn.Parameter(torch.empty(2 * max_distance + 1, self.head_dim))
                              for axis in ("rows", "cols")})
            for _ in range(depth))
        for table in self.parameters():
            trunc_normal_(table, std=0.02)
        row_index, col_index = clipped_offsets(self.grid, max_distance)
        self.register_buffer("row_index", row_index, persistent=False)  # (N, N) into the row table
        self.register_buffer("col_index", col_index, persistent=False)  # (N, N) into the column table

    def bias(self, layer: int, grid: Grid, q: Tensor) -> Tensor:
        if tuple(grid) == self.grid:
            row_index, col_index = self.row_index, self.col_index
        else:
            row_index, col_index = clipped_offsets(grid, self.max_distance, device=self.row_index.device)
        tables = self.layers[layer]
        q = q * self.head_dim ** -0.5
        shape = (*q.shape[:-1], row_index.shape[-1])  # (B, heads, N, N)
        row_terms = q @ tables["rows"].T  # (B, heads, N, 2K+1): q_i . a_row[offset] for every offset
        col_terms = q @ tables["cols"].T
        return row_terms.gather(-1, row_index.expand(shape)) + col_terms.gather(-1, col_index.expand(shape))

    def rebuild_buffers(self) -> None:
        self.row_index, self.col_index = clipped_offsets(self.grid, self.max_distance, device=self.row_index.device)

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "max_distance": self.max_distance}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, max_distance={self.max_distance}"
