"""Properties of the positional schemes themselves (tables, biases, convolutions), checked against
references written independently here, on rectangular grids so that a swapped H/W or a grid
inferred with sqrt(N) shows up."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import vitpos
from vitpos import ConfigError
from vitpos.pos import HOOKS, create_pos, get_pos_class

PATCH = 4


pytestmark = pytest.mark.usefixtures("one_thread")


def build(pos: str, img_size, dim: int = 16, depth: int = 2, num_heads: int = 2, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return vitpos.create_model(pos, img_size=img_size, num_classes=10, in_chans=3, dim=dim, depth=depth,
                               num_heads=num_heads, patch_size=PATCH, **kwargs)


# ----------------------------------------------------------------------------------------------
# registry / hooks


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_registered_class_knows_its_name_and_uses_a_hook(pos):
    cls = get_pos_class(pos)
    assert cls.scheme_name == pos
    used = [hook for hook in HOOKS if cls.uses(hook)]
    if pos == "none":
        assert used == [], "`none` must inject no position signal at all"
    else:
        assert used, f"{pos} overrides none of the hooks {HOOKS}, so it adds no position signal"


# ----------------------------------------------------------------------------------------------
# 1d_sin: Vaswani et al. over the row-major token index


def vaswani_reference(grid, dim, temperature=10000.0):
    height, width = grid
    table = []
    for row in range(height):
        for col in range(width):
            n = row * width + col
            vec = []
            for i in range(dim // 2):
                angle = n / temperature ** (2 * i / dim)
                vec += [math.sin(angle), math.cos(angle)]
            table.append(vec)
    return torch.tensor(table, dtype=torch.float64)


# built for the grid asked (cached buffer) and for another grid (recomputed)
@pytest.mark.parametrize("img_size", [(12, 20), 32], ids=["built-grid", "other-grid"])
def test_1d_sin_matches_vaswani_formula(img_size):
    grid, dim = (3, 5), 16
    model = build("1d_sin", img_size, dim=dim)
    table = model.pos.table(grid)
    assert table.shape == (15, dim)
    assert table.dtype == torch.float32
    torch.testing.assert_close(table.double(), vaswani_reference(grid, dim), atol=1e-5, rtol=0)
    # the `add` hook adds exactly this table
    x = torch.randn(2, 15, dim)
    torch.testing.assert_close(model.pos.add(x, grid), x + table)


# ----------------------------------------------------------------------------------------------
# 2d_sin: timm build_sincos2d_pos_embed layout [sin(row w), sin(col w), cos(row w), cos(col w)]


def sincos2d_reference(grid, dim, temperature=10000.0):
    height, width = grid
    quarter = dim // 4
    freqs = [1.0 / temperature ** (k / quarter) for k in range(quarter)]
    table = []
    for row in range(height):
        for col in range(width):
            table.append([math.sin(row * w) for w in freqs] + [math.sin(col * w) for w in freqs]
                         + [math.cos(row * w) for w in freqs] + [math.cos(col * w) for w in freqs])
    return torch.tensor(table, dtype=torch.float64)


@pytest.mark.parametrize("img_size", [(12, 20), 32], ids=["built-grid", "other-grid"])
def test_2d_sin_matches_reference_layout(img_size):
    grid, dim = (3, 5), 16
    model = build("2d_sin", img_size, dim=dim)
    table = model.pos.table(grid)
    assert table.shape == (15, dim)
    torch.testing.assert_close(table.double(), sincos2d_reference(grid, dim), atol=1e-5, rtol=0)


def test_2d_sin_half_the_channels_depend_on_row_only():
    grid, dim = (3, 5), 16
    height, width = grid
    table = build("2d_sin", (12, 20), dim=dim).pos.table(grid).reshape(height, width, dim)
    quarter = dim // 4
    row_channels = list(range(0, quarter)) + list(range(2 * quarter, 3 * quarter))
    col_channels = list(range(quarter, 2 * quarter)) + list(range(3 * quarter, 4 * quarter))

    # tokens in the same row share the row channels bit for bit; tokens in the same column the column ones
    assert torch.equal(table[:, :, row_channels], table[:, :1, row_channels].expand(-1, width, -1))
    assert torch.equal(table[:, :, col_channels], table[:1, :, col_channels].expand(height, -1, -1))

    # exactly half of the channels are constant along a row, exactly half along a column
    constant_along_row = (table == table[:, :1]).all(dim=1).all(dim=0)  # (D,)
    constant_along_col = (table == table[:1]).all(dim=0).all(dim=0)
    assert int(constant_along_row.sum()) == dim // 2
    assert int(constant_along_col.sum()) == dim // 2
    assert not (constant_along_row & constant_along_col).any()

    # and every token gets a distinct code
    flat = table.reshape(height * width, dim)
    assert torch.cdist(flat, flat).add(torch.eye(height * width)).min() > 0


# ----------------------------------------------------------------------------------------------
# rel_bias: bias is a function of the 2D offset between query and key


def offsets(grid):
    height, width = grid
    rows = torch.arange(height).repeat_interleave(width)  # row-major token order
    cols = torch.arange(width).repeat(height)
    return rows[:, None] - rows[None, :], cols[:, None] - cols[None, :]  # (N, N) each


def assert_depends_only_on_offset(bias, grid):
    """Every (query, key) pair with the same (drow, dcol) gets the same value, per head; returns the
    number of distinct values per head."""
    drow, dcol = offsets(grid)
    key = (drow * 1000 + dcol).flatten()
    assert key.unique().numel() == (2 * grid[0] - 1) * (2 * grid[1] - 1)
    counts = []
    for head in bias:
        values = head.flatten()
        for k in key.unique():
            group = values[key == k]
            torch.testing.assert_close(group, group[:1].expand_as(group), atol=0, rtol=0)
        counts.append(torch.unique(values).numel())
    return counts


def test_rel_bias_depends_only_on_offset_on_built_grid():
    grid, heads, depth = (3, 5), 2, 2
    model = build("rel_bias", (12, 20), depth=depth, num_heads=heads)
    biases = []
    for layer in range(depth):
        bias = model.pos.bias(layer, grid)
        assert bias.shape == (heads, 15, 15)
        counts = assert_depends_only_on_offset(bias.detach(), grid)
        # and distinct offsets get distinct (randomly initialised) entries: no two offsets alias
        assert counts == [(2 * grid[0] - 1) * (2 * grid[1] - 1)] * heads
        biases.append(bias.detach())
    assert not torch.equal(biases[0], biases[1]), "each layer has its own table"

    # random pairs with equal offsets, the property as stated
    gen = torch.Generator().manual_seed(0)
    bias = biases[0]
    for _ in range(50):
        drow = int(torch.randint(-2, 3, (1,), generator=gen))
        dcol = int(torch.randint(-4, 5, (1,), generator=gen))
        pairs = []
        for _ in range(2):
            r = int(torch.randint(max(0, drow), min(3, 3 + drow), (1,), generator=gen))
            c = int(torch.randint(max(0, dcol), min(5, 5 + dcol), (1,), generator=gen))
            pairs.append((r * 5 + c, (r - drow) * 5 + (c - dcol)))
        (p1, q1), (p2, q2) = pairs
        assert torch.equal(bias[:, p1, q1], bias[:, p2, q2])


@pytest.mark.parametrize("new_grid", [(4, 7), (2, 3), (3, 8)])
def test_rel_bias_resized_depends_only_on_offset(new_grid):
    built, heads, depth = (3, 5), 2, 2
    model = build("rel_bias", (12, 20), depth=depth, num_heads=heads)
    n = new_grid[0] * new_grid[1]
    for layer in range(depth):
        native = model.pos.bias(layer, built).detach()
        bias = model.pos.bias(layer, new_grid).detach()
        assert bias.shape == (heads, n, n)
        assert torch.isfinite(bias).all()
        assert_depends_only_on_offset(bias, new_grid)
        # the zero offset (the diagonal) is the centre of the table, which a resampling keeps
        torch.testing.assert_close(bias[:, 0, 0], native[:, 0, 0], atol=1e-6, rtol=0)
        assert bias.std() > 0


@pytest.mark.parametrize("new_grid", [(4, 7), (2, 3), (3, 8)])
@pytest.mark.parametrize("axis", ["row", "col"])
def test_rel_bias_resize_keeps_orientation(axis, new_grid):
    """A table whose bias is the column offset (col_q - col_k) on the built grid must, resized, still
    depend on the column offset only and increase with it (likewise for rows): resampling must not
    transpose, flip or mix the two axes."""
    built = (3, 5)
    model = build("rel_bias", (12, 20), depth=1, num_heads=2)
    rel = model.pos.layers[0]
    drow, dcol = offsets(built)
    wanted = (drow if axis == "row" else dcol).flatten().float()
    with torch.no_grad():  # write the table through the module's own index, whatever its layout
        rel.relative_position_bias_table[rel.relative_position_index] = wanted[:, None].expand(-1, 2)
        native = model.pos.bias(0, built)
        assert torch.equal(native, (drow if axis == "row" else dcol).float().expand(2, -1, -1))
        bias = model.pos.bias(0, new_grid)
    new_drow, new_dcol = offsets(new_grid)
    along, other = (new_drow, new_dcol) if axis == "row" else (new_dcol, new_drow)
    for head in bias:
        assert torch.equal(torch.sign(head), torch.sign(along).float())  # zero exactly at zero offset
        values = {}
        for offset, value in zip(along.flatten().tolist(), head.flatten().tolist()):
            values.setdefault(offset, []).append(value)
        for offset, group in values.items():  # the other axis' offset does not matter
            assert max(group) - min(group) < 1e-5, (offset, group)
        ordered = [values[k][0] for k in sorted(values)]
        assert all(b > a for a, b in zip(ordered, ordered[1:])), ordered


def test_rel_bias_resized_constant_table_stays_constant():
    model = build("rel_bias", (12, 20), depth=1, num_heads=2)
    with torch.no_grad():
        model.pos.layers[0].relative_position_bias_table.fill_(0.7)
    bias = model.pos.bias(0, (4, 7))
    torch.testing.assert_close(bias, torch.full_like(bias, 0.7))


# ----------------------------------------------------------------------------------------------
# cpe: depthwise conv over the token grid, residual, after the listed blocks only


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
        torch.testing.assert_close(y_shifted[..., :, 2:width - 1], y[..., :, 1:width - 2], atol=1e-6, rtol=1e-5)
    else:
        torch.testing.assert_close(y_shifted[..., 2:height - 1, :], y[..., 1:height - 2, :], atol=1e-6, rtol=1e-5)
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


@pytest.mark.parametrize("kwargs", [dict(after_layers=(2,)), dict(after_layers=(-1,)), dict(kernel_size=4)])
def test_cpe_bad_options_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        cpe(depth=2, **kwargs)


# ----------------------------------------------------------------------------------------------
# learned tables


def test_1d_learned_table_on_built_grid_is_the_parameter():
    model = build("1d_learned", 32, dim=16)  # grid 8x8
    table = model.pos.table((8, 8))
    assert table.shape == (64, 16)
    assert torch.equal(table, model.pos.embedding[0])


def test_1d_learned_same_token_count_other_shape_is_resampled():
    model = build("1d_learned", 32, dim=16)  # grid 8x8
    embedding = model.pos.embedding[0].detach()
    table = model.pos.table((4, 16)).detach()
    assert table.shape == (64, 16)
    assert torch.isfinite(table).all()
    # 64 tokens both ways, but the layout changed: it must be resampled, not passed through
    assert (table - embedding).abs().max() > 1e-3


@pytest.mark.parametrize("varies_along", ["col", "row"])
def test_1d_learned_resampling_treats_the_table_as_a_2d_grid(varies_along):
    """An embedding that varies only along columns of the 8x8 grid must, resampled to 4x16, still vary
    only along columns (every row identical); likewise for rows. Resampling the table as a 1D
    sequence, or with H and W swapped, breaks this."""
    model = build("1d_learned", 32, dim=16)
    torch.manual_seed(1)
    values = torch.randn(8, 16)
    with torch.no_grad():
        if varies_along == "col":
            model.pos.embedding.copy_(values[None, :, :].expand(8, 8, 16).reshape(1, 64, 16))
        else:
            model.pos.embedding.copy_(values[:, None, :].expand(8, 8, 16).reshape(1, 64, 16))
        table = model.pos.table((4, 16)).reshape(4, 16, 16)
    if varies_along == "col":
        torch.testing.assert_close(table, table[:1].expand_as(table), atol=1e-5, rtol=0)
        assert table[0].std(dim=0).min() > 1e-3
    else:
        torch.testing.assert_close(table, table[:, :1].expand_as(table), atol=1e-5, rtol=0)
        assert table[:, 0].std(dim=0).min() > 1e-3


def test_2d_learned_token_is_row_then_column_vector():
    grid = (3, 5)
    model = build("2d_learned", (12, 20), dim=16)
    table = model.pos.table(grid).detach().reshape(3, 5, 16)
    rows, cols = model.pos.rows.detach(), model.pos.cols.detach()
    assert rows.shape == (3, 8) and cols.shape == (5, 8)
    for r in range(3):
        for c in range(5):
            assert torch.equal(table[r, c], torch.cat([rows[r], cols[c]]))
    # on another grid: each half still depends on its own axis only
    other = model.pos.table((6, 4)).detach().reshape(6, 4, 16)
    torch.testing.assert_close(other[:, :, :8], other[:, :1, :8].expand(6, 4, 8), atol=0, rtol=0)
    torch.testing.assert_close(other[:, :, 8:], other[:1, :, 8:].expand(6, 4, 8), atol=0, rtol=0)


@pytest.mark.parametrize("pos, mode", [("1d_learned", "linear"), ("2d_learned", "bicubic")])
def test_unsupported_resize_mode_fails_at_construction(pos, mode):
    with pytest.raises(vitpos.ConfigError, match=f"resize_mode='{mode}'"):
        vitpos.create_model(pos, dim=32, depth=1, num_heads=2, pos_kwargs={"resize_mode": mode})
