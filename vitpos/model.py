"""A pre-norm Vision Transformer that knows positions only through the four hooks of
`vitpos.pos.PositionalEncoding` (add / bias / rotate / after_block).

Patch embedding, MLP, DropPath and weight init come from timm; the attention is written here
because no library attention exposes the bias and rotate hooks between q/k and the softmax.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from functools import partial

import torch
import torch.nn.functional as F
from timm.layers import DropPath, Mlp, PatchEmbed, trunc_normal_
from timm.models import named_apply
from timm.models.vision_transformer import init_weights_vit_timm
from torch import Tensor, nn

from .errors import ConfigError, check_setting, is_integer, is_number
from .pos import Grid, create_pos
from .pos.arguments import check_model_given

ATTN_IMPLS = ("auto", "sdpa", "math")
POOLS = ("gap", "cls")
ATTN_TEMPERATURES = ("none", "log")

Rotate = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
# queries (B, heads, N, head_dim) -> additive logit bias (heads, N, N) or (B, heads, N, N)
Bias = Callable[[Tensor], Tensor]


class Attention(nn.Module):
    """Multi-head self-attention with an optional additive logit bias (computed from the queries
    by `bias`) and q/k rotation.

    `attn_impl`: `sdpa` uses `F.scaled_dot_product_attention` (bias passed as `attn_mask`),
    `math` the plain matmul-softmax-matmul, `auto` the faster of the two as measured
    (docs/PERFORMANCE.md): `sdpa` on any device but the CPU; on the CPU, `sdpa` for inference
    without a logit bias, `math` for training (the fused kernel's backward is slower for short
    token sequences) and with a bias (passed as a float mask, the fused kernel is slower).
    """

    def __init__(
        self, dim: int, num_heads: int, qkv_bias: bool = True, attn_impl: str = "auto", proj_drop: float = 0.0
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.attn_impl = attn_impl
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def heads(self, x: Tensor, rotate: Rotate | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Tokens (B, N, D) -> q, k, v (B, heads, N, head_dim) each, q and k rotated by `rotate`."""
        batch, num_tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, num_tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, N, head_dim)
        return (*rotate(q, k), v) if rotate is not None else (q, k, v)

    def probs(self, q: Tensor, k: Tensor, bias: Tensor | None = None, temperature: float = 1.0) -> Tensor:
        """Attention probabilities (B, heads, N, N) of the math path (also read by `vitpos.figures`);
        `temperature` multiplies the q.k logits (not the bias)."""
        logits = (q * (self.scale * temperature)) @ k.transpose(-2, -1)  # (B, heads, N, N)
        if bias is not None:
            logits = logits + bias.to(logits.dtype)
        return logits.softmax(dim=-1)

    def uses_sdpa(self, device: torch.device, with_bias: bool) -> bool:
        """Whether this call takes the fused kernel (see `attn_impl` above)."""
        if self.attn_impl != "auto":
            return self.attn_impl == "sdpa"
        return device.type != "cpu" or (not torch.is_grad_enabled() and not with_bias)

    def forward(
        self, x: Tensor, bias: Bias | None = None, rotate: Rotate | None = None, temperature: float = 1.0
    ) -> Tensor:
        batch, num_tokens, dim = x.shape
        q, k, v = self.heads(x, rotate)
        logit_bias = None if bias is None else bias(q)
        if self.uses_sdpa(x.device, logit_bias is not None):
            attn_mask = None if logit_bias is None else logit_bias.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=self.scale * temperature)
        else:
            out = self.probs(q, k, logit_bias, temperature).to(v.dtype) @ v
        out = out.transpose(1, 2).reshape(batch, num_tokens, dim)  # (B, N, D)
        return self.proj_drop(self.proj(out))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        attn_impl: str,
        drop: float = 0.0,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_impl=attn_impl, proj_drop=drop)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, hidden_features=int(dim * mlp_ratio), act_layer=nn.GELU, drop=drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self, x: Tensor, bias: Bias | None = None, rotate: Rotate | None = None, temperature: float = 1.0
    ) -> Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x), bias=bias, rotate=rotate, temperature=temperature))
        return x + self.drop_path(self.mlp(self.norm2(x)))


def check_attn_temperature(value) -> None:
    """A ConfigError unless `value` is one of ATTN_TEMPERATURES."""
    if value not in ATTN_TEMPERATURES:
        raise ConfigError(f"attn_temperature={value!r} is not one of {', '.join(ATTN_TEMPERATURES)}")


def image_size(value, setting: str | None = None, example: str = "img_size=32") -> tuple[int, int]:
    """`value` (an int or an [H, W] pair) as a (H, W) tuple of positive ints, or a ConfigError that
    names the `setting` it came from (default `img_size=<value>`)."""
    sizes = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value, value]
    if len(sizes) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise ConfigError(
            f"{setting or f'img_size={value!r}'} must be a positive integer or an [H, W] pair of them, e.g. {example}"
        )
    return sizes[0], sizes[1]


def check_architecture(config: dict) -> None:
    """The `VisionTransformer` arguments (its `config`) that no layer checks, each refused as one line."""
    for name in ("patch_size", "in_chans", "num_classes", "dim", "depth", "num_heads"):
        value = config[name]
        check_setting(f"model.{name}", value, is_integer(value) and value > 0, "be a positive integer")
    check_setting(
        "model.mlp_ratio",
        config["mlp_ratio"],
        is_number(config["mlp_ratio"]) and config["mlp_ratio"] > 0,
        "be a positive number (the MLP's hidden width / dim), e.g. model.mlp_ratio=4",
    )
    check_setting(
        "model.drop_path_rate",
        config["drop_path_rate"],
        is_number(config["drop_path_rate"]) and 0 <= config["drop_path_rate"] < 1,
        "be a number with 0 <= drop_path_rate < 1, e.g. model.drop_path_rate=0.1",
    )
    dim, num_heads, drop_rate = config["dim"], config["num_heads"], config["drop_rate"]
    if dim % num_heads:
        raise ConfigError(f"dim={dim} is not divisible by num_heads={num_heads}")
    if config["pool"] not in POOLS:
        raise ConfigError(f"pool={config['pool']!r} is not one of {', '.join(POOLS)}")
    if config["attn_impl"] not in ATTN_IMPLS:
        raise ConfigError(f"attn_impl={config['attn_impl']!r} is not one of {', '.join(ATTN_IMPLS)}")
    check_attn_temperature(config["attn_temperature"])
    if isinstance(drop_rate, bool) or not isinstance(drop_rate, (int, float)) or not 0 <= drop_rate < 1:
        raise ConfigError(
            f"model.drop_rate={drop_rate!r} must be a number with 0 <= drop_rate < 1, e.g. model.drop_rate=0.1"
        )


class VisionTransformer(nn.Module):
    """ViT: patch embed -> `add` -> blocks (attention applies `bias`, `rotate`; then `after_block`)
    -> final norm -> pool -> head. The patch grid is taken from each input, so any image size
    divisible by the patch size works (the scheme resizes its state for grids it was not built for).

    Args:
        pos: positional scheme name (see `vitpos.list_pos()`).
        img_size: training image size, int or (H, W); defines the scheme's native grid.
        patch_size: square patch side in pixels.
        in_chans: input channels.
        num_classes: classifier outputs.
        dim: token width.
        depth: number of blocks.
        num_heads: attention heads (dim must be divisible by it).
        mlp_ratio: MLP hidden width / dim.
        qkv_bias: bias in the qkv projection.
        drop_rate: dropout on the outputs of the attention projection and of the MLP, and after the
            MLP's activation (timm's `proj_drop`), 0 <= drop_rate < 1.
        drop_path_rate: stochastic depth, linearly increasing over the blocks up to this value.
        pool: `gap` (mean of patch tokens) or `cls` (a class token, which gets no position: no
            additive table, zero attention bias, no rotation). With `cls`, only the class token is
            read after the last block, so a per-layer bias of the last block cannot reach the output.
        attn_impl: `auto`, `sdpa` or `math` (see `Attention`).
        attn_temperature: `none`, or `log`: on an input of N tokens (patches and cls), every q.k
            logit is multiplied by log(N) / log(N_ref), N_ref the tokens at `temperature_ref_size`
            (1 there; Chiang & Cholak 2022, YaRN's temperature in this form), so attention keeps its
            sharpness on larger grids. Training-free; for evaluation or fine-tuning at a new size.
        temperature_ref_size: the image size (int or (H, W)) where the temperature is 1: the size the
            weights were trained at; default `img_size`. `resize` keeps it.
        pos_kwargs: extra constructor arguments of the scheme (e.g. `resize_mode`).
    """

    def __init__(
        self,
        pos: str = "2d_sin",
        img_size: int | tuple[int, int] = 32,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 10,
        dim: int = 192,
        depth: int = 6,
        num_heads: int = 3,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        pool: str = "gap",
        attn_impl: str = "auto",
        attn_temperature: str = "none",
        temperature_ref_size: int | tuple[int, int] | None = None,
        pos_kwargs: dict | None = None,
    ):
        arguments = {name: value for name, value in locals().items() if name not in ("self", "__class__")}
        super().__init__()
        img_size = image_size(img_size)
        ref_size = (
            image_size(temperature_ref_size, f"model.temperature_ref_size={temperature_ref_size!r}")
            if temperature_ref_size is not None
            else img_size
        )
        # the constructor's arguments, normalised: `VisionTransformer(**config)` builds this model again
        self.config = arguments | dict(
            img_size=list(img_size), temperature_ref_size=list(ref_size), pos_kwargs=dict(pos_kwargs or {})
        )
        check_architecture(self.config)
        self._build_layers(self.config)
        self._init_weights()

    def _build_layers(self, config: dict) -> None:
        """The native grid, patch embedding, the scheme, the cls token (pool=cls), the blocks, norm
        and head; then the scheme's hooks, decided once here so that the forward pass never asks
        which scheme it runs, and the tokens at `temperature_ref_size`."""
        dim, depth, num_heads = config["dim"], config["depth"], config["num_heads"]
        self.patch_size, self.attn_temperature = config["patch_size"], config["attn_temperature"]
        self.grid: Grid = self.grid_for(tuple(config["img_size"]))
        self.patch_embed = PatchEmbed(
            img_size=tuple(config["img_size"]),
            patch_size=config["patch_size"],
            in_chans=config["in_chans"],
            embed_dim=dim,
            flatten=False,
            output_fmt="NHWC",
            strict_img_size=False,
        )
        check_model_given(config["pos_kwargs"])
        self.pos = create_pos(
            config["pos"], dim=dim, num_heads=num_heads, depth=depth, grid=self.grid, **config["pos_kwargs"]
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if config["pool"] == "cls" else None
        self.num_prefix_tokens = 0 if self.cls_token is None else 1
        drop_path_rates = [config["drop_path_rate"] * i / max(1, depth - 1) for i in range(depth)]  # linear in depth
        self.blocks = nn.ModuleList(
            Block(
                dim, num_heads, config["mlp_ratio"], config["qkv_bias"], rate, config["attn_impl"], config["drop_rate"]
            )
            for rate in drop_path_rates
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, config["num_classes"])
        self._pos_bias = self.pos.uses("bias")
        self._pos_rotate = self.pos.uses("rotate")
        self._pos_after_block = self.pos.uses("after_block")
        self._pos_fuzzy = self.pos.fuzzy
        ref_grid = self.grid_for(tuple(config["temperature_ref_size"]))
        self._ref_tokens = ref_grid[0] * ref_grid[1] + self.num_prefix_tokens  # where the temperature is 1

    def _init_weights(self) -> None:
        named_apply(init_weights_vit_timm, self.blocks)
        named_apply(init_weights_vit_timm, self.head)
        if self.cls_token is not None:
            trunc_normal_(self.cls_token, std=0.02)

    def grid_for(self, img_size: tuple[int, int]) -> Grid:
        """Patch grid (H/p, W/p) of an image size; a clear error when it does not divide."""
        height, width = img_size
        if height % self.patch_size or width % self.patch_size:
            raise ConfigError(
                f"image size {height}x{width} is not divisible by the patch size {self.patch_size}; "
                f"use a multiple of {self.patch_size}"
            )
        return height // self.patch_size, width // self.patch_size

    def temperature(self, grid: Grid) -> float:
        """The logit multiplier on `grid` (see `attn_temperature`): 1 unless `log`."""
        if self.attn_temperature == "none":
            return 1.0
        return math.log(grid[0] * grid[1] + self.num_prefix_tokens) / math.log(self._ref_tokens)

    def set_attn_temperature(self, attn_temperature: str) -> VisionTransformer:
        """Switch the attention temperature (`none` or `log`) of a built model, in place."""
        check_attn_temperature(attn_temperature)
        self.attn_temperature = self.config["attn_temperature"] = attn_temperature
        return self

    def resize(self, img_size: int | tuple[int, int], resize_mode: str | None = None) -> VisionTransformer:
        """Convert the model in place to a new input size with the scheme's resize rule, so that
        `img_size` becomes its native size (fine-tuning there, saving, `create_model(**config)`)."""
        img_size = image_size(img_size)
        grid = self.grid_for(img_size)
        pos_kwargs = self.pos.resize_to(grid, resize_mode)
        self.grid = grid
        self.config.update(img_size=list(img_size), pos_kwargs=pos_kwargs)
        return self

    def no_weight_decay(self) -> set[str]:
        """Parameter names excluded from weight decay: positional tables and the cls token."""
        names = {f"pos.{name}" for name in self.pos.no_weight_decay()}
        if self.cls_token is not None:
            names.add("cls_token")
        return names

    def _bias(self, layer: int, grid: Grid, q: Tensor) -> Tensor:
        prefix = self.num_prefix_tokens
        bias = self.pos.bias(layer, grid, q[:, :, prefix:])  # (heads, N, N) or (B, heads, N, N)
        return F.pad(bias, (prefix, 0, prefix, 0)) if prefix else bias  # prefix rows/cols get no bias

    def _rotate(self, layer: int, grid: Grid, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        prefix = self.num_prefix_tokens
        if not prefix:  # slicing and re-concatenating would cost two copies and a gradient accumulation
            return self.pos.rotate(layer, q, k, grid)
        q_patch, k_patch = self.pos.rotate(layer, q[:, :, prefix:], k[:, :, prefix:], grid)
        return torch.cat([q[:, :, :prefix], q_patch], dim=2), torch.cat([k[:, :, :prefix], k_patch], dim=2)

    def _after_block(self, layer: int, x: Tensor, grid: Grid) -> Tensor:
        prefix = self.num_prefix_tokens
        return torch.cat([x[:, :prefix], self.pos.after_block(layer, x[:, prefix:], grid)], dim=1)

    def forward_features(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> pooled features (B, D)."""
        grid = self.grid_for(images.shape[-2:])
        # (B, H, W, D) -> (B, N, D); the residual stream stays in the parameters' dtype (fp32 under
        # autocast) for every scheme, so schemes differ only by their hooks' own cost.
        x = self.patch_embed(images).flatten(1, 2).to(self.norm.weight.dtype)
        if self._pos_fuzzy:
            self.pos.draw_jitter(x.shape[0], grid, x.device)
        x = self.pos.add(x, grid)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)  # (B, 1+N, D)
        temperature = self.temperature(grid)
        for layer, block in enumerate(self.blocks):
            bias = partial(self._bias, layer, grid) if self._pos_bias else None
            rotate = partial(self._rotate, layer, grid) if self._pos_rotate else None
            x = block(x, bias=bias, rotate=rotate, temperature=temperature)
            if self._pos_after_block:
                x = self._after_block(layer, x, grid)
        x = self.norm(x)
        return x[:, 0] if self.cls_token is not None else x.mean(dim=1)

    def forward(self, images: Tensor) -> Tensor:
        """Images (B, C, H, W) -> logits (B, num_classes)."""
        return self.head(self.forward_features(images))


def create_model(
    pos: str, img_size: int | tuple[int, int] = 32, num_classes: int = 10, in_chans: int = 3, **model_kwargs
) -> VisionTransformer:
    """Build a ViT with positional scheme `pos`; `model_kwargs` are `VisionTransformer` arguments."""
    return VisionTransformer(pos=pos, img_size=img_size, num_classes=num_classes, in_chans=in_chans, **model_kwargs)


# the `create_model` keyword arguments besides the scheme and size (CLIs accept them as key=value)
MODEL_ARGS = frozenset(inspect.signature(VisionTransformer).parameters) - {"pos", "img_size"}
