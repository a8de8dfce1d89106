"""Position biases computed from the offset between query and key (the `bias` hook): no table
to resize, the same function on every grid.

- `cpb`: SwinV2's continuous position bias (Liu et al. 2022): an MLP per layer maps the log-spaced
  2D offset to a bias per head.
- `alibi_2d`: ALiBi (Press et al. 2022) on the patch grid: -slope_h * (Euclidean distance), fixed.
- `lookhere`: LookHere (Fuller et al. 2024): each head sees only a cone pointed in its direction
  (-inf outside), with an ALiBi-like distance penalty; fixed.
- `fire`: FIRE (Li et al. 2024) in 2D: an MLP per layer of the per-axis offsets, log-transformed and
  divided by the query's reach to the grid's edge (at least a learned threshold).

Why each is built as it is: docs/DESIGN.md, "The schemes, as built here".
"""

from __future__ import annotations

import contextlib
import math

import torch
from timm.layers import gen_relative_position_index, trunc_normal_
from timm.layers.pos_embed_rel import gen_relative_log_coords
from torch import Tensor, nn

from .arguments import Argument
from .base import Grid, PositionalEncoding, token_positions
from .registry import register


def autocast_off(device_type: str):
    """A context without autocast on `device_type`, for the tiny bias MLPs (`cpb`, `fire`), which run
    in their parameters' dtype; a no-op where the device has no autocast (`meta`: FLOP counting)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


@register("cpb")
class ContinuousPositionBias(PositionalEncoding):
    """SwinV2's log-spaced continuous position bias (Liu et al. 2022, sec. 3.3), one MLP per layer.

    Offset d per axis, in units of the reference grid: u = 8 d / (ref - 1), input = sign(u) *
    log2(1 + |u|) / log2(8); bias = 16 * sigmoid(MLP(input)), MLP = Linear(2, hidden) -> ReLU ->
    Linear(hidden, heads, no bias). Buffers `coords` (2H-1, 2W-1, 2) and `index` (N*N,); bias
    (heads, N, N). Other grids use the same MLPs (nothing to resize). Fuzzy training: the offsets
    between one jittered copy of the grid per step, shared by the batch (docs/DESIGN.md, section 2).

    Args:
        hidden_dim: hidden width of each MLP (512 in SwinV2).
        ref_grid: the grid offsets are normalised by (the training grid); default: the built grid.
    """

    measures_in_ref_grid = True
    supports_fuzzy = True
    arguments = {"hidden_dim": Argument("the MLP's hidden width", kind="integer", low=1)}

    def __init__(
        self, dim: int, num_heads: int, depth: int, grid: Grid, hidden_dim: int = 512, ref_grid: Grid | None = None
    ):
        super().__init__(dim, num_heads, depth, grid, ref_grid=ref_grid)
        self.hidden_dim = int(hidden_dim)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(2, self.hidden_dim), nn.ReLU(), nn.Linear(self.hidden_dim, num_heads, bias=False))
            for _ in range(depth)
        )
        for mlp in self.layers:  # SwinV2's init: the bias starts near 8 for every offset
            trunc_normal_(mlp[0].weight, std=0.02)
            nn.init.zeros_(mlp[0].bias)
            trunc_normal_(mlp[2].weight, std=0.02)
        self.build_buffers()

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        """`coords`: the log-spaced MLP input of every offset of `grid`, (2H-1, 2W-1, 2) fp32;
        `index`: (N*N,) from each (query, key) pair to its offset in the flattened coords."""
        coords = gen_relative_log_coords(tuple(grid), self.log_ref(), mode="swin", device=device, dtype=torch.float32)
        index = gen_relative_position_index(tuple(grid), device=device).view(-1)
        return {"coords": coords, "index": index}

    def log_ref(self) -> Grid:
        """The reference grid of the log spacing, which divides offsets by (ref - 1): a reference axis
        of one patch has no offsets, so it counts as 2 (divide by 1 there)."""
        return (max(self.ref_grid[0], 2), max(self.ref_grid[1], 2))

    def _mlp_bias(self, layer: int, coords: Tensor) -> Tensor:
        """Log-spaced offsets (..., 2) -> 16 * sigmoid(MLP(offsets)), (..., heads)."""
        mlp = self.layers[layer]
        with autocast_off(coords.device.type):  # the tiny MLP in the parameters' dtype
            return 16 * torch.sigmoid(mlp(coords.to(mlp[0].weight.dtype)))

    def _bias_from(self, layer: int, grid: Grid) -> Tensor:
        fixed = self.grid_buffers(grid)
        table = self._mlp_bias(layer, fixed["coords"]).view(-1, self.num_heads)  # ((2H-1)*(2W-1), heads)
        num_tokens = grid[0] * grid[1]
        return table[fixed["index"]].view(num_tokens, num_tokens, self.num_heads).permute(2, 0, 1)  # (heads, N, N)

    def _fuzzy_bias(self, layer: int, grid: Grid) -> Tensor:
        """The bias between the first image's jittered token positions, for every image of the batch
        (per image, the MLP would run on B x N x N offsets), (heads, N, N)."""
        rows, cols = self.jittered(*token_positions(grid, device=self.jitter.device))  # (B, N) each
        position = torch.stack([rows[0], cols[0]], dim=-1)  # (N, 2)
        offsets = position[:, None] - position[None]  # (N, N, 2): query - key, as timm's index
        # SwinV2's log spacing (timm's gen_relative_log_coords, mode swin) of continuous offsets
        scaled = 8 * offsets / (offsets.new_tensor(self.log_ref()) - 1)
        coords = torch.sign(scaled) * torch.log2(1 + scaled.abs()) / math.log2(8)
        return self._mlp_bias(layer, coords).permute(2, 0, 1)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        grid = tuple(grid)
        if self.jitter is not None and self.training:
            return self._fuzzy_bias(layer, grid)
        return self.per_grid((layer, grid), lambda: self._bias_from(layer, grid))

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "hidden_dim": self.hidden_dim}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, ref_grid={self.ref_grid}"


def alibi_slopes(num_heads: int, bias_max: float = 8.0) -> Tensor:
    """ALiBi's head slopes, the geometric sequence 2^(-bias_max * h / heads), h = 1..heads, fp32."""
    return 2.0 ** (-bias_max * torch.arange(1, num_heads + 1, dtype=torch.float32) / num_heads)


@register("alibi_2d")
class Alibi2d(PositionalEncoding):
    """2D ALiBi (Press et al. 2022 on the patch grid): the bias of head h between patches p and q
    (row, col in patch units) is -slope_h * ||p - q||, slopes 2^(-bias_max * h / heads), h = 1..heads.
    No parameters; the buffer `cached` (heads, N, N) is the bias of the built grid.

    Args:
        bias_max: exponent range of the slopes (8 in ALiBi; MPT's `alibi_bias_max`).
    """

    arguments = {"bias_max": Argument("the exponent range of the head slopes", low=0, low_open=True)}

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, bias_max: float = 8.0):
        super().__init__(dim, num_heads, depth, grid)
        self.bias_max = float(bias_max)
        self.build_buffers()

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        # on the CPU whatever `device`: the same bias on every device
        coords = torch.stack(torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij"))
        coords = coords.flatten(1).T.to(torch.float32)  # (2, H, W) -> (N, 2) row-major
        # exact: integer squares, one sqrt (torch.cdist may take a matmul shortcut)
        distance = (coords[:, None, :] - coords[None, :, :]).pow(2).sum(-1).sqrt()  # (N, N)
        return {"cached": -alibi_slopes(self.num_heads, self.bias_max)[:, None, None] * distance}  # (heads, N, N)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        return self.grid_buffers(grid)["cached"]

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "bias_max": self.bias_max}


CONE_TOLERANCE = 1e-6  # relative: a key on the cone's edge is inside despite the rounding of cos/sin


@register("lookhere")
class LookHere(PositionalEncoding):
    """LookHere (Fuller et al. 2024): each head attends within a cone of `field_of_view` degrees
    pointed in one of `directions` directions, and the logit of a key inside it drops by slope_h
    times its Euclidean distance; keys outside get -inf. A query always sees itself. Head h points
    in direction h mod D (axes first, then diagonals) with slope `slope` * 2^-(h // D). No
    parameters; buffers `penalty` (heads, N, N) fp32 and `visible` (heads, N, N) bool; the bias is
    the same in every layer. Other grids recompute both (distances per `resize_mode`).

    Args:
        directions: how many evenly spaced directions the heads are dealt to (8: axes and diagonals).
        field_of_view: the cone's full angle in degrees, 0 < field_of_view <= 360.
        slope: the distance penalty per patch of the first head of each direction.
        resize_mode: `interpolate` (distances and cones measured in the training grid's units, as
            if the same image were sampled more finely) or `extrapolate` (in patches).
        ref_grid: the training grid `interpolate` measures in; default: the built grid.
    """

    resize_modes = ("interpolate", "extrapolate")
    measures_in_ref_grid = True
    arguments = {
        "directions": Argument("how many evenly spaced directions heads point in", kind="integer", low=1),
        "field_of_view": Argument("the cone's full angle in degrees", low=0, low_open=True, high=360),
        "slope": Argument("the distance penalty per patch", low=0),
    }

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        directions: int = 8,
        field_of_view: float = 180.0,
        slope: float = 0.25,
        resize_mode: str | None = None,
        ref_grid: Grid | None = None,
    ):
        super().__init__(dim, num_heads, depth, grid, resize_mode, ref_grid)
        self.directions = int(directions)
        self.field_of_view = float(field_of_view)
        self.slope = float(slope)
        self.build_buffers()

    def head_angles(self) -> list[float]:
        """The direction of every head in degrees counter-clockwise from "right" ("up" is the
        negative row direction): the D directions 360 k / D, those along an axis first, each group
        counter-clockwise (for D = 8: right, up, left, down, then the diagonals, so that two heads
        already cover both axes); head h points in the (h mod D)-th of them."""
        angles = [360 * k / self.directions for k in range(self.directions)]
        order = sorted(angles, key=lambda angle: angle % 90 != 0)  # stable: counter-clockwise within each group
        return [order[head % len(order)] for head in range(self.num_heads)]

    def head_slopes(self) -> Tensor:
        """The distance penalty per patch of every head, (heads,) fp64: `slope` for the first head of
        each direction, halved for each further head there (ALiBi's ratio between heads at 8 heads)."""
        ranks = torch.arange(self.num_heads, dtype=torch.float64) // self.directions
        return self.slope * 2.0**-ranks

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        """`penalty`: -slope_h * distance, (heads, N, N) fp32; `visible`: whether the key lies in the
        head's cone, (heads, N, N) bool. Computed on the CPU in fp64: the same cones on every device."""
        rows, cols = (position.double() for position in token_positions(grid, self.ref_grid, self.resize_mode))
        right = cols[None, :] - cols[:, None]  # (N, N) [query, key]: how far right of the query the key is
        up = rows[:, None] - rows[None, :]  # how far above it (rows grow downwards)
        distance = torch.hypot(right, up)
        angles = torch.deg2rad(torch.tensor(self.head_angles(), dtype=torch.float64))[:, None, None]  # (heads, 1, 1)
        along = angles.cos() * right + angles.sin() * up  # (heads, N, N): the key's offset along the head's direction
        half_angle = math.radians(self.field_of_view / 2)
        visible = along >= distance * (math.cos(half_angle) - CONE_TOLERANCE)  # the query itself: 0 >= 0
        penalty = -self.head_slopes()[:, None, None] * distance
        return {"penalty": penalty.float(), "visible": visible}

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        grid = tuple(grid)

        def masked() -> Tensor:
            fixed = self.grid_buffers(grid)
            return fixed["penalty"].masked_fill(~fixed["visible"], float("-inf"))  # (heads, N, N)

        return self.per_grid(("bias", grid), masked)

    def init_kwargs(self) -> dict:
        return {
            **super().init_kwargs(),
            "directions": self.directions,
            "field_of_view": self.field_of_view,
            "slope": self.slope,
        }

    def extra_repr(self) -> str:
        return (
            f"grid={self.grid}, ref_grid={self.ref_grid}, directions={self.directions}, "
            f"field_of_view={self.field_of_view}, slope={self.slope}"
        )


FIRE_C_INIT = 0.1  # the log transform's scale c at initialisation, as in FIRE
FIRE_EPS = 1e-6  # keeps the normaliser positive where the threshold learns its way to 0


def axis_offsets(size: int, device=None) -> tuple[Tensor, Tensor]:
    """Along one axis of `size` patches, (size, size) each [query, key], fp32: the offset key -
    query, and the query's reach: the patches from the query to the axis' end in the key's direction
    (its position for keys before it, size - 1 - position otherwise)."""
    position = torch.arange(size, dtype=torch.float32, device=device)
    offset = position[None, :] - position[:, None]
    reach = torch.where(offset < 0, position[:, None], size - 1 - position[:, None])
    return offset, reach


class FireFunction(nn.Module):
    """One layer's FIRE: the log transform's scales c and thresholds L (row, column), and the MLP
    from the two normalised offsets to a bias per head (2 -> hidden -> heads, ReLU)."""

    def __init__(self, num_heads: int, hidden_dim: int, thresholds: tuple[float, float]):
        super().__init__()
        self.c = nn.Parameter(torch.full((2,), FIRE_C_INIT))
        self.threshold = nn.Parameter(torch.tensor(thresholds, dtype=torch.float32))
        # no output bias: a constant per head shifts a softmax row by nothing
        self.mlp = nn.Sequential(nn.Linear(2, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, num_heads, bias=False))


@register("fire")
class FunctionalInterpolation(PositionalEncoding):
    """FIRE (Li et al. 2024) on the patch grid, one per layer. Per axis, offset d = key - query is
    normalised by the query's reach r in the key's direction: u = sign(d) psi(|d|) / psi(max(L, r)),
    psi(x) = log(|c| x + 1), c and the threshold L learned (L starts at the training axis' largest
    offset). An MLP maps (u_row, u_col) in [-1, 1]^2 to a bias per head, (heads, N, N). Buffers
    `row_offsets`, `row_reach` (H, H), `col_offsets`, `col_reach` (W, W). Other grids use the same
    functions: nothing to resize (docs/DESIGN.md, section 1).

    Args:
        hidden_dim: hidden width of each layer's MLP (32 in FIRE).
    """

    arguments = {"hidden_dim": Argument("the MLP's hidden width", kind="integer", low=1)}

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, hidden_dim: int = 32):
        super().__init__(dim, num_heads, depth, grid)
        self.hidden_dim = hidden_dim
        thresholds = (max(self.grid[0] - 1, 1), max(self.grid[1] - 1, 1))
        self.layers = nn.ModuleList(FireFunction(num_heads, hidden_dim, thresholds) for _ in range(depth))
        self.build_buffers()

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        row_offsets, row_reach = axis_offsets(grid[0], device)
        col_offsets, col_reach = axis_offsets(grid[1], device)
        return {"row_offsets": row_offsets, "row_reach": row_reach, "col_offsets": col_offsets, "col_reach": col_reach}

    def normalised_offsets(self, layer: int, grid: Grid) -> Tensor:
        """The MLP's input for every (query, key) pair, (N, N, 2) (row, column), each in [-1, 1]."""
        fixed = self.grid_buffers(grid)
        fire = self.layers[layer]
        scale, threshold = fire.c.abs(), fire.threshold.abs()

        def normalised(axis: int, name: str) -> Tensor:  # (size, size) [query, key]
            offset, reach = fixed[f"{name}_offsets"], fixed[f"{name}_reach"]

            def psi(x: Tensor) -> Tensor:
                return torch.log1p(scale[axis] * x)

            return offset.sign() * psi(offset.abs()) / (psi(torch.maximum(reach, threshold[axis])) + FIRE_EPS)

        rows, cols = normalised(0, "row"), normalised(1, "col")
        num_tokens = grid[0] * grid[1]
        # [query row, query col, key row, key col] -> (N, N), tokens row-major
        pairs = torch.broadcast_tensors(rows[:, None, :, None], cols[None, :, None, :])
        return torch.stack(pairs, dim=-1).reshape(num_tokens, num_tokens, 2)

    def _bias_from(self, layer: int, grid: Grid) -> Tensor:
        mlp = self.layers[layer].mlp
        inputs = self.normalised_offsets(layer, grid)
        with autocast_off(inputs.device.type):  # the tiny MLP in the parameters' dtype
            return mlp(inputs.to(mlp[0].weight.dtype)).permute(2, 0, 1)  # (N, N, heads) -> (heads, N, N)

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor:
        grid = tuple(grid)
        return self.per_grid((layer, grid), lambda: self._bias_from(layer, grid))

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "hidden_dim": self.hidden_dim}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, hidden_dim={self.hidden_dim}"
