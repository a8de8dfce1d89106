"""Training-free resolution extrapolation: NTK-aware scaling and YaRN of the frequencies (2d_sin,
rope_axial, rope_mixed), the attention temperature (any scheme) and fuzzy positions in training."""

from __future__ import annotations

import math

import pytest
import torch
from pos_util import build

from vitpos import ConfigError, create_model, list_pos
from vitpos.pos import get_pos_class
from vitpos.pos.registry import fuzzy_schemes
from vitpos.pos.scaling import FREQUENCY_MODES, axis_scale, band_range, ntk_factor, rescale, yarn_factor

pytestmark = pytest.mark.usefixtures("one_thread")

FREQUENCY_SCHEMES = [pos for pos in list_pos() if set(FREQUENCY_MODES) <= set(get_pos_class(pos).resize_modes)]


def test_the_frequency_modes_cover_the_sincos_and_rotary_schemes():
    assert FREQUENCY_SCHEMES == ["2d_sin", "rope_axial", "rope_mixed"]


def theta_bands(theta: float, num_bands: int) -> torch.Tensor:
    return theta ** (-torch.arange(num_bands, dtype=torch.float64) / num_bands)


@pytest.mark.parametrize("scale", [1.5, 2.0, 3.0])
def test_ntk_keeps_the_highest_band_interpolates_the_lowest_and_is_a_base_change(scale):
    theta, num_bands = 100.0, 8
    bands = theta_bands(theta, num_bands)
    scaled = rescale(bands, "ntk", scale, ref_len=8, lowest=band_range(theta, num_bands))
    assert scaled[0] == bands[0]  # the fastest band: extrapolated
    assert torch.isclose(scaled[-1], bands[-1] / scale)  # the slowest: position interpolation
    assert (scaled[1:-1] < bands[1:-1]).all() and (scaled[1:-1] > bands[1:-1] / scale).all()
    # NTK-aware scaling is the base change theta -> theta * s^(K / (K - 1))
    assert torch.allclose(scaled, theta_bands(theta * scale ** (num_bands / (num_bands - 1)), num_bands))


def test_yarn_extrapolates_fast_bands_interpolates_slow_ones_and_blends_between():
    ref_len, scale = 64, 2.0
    # turns over the training axis r = L f / 2pi: 0.5 (< alpha = 1), 16.5 (the ramp's middle), 64 (> beta = 32)
    freqs = torch.tensor([0.5, 16.5, 64.0], dtype=torch.float64) * 2 * math.pi / ref_len
    factor = yarn_factor(freqs, scale, ref_len)
    assert torch.allclose(factor, torch.tensor([1 / scale, (0.5 + 0.5 / scale), 1.0], dtype=torch.float64))


@pytest.mark.parametrize("mode", FREQUENCY_MODES)
def test_frequency_rules_are_the_identity_at_or_below_the_training_size(mode):
    bands = theta_bands(100.0, 8)
    assert axis_scale(8, 8) == axis_scale(6, 8) == 1.0
    assert torch.equal(rescale(bands, mode, 1.0, ref_len=8, lowest=band_range(100.0, 8)), bands)
    assert torch.equal(ntk_factor(bands, 1.0, band_range(100.0, 8)), torch.ones_like(bands))


def positional_output(model, grid):
    """What the scheme gives a grid: the additive table (N, D), or every layer's rotation angles."""
    pos = model.pos
    if pos.uses("add"):
        return pos.add(torch.zeros(1, grid[0] * grid[1], pos.dim), grid)[0]
    return torch.stack([pos.angles(layer, grid).expand(pos.num_heads, -1, -1) for layer in range(pos.depth)])


@pytest.mark.parametrize("mode", FREQUENCY_MODES)
@pytest.mark.parametrize("pos", FREQUENCY_SCHEMES)
def test_frequency_modes_equal_extrapolation_on_the_training_grid_and_smaller(pos, mode):
    extrapolated = build(pos, (12, 20), dim=32, num_heads=2, pos_kwargs={"resize_mode": "extrapolate"}).eval()
    scaled = build(pos, (12, 20), dim=32, num_heads=2, pos_kwargs={"resize_mode": mode}).eval()
    with torch.no_grad():
        for grid in [(3, 5), (2, 4)]:
            assert torch.allclose(positional_output(scaled, grid), positional_output(extrapolated, grid), atol=1e-6)


@pytest.mark.parametrize("mode", FREQUENCY_MODES)
def test_rope_axial_frequency_modes_rescale_only_the_larger_axis(mode):
    """On a grid twice as wide, the row pairs rotate as when extrapolating; of the column pairs,
    under NTK the fastest matches extrapolation and the slowest interpolation."""
    kwargs = dict(img_size=(12, 20), dim=32, num_heads=2)  # 3 x 5 grid, head_dim 16: 4 row + 4 column pairs
    angles = {
        m: build("rope_axial", pos_kwargs={"resize_mode": m}, **kwargs).pos.angles(0, (3, 10))
        for m in ("extrapolate", "interpolate", mode)
    }
    rows, cols = slice(0, 4), slice(4, 8)
    assert torch.allclose(angles[mode][:, rows], angles["extrapolate"][:, rows])
    assert not torch.allclose(angles[mode][:, cols], angles["extrapolate"][:, cols])
    if mode == "ntk":
        assert torch.allclose(angles[mode][:, 4], angles["extrapolate"][:, 4])  # fastest column pair
        assert torch.allclose(angles[mode][:, 7], angles["interpolate"][:, 7], atol=1e-6)  # slowest


def test_rope_mixed_ntk_scales_each_axis_component_of_the_learned_frequencies():
    model = build("rope_mixed", (12, 20), dim=32, num_heads=2, pos_kwargs={"resize_mode": "ntk"})
    pos = model.pos
    angles = pos.angles(1, (6, 5))  # twice the rows, the same columns
    rows = torch.arange(6.0).repeat_interleave(5)
    cols = torch.arange(5.0).repeat(6)
    freq_x, freq_y = pos.freqs[:, 1].detach()
    freq_y = freq_y * ntk_factor(freq_y, 2.0, band_range(pos.theta, pos.head_dim // 4))
    expected = cols[None, :, None] * freq_x[:, None] + rows[None, :, None] * freq_y[:, None]
    assert torch.allclose(angles, expected, atol=1e-6)


@pytest.mark.parametrize("pos", ["none", "2d_sin", "rel_bias", "rope_mixed"])
def test_log_temperature_is_the_identity_at_the_training_size_and_sharpens_beyond(pos):
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    plain = build(pos, 16, dim=32, num_heads=2).eval()
    tempered = build(pos, 16, dim=32, num_heads=2, attn_temperature="log").eval()
    with torch.no_grad():
        assert torch.equal(plain(images[..., :16, :16]), tempered(images[..., :16, :16]))
        assert not torch.allclose(plain(images), tempered(images))
    assert tempered.temperature((8, 8)) == pytest.approx(math.log(64) / math.log(16))


def test_log_temperature_counts_the_cls_token_and_survives_a_resize():
    model = build("2d_sin", 16, dim=32, num_heads=2, pool="cls", attn_temperature="log")
    assert model.temperature((8, 8)) == pytest.approx(math.log(65) / math.log(17))
    model.resize(32)
    assert model.config["temperature_ref_size"] == [16, 16]
    assert model.temperature((8, 8)) == pytest.approx(math.log(65) / math.log(17))
    rebuilt = create_model(**model.config)
    assert rebuilt.temperature((8, 8)) == model.temperature((8, 8))


@pytest.mark.parametrize("attn_impl", ["sdpa", "math"])
def test_log_temperature_is_the_same_on_both_attention_paths(attn_impl):
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    reference = build("rope_axial", 16, dim=32, num_heads=2, attn_temperature="log", attn_impl="math").eval()
    other = build("rope_axial", 16, dim=32, num_heads=2, attn_temperature="log", attn_impl=attn_impl).eval()
    with torch.no_grad():
        assert torch.allclose(reference(images), other(images), atol=1e-5)


def test_unknown_attention_temperature_is_one_config_error():
    with pytest.raises(ConfigError, match="attn_temperature='cubic' is not one of none, log"):
        build("2d_sin", 16, attn_temperature="cubic")


def test_fuzzy_schemes():
    assert fuzzy_schemes() == ["1d_learned", "2d_learned", "2d_sin", "cpb", "rope_axial", "rope_mixed"]


@pytest.mark.parametrize("pos", sorted(set(list_pos()) - set(fuzzy_schemes())))
def test_fuzzy_is_refused_where_there_are_no_coordinates(pos):
    with pytest.raises(
        ConfigError, match=f"pos={pos} has no continuous coordinates.*1d_learned, 2d_learned, 2d_sin, cpb"
    ):
        build(pos, 16, dim=32, num_heads=2, pos_kwargs={"fuzzy": True})


@pytest.mark.parametrize("pos", fuzzy_schemes())
def test_fuzzy_positions_change_training_only(pos):
    images = torch.randn(4, 3, 16, 24, generator=torch.Generator().manual_seed(0))
    exact = build(pos, (16, 24), dim=32, num_heads=2)
    fuzzy = build(pos, (16, 24), dim=32, num_heads=2, pos_kwargs={"fuzzy": True})
    assert fuzzy.config["pos_kwargs"]["fuzzy"] is True
    fuzzy.load_state_dict(exact.state_dict())
    exact.eval(), fuzzy.eval()
    with torch.no_grad():
        for size in [(16, 24), (32, 24)]:  # the training grid and another one
            batch = torch.nn.functional.interpolate(images, size=size)
            assert torch.equal(fuzzy(batch), exact(batch))  # evaluation: no jitter, the same model
    exact.train(), fuzzy.train()
    torch.manual_seed(1)
    first = fuzzy(images)
    jitter = fuzzy.pos.jitter
    assert jitter.shape == (4, 4 * 6, 2) and (jitter >= -0.5).all() and (jitter < 0.5).all()
    assert len(jitter.unique()) == jitter.numel()  # per image, per token, per axis
    torch.manual_seed(1)
    assert torch.equal(fuzzy(images), first)  # seeded: the training RNG draws the offsets
    assert not torch.allclose(first, exact(images))


@pytest.mark.parametrize("pos", fuzzy_schemes())
def test_zero_fuzzy_offsets_reproduce_the_exact_positions(pos):
    """The fuzzy path (per-image coordinates) at offset 0 is the exact path."""
    images = torch.randn(2, 3, 16, 24, generator=torch.Generator().manual_seed(0))
    exact = build(pos, (16, 24), dim=32, num_heads=2).train()
    fuzzy = build(pos, (16, 24), dim=32, num_heads=2, pos_kwargs={"fuzzy": True}).train()
    fuzzy.load_state_dict(exact.state_dict())
    zero = torch.zeros(2, 4 * 6, 2)
    fuzzy.pos.draw_jitter = lambda batch, grid, device=None: setattr(fuzzy.pos, "jitter", zero)
    torch.manual_seed(0)
    expected = exact(images)
    torch.manual_seed(0)  # the same dropout/drop-path stream
    assert torch.allclose(fuzzy(images), expected, atol=1e-5)


def test_fuzzy_1d_learned_reads_between_table_entries():
    model = build("1d_learned", (8, 12), dim=32, num_heads=2, pos_kwargs={"fuzzy": True}).train()  # 2 x 3 grid
    pos = model.pos
    pos.jitter = torch.zeros(1, 6, 2)
    pos.jitter[0, 0] = torch.tensor([0.25, 0.5])  # token (0, 0) read at row 0.25, col 0.5
    table = pos.embedding[0].detach().reshape(2, 3, -1)
    expected = 0.75 * (0.5 * table[0, 0] + 0.5 * table[0, 1]) + 0.25 * (0.5 * table[1, 0] + 0.5 * table[1, 1])
    assert torch.allclose(pos.table((2, 3))[0, 0], expected, atol=1e-6)


def test_fuzzy_2d_learned_reads_each_axis_between_entries():
    model = build("2d_learned", (8, 12), dim=32, num_heads=2, pos_kwargs={"fuzzy": True}).train()  # 2 x 3 grid
    pos = model.pos
    pos.jitter = torch.zeros(1, 6, 2)
    pos.jitter[0, 4] = torch.tensor([-0.25, 0.5])  # token (1, 1) read at row 0.75, col 1.5
    rows, cols = pos.rows.detach(), pos.cols.detach()
    expected = torch.cat([0.25 * rows[0] + 0.75 * rows[1], 0.5 * cols[1] + 0.5 * cols[2]])
    assert torch.allclose(pos.table((2, 3))[0, 4], expected, atol=1e-6)


def test_fuzzy_cpb_reads_its_mlp_at_the_first_images_jittered_offsets_for_the_whole_batch():
    model = build("cpb", (8, 12), dim=32, num_heads=2, pos_kwargs={"fuzzy": True}).train()  # 2 x 3 grid
    pos = model.pos
    pos.jitter = torch.zeros(2, 6, 2)
    pos.jitter[0, 0] = torch.tensor([0.5, -0.25])  # image 0, token (0, 0) at row 0.5, col -0.25
    pos.jitter[1] = 0.3  # another image's offsets: not read (one jittered grid per step)
    bias = pos.bias(0, (2, 3))
    assert bias.shape == (2, 6, 6)
    # query token (0, 0) against key token (1, 2): offset (0.5 - 1, -0.25 - 2) in units of ref - 1 = (1, 2)
    offset = torch.tensor([(0.5 - 1) / 1, (-0.25 - 2) / 2]) * 8
    coords = torch.sign(offset) * torch.log2(1 + offset.abs()) / math.log2(8)
    expected = 16 * torch.sigmoid(pos.layers[0](coords))
    assert torch.allclose(bias[:, 0, 5], expected, atol=1e-6)
    pos.jitter = None  # without offsets: the exact table
    assert not torch.allclose(pos.bias(0, (2, 3))[:, 0, 5], expected)
