"""Additive schemes (`1d_learned`, `2d_learned`, `1d_sin`, `2d_sin`), checked against references
written independently here. Rectangular grids throughout, so a swapped H/W or a grid inferred with
sqrt(N) shows up."""

from __future__ import annotations

import math

import pytest
import torch
from pos_util import build

pytestmark = pytest.mark.usefixtures("one_thread")


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


def sincos2d_reference(grid, dim, temperature=10000.0):
    height, width = grid
    quarter = dim // 4
    freqs = [1.0 / temperature ** (k / quarter) for k in range(quarter)]
    table = []
    for row in range(height):
        for col in range(width):
            table.append(
                [math.sin(row * w) for w in freqs]
                + [math.sin(col * w) for w in freqs]
                + [math.cos(row * w) for w in freqs]
                + [math.cos(col * w) for w in freqs]
            )
    return torch.tensor(table, dtype=torch.float64)


@pytest.mark.parametrize("pos, reference", [("1d_sin", vaswani_reference), ("2d_sin", sincos2d_reference)])
@pytest.mark.parametrize("img_size", [(12, 20), 32], ids=["built-grid", "other-grid"])
def test_sincos_tables_match_their_reference(pos, reference, img_size):
    grid, dim = (3, 5), 16
    model = build(pos, img_size, dim=dim)
    table = model.pos.table(grid)
    assert table.shape == (15, dim) and table.dtype == torch.float32
    torch.testing.assert_close(table.double(), reference(grid, dim), atol=1e-5, rtol=0)
    x = torch.randn(2, 15, dim)  # the `add` hook adds exactly this table
    torch.testing.assert_close(model.pos.add(x, grid), x + table)


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
