"""Training-free frequency rules for grids larger than the training grid, shared by the sin-cos and
rotary schemes: NTK-aware scaling and YaRN, applied per image axis as VisionNTK / VisionYaRN (Lu et
al. 2024, "FiT: Flexible Vision Transformer for Diffusion Model").

Positions stay 0..H'-1 (as `extrapolate`); what changes is each frequency f of an axis, by a factor
that depends on f and on the axis' scale s = max(H' / H_train, 1) (1 on a grid no larger than the
training grid, where both rules are the identity).
"""

from __future__ import annotations

import math

from torch import Tensor

FREQUENCY_MODES = ("ntk", "yarn")
YARN_ALPHA, YARN_BETA = 1.0, 32.0  # YaRN's ramp bounds, in turns over the training axis (Peng et al.)


def axis_scale(size: int, ref_size: int) -> float:
    """The scale s of one axis: how many times the training axis fits into the new one, at least 1."""
    return max(size / ref_size, 1.0)


def ntk_factor(freqs: Tensor, scale: float, lowest: float, highest: float = 1.0) -> Tensor:
    """NTK-aware scaling (bloc97 2023; VisionNTK in FiT): f -> f * s^-e(f), with
    e(f) = log(highest / |f|) / log(highest / lowest) clamped to [0, 1]. The highest frequency is
    kept (extrapolated), the lowest divided by s (interpolated); for bands theta^(-k/K), k < K, with
    highest 1 and lowest theta^(-(K-1)/K) it is the base change theta -> theta * s^(K/(K-1))."""
    exponent = (math.log(highest) - freqs.abs().clamp_min(1e-30).log()) / math.log(highest / lowest)
    return scale ** -exponent.clamp(0.0, 1.0)


def yarn_factor(
    freqs: Tensor, scale: float, ref_len: int, alpha: float = YARN_ALPHA, beta: float = YARN_BETA
) -> Tensor:
    """YaRN's frequency rule, "NTK-by-parts" (Peng et al. 2024): a frequency turning r = L |f| / 2pi
    times over the training axis of length L is kept when r >= beta (it has seen every phase),
    divided by s when r <= alpha, and blended linearly in between: f -> f * (g + (1 - g) / s),
    g = clamp((r - alpha) / (beta - alpha), 0, 1). YaRN's logit scaling is the separate
    `attn_temperature` option."""
    turns = ref_len * freqs.abs() / (2 * math.pi)
    keep = ((turns - alpha) / (beta - alpha)).clamp(0.0, 1.0)
    return keep + (1.0 - keep) / scale


def rescale(freqs: Tensor, mode: str, scale: float, ref_len: int, lowest: float) -> Tensor:
    """`freqs` (any shape, radians per patch along one axis) under `mode` (`ntk` or `yarn`) for an
    axis `scale` times the training axis of `ref_len` patches; `lowest` = the scheme's nominal lowest
    frequency (NTK's end of the band)."""
    if scale == 1.0:
        return freqs
    if mode == "ntk":
        return freqs * ntk_factor(freqs, scale, lowest)
    if mode == "yarn":
        return freqs * yarn_factor(freqs, scale, ref_len)
    raise ValueError(f"unknown frequency mode {mode!r}; one of {', '.join(FREQUENCY_MODES)}")


def band_range(theta: float, num_bands: int) -> float:
    """The lowest of the bands theta^(-k / num_bands), k = 0..num_bands-1 (the highest is 1)."""
    return theta ** (-(num_bands - 1) / num_bands) if num_bands > 1 else 1.0


def axis_frequencies(
    bands: Tensor, mode: str, grid: tuple[int, int], ref_grid: tuple[int, int], lowest: float
) -> tuple[Tensor, Tensor]:
    """The row and column frequencies of `bands` on `grid` under `mode` (unchanged unless ntk/yarn)."""
    if mode not in FREQUENCY_MODES:
        return bands, bands
    (height, width), (ref_height, ref_width) = grid, ref_grid
    return (
        rescale(bands, mode, axis_scale(height, ref_height), ref_height, lowest),
        rescale(bands, mode, axis_scale(width, ref_width), ref_width, lowest),
    )
