"""Rotary position embeddings: queries and keys rotated by their patch's position (the `rotate` hook).

Both schemes are from Heo et al. 2024, "Rotary Position Embedding for Vision Transformer"
(RoPE-ViT, ECCV 2024; code: naver-ai/rope-vit). Each pair of channels of a head's query and key is
rotated by an angle linear in the patch position, so the attention score q_i . k_j depends on the
positions only through their 2D offset p_i - p_j.

- `rope_axial`: fixed frequencies; half the channel pairs rotate with the row, half with the
  column (RoPE-Axial). Built with timm's `build_rotary_pos_embed`.
- `rope_mixed`: learned 2D frequencies per head and per layer, angle = col * f_x + row * f_y, so a
  pair can rotate along any direction of the image (RoPE-Mixed). Initialised with timm's
  `init_random_2d_freqs` (the paper's init: axial magnitudes, a random direction per head).

Angles, sin and cos are computed in fp32 and the rotation is applied to fp32 copies of q and k,
cast back to q's dtype afterwards: under bf16 a position times a frequency (up to ~15 rad on a
16 x 16 grid) would otherwise keep only ~2 significant digits of the angle.

Resize rule: nothing to resample; the angles are recomputed for the new grid (from the fixed or the
learned frequencies), with positions either 0..H'-1 (`extrapolate`, as if the image were larger;
what RoPE-ViT evaluates at higher resolutions) or rescaled into the reference (training) grid
(`interpolate`, position interpolation), exactly as the fixed sin-cos tables of `absolute.py`.
"""
from __future__ import annotations

import torch
from timm.layers.pos_embed_sincos import (apply_rot_embed_cat, build_rotary_pos_embed, get_mixed_freqs,
                                          init_random_2d_freqs)
from torch import Tensor, nn

from ..errors import ConfigError
from .base import Grid, PositionalEncoding, axis_positions, check_choice
from .registry import register


def rotate_fp32(x: Tensor, embed: Tensor) -> Tensor:
    """Rotate x (B, heads, N, head_dim), any dtype, by `embed` = [sin | cos] (..., N, 2 * head_dim) in
    the interleaved pair layout; computed in fp32, returned in x's dtype."""
    return apply_rot_embed_cat(x.float(), embed.float()).to(x.dtype)


class RotaryEncoding(PositionalEncoding):
    """Shared by the RoPE schemes: head_dim check, the two position modes, the rotation.

    Args:
        resize_mode: positions on a grid other than `ref_grid`: `extrapolate` (0..H'-1) or
            `interpolate` (rescaled into the reference grid's range).
        ref_grid: the grid positions are measured in (the training grid); default: the built grid.
    """

    resize_modes = ("extrapolate", "interpolate")

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, resize_mode: str = "extrapolate",
                 ref_grid: Grid | None = None):
        super().__init__(dim, num_heads, depth, grid)
        if dim % num_heads or (dim // num_heads) % 4:
            raise ConfigError(
                f"pos={self.scheme_name} needs head_dim = dim / num_heads divisible by 4 (a row and a column "
                f"rotation per channel pair); got dim={dim}, num_heads={num_heads}, head_dim={dim / num_heads:g}"
            )
        check_choice(self.scheme_name, "resize_mode", resize_mode, self.resize_modes)
        self.head_dim = dim // num_heads
        self.resize_mode = resize_mode
        self.ref_grid = tuple(int(s) for s in ref_grid) if ref_grid else self.grid

    def positions(self, grid: Grid, device=None) -> tuple[Tensor, Tensor]:
        """Row and column coordinate of every token, (N,) each in row-major order, fp32, under the
        resize mode."""
        rows, cols = axis_positions(grid, self.ref_grid, self.resize_mode, device=device)
        return rows.repeat_interleave(grid[1]), cols.repeat(grid[0])  # (H*W,) each, row-major

    def embed(self, layer: int, grid: Grid) -> Tensor:
        """fp32 [sin | cos] of the angles: (N, 2 * head_dim) or (heads, N, 2 * head_dim)."""
        raise NotImplementedError

    def rotate(self, layer: int, q: Tensor, k: Tensor, grid: Grid) -> tuple[Tensor, Tensor]:
        embed = self.embed(layer, grid)
        return rotate_fp32(q, embed), rotate_fp32(k, embed)

    def resize_to(self, grid: Grid, mode: str | None = None) -> dict:
        self.check_resize_mode(mode)
        self.resize_mode = mode or self.resize_mode
        return super().resize_to(grid)

    def init_kwargs(self) -> dict:
        return {"resize_mode": self.resize_mode, "ref_grid": list(self.ref_grid)}

    def extra_repr(self) -> str:
        return f"grid={self.grid}, head_dim={self.head_dim}, resize_mode={self.resize_mode}, ref_grid={self.ref_grid}"


@register("rope_axial")
class RopeAxial(RotaryEncoding):
    """RoPE-Axial (Heo et al. 2024): of each head's head_dim / 2 channel pairs, the first half rotate
    by row * f_k and the second half by col * f_k, with fixed frequencies f_k = theta^(-4k / head_dim),
    k = 0..head_dim/4 - 1 (the same for every head and layer; no parameters).

    `theta` = 100 by default, as in RoPE-ViT (their `rope_theta`), not the 10000 of language models:
    positions here only reach 7..15 (8 x 8 to 16 x 16 grids), and with 10000 the slowest pairs turn by
    about 10000^(-15/16) * 7 ~ 1e-3 rad across the whole image, i.e. a quarter of the channels carry
    no position at all; with 100 the slowest pair still turns ~0.1 rad, the fastest 1 rad per patch.

    The [sin | cos] table of the built grid is a non-persistent fp32 buffer that stays fp32 when the
    model is cast to bf16 (see `_apply`); other grids are recomputed (cached while gradients are off).

    Args:
        theta: frequency base.
        resize_mode: `extrapolate` or `interpolate` (see the module docstring).
        ref_grid: the grid positions are measured in; default: the built grid.
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, theta: float = 100.0,
                 resize_mode: str = "extrapolate", ref_grid: Grid | None = None):
        super().__init__(dim, num_heads, depth, grid, resize_mode=resize_mode, ref_grid=ref_grid)
        self.theta = float(theta)
        self.register_buffer("cached", self._compute(self.grid), persistent=False)  # (N, 2 * head_dim)

    def _compute(self, grid: Grid, device=None) -> Tensor:
        """[sin | cos] (H*W, 2 * head_dim) in fp32; pairs interleaved, row pairs first."""
        ref = list(self.ref_grid) if self.resize_mode == "interpolate" else None  # rescales t to t / H' * H_ref
        sin, cos = build_rotary_pos_embed(list(grid), dim=self.head_dim, temperature=self.theta, in_pixels=False,
                                          ref_feat_shape=ref, grid_indexing="ij", device=device,
                                          dtype=torch.float32)  # each (H*W, head_dim)
        return torch.cat([sin, cos], dim=-1)

    def embed(self, layer: int, grid: Grid) -> Tensor:
        if tuple(grid) == self.grid:
            return self.cached
        return self.per_grid(tuple(grid), lambda: self._compute(grid, device=self.cached.device))

    def resize_to(self, grid: Grid, mode: str | None = None) -> dict:
        kwargs = super().resize_to(grid, mode)
        self.cached = self._compute(self.grid, device=self.cached.device)
        return kwargs

    def _apply(self, fn, *args, **kwargs):
        # `.to(bf16)` / `.half()` cast every floating buffer; the angles' sin/cos must stay fp32, so
        # rebuild them (as timm's rotary modules rebuild their frequency bands).
        module = super()._apply(fn, *args, **kwargs)
        if self.cached.dtype != torch.float32:
            self.cached = self._compute(self.grid, device=self.cached.device)
        return module

    def init_kwargs(self) -> dict:
        return {"theta": self.theta, **super().init_kwargs()}


@register("rope_mixed")
class RopeMixed(RotaryEncoding):
    """RoPE-Mixed (Heo et al. 2024): learned frequencies per layer, head and channel pair,
    `freqs` (2, depth, heads, head_dim/2) = (f_x, f_y); pair k of head h in layer l rotates by
    col * f_x[l, h, k] + row * f_y[l, h, k]. Initialised as in the paper (timm's
    `init_random_2d_freqs`): magnitudes theta^(-4k / head_dim), half the pairs along a random
    direction per head and layer, half along the perpendicular one. Excluded from weight decay.

    Angles depend on the parameters, so they are recomputed every training step (cheap: N x heads x
    head_dim/2 per layer) and cached per grid while gradients are off. Other grids: the learned
    frequencies applied to the new grid's positions; nothing is resampled.

    Args:
        theta: frequency base of the initialisation (10 in RoPE-ViT for the mixed variant).
        resize_mode: `extrapolate` or `interpolate` (see the module docstring).
        ref_grid: the grid positions are measured in; default: the built grid.
    """

    def __init__(self, dim: int, num_heads: int, depth: int, grid: Grid, theta: float = 10.0,
                 resize_mode: str = "extrapolate", ref_grid: Grid | None = None):
        super().__init__(dim, num_heads, depth, grid, resize_mode=resize_mode, ref_grid=ref_grid)
        self.theta = float(theta)
        self.freqs = nn.Parameter(init_random_2d_freqs(self.head_dim, depth, num_heads, temperature=self.theta))

    def _compute(self, layer: int, grid: Grid) -> Tensor:
        # timm's RotaryEmbeddingMixed.get_embed builds every layer at once from a grid without a
        # reference shape; here one layer's frequencies meet positions under the resize mode.
        rows, cols = self.positions(grid, device=self.freqs.device)
        return get_mixed_freqs(self.freqs[:, layer], cols, rows, dtype=torch.float32)  # (heads, N, 2 * head_dim)

    def embed(self, layer: int, grid: Grid) -> Tensor:
        return self.per_grid((layer, tuple(grid)), lambda: self._compute(layer, grid))

    def init_kwargs(self) -> dict:
        return {"theta": self.theta, **super().init_kwargs()}
