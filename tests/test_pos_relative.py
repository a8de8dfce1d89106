"""Attention-bias schemes (`rel_bias`, `cpb`, `alibi_2d`: functions of the offset only; `rel_shaw`:
of the offset and the query; `lookhere`: of the offset, -inf outside each head's cone; `fire`: of the
offset and the query's distance to the edge), references written here. Rectangular grids throughout,
so a swapped H/W or a grid inferred with sqrt(N) shows up."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from pos_util import assert_function_of_offset, build, group_by_offset, offsets

from vitpos import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


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


def euclidean(grid):
    drow, dcol = offsets(grid)
    return (drow.double() ** 2 + dcol.double() ** 2).sqrt()


@pytest.mark.parametrize("heads", [1, 2, 3, 8])
@pytest.mark.parametrize("grid", [(3, 5), (4, 7), (12, 12)], ids=["built-grid", "other-grid", "larger-grid"])
def test_alibi_2d_is_minus_slope_times_euclidean_distance(grid, heads):
    model = build("alibi_2d", (12, 20), dim=8 * heads, num_heads=heads)
    assert list(model.pos.parameters()) == []
    assert not [key for key in model.state_dict() if key.startswith("pos.")]
    slopes = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)], dtype=torch.float64)
    bias = model.pos.bias(0, grid)
    n = grid[0] * grid[1]
    assert bias.shape == (heads, n, n) and bias.dtype == torch.float32
    torch.testing.assert_close(bias.double(), -slopes[:, None, None] * euclidean(grid), atol=1e-6, rtol=1e-6)
    assert torch.equal(model.pos.bias(1, grid), bias)  # the same in every layer


@pytest.mark.parametrize("grid", [(3, 5), (9, 6)], ids=["built-grid", "other-grid"])
def test_alibi_2d_symmetric_zero_diagonal_more_negative_with_distance(grid):
    model = build("alibi_2d", (12, 20), dim=16, num_heads=4)
    bias = model.pos.bias(0, grid)
    distance = euclidean(grid).flatten()
    assert torch.equal(bias, bias.transpose(1, 2))
    assert torch.equal(torch.diagonal(bias, dim1=1, dim2=2), torch.zeros(4, grid[0] * grid[1]))
    order = torch.argsort(distance)
    for head in bias:
        values = head.flatten()[order].double()
        d = distance[order]
        steps = values[1:] - values[:-1]
        assert (steps[d[1:] > d[:-1] + 1e-9] < 0).all()  # strictly more negative when farther
        assert (steps[(d[1:] - d[:-1]).abs() < 1e-9].abs() < 1e-6).all()  # equal distance, equal bias
        assert (values[1:] <= 0).all()
    # Euclidean, not Manhattan: the diagonal neighbour (1, 1) is sqrt(2), not 2, steps away
    torch.testing.assert_close(bias[:, 0, grid[1] + 1], math.sqrt(2) * bias[:, 0, 1])
    # steeper heads first
    assert (bias[:-1, 0, -1] < bias[1:, 0, -1]).all()


def swinv2_inputs(grid, ref_grid):
    """SwinV2's log-spaced MLP input for every (query, key) pair: (N, N, 2), fp64."""
    drow, dcol = offsets(grid)
    u = torch.stack([8 * drow.double() / (ref_grid[0] - 1), 8 * dcol.double() / (ref_grid[1] - 1)], dim=-1)
    return torch.sign(u) * torch.log2(1 + u.abs()) / math.log2(8)


@pytest.mark.parametrize("grid", [(3, 5), (6, 4), (9, 15)], ids=["built-grid", "other-grid", "larger-grid"])
def test_cpb_matches_swinv2_formula(grid):
    model = build("cpb", (12, 20), dim=16, num_heads=2)  # reference grid 3 x 5
    for layer in range(2):
        bias = model.pos.bias(layer, grid).detach()
        n = grid[0] * grid[1]
        assert bias.shape == (2, n, n)
        mlp = copy.deepcopy(model.pos.layers[layer]).double()
        expected = (16 * torch.sigmoid(mlp(swinv2_inputs(grid, (3, 5))))).permute(2, 0, 1)
        torch.testing.assert_close(bias.double(), expected, atol=1e-5, rtol=0)
        assert ((bias > 0) & (bias < 16)).all()


@pytest.mark.parametrize("grid", [(3, 5), (9, 15), (5, 3)], ids=["built-grid", "larger-grid", "transposed-grid"])
def test_cpb_bias_depends_only_on_offset(grid):
    model = build("cpb", (12, 20), dim=16, num_heads=2)
    with torch.no_grad():  # trained-like MLPs: the init's bias is 8 +- 0.03
        for param in model.pos.parameters():
            param.mul_(10)
        for layer in range(2):
            for head in model.pos.bias(layer, grid):
                per_offset = assert_function_of_offset(head, grid, atol=0)  # one table entry per offset
                # and offsets are told apart (not all: 16*sigmoid of a ReLU MLP in fp32 may tie a few
                # of the 493 offsets of 9 x 15 to the last bit)
                assert len(set(per_offset.values())) >= 0.95 * len(per_offset)


def test_cpb_larger_grid_uses_the_same_mlp_without_resampling():
    model = build("cpb", 32, dim=16, num_heads=2)  # 8 x 8
    with torch.no_grad():
        for param in model.pos.parameters():
            param.mul_(10)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        small = model.pos.bias(0, (8, 8))
        large = model.pos.bias(0, (16, 12))
        logits = model(torch.randn(2, 3, 64, 48))
    assert torch.isfinite(logits).all()
    # every offset the two grids share keeps exactly its bias: the same MLP on the same inputs
    small_groups = {k: v[0] for k, v in group_by_offset(small[0], (8, 8)).items()}
    large_groups = {k: v[0] for k, v in group_by_offset(large[0], (16, 12)).items()}
    assert len(large_groups) > len(small_groups)
    for offset, value in small_groups.items():
        assert abs(large_groups[offset] - value) < 1e-6, offset
    # offsets beyond the training range are log-extrapolated: finite, and different from the edge
    assert abs(large_groups[(15, 11)] - large_groups[(7, 7)]) > 1e-4
    # nothing was resampled or changed, nor is anything when converting the model to that size
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    model.resize((64, 48))
    assert model.config["pos_kwargs"]["ref_grid"] == [8, 8]
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        torch.testing.assert_close(model.pos.bias(0, (16, 12)), large, atol=0, rtol=0)
    with pytest.raises(ConfigError, match="leave resize_mode unset"):
        model.resize(32, "bicubic")


def test_cpb_bias_is_cached_in_eval_and_follows_parameter_changes():
    model = build("cpb", 32, dim=16, num_heads=2).eval()
    with torch.no_grad():
        first = model.pos.bias(0, (12, 12))
        assert model.pos.bias(0, (12, 12)) is first  # memoised: eval mode, gradients off
    model.train()  # as Lightning between validations: the optimizer changes the MLP in place
    with torch.no_grad():
        model.pos.layers[0][2].weight.mul_(10)
    model.eval()
    with torch.no_grad():
        changed = model.pos.bias(0, (12, 12))
    assert changed is not first and (changed - first).abs().max() > 1e-3
    model.pos.load_state_dict(model.pos.state_dict())  # loading a state dict drops the memo too
    with torch.no_grad():
        assert model.pos.bias(0, (12, 12)) is not changed
    trained = model.train().pos.bias(0, (12, 12))
    assert trained.requires_grad  # recomputed with gradients in training
    torch.testing.assert_close(trained.detach(), changed)


def test_cpb_mlp_runs_in_the_parameter_dtype_under_autocast():
    model = build("cpb", 32, dim=16, num_heads=2)
    with torch.no_grad():
        reference = model.pos.bias(0, (12, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        biased = model.pos.bias(1, (8, 8)), model.pos.bias(0, (12, 12))
    assert all(b.dtype == torch.float32 for b in biased)  # not the bf16 of autocast's matmuls
    torch.testing.assert_close(biased[1], reference, atol=0, rtol=0)
    model = model.to(torch.bfloat16)  # a bf16 model computes its bias in bf16
    with torch.no_grad():
        assert model.pos.bias(0, (12, 12)).dtype == torch.bfloat16
        assert model(torch.randn(1, 3, 48, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16


# ----------------------------------------------------------------------------------------------
# rel_shaw: the logit term q_i . (a_row[clip(dr)] + a_col[clip(dc)]) / sqrt(head_dim), per layer


def shaw_model(max_distance: int = 2, img_size=(12, 20), **kwargs):
    """rel_shaw built for a 3 x 5 grid, head_dim 8, its tables random (the init's are near zero)."""
    model = build("rel_shaw", img_size, dim=16, num_heads=2, pos_kwargs={"max_distance": max_distance}, **kwargs)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for table in model.pos.parameters():
            table.copy_(torch.randn(table.shape, generator=generator))
    return model


def shaw_reference(model, layer: int, grid, q):
    """The term by a loop over every (query i, key j) pair, offsets key - query (Shaw's j - i), fp64."""
    k = model.pos.max_distance
    rows, cols = (model.pos.layers[layer][axis].double() for axis in ("rows", "cols"))
    batch, heads, n, head_dim = q.shape
    term = torch.empty(batch, heads, n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            (row_i, col_i), (row_j, col_j) = divmod(i, grid[1]), divmod(j, grid[1])
            a = rows[min(max(row_j - row_i, -k), k) + k] + cols[min(max(col_j - col_i, -k), k) + k]
            term[:, :, i, j] = q[:, :, i].double() @ a / math.sqrt(head_dim)
    return term


def random_queries(grid, batch: int = 2, heads: int = 2, head_dim: int = 8, seed: int = 1):
    return torch.randn(batch, heads, grid[0] * grid[1], head_dim, generator=torch.Generator().manual_seed(seed))


def same_query_everywhere(grid, heads: int = 2, head_dim: int = 8):
    """One random query per head, at every token: (1, heads, N, head_dim)."""
    return random_queries((1, 1), batch=1, heads=heads, head_dim=head_dim).expand(-1, -1, grid[0] * grid[1], -1)


# 3 x 5 with max_distance 2 clips the column offsets +-3, +-4; with 1 also the row offsets +-2
@pytest.mark.parametrize("max_distance", [1, 2])
@pytest.mark.parametrize("grid", [(3, 5), (4, 7)], ids=["built-grid", "other-grid"])
def test_rel_shaw_equals_the_per_pair_loop(grid, max_distance):
    model = shaw_model(max_distance)
    q = random_queries(grid)
    for layer in range(2):
        term = model.pos.bias(layer, grid, q)
        n = grid[0] * grid[1]
        assert term.shape == (2, 2, n, n) and term.dtype == torch.float32
        torch.testing.assert_close(term.double(), shaw_reference(model, layer, grid, q), atol=1e-5, rtol=1e-5)
    assert not torch.equal(model.pos.bias(0, grid, q), model.pos.bias(1, grid, q)), "each layer has its own tables"


@pytest.mark.parametrize("grid", [(3, 5), (4, 7), (7, 4)], ids=["built-grid", "other-grid", "transposed-grid"])
def test_rel_shaw_same_offset_and_query_same_term(grid):
    """Translation: token pairs with the same (drow, dcol) and the same query get the same term (and
    different queries different terms: the bias depends on the query, unlike rel_bias')."""
    model = shaw_model()
    with torch.no_grad():
        for head in model.pos.bias(0, grid, same_query_everywhere(grid))[0]:
            assert_function_of_offset(head, grid, atol=1e-5)
        varied = model.pos.bias(0, grid, random_queries(grid))[0, 0]
    spread = [max(group) - min(group) for group in group_by_offset(varied, grid).values() if len(group) > 1]
    assert max(spread) > 0.1


@pytest.mark.parametrize("max_distance", [1, 2])
def test_rel_shaw_offsets_beyond_max_distance_get_the_term_of_max_distance(max_distance):
    grid = (4, 7)  # row offsets up to 3, column offsets up to 6: beyond either max_distance
    model = shaw_model(max_distance)
    with torch.no_grad():
        for head in model.pos.bias(0, grid, same_query_everywhere(grid))[0]:
            per_offset = assert_function_of_offset(head, grid, atol=1e-5)

            def clip(d):
                return max(-max_distance, min(max_distance, d))

            for (drow, dcol), value in per_offset.items():
                assert abs(value - per_offset[clip(drow), clip(dcol)]) < 1e-5, (drow, dcol)
            # and the (2K+1)^2 offsets within the clipping range are all told apart
            inside = sorted(
                value for (drow, dcol), value in per_offset.items() if (drow, dcol) == (clip(drow), clip(dcol))
            )
            assert len(inside) == (2 * max_distance + 1) ** 2
            assert min(b - a for a, b in zip(inside, inside[1:])) > 1e-4


def test_rel_shaw_any_grid_uses_the_same_tables():
    """Nothing depends on the grid but the index: the same parameters for every built grid, a larger
    input runs, and converting the model to it changes no tensor."""
    shapes = {
        size: {name: p.shape for name, p in build("rel_shaw", size, dim=16, num_heads=2).pos.named_parameters()}
        for size in [(12, 20), 32, (64, 48)]
    }
    assert shapes[(12, 20)] == shapes[32] == shapes[(64, 48)]
    assert sum(s.numel() for s in shapes[32].values()) == 2 * 2 * 5 * 8  # layers x axes x (2K+1) x head_dim

    model = shaw_model().eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        logits = model(torch.randn(2, 3, 48, 64, generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()
    model.resize((48, 64))
    assert model.grid == model.pos.grid == (12, 16)
    assert model.config["pos_kwargs"] == {"max_distance": 2, "fuzzy": False}
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        torch.testing.assert_close(
            model(torch.randn(2, 3, 48, 64, generator=torch.Generator().manual_seed(0))), logits, atol=0, rtol=0
        )
    with pytest.raises(ConfigError, match="leave resize_mode unset"):
        model.resize(32, "bicubic")


@pytest.mark.parametrize("attn_impl", ["math", "sdpa"])
@pytest.mark.parametrize("pool", ["gap", "cls"])
def test_rel_shaw_with_zero_tables_is_the_model_without_position(pool, attn_impl):
    shaw = shaw_model(pool=pool, attn_impl=attn_impl).eval()
    with torch.no_grad():
        for table in shaw.pos.parameters():
            table.zero_()
    none = build("none", (12, 20), dim=16, num_heads=2, pool=pool, attn_impl=attn_impl).eval()
    none.load_state_dict({k: v for k, v in shaw.state_dict().items() if not k.startswith("pos.")})
    x = torch.randn(2, 3, 16, 28, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(shaw(x), none(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("max_distance", [0, -1, 1.5, True])
def test_rel_shaw_max_distance_must_be_a_positive_integer(max_distance):
    with pytest.raises(
        ConfigError, match=r"pos=rel_shaw needs max_distance to be a positive integer.*max_distance=2; got"
    ):
        build("rel_shaw", 32, pos_kwargs={"max_distance": max_distance})


# ----------------------------------------------------------------------------------------------
# lookhere: -inf outside the head's cone, -slope_h * Euclidean distance inside, the same in every layer

# (right, up) unit steps of the 8 directions in the order heads are dealt to them: axes, then diagonals
LOOK_STEPS = [(1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, 1), (-1, -1), (1, -1)]


def key_offsets(grid):
    """How far right of and above the query every key lies, (N, N) [query, key] each, int64."""
    drow, dcol = offsets(grid)  # query - key
    return -dcol, drow


def in_cone(step, field_of_view, grid):
    """The reference cones in integer arithmetic, (N, N) bool: 180 degrees = the half-plane ahead
    (edge included); 90 degrees along an axis = at least as far ahead as aside; 90 degrees along a
    diagonal = the quadrant between the two axes it bisects."""
    right, up = key_offsets(grid)
    ahead = right * step[0] + up * step[1]
    if field_of_view == 180:
        return ahead >= 0
    if 0 in step:  # along an axis
        return ahead >= (right * step[1] - up * step[0]).abs()
    return (right * step[0] >= 0) & (up * step[1] >= 0)


@pytest.mark.parametrize("field_of_view", [180.0, 90.0])
@pytest.mark.parametrize("grid", [(5, 7), (7, 4)], ids=["built-grid", "other-grid"])
def test_lookhere_each_head_sees_exactly_its_cone(grid, field_of_view):
    """On a rectangular grid, head h sees the keys of its direction's cone and nothing else: the
    head looking right (180 degrees) the keys in the query's column or right of it, the one looking
    up-right (90 degrees) the quadrant above and right of the query. (On another grid, in patches.)"""
    options = {"field_of_view": field_of_view, "resize_mode": "extrapolate"}
    model = build("lookhere", (20, 28), dim=32, num_heads=8, pos_kwargs=options)
    assert model.pos.head_angles() == [0, 90, 180, 270, 45, 135, 225, 315]
    bias = model.pos.bias(0, grid)
    for head, step in enumerate(LOOK_STEPS):
        assert torch.equal(bias[head] > float("-inf"), in_cone(step, field_of_view, grid)), (head, step)
    if field_of_view == 180:  # the property as stated, once more
        right, _ = key_offsets(grid)
        assert torch.equal(bias[0] > float("-inf"), right >= 0)
    assert torch.equal(model.pos.bias(1, grid), bias)  # the same in every layer


@pytest.mark.parametrize("field_of_view", [1.0, 45.0, 180.0, 360.0])
@pytest.mark.parametrize("directions", [1, 3, 8])
def test_lookhere_every_query_sees_itself(directions, field_of_view):
    """However narrow the cone, a query sees at least itself (bias 0), so no softmax row is empty;
    a 360-degree cone masks nothing."""
    model = build(
        "lookhere", (20, 28), dim=48, num_heads=6, pos_kwargs=dict(directions=directions, field_of_view=field_of_view)
    )
    bias = model.pos.bias(0, (6, 5))
    assert torch.equal(torch.diagonal(bias, dim1=1, dim2=2), torch.zeros(6, 30))
    assert (bias > float("-inf")).any(dim=-1).all()
    assert torch.isfinite(bias).all() == (field_of_view == 360.0)


@pytest.mark.parametrize("grid", [(5, 7), (9, 3)], ids=["built-grid", "other-grid"])
def test_lookhere_penalty_is_minus_slope_times_distance_and_monotone(grid):
    """Inside the cone the bias is -slope_h * Euclidean distance: 0 at the query, strictly lower for
    every farther key, equal at equal distance; heads beyond the first D of a direction halve it.
    (On another grid, distances in patches.)"""
    options = dict(directions=4, slope=0.3, resize_mode="extrapolate")
    model = build("lookhere", (20, 28), dim=48, num_heads=6, pos_kwargs=options)
    slopes = torch.tensor([0.3, 0.3, 0.3, 0.3, 0.15, 0.15], dtype=torch.float64)
    assert model.pos.head_angles() == [0, 90, 180, 270, 0, 90]
    bias = model.pos.bias(0, grid).double()
    distance = euclidean(grid)
    visible = bias > float("-inf")
    expected = -slopes[:, None, None] * distance
    torch.testing.assert_close(bias[visible], expected.expand_as(bias)[visible], atol=1e-6, rtol=1e-6)
    for head in range(6):
        d, values = distance[visible[head]], bias[head][visible[head]]
        order = torch.argsort(d)
        d, values = d[order], values[order]
        steps = values[1:] - values[:-1]
        assert (steps[d[1:] > d[:-1] + 1e-9] < 0).all()
        assert (steps[(d[1:] - d[:-1]).abs() < 1e-9].abs() < 1e-6).all()


def test_lookhere_interpolate_measures_in_training_grid_units_and_extrapolate_in_patches():
    """At twice the training grid the cones are the same (they do not depend on scale); `interpolate`
    halves every distance (the pair 2 patches apart gets the training bias of 1 patch apart),
    `extrapolate` keeps patches. On the training grid both modes are one bias."""
    interpolated = build("lookhere", (16, 24), dim=16, num_heads=4)  # 4 x 6, the default mode
    extrapolated = build("lookhere", (16, 24), dim=16, num_heads=4, pos_kwargs={"resize_mode": "extrapolate"})
    assert interpolated.pos.resize_mode == "interpolate"
    assert torch.equal(interpolated.pos.bias(0, (4, 6)), extrapolated.pos.bias(0, (4, 6)))
    fine, coarse = interpolated.pos.bias(0, (8, 12)), interpolated.pos.bias(0, (4, 6))
    in_patches = extrapolated.pos.bias(0, (8, 12))
    assert torch.equal(fine > float("-inf"), in_patches > float("-inf"))
    visible = in_patches > float("-inf")
    torch.testing.assert_close(fine[visible], in_patches[visible] / 2)
    even = (torch.arange(4)[:, None] * 2 * 12 + torch.arange(6) * 2).flatten()  # token (2r, 2c) of 8 x 12
    torch.testing.assert_close(fine[:, even][:, :, even], coarse)


@pytest.mark.parametrize(
    "option, value",
    [
        ("directions", 0),
        ("directions", 2.5),
        ("directions", True),
        ("field_of_view", 0),
        ("field_of_view", 400),
        ("field_of_view", "wide"),
        ("slope", -1),
        ("slope", float("inf")),
    ],
)
def test_lookhere_bad_option_is_one_config_error(option, value):
    with pytest.raises(ConfigError, match=rf"pos=lookhere needs {option} to be .*got {option}="):
        build("lookhere", 32, pos_kwargs={option: value})


# ----------------------------------------------------------------------------------------------
# fire: an MLP of per-axis offsets, log-transformed and normalised by the query's reach to the edge


def fire_inputs(grid, c, threshold):
    """FIRE's MLP input for every (query, key) pair, written out per pair: (N, N, 2) fp64."""
    height, width = grid
    inputs = torch.zeros(height * width, height * width, 2, dtype=torch.float64)
    for query in range(height * width):
        for key in range(height * width):
            for axis, (q, k, size) in enumerate(
                [(query // width, key // width, height), (query % width, key % width, width)]
            ):
                reach = q if k < q else size - 1 - q  # patches from the query to the edge the key lies towards
                psi = lambda x, axis=axis: math.log(abs(c[axis]) * x + 1)  # noqa: E731
                normaliser = psi(max(abs(threshold[axis]), reach)) + 1e-6
                inputs[query, key, axis] = math.copysign(psi(abs(k - q)), k - q) / normaliser if k != q else 0.0
    return inputs


def fire_model(img_size=(16, 24), **kwargs):
    """fire built for a 4 x 6 grid with 2 heads."""
    return build("fire", img_size, dim=16, num_heads=2, **kwargs)


@pytest.mark.parametrize("grid", [(4, 6), (9, 5)], ids=["built-grid", "other-grid"])
def test_fire_matches_its_formula(grid):
    model = fire_model()
    with torch.no_grad():
        model.pos.layers[1].c.copy_(torch.tensor([0.5, -0.05]))  # |c| is the scale
        model.pos.layers[1].threshold.copy_(torch.tensor([2.0, -3.5]))
    for layer in range(2):
        fire = model.pos.layers[layer]
        c, threshold = fire.c.tolist(), fire.threshold.tolist()
        expected_inputs = fire_inputs(grid, c, threshold)
        torch.testing.assert_close(
            model.pos.normalised_offsets(layer, grid).double(), expected_inputs, atol=1e-6, rtol=0
        )
        expected = copy.deepcopy(fire.mlp).double()(expected_inputs).permute(2, 0, 1)
        torch.testing.assert_close(model.pos.bias(layer, grid).double(), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("img_size", [(16, 24), (28, 12)])
def test_fire_on_the_training_grid_the_normalisation_is_inactive_and_the_bias_translation_invariant(img_size):
    """The threshold starts at the training axis' largest offset, so on the training grid every
    query's normaliser is psi(L): the input is psi(|d|) / psi(n - 1) with its sign, and the bias a
    function of the offset alone, as FIRE is below its threshold."""
    model = fire_model(img_size)
    grid = model.grid
    inputs = model.pos.normalised_offsets(0, grid).detach().double()
    drow, dcol = offsets(grid)  # query - key
    for axis, (d, size) in enumerate([(-drow, grid[0]), (-dcol, grid[1])]):
        d = d.double()
        expected = d.sign() * torch.log1p(0.1 * d.abs()) / (math.log1p(0.1 * (size - 1)) + 1e-6)
        torch.testing.assert_close(inputs[..., axis], expected, atol=1e-6, rtol=0)
    for layer in range(2):
        for head in model.pos.bias(layer, grid).detach():
            assert_function_of_offset(head, grid, atol=1e-6)


def test_fire_beyond_the_threshold_interpolates_progressively():
    """On a grid twice the training one, a query whose reach towards the key exceeds the threshold
    divides by its reach: the same offset shrinks for queries farther from the edge (not a function
    of the offset any more); below the threshold the input is the training grid's."""
    model = fire_model()  # 4 x 6: thresholds 3 (rows) and 5 (columns)
    inputs = model.pos.normalised_offsets(0, (8, 12)).detach()
    one_right = [inputs[c, c + 1, 1].item() for c in range(11)]  # queries in row 0, key one column right
    reach = [11 - c for c in range(11)]
    trained = model.pos.normalised_offsets(0, (4, 6))[0, 1, 1].item()  # offset +1 on the training grid
    for c in range(11):
        if reach[c] <= 5:
            assert one_right[c] == pytest.approx(trained, abs=1e-6)
    assert all(a < b for a, b in zip(one_right[:6], one_right[1:7]))  # reach 11 .. 5: rising to the trained value
    with torch.no_grad():
        bias = model.pos.bias(0, (8, 12))
    groups = group_by_offset(bias[0], (8, 12))
    assert max(groups[(0, -1)]) - min(groups[(0, -1)]) > 1e-6


@pytest.mark.parametrize("grid", [(1, 1), (2, 3), (8, 12), (16, 24), (40, 3)])
def test_fire_inputs_stay_in_the_training_range_on_any_grid(grid):
    """|input| <= 1 on every grid (a query's farthest key in each direction maps to +-1 once its
    reach passes the threshold): no offset leaves the range the MLP was trained on; finite bias."""
    model = fire_model()
    inputs = model.pos.normalised_offsets(0, grid).detach()
    assert (inputs.abs() <= 1).all()
    if grid[1] - 1 >= 5:  # the column axis reaches beyond the threshold: the corners map to +-1
        assert inputs[0, grid[1] - 1, 1].item() == pytest.approx(1, abs=1e-5)
        assert inputs[grid[1] - 1, 0, 1].item() == pytest.approx(-1, abs=1e-5)
    with torch.no_grad():
        assert torch.isfinite(model.pos.bias(0, grid)).all()


def test_fire_tells_the_two_directions_of_an_axis_apart():
    """Offsets are signed: key right of the query and key left of it are opposite inputs, so the
    bias can differ (a causal FIRE only ever sees one direction)."""
    model = fire_model()
    inputs = model.pos.normalised_offsets(0, (4, 6)).detach()
    torch.testing.assert_close(inputs[2, 3], -inputs[3, 2])
    with torch.no_grad():
        bias = model.pos.bias(0, (4, 6))
    assert (bias[:, 2, 3] - bias[:, 3, 2]).abs().max() > 1e-4


@pytest.mark.parametrize("hidden_dim", [0, -1, 1.5, True])
def test_fire_hidden_dim_must_be_a_positive_integer(hidden_dim):
    with pytest.raises(ConfigError, match=r"pos=fire needs hidden_dim to be a positive integer.*got hidden_dim="):
        build("fire", 32, pos_kwargs={"hidden_dim": hidden_dim})
