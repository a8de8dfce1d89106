"""Rotary schemes (`rope_axial`, `rope_mixed`): scores depend on the 2D offset only, the rotation
matches timm's formula. Rectangular grids throughout, so a swapped H/W or a grid inferred with
sqrt(N) shows up."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from pos_util import assert_function_of_offset, build
from timm.layers.pos_embed_sincos import apply_rot_embed

import vitpos
from vitpos import ConfigError
from vitpos.pos import create_pos, get_pos_class

pytestmark = pytest.mark.usefixtures("one_thread")


ROPES = ("rope_axial", "rope_mixed")


def rotated_scores(pos, layer, grid, seed=0):
    """q_i . k_j after rotation, (heads, N, N), for q and k the same random vector at every token."""
    generator = torch.Generator().manual_seed(seed)
    heads, head_dim, n = pos.num_heads, pos.head_dim, grid[0] * grid[1]
    q = torch.randn(1, heads, 1, head_dim, generator=generator).expand(1, heads, n, head_dim)
    k = torch.randn(1, heads, 1, head_dim, generator=generator).expand(1, heads, n, head_dim)
    q_rot, k_rot = pos.rotate(layer, q, k, grid)
    assert q_rot.shape == k_rot.shape == (1, heads, n, head_dim)
    return (q_rot @ k_rot.transpose(-2, -1))[0]  # (heads, N, N)


@pytest.mark.parametrize("mode", get_pos_class("rope_axial").resize_modes)
@pytest.mark.parametrize("grid", [(3, 5), (4, 7)], ids=["built-grid", "other-grid"])
@pytest.mark.parametrize("pos", ROPES)
def test_rope_scores_depend_only_on_the_2d_offset(pos, grid, mode):
    model = build(pos, (12, 20), dim=32, num_heads=2, pos_kwargs={"resize_mode": mode})  # built 3 x 5, head_dim 16
    for layer in range(2):
        scores = rotated_scores(model.pos, layer, grid)
        for head in scores:
            # equal offsets -> equal scores; different offsets -> different scores (rows and columns are
            # told apart, and (dr, dc) from (-dr, -dc): the score is not a function of the distance)
            # (measured: same-offset spread <= 3e-6 in fp32, smallest gap between offsets >= 1.1e-4)
            per_offset = assert_function_of_offset(head, grid, atol=1e-5, min_gap=2e-5)
            assert abs(per_offset[(1, 0)] - per_offset[(0, 1)]) > 1e-3
            assert abs(per_offset[(1, 2)] - per_offset[(-1, -2)]) > 1e-3


def test_rope_mixed_heads_and_layers_have_their_own_frequencies():
    model = build("rope_mixed", (12, 20), dim=32, num_heads=2)
    freqs = model.pos.freqs.detach()
    assert freqs.shape == (2, 2, 2, 8)  # (x/y, depth, heads, head_dim / 2)
    scores = [rotated_scores(model.pos, layer, (3, 5)) for layer in range(2)]
    assert not torch.allclose(scores[0], scores[1], atol=1e-3)  # layers differ
    assert not torch.allclose(freqs[:, :, 0], freqs[:, :, 1])  # heads differ
    # mixed: a pair's frequency has both an x and a y component (not axial)
    assert (freqs[0].abs() > 1e-4).float().mean() > 0.9 and (freqs[1].abs() > 1e-4).float().mean() > 0.9


def axial_angles(grid, head_dim, theta, ref_grid=None):
    """fp64 angles (N, head_dim/2): pair p < head_dim/4 turns by row * theta^(-4p/head_dim), pair
    head_dim/4 + p by col * theta^(-4p/head_dim)."""
    height, width = grid
    rows = torch.arange(height, dtype=torch.float64).repeat_interleave(width)
    cols = torch.arange(width, dtype=torch.float64).repeat(height)
    if ref_grid is not None:
        rows, cols = rows * ref_grid[0] / height, cols * ref_grid[1] / width
    freqs = theta ** (-4 * torch.arange(head_dim // 4, dtype=torch.float64) / head_dim)
    return torch.cat([rows[:, None] * freqs, cols[:, None] * freqs], dim=1)


def axial_reference(x, grid, theta, ref_grid=None):
    """Rotate x (B, heads, N, head_dim) in fp64 by `axial_angles`; pair p is channels (p, p + head_dim/2)
    (timm's half layout)."""
    angles = axial_angles(grid, x.shape[-1], theta, ref_grid)
    x = x.double()
    first, second = x.chunk(2, dim=-1)
    return torch.cat(
        [first * angles.cos() - second * angles.sin(), second * angles.cos() + first * angles.sin()], dim=-1
    )


@pytest.mark.parametrize("theta", [100.0, 10000.0])
@pytest.mark.parametrize("grid,mode", [((3, 5), "extrapolate"), ((5, 4), "extrapolate"), ((6, 10), "interpolate")])
def test_rope_axial_matches_reference(grid, mode, theta):
    model = build("rope_axial", (12, 20), dim=32, num_heads=2, pos_kwargs={"theta": theta, "resize_mode": mode})
    n = grid[0] * grid[1]
    q, k = torch.randn(2, 3, 2, n, 16).unbind(0)
    q_rot, k_rot = model.pos.rotate(0, q, k, grid)
    ref_grid = (3, 5) if mode == "interpolate" else None
    torch.testing.assert_close(q_rot.double(), axial_reference(q, grid, theta, ref_grid), atol=1e-5, rtol=0)
    torch.testing.assert_close(k_rot.double(), axial_reference(k, grid, theta, ref_grid), atol=1e-5, rtol=0)
    # a rotation: norms of every pair kept; the first token (position 0, 0) is not rotated at all
    torch.testing.assert_close(q_rot.norm(dim=-1), q.norm(dim=-1))
    if mode == "extrapolate":
        torch.testing.assert_close(q_rot[:, :, 0], q[:, :, 0], atol=0, rtol=0)
    # the same rotation in every layer (fixed frequencies)
    torch.testing.assert_close(model.pos.rotate(1, q, k, grid)[0], q_rot, atol=0, rtol=0)


@pytest.mark.parametrize(
    "angles_shape", [(10, 4), (1, 10, 4), (3, 10, 4)], ids=["shared", "broadcast-head", "per-head"]
)
def test_half_layout_rotation_is_timms_formula_with_exact_gradients(angles_shape):
    """The hand-written rotation and backward against timm's `apply_rot_embed(half=True)` and against
    finite differences, for fixed (shared) and learned (per-head) angles and a non-contiguous x."""
    generator = torch.Generator().manual_seed(0)
    # (B, heads, N, D)
    x = torch.randn(2, 10, 3, 8, dtype=torch.float64, generator=generator).transpose(1, 2).requires_grad_()
    angles = (4 * torch.randn(angles_shape, dtype=torch.float64, generator=generator)).requires_grad_()
    rotated = vitpos.pos.rotary.HalfLayoutRotation.apply(x, angles)
    both_halves = torch.cat([angles, angles], dim=-1)
    timm_rotated = apply_rot_embed(x, both_halves.sin(), both_halves.cos(), half=True)
    torch.testing.assert_close(rotated, timm_rotated, atol=1e-12, rtol=0)
    upstream = torch.randn(rotated.shape, dtype=torch.float64, generator=generator)
    grads = torch.autograd.grad(rotated, (x, angles), upstream)
    timm_grads = torch.autograd.grad(timm_rotated, (x, angles), upstream)
    for grad, timm_grad in zip(grads, timm_grads):
        assert grad.shape == timm_grad.shape
        torch.testing.assert_close(grad, timm_grad, atol=1e-10, rtol=0)
    assert torch.autograd.gradcheck(vitpos.pos.rotary.HalfLayoutRotation.apply, (x, angles))


@pytest.mark.parametrize("pos", ROPES)
def test_rope_modes_interpolate_rescales_extrapolate_extends(pos):
    model8 = build(pos, 32, dim=32)  # 8 x 8
    table8 = model8.pos.angles(0, (8, 8)).reshape(-1, 8, 8, 8)  # (heads or 1, H, W, head_dim/2)
    for mode in ("interpolate", "extrapolate"):
        model = build(pos, 32, dim=32).resize(64, mode)  # 16 x 16, same parameters (same seed)
        table16 = model.pos.angles(0, (16, 16)).reshape(-1, 16, 16, 8)
        if mode == "interpolate":  # the same image sampled finer: even positions are the old grid
            torch.testing.assert_close(table16[:, ::2, ::2], table8, atol=1e-6, rtol=0)
            assert (table16[:, 1::2, 1::2] - table8).abs().max() > 1e-2
        else:  # a larger image: the top-left block is the old grid
            torch.testing.assert_close(table16[:, :8, :8], table8, atol=1e-6, rtol=0)


# fp32 angles with sin/cos rounded once to bf16 and a bf16 multiply-add: measured 0.0013-0.0014 over
# seeds (0.0009 for the exact rotation rounded to bf16); with the angles themselves rounded to bf16
# (errors up to 2^-6 rad at 4.7 rad, position 15 of the second-fastest pair): 0.0029-0.0030
BF16_ROTATION_TOLERANCE = 2**-9


def bf16_rotation_error(rotated, x, grid, theta):
    """Error of a bf16 rotation of x against the fp64 one, relative to each pair's norm, averaged over
    the batch, heads and tokens: the worst channel."""
    reference = axial_reference(x, grid, theta)
    first, second = x.double().chunk(2, dim=-1)
    pair_norm = (first**2 + second**2).sqrt().repeat(1, 1, 1, 2)
    return ((rotated.double() - reference).abs() / pair_norm).mean(dim=(0, 1, 2)).max().item()


def test_rope_axial_angles_are_fp32_under_autocast_and_in_a_bf16_model():
    grid = (16, 16)  # positions up to 15: bf16 angles would be off by up to 0.03 rad
    x = torch.randn(2, 2, 256, 16).to(torch.bfloat16)

    # the check can fail: the same rotation with its angles rounded to bf16 is outside the tolerance
    angles_bf16 = axial_angles(grid, 16, 100.0).to(torch.bfloat16).float()
    bad = vitpos.pos.rotary.HalfLayoutRotation.apply(x, angles_bf16)
    assert bf16_rotation_error(bad, x.float(), grid, 100.0) > 1.3 * BF16_ROTATION_TOLERANCE

    # fp32 model under bf16 autocast (as in training): 16 x 16 as the built grid and as another grid
    for size in (64, 32):
        model = build("rope_axial", size, dim=32)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for other in (grid, (16, 12)):
                assert model.pos.angles(0, other).dtype == torch.float32
            q_rot, k_rot = model.pos.rotate(0, x, x, grid)
        assert q_rot.dtype == torch.bfloat16
        assert bf16_rotation_error(q_rot, x.float(), grid, 100.0) < BF16_ROTATION_TOLERANCE

    # a model cast to bf16 keeps its angles in fp32 (it has no buffer a cast could round)
    model = build("rope_axial", 64, dim=32).to(torch.bfloat16)
    assert not list(model.pos.buffers()) and not list(model.pos.parameters())
    assert model.pos.angles(0, grid).dtype == torch.float32 and model.pos.angles(0, (4, 4)).dtype == torch.float32
    q_rot, _ = model.pos.rotate(0, x, x, grid)
    assert q_rot.dtype == torch.bfloat16
    assert bf16_rotation_error(q_rot, x.float(), grid, 100.0) < BF16_ROTATION_TOLERANCE
    # the whole bf16 model runs, on its grid and another
    with torch.no_grad():
        for size in (64, 48):
            assert model(torch.randn(1, 3, size, size, dtype=torch.bfloat16)).dtype == torch.bfloat16
    # and back to fp32: the same angles as a model that never was bf16
    torch.testing.assert_close(
        model.float().pos.angles(0, grid), build("rope_axial", 64, dim=32).pos.angles(0, grid), atol=0, rtol=0
    )


def test_rope_axial_angles_are_computed_once_per_grid_also_in_training():
    model = build("rope_axial", 32, dim=32).train()
    first = model.pos.angles(0, (8, 8))
    assert model.pos.angles(1, (8, 8)) is first and model.pos.angles(0, (8, 8)) is first  # every layer, every step
    assert model.pos.angles(0, (4, 6)) is not first
    torch.testing.assert_close(first.double(), axial_angles((8, 8), 16, 100.0))


def test_rope_mixed_angles_are_fp32_under_autocast_and_in_a_bf16_model():
    model = build("rope_mixed", 32, dim=32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.pos.angles(0, (8, 8)).dtype == torch.float32
        assert model.pos.angles(1, (12, 16)).dtype == torch.float32
        x = torch.randn(1, 2, 64, 16, dtype=torch.bfloat16)
        assert model.pos.rotate(0, x, x, (8, 8))[0].dtype == torch.bfloat16
    model = model.to(torch.bfloat16)
    assert model.pos.angles(0, (8, 8)).dtype == torch.float32
    with torch.no_grad():
        assert model(torch.randn(1, 3, 48, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16


@pytest.mark.parametrize("pool", ["gap", "cls"])
@pytest.mark.parametrize("size", [(32, 32), (32, 48)], ids=["built-grid", "other-grid"])
def test_rope_mixed_frequencies_get_gradients(size, pool):
    model = build("rope_mixed", 32, dim=32, depth=2, num_heads=2, pool=pool)
    assert [name for name, _ in model.pos.named_parameters()] == ["freqs"]
    assert "pos.freqs" in model.no_weight_decay()
    x = torch.randn(2, 3, *size)
    F.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    grad = model.pos.freqs.grad
    assert grad is not None and torch.isfinite(grad).all()
    for layer in range(2):
        for head in range(2):  # every layer's and head's frequencies (x and y) move
            assert grad[0, layer, head].abs().max() > 0 and grad[1, layer, head].abs().max() > 0


def test_rope_mixed_learning_a_frequency_changes_the_scores():
    model = build("rope_mixed", (12, 20), dim=32).eval()
    with torch.no_grad():
        before = rotated_scores(model.pos, 0, (3, 5))  # angles memoised: eval mode, gradients off
    model.train()  # a training step changes the frequencies in place: the memo goes with the mode change
    with torch.no_grad():
        model.pos.freqs[0, 0] += 0.3  # f_x of layer 0, in place (as an optimizer step)
    model.eval()
    with torch.no_grad():
        cached = rotated_scores(model.pos, 0, (3, 5))
    after = rotated_scores(model.pos, 0, (3, 5))  # recomputed with gradients on
    torch.testing.assert_close(cached, after)
    assert (after - before).abs().max() > 1e-2
    torch.testing.assert_close(
        rotated_scores(model.pos, 1, (3, 5)), rotated_scores(build("rope_mixed", (12, 20), dim=32).pos, 1, (3, 5))
    )  # layer 1 untouched


@pytest.mark.parametrize("dim,num_heads", [(24, 4), (40, 4), (36, 6)], ids=["hd6", "hd10", "hd6b"])
@pytest.mark.parametrize("pos", ROPES)
def test_rope_head_dim_not_divisible_by_4_raises_config_error(pos, dim, num_heads):
    head_dim = dim // num_heads
    with pytest.raises(ConfigError, match=rf"pos={pos}.*head_dim.*divisible by 4.*head_dim={head_dim}\b"):
        build(pos, 32, dim=dim, num_heads=num_heads)
    with pytest.raises(ConfigError, match=rf"pos={pos}"):  # the scheme alone, too
        create_pos(pos, dim=dim, num_heads=num_heads, depth=1, grid=(8, 8))
    build(pos, 32, dim=dim, num_heads=num_heads // 2)  # head_dim 12 or 20 or 12: fine


@pytest.mark.parametrize("pos", ROPES)
def test_rope_unknown_resize_mode_raises_config_error(pos):
    with pytest.raises(ConfigError, match="choose one of extrapolate, interpolate"):
        build(pos, 32, pos_kwargs={"resize_mode": "bicubic"})
