"""The conditional scheme (`cpe`): a residual depthwise convolution on the token grid. Rectangular
grids throughout, so a swapped H/W or a grid inferred with sqrt(N) shows up."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitpos import ConfigError
from vitpos.pos import create_pos

pytestmark = pytest.mark.usefixtures("one_thread")


def cpe(grid=(5, 7), dim=8, depth=2, seed=0, **kwargs):
    torch.manual_seed(seed)
    return create_pos("cpe", dim=dim, num_heads=2, depth=depth, grid=grid, **kwargs)


def to_tokens(feature_map):  # (B, D, H, W) -> (B, H*W, D), row-major
    return feature_map.flatten(2).transpose(1, 2)


def to_map(tokens, grid):
    return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], *grid)


@pytest.mark.parametrize("grid", [(5, 7), (4, 9)], ids=["built-grid", "other-grid"])
def test_cpe_is_residual_depthwise_conv_on_the_grid(grid):
    pe = cpe()
    x = to_tokens(torch.randn(2, 8, *grid))
    out = pe.after_block(0, x, grid)
    assert out.shape == x.shape
    assert (out - x).abs().max() > 1e-3
    peg = pe.pegs["0"]
    expected = x + to_tokens(F.conv2d(to_map(x, grid), peg.weight, peg.bias, padding=1, groups=8))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("axis", ["col", "row"])
@pytest.mark.parametrize("grid", [(5, 7), (6, 9)], ids=["built-grid", "other-grid"])
def test_cpe_translation_equivariant_in_interior(axis, grid):
    pe = cpe()
    height, width = grid
    fmap = torch.randn(1, 8, height, width)
    shifted = torch.zeros_like(fmap)
    if axis == "col":
        shifted[..., :, 1:] = fmap[..., :, :-1]
    else:
        shifted[..., 1:, :] = fmap[..., :-1, :]

    def response(m):  # the conv response alone (output minus the residual input), as a map
        x = to_tokens(m)
        return to_map(pe.after_block(0, x, grid) - x, grid)

    y, y_shifted = response(fmap), response(shifted)
    if axis == "col":  # interior columns 2..W-2: both receptive fields lie inside the image
        torch.testing.assert_close(y_shifted[..., :, 2 : width - 1], y[..., :, 1 : width - 2], atol=1e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(y_shifted[..., 2 : height - 1, :], y[..., 1 : height - 2, :], atol=1e-6, rtol=1e-5)
    # not trivially: the response does move with the input
    assert not torch.allclose(y_shifted, y, atol=1e-4)


def test_cpe_zero_padding_gives_absolute_position():
    grid = (5, 7)
    pe = cpe()
    x = torch.ones(1, 35, 8)  # a constant map: any variation of the output comes from the border
    response = to_map(pe.after_block(0, x, grid) - x, grid)[0]
    corner, centre = response[:, 0, 0], response[:, 2, 3]
    assert (corner - centre).abs().max() > 1e-3
    # interior positions (away from the border) all respond the same
    interior = response[:, 1:-1, 1:-1]
    torch.testing.assert_close(interior, interior[:, :1, :1].expand_as(interior))


@pytest.mark.parametrize("grid", [(5, 7), (4, 9)], ids=["built-grid", "other-grid"])
def test_cpe_circular_padding_has_no_absolute_position(grid):
    """Wrapped around, the convolution commutes with every cyclic shift of the grid, and a constant
    map gets the same response everywhere: no token can tell where it is."""
    pe = cpe(padding_mode="circular")
    fmap = torch.randn(1, 8, *grid)

    def response(scheme, m):
        x = to_tokens(m)
        return to_map(scheme.after_block(0, x, grid) - x, grid)

    shift = (2, 3)
    torch.testing.assert_close(
        response(pe, fmap.roll(shift, dims=(2, 3))), response(pe, fmap).roll(shift, dims=(2, 3)), atol=1e-6, rtol=1e-5
    )
    constant = response(pe, torch.ones(1, 8, *grid))[0]
    torch.testing.assert_close(constant, constant[:, :1, :1].expand_as(constant))
    assert constant.abs().max() > 1e-3  # it responds, the same everywhere
    # the default, zero padding, does not commute with the wrapped shift
    zeros = cpe()
    zeros.load_state_dict(pe.state_dict())
    rolled_first, rolled_after = (
        response(zeros, fmap.roll(shift, dims=(2, 3))),
        response(zeros, fmap).roll(shift, (2, 3)),
    )
    assert not torch.allclose(rolled_first, rolled_after, atol=1e-4)


def test_cpe_padding_mode_survives_a_rebuild():
    pe = cpe(padding_mode="circular")
    assert pe.init_kwargs()["padding_mode"] == "circular"
    assert pe.pegs["0"].padding_mode == "circular"


def test_cpe_unlisted_layers_are_identity():
    grid = (5, 7)
    x = torch.randn(2, 35, 8)
    default = cpe()  # after block 0 only
    out = default.after_block(1, x, grid)
    assert out is x or torch.equal(out, x)
    assert not torch.equal(default.after_block(0, x, grid), x)

    later = cpe(after_layers=(1,))
    out = later.after_block(0, x, grid)
    assert out is x or torch.equal(out, x)
    assert not torch.equal(later.after_block(1, x, grid), x)


@pytest.mark.parametrize(
    "kwargs", [dict(after_layers=(2,)), dict(after_layers=(-1,)), dict(kernel_size=4), dict(padding_mode="reflect")]
)
def test_cpe_bad_options_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        cpe(depth=2, **kwargs)
