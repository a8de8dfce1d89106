"""Properties of the ViT with every registered positional scheme: shapes on any grid, gradients,
weight decay groups, patch-permutation (in)variance, configuration errors, attention backends."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import vitpos
from vitpos import ConfigError

SCHEMES = vitpos.list_pos()
POOLS = ("gap", "cls")
PATCH = 4


pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = dict(dim=32, depth=2, num_heads=2, patch_size=PATCH)

# Schemes whose positional parameters are ordinary weights (a convolution) that decay like any weight;
# every other scheme's parameters are positional tables, excluded from weight decay.
DECAYED_POS = {"cpe"}
# Fixed (non-learned) tables (sin-cos, RoPE angles, ALiBi distances, LookHere's cones): buffers only.
FIXED_TABLES = ("1d_sin", "2d_sin", "rope_axial", "alibi_2d", "lookhere")
# The Swin init (std 0.02 on the attention logits) moves the logits by ~1e-5 only under a patch
# shuffle; scaled to a trained-table magnitude (std ~2) the dependence on position is clear. Likewise
# cpb: SwinV2's init (MLP weights std 0.02) gives 16*sigmoid(~0) = 8 +- 0.03 for every offset.
# rel_shaw's term q . a is a product of two init-sized factors (tables std 0.02, queries of the ViT
# init), so both are scaled: its tables here, its q in SCALE_QK (measured shuffle change: 2e-4 with
# the tables alone x100, 4e-3 with both x10).
SCALE_POS = {"rel_bias": 100.0, "cpb": 10.0, "rel_shaw": 10.0}
# Schemes whose position signal acts through the content logits q.k (RoPE rotates q and k) or
# competes with them (ALiBi's fixed slopes, 1/16 and 1/256 for 2 heads) have no table to scale: with
# the ViT init (qkv std 0.02) q.k ~ 1e-2, attention is near-uniform, and a patch shuffle moves the
# logits by only 1e-5 (gap: a relative scheme then sees the order only through border effects at
# first order, as rel_bias unscaled does) to 8e-5 (alibi_2d, cls). With q and k at a trained
# magnitude (qkv weights x10, logits O(1)) the dependence on the order is clear (measured 2e-3 to 1).
SCALE_QK = {"rope_axial": 10.0, "rope_mixed": 10.0, "alibi_2d": 10.0, "rel_shaw": 10.0}
# Schemes with a learned attention bias per layer, their parameters named `layers.<i>.` (see the
# cls-pooling exemption in test_gradient_reaches_every_positional_parameter).
PER_LAYER_BIAS = {"rel_bias", "cpb", "rel_shaw", "fire"}


def make(pos: str, img_size=32, pool: str = "gap", seed: int = 0, **kwargs) -> vitpos.VisionTransformer:
    torch.manual_seed(seed)
    return vitpos.create_model(pos, img_size=img_size, num_classes=10, in_chans=3, pool=pool, **{**SMALL, **kwargs})


def images(height: int, width: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


def loss_of(model, x):
    return F.cross_entropy(model(x), torch.arange(x.shape[0]) % 10)


# ----------------------------------------------------------------------------------------------
# 1. any grid: square, rectangular, other than the built one


CASES = {  # name: (img_size built for, input H x W)
    "square": (32, (32, 32)),
    "rect-built": ((32, 48), (32, 48)),
    "rect-built-transposed": ((32, 48), (48, 32)),
    "square-built-rect-input": (32, (32, 48)),
    "square-built-larger-input": (32, (48, 48)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_forward_gives_finite_logits_on_any_grid(pos, pool, case):
    built, size = CASES[case]
    model = make(pos, built, pool).eval()
    built_hw = built if isinstance(built, tuple) else (built, built)
    assert model.grid == model.pos.grid == (built_hw[0] // PATCH, built_hw[1] // PATCH)
    x = images(*size, batch=3)
    with torch.no_grad():
        logits = model(x)
        single = torch.cat([model(x[i : i + 1]) for i in range(3)])
    assert logits.shape == (3, 10)
    assert torch.isfinite(logits).all()
    # samples do not mix (a wrong reshape between batch and tokens would mix them)
    torch.testing.assert_close(logits, single, atol=1e-5, rtol=1e-4)
    # and the logits depend on the image
    assert (logits[0] - logits[1]).abs().max() > 1e-4


# ----------------------------------------------------------------------------------------------
# 2. gradients to the positional module, buffers vs parameters, weight decay


@pytest.mark.parametrize("size", [(32, 32), (32, 48)], ids=["built-grid", "other-grid"])
@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_gradient_reaches_every_positional_parameter(pos, pool, size):
    model = make(pos, 32, pool)
    loss_of(model, images(*size)).backward()
    last = model.config["depth"] - 1
    for name, param in model.pos.named_parameters():
        assert param.grad is not None, f"pos.{name} gets no gradient"
        if pool == "cls" and pos in PER_LAYER_BIAS and name.startswith(f"layers.{last}."):
            # By design the cls token gets no position: after the last block only the cls token is
            # read, so the last layer's bias (a relative table, or cpb's MLP) cannot influence the
            # output (documented in the model). Other layers' biases and rotations do reach it.
            assert param.grad.abs().max() == 0
        else:
            assert param.grad.abs().max() > 0, f"pos.{name} gets an all-zero gradient"


@pytest.mark.parametrize("pos", SCHEMES)
def test_mixed_resolution_steps_train_the_native_state(pos):
    """Mixed-resolution training (steps at 24, 32, 40 px of a model built at 32): every size
    reaches the same parameters; positional parameters keep their native shapes (a learned table is
    resampled inside the forward pass and its gradient flows back to the native table); fixed
    tables are recomputed per grid, never overwritten."""
    model = make(pos, 32)
    shapes = {name: param.shape for name, param in model.named_parameters()}
    buffers = {name: buffer.clone() for name, buffer in model.pos.named_buffers()}
    reached = {}
    for size in (24, 32, 40):
        model.zero_grad(set_to_none=True)
        loss_of(model, images(size, size)).backward()
        reached[size] = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().max() > 0}
    assert reached[24] == reached[32] == reached[40]
    assert {f"pos.{name}" for name, _ in model.pos.named_parameters()} <= reached[40]
    assert {name: param.shape for name, param in model.named_parameters()} == shapes
    assert model.grid == (8, 8)
    after = dict(model.pos.named_buffers())
    assert after.keys() == buffers.keys() and all(torch.equal(after[n], buffers[n]) for n in buffers)


@pytest.mark.parametrize("pos", FIXED_TABLES)
def test_fixed_schemes_save_no_state(pos):
    """A fixed scheme's tables are derived from the grid (non-persistent buffers, or computed)."""
    model = make(pos)
    assert list(model.pos.parameters()) == []
    assert not [key for key in model.state_dict() if key.startswith("pos.")]


@pytest.mark.parametrize("pos", SCHEMES)
def test_positional_state_dict_holds_parameters_only(pos):
    """Fixed tables and indices are derived from the grid: a checkpoint carries learned tensors only."""
    model = make(pos)
    saved = {key for key in model.state_dict() if key.startswith("pos.")}
    assert saved == {f"pos.{name}" for name, _ in model.pos.named_parameters()}


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_no_weight_decay_names_positional_tables(pos, pool):
    model = make(pos, pool=pool)
    excluded = model.no_weight_decay()
    params = {name for name, _ in model.named_parameters()}
    assert excluded <= params, f"not parameters: {excluded - params}"
    pos_params = {f"pos.{name}" for name, _ in model.pos.named_parameters()}
    if pos in DECAYED_POS:
        assert pos_params, f"{pos} was expected to have weights"
        assert not excluded & pos_params
    else:
        assert pos_params <= excluded
    assert ("cls_token" in excluded) == (pool == "cls")
    assert excluded - pos_params <= {"cls_token"}, "only positional tables and the cls token skip decay"


# ----------------------------------------------------------------------------------------------
# 3. shuffling the patches of an image: only `none` cannot tell


def shuffle_patches(imgs: torch.Tensor, perm: torch.Tensor, patch: int = PATCH) -> torch.Tensor:
    """Cut (B, C, H, W) into patch x patch tiles (row-major), reorder them by `perm`, reassemble."""
    batch, chans, height, width = imgs.shape
    gh, gw = height // patch, width // patch
    tiles = imgs.reshape(batch, chans, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5)
    tiles = tiles.reshape(batch, gh * gw, chans, patch, patch)[:, perm]
    return tiles.reshape(batch, gh, gw, chans, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(imgs.shape)


PERM = torch.randperm(64, generator=torch.Generator().manual_seed(123))


def test_shuffle_patches_permutes_the_patch_tokens():
    model = make("none").eval()
    x = images(32, 32)
    shuffled = shuffle_patches(x, PERM)
    assert not torch.allclose(shuffled, x)
    assert torch.equal(shuffle_patches(x, torch.arange(64)), x)
    assert torch.equal(torch.sort(shuffled.flatten()).values, torch.sort(x.flatten()).values)
    with torch.no_grad():
        tokens = model.patch_embed(x).flatten(1, 2)
        tokens_shuffled = model.patch_embed(shuffled).flatten(1, 2)
    torch.testing.assert_close(tokens_shuffled, tokens[:, PERM])


@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_patch_shuffle_changes_logits_unless_no_position(pos, pool):
    model = make(pos, 32, pool).eval()
    if pos in SCALE_POS:
        with torch.no_grad():
            for param in model.pos.parameters():
                param.mul_(SCALE_POS[pos])
    if pos in SCALE_QK:
        with torch.no_grad():
            for block in model.blocks:
                block.attn.qkv.weight.mul_(SCALE_QK[pos])
    x = images(32, 32)
    with torch.no_grad():
        logits, logits_shuffled = model(x), model(shuffle_patches(x, PERM))
    if pos == "none":
        assert torch.allclose(logits, logits_shuffled, atol=1e-5, rtol=0)
    else:
        diff = (logits - logits_shuffled).abs().max().item()
        assert diff > 1e-4, f"{pos}/{pool} barely sees the patch order (max diff {diff:.2e})"


@pytest.mark.parametrize("size", [(32, 32), (32, 48)], ids=["built-grid", "other-grid"])
@pytest.mark.parametrize("pos", [name for name in SCHEMES if vitpos.pos.get_pos_class(name).uses("bias")])
def test_cls_token_gets_no_attention_bias(pos, size):
    """Prefix tokens get no position: the bias the blocks see is the scheme's bias of the patch
    queries only, with a zero row and column for the cls token in front."""
    model = make(pos, 32, "cls")
    grid = (size[0] // PATCH, size[1] // PATCH)
    n = grid[0] * grid[1]
    heads = SMALL["num_heads"]
    q = torch.randn(2, heads, 1 + n, SMALL["dim"] // heads)  # (B, heads, 1+N, head_dim), cls first
    for layer in range(SMALL["depth"]):
        full = model._bias(layer, grid, q)
        patch = model.pos.bias(layer, grid, q[:, :, 1:])
        assert full.shape[-3:] == (heads, 1 + n, 1 + n)
        assert torch.equal(full[..., 1:, 1:], patch)
        assert not full[..., 0, :].any() and not full[..., :, 0].any()


# ----------------------------------------------------------------------------------------------
# 4. configuration errors


def test_unknown_scheme_lists_every_valid_name():
    assert issubclass(ConfigError, ValueError)
    with pytest.raises(ConfigError) as info:
        vitpos.create_model("no_such_scheme", img_size=32, num_classes=10, in_chans=3, **SMALL)
    message = str(info.value)
    assert "no_such_scheme" in message
    for name in SCHEMES:
        assert re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message), f"{name!r} missing from: {message}"


@pytest.mark.parametrize(
    "pos,dim,num_heads,valid_dim",
    [
        ("2d_sin", 34, 2, 36),  # needs dim % 4 == 0
        ("1d_sin", 33, 3, 36),  # needs dim % 2 == 0
        ("2d_learned", 33, 3, 36),  # needs dim % 2 == 0
    ],
)
def test_indivisible_dim_raises_config_error(pos, dim, num_heads, valid_dim):
    # dim % num_heads == 0 here, so the error can only come from the positional scheme
    with pytest.raises(ConfigError, match=rf"{re.escape(pos)}.*dim={dim}"):
        make(pos, dim=dim, num_heads=num_heads)
    make(pos, dim=valid_dim, num_heads=num_heads)  # the same scheme builds with a divisible dim


@pytest.mark.parametrize("pos", SCHEMES)
def test_dim_not_divisible_by_heads_raises_config_error(pos):
    with pytest.raises(ConfigError, match="num_heads"):
        make(pos, dim=32, num_heads=3)


@pytest.mark.parametrize("img_size", [30, (32, 30), (30, 32)])
def test_image_size_not_divisible_by_patch_raises_at_construction(img_size):
    with pytest.raises(ConfigError, match="patch size"):
        make("2d_sin", img_size)


@pytest.mark.parametrize("size", [(30, 32), (32, 30)])
@pytest.mark.parametrize("pos", SCHEMES)
def test_image_not_divisible_by_patch_raises_at_forward(pos, size):
    model = make(pos, 32)
    with pytest.raises(ConfigError, match="patch size"):
        model(images(*size))


@pytest.mark.parametrize("option", [dict(pool="mean"), dict(attn_impl="flash")])
def test_unknown_pool_or_attn_impl_raises_config_error(option):
    with pytest.raises(ConfigError):
        make("none", **option)


@pytest.mark.parametrize("rate", [-0.1, 1.0, True, "0.1"])
def test_drop_rate_outside_zero_to_one_raises_config_error(rate):
    with pytest.raises(ConfigError, match=r"model\.drop_rate=.* 0 <= drop_rate < 1"):
        make("none", drop_rate=rate)


def test_dropout_changes_training_only():
    """drop_rate adds no parameter, perturbs the training forward pass, and leaves evaluation
    identical to the same weights without dropout."""
    x = images(32, 32, batch=4)
    plain, dropped = make("2d_sin"), make("2d_sin", drop_rate=0.5)
    dropped.load_state_dict(plain.state_dict())  # strict: the same parameters and buffers
    with torch.no_grad():
        torch.testing.assert_close(dropped.eval()(x), plain.eval()(x), atol=0, rtol=0)
        assert not torch.allclose(dropped.train()(x), plain.train()(x))


# ----------------------------------------------------------------------------------------------
# 5. every parameter is used (DDP with find_unused_parameters=False)


@pytest.mark.parametrize("size", [(32, 32), (32, 48)], ids=["built-grid", "other-grid"])
@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_every_parameter_gets_a_gradient(pos, pool, size):
    model = make(pos, 32, pool)
    if pool == "gap":
        assert model.cls_token is None
        assert not [name for name, _ in model.named_parameters() if "cls" in name]
    else:
        assert isinstance(model.cls_token, torch.nn.Parameter)
        assert model.cls_token.shape == (1, 1, SMALL["dim"])
    loss_of(model, images(*size)).backward()
    missing = [name for name, param in model.named_parameters() if param.grad is None]
    assert not missing, f"unused parameters: {missing}"


# ----------------------------------------------------------------------------------------------
# 6. attention backends agree


@pytest.mark.parametrize("size", [(32, 32), (32, 48)], ids=["built-grid", "other-grid"])
@pytest.mark.parametrize("pool", POOLS)
@pytest.mark.parametrize("pos", SCHEMES)
def test_math_and_sdpa_attention_agree(pos, pool, size, monkeypatch):
    math_model = make(pos, 32, pool, attn_impl="math")
    if pos in SCALE_POS:  # make a bias large enough to matter
        with torch.no_grad():
            for param in math_model.pos.parameters():
                param.mul_(SCALE_POS[pos])
    sdpa_model = make(pos, 32, pool, seed=1, attn_impl="sdpa")
    sdpa_model.load_state_dict(math_model.state_dict())

    calls = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    x = images(*size)
    targets = torch.arange(x.shape[0]) % 10
    logits_math = math_model(x)
    assert not calls, "attn_impl='math' must not call scaled_dot_product_attention"
    logits_sdpa = sdpa_model(x)
    assert len(calls) == SMALL["depth"], "attn_impl='sdpa' must call scaled_dot_product_attention per block"

    torch.testing.assert_close(logits_sdpa, logits_math, atol=1e-5, rtol=0)
    F.cross_entropy(logits_math, targets).backward()
    F.cross_entropy(logits_sdpa, targets).backward()
    sdpa_params = dict(sdpa_model.named_parameters())
    for name, param in math_model.named_parameters():
        other = sdpa_params[name]
        assert (param.grad is None) == (other.grad is None), name
        if param.grad is not None:
            torch.testing.assert_close(
                other.grad, param.grad, atol=1e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
            )


@pytest.mark.parametrize("pos", SCHEMES)
def test_auto_attention_on_cpu_fuses_only_inference_without_a_bias(pos, monkeypatch):
    """`attn_impl=auto` on the CPU: the fused kernel for inference of a scheme without a logit bias,
    the math path for training steps (gradients on, in either module mode) and for a biased scheme."""
    model = make(pos, 32)
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    x = images(32, 48)
    model.train()(x)
    model.eval()(x)
    assert not calls, "a forward pass with gradients must take the math path on the CPU"
    with torch.inference_mode():
        model(x)
    assert len(calls) == (0 if model.pos.uses("bias") else SMALL["depth"])


@pytest.mark.parametrize("pos", SCHEMES)
def test_math_and_sdpa_agree_under_bf16_autocast(pos):
    """The training precision on CPU and GPU: both kernels within bf16 tolerance of each other and
    of the fp32 reference (bf16 keeps ~3 significant digits)."""
    math_model = make(pos, 32, "gap", attn_impl="math")
    sdpa_model = make(pos, 32, "gap", seed=1, attn_impl="sdpa")
    sdpa_model.load_state_dict(math_model.state_dict())
    x = images(32, 32)
    reference = math_model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits_math, logits_sdpa = math_model(x).float(), sdpa_model(x).float()
    scale = reference.abs().max()
    assert (logits_math - reference).abs().max() < 0.03 * scale
    assert (logits_sdpa - reference).abs().max() < 0.03 * scale
    grads = []
    for model, logits in ((math_model, logits_math), (sdpa_model, logits_sdpa)):
        F.cross_entropy(logits, torch.arange(len(x)) % 10).backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    cosine = F.cosine_similarity(grads[0], grads[1], dim=0)
    assert cosine > 0.99


# ----------------------------------------------------------------------------------------------
# a fixed table recomputed for another grid follows the model's dtype


@pytest.mark.parametrize("pos", FIXED_TABLES)
def test_bf16_model_runs_on_another_grid(pos):
    model = make(pos, 32).to(torch.bfloat16).eval()
    with torch.no_grad():
        logits = model(images(48, 48).to(torch.bfloat16))
    assert logits.dtype == torch.bfloat16
