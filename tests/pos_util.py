"""Helpers shared by the test_pos_* files: a small model of a scheme, and checks that a
quantity depends only on the 2D offset between tokens (on rectangular grids, so a swapped H/W or a
grid inferred with sqrt(N) shows up)."""

from __future__ import annotations

import torch

import vitpos

PATCH = 4


def build(pos: str, img_size, dim: int = 16, depth: int = 2, num_heads: int = 2, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return vitpos.create_model(
        pos,
        img_size=img_size,
        num_classes=10,
        in_chans=3,
        dim=dim,
        depth=depth,
        num_heads=num_heads,
        patch_size=PATCH,
        **kwargs,
    )


def offsets(grid):
    height, width = grid
    rows = torch.arange(height).repeat_interleave(width)  # row-major token order
    cols = torch.arange(width).repeat(height)
    return rows[:, None] - rows[None, :], cols[:, None] - cols[None, :]  # (N, N) each


def group_by_offset(values, grid):
    """{(drow, dcol): values of every (query, key) pair with that offset} for a (N, N) tensor."""
    drow, dcol = offsets(grid)
    groups = {}
    for r, c, v in zip(drow.flatten().tolist(), dcol.flatten().tolist(), values.flatten().tolist()):
        groups.setdefault((r, c), []).append(v)
    return groups


def assert_function_of_offset(values, grid, atol=1e-5, min_gap=None):
    """Every pair with the same offset has the same value (to `atol`); with `min_gap`, different
    offsets also get values at least `min_gap` apart. Returns {offset: value}."""
    groups = group_by_offset(values, grid)
    assert len(groups) == (2 * grid[0] - 1) * (2 * grid[1] - 1)
    for offset, group in groups.items():
        assert max(group) - min(group) <= atol, (offset, group)
    per_offset = {offset: group[0] for offset, group in groups.items()}
    if min_gap is not None:
        ordered = sorted(per_offset.values())
        gap = min(b - a for a, b in zip(ordered, ordered[1:]))
        assert gap > min_gap, f"two different offsets give (almost) the same value: gap {gap:.2e}"
    return per_offset
