"""Rotary position embeddings: queries and keys rotated by their patch's position (the `rotate` hook).

Both schemes are from Heo et al. 2024, "Rotary Position Embedding for Vision Transformer" (RoPE-ViT):
each channel pair of a head's query and key rotates by an angle linear in the patch position, so
q_i . k_j depends on the positions only through the offset p_i - p_j.

- `rope_axial`: fixed frequencies (timm's `freq_bands`); half the pairs rotate with the row, half
  with the column (RoPE-Axial).
- `rope_mixed`: learned 2D frequencies per head and layer, angle = col * f_x + row * f_y (RoPE-Mixed).

A scheme provides fp32 angles (`angles(layer, grid)`, one per channel pair); `HalfLayoutRotation`
applies them in timm's half layout (pair p = channels p and p + head_dim/2). Other grids: the angles
are recomputed (`resize_mode`). Precision, layout and resize rules: docs/DESIGN.md.
"""

from __future__ import annotations

import torch
from timm.layers.pos_embed_sincos import freq_bands, init_random_2d_freqs
from torch import Tensor, nn

from ..errors import ConfigError
from .arguments import Argument
from .base import Grid, PositionalEncoding, token_positions
from .registry import register
from .scaling import FREQUENCY_MODES, axis_frequencies, axis_scale, band_range, rescale


def rotate_halves(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """(x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) on the two halves of the last dim of x, each
    half written in place into the output (two passes over x instead of the four of
    `x * cos + rope_rotate_half(x) * sin`); cos and sin (..., N, D/2) are in x's dtype."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    x1, x2 = x.chunk(2, dim=-1)
    out1, out2 = out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin)
    return out


class HalfLayoutRotation(torch.autograd.Function):
    """Rotate x (..., N, D) by `angles` (fp32, broadcastable to (..., N, D/2)) in timm's half layout
    (`apply_rot_embed(half=True)`: x * cos + rope_rotate_half(x) * sin), backward written out: the
    inverse rotation for x and, for learned angles, d(loss)/d(angle) = g2 * y1 - g1 * y2 summed over
    the broadcast dims. Why by hand: docs/DESIGN.md; the speed-up: docs/PERFORMANCE.md."""

    @staticmethod
    def forward(ctx, x: Tensor, angles: Tensor) -> Tensor:
        angles = angles.to(torch.promote_types(angles.dtype, torch.float32))  # trig in >= fp32, then one cast
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (..., N, D/2)
        y = rotate_halves(x, cos, sin)
        ctx.angles_shape = angles.shape
        ctx.save_for_backward(cos, sin, y if ctx.needs_input_grad[1] else None)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin, y = ctx.saved_tensors
        grad_x = rotate_halves(grad, cos, -sin) if ctx.needs_input_grad[0] else None  # the inverse rotation
        grad_angles = None
        if ctx.needs_input_grad[1]:
            # dy1 / dangle = -y2, dy2 / dangle = y1
            (grad1, grad2), (y1, y2) = grad.chunk(2, dim=-1), y.chunk(2, dim=-1)
            per_pair = torch.mul(grad2, y1).addcmul_(grad1, y2, value=-1)  # (..., N, D/2)
            shape = ctx.angles_shape
            lead = per_pair.dim() - len(shape)
            dims = [*range(lead), *(lead + i for i, n in enumerate(shape) if n == 1 and per_pair.shape[lead + i] != 1)]
            dtype = torch.promote_types(per_pair.dtype, torch.float32)  # accumulate the batch sum in >= fp32
            grad_angles = per_pair.sum(dims, dtype=dtype).reshape(shape) if dims else per_pair.to(dtype)
        return grad_x, grad_angles


class RotaryEncoding(PositionalEncoding):
    """Shared by the RoPE schemes: head_dim check, the two position modes, the rotation.

    Args:
        theta: frequency base (of the fixed frequencies, or of the learned ones' initialisation).
        resize_mode: positions on a grid other than `ref_grid`: `extrapolate` (0..H'-1),
            `interpolate` (rescaled into the reference grid's range), `ntk` or `yarn` (0..H'-1 with
            rescaled frequencies).
        ref_grid: the grid positions are measured in (the training grid); default: the built grid.
    """

    resize_modes = ("extrapolate", "interpolate", *FREQUENCY_MODES)
    measures_in_ref_grid = True
    supports_fuzzy = True
    arguments = {"theta": Argument("the frequency base", low=0, low_open=True)}

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        theta: float,
        resize_mode: str = "extrapolate",
        ref_grid: Grid | None = None,
    ):
        super().__init__(dim, num_heads, depth, grid, resize_mode, ref_grid)
        if dim % num_heads or (dim // num_heads) % 4:
            raise ConfigError(
                f"pos={self.scheme_name} needs head_dim = dim / num_heads divisible by 4 (a row and a column "
                f"rotation per channel pair); got dim={dim}, num_heads={num_heads}, head_dim={dim / num_heads:g}"
            )
        self.head_dim = dim // num_heads
        self.theta = float(theta)

    def positions(self, grid: Grid, device=None) -> tuple[Tensor, Tensor]:
        """Row and column coordinate of every token, (N,) each in row-major order, fp32, under the
        resize mode; (B, N) each with fuzzy offsets in training."""
        return self.jittered(*token_positions(grid, self.ref_grid, self.resize_mode, device=device))

    def lowest_frequency(self) -> float:
        """The nominal lowest frequency theta^(-(K-1)/K), K = head_dim/4 (NTK's end of the band)."""
        return band_range(self.theta, self.head_dim // 4)

    def angles(self, layer: int, grid: Grid, device=None) -> Tensor:
        """fp32 angle of every channel pair at every token: (N, head_dim/2) or (heads, N, head_dim/2),
        on `device` (default: the scheme's parameters', else the CPU)."""
        raise NotImplementedError

    def rotate(self, layer: int, q: Tensor, k: Tensor, grid: Grid) -> tuple[Tensor, Tensor]:
        angles = self.angles(layer, grid, q.device)
        return HalfLayoutRotation.apply(q, angles), HalfLayoutRotation.apply(k, angles)

    def init_kwargs(self) -> dict:
        return {**super().init_kwargs(), "theta": self.theta}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, head_dim={self.head_dim}, resize_mode={self.resize_mode}, ref_grid={self.ref_grid}"


@register("rope_axial")
class RopeAxial(RotaryEncoding):
    """RoPE-Axial (Heo et al. 2024): of each head's head_dim/2 channel pairs, the first half rotate by
    row * f_k, the second half by col * f_k, f_k = theta^(-4k / head_dim), k = 0..head_dim/4 - 1, the
    same for every head and layer. No parameters and no buffers: fp32 angles memoised per grid.

    Args:
        theta: frequency base (100, RoPE-ViT's `rope_theta`; why not 10000: docs/DESIGN.md).
        resize_mode: `extrapolate`, `interpolate`, `ntk` or `yarn` (see `RotaryEncoding`).
        ref_grid: the grid positions are measured in; default: the built grid.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        theta: float = 100.0,
        resize_mode: str = "extrapolate",
        ref_grid: Grid | None = None,
    ):
        super().__init__(dim, num_heads, depth, grid, theta, resize_mode=resize_mode, ref_grid=ref_grid)

    def _compute(self, grid: Grid, device=None) -> Tensor:
        """Angles (H*W, head_dim/2) in fp32, or (B, 1, H*W, head_dim/2) with fuzzy offsets: row
        pairs first, then column pairs."""
        bands = freq_bands(self.head_dim // 4, temperature=self.theta, step=1, device=device)  # theta^(-4k/head_dim)
        row_bands, col_bands = axis_frequencies(bands, self.resize_mode, grid, self.ref_grid, self.lowest_frequency())
        rows, cols = self.positions(grid, device=device)
        # (..., N, hd/4) row angles and column angles -> (..., N, hd/2)
        angles = torch.cat([rows[..., None] * row_bands, cols[..., None] * col_bands], dim=-1)
        return angles if angles.dim() == 2 else angles.unsqueeze(1)  # (B, N, hd/2) -> (B, 1, N, hd/2): all heads

    def angles(self, layer: int, grid: Grid, device=None) -> Tensor:
        if self.jitter is not None and self.training:
            return self._compute(grid, device=device)
        return self.per_grid((tuple(grid), torch.device(device or "cpu")), lambda: self._compute(grid, device=device))


@register("rope_mixed")
class RopeMixed(RotaryEncoding):
    """RoPE-Mixed (Heo et al. 2024): learned `freqs` (2, depth, heads, head_dim/2) = (f_x, f_y); pair k
    of head h in layer l rotates by col * f_x[l, h, k] + row * f_y[l, h, k]. Initialised as in the
    paper (timm's `init_random_2d_freqs`: magnitudes theta^(-4k / head_dim), a random direction per
    head and layer). Angles are recomputed every training step, memoised per grid in evaluation.

    Args:
        theta: frequency base of the initialisation (10 in RoPE-ViT for the mixed variant).
        resize_mode: `extrapolate`, `interpolate`, `ntk` or `yarn` (see `RotaryEncoding`); the
            frequency rules treat f_x as the column axis' and f_y as the row axis' frequency.
        ref_grid: the grid positions are measured in; default: the built grid.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        theta: float = 10.0,
        resize_mode: str = "extrapolate",
        ref_grid: Grid | None = None,
    ):
        super().__init__(dim, num_heads, depth, grid, theta, resize_mode=resize_mode, ref_grid=ref_grid)
        self.freqs = nn.Parameter(init_random_2d_freqs(self.head_dim, depth, num_heads, temperature=self.theta))

    def _compute(self, layer: int, grid: Grid) -> Tensor:
        # timm's get_mixed_freqs returns sin/cos (not angles) of every layer at once without a
        # reference grid; here one layer's frequencies meet positions under the resize mode.
        rows, cols = self.positions(grid, device=self.freqs.device)  # (N,) each, or (B, N) when fuzzy
        freq_x, freq_y = self.freqs[:, layer].float()  # (heads, head_dim/2) each, fp32 also under autocast
        if self.resize_mode in FREQUENCY_MODES:
            (height, width), (ref_height, ref_width) = grid, self.ref_grid
            lowest = self.lowest_frequency()
            freq_x = rescale(freq_x, self.resize_mode, axis_scale(width, ref_width), ref_width, lowest)
            freq_y = rescale(freq_y, self.resize_mode, axis_scale(height, ref_height), ref_height, lowest)
        # (..., 1, N, 1) * (heads, 1, head_dim/2) -> (heads, N, head_dim/2), or (B, heads, N, head_dim/2)
        return cols[..., None, :, None] * freq_x[:, None] + rows[..., None, :, None] * freq_y[:, None]

    def angles(self, layer: int, grid: Grid, device=None) -> Tensor:
        if self.jitter is not None and self.training:
            return self._compute(layer, grid)
        return self.per_grid((layer, tuple(grid)), lambda: self._compute(layer, grid))
