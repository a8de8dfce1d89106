"""The one interface every positional scheme implements.

A position signal enters a ViT at one of four places (see docs/DESIGN.md, section 1). Each hook is a
no-op here, so a scheme overrides only the hooks it uses; the model asks `uses(hook)` once at
construction and never branches on the scheme's name.

Conventions:
- `grid = (H, W)` is the patch grid of the actual input, always passed explicitly.
- Hooks see patch tokens only; the model handles prefix (cls) tokens in one place.
- Fixed tensors derived from the grid come from one method, `buffers_for(grid)`; a scheme with
  some ends its `__init__` with `self.build_buffers()` (they become non-persistent buffers for the
  built grid) and reads them with `grid_buffers(grid)`, for any grid. Learned tables are
  parameters, excluded from weight decay (`no_weight_decay`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor, nn

from ..errors import ConfigError
from .arguments import Argument

Grid = tuple[int, int]

HOOKS = ("add", "bias", "rotate", "after_block")

T = TypeVar("T")


class PositionalEncoding(nn.Module):
    """Base class: no position signal at all unless a subclass overrides a hook.

    Args:
        dim: token width D.
        num_heads: attention heads per layer.
        depth: number of transformer blocks.
        grid: the patch grid (H, W) the model is built (and trained) for.
        resize_mode: the mode of the scheme's resize rule (schemes with `resize_modes`; default:
            the first of them).
        ref_grid: the grid positions or offsets are measured in (schemes with
            `measures_in_ref_grid`; default: the built grid). It stays the training grid when the
            scheme is converted to another grid.
    """

    scheme_name: str = ""
    resize_modes: tuple[str, ...] = ()  # modes of this scheme's resize rule; () = no state to resize
    measures_in_ref_grid: bool = False  # whether `ref_grid` is part of the scheme's state
    supports_fuzzy: bool = False  # whether the scheme reads continuous coordinates (`fuzzy` training)
    fuzzy: bool = False  # set by `create_pos`; see `draw_jitter`
    jitter: Tensor | None = None  # this forward pass' fuzzy offsets, (B, H*W, 2) (row, col), or None
    # the range of each constructor argument a user sets, checked by `create_pos`; subclasses add theirs
    arguments: dict[str, Argument] = {
        "ref_grid": Argument("the training grid positions are measured in", kind="grid", low=1, example="[8, 8]")
    }

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        resize_mode: str | None = None,
        ref_grid: Grid | None = None,
    ):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.depth = depth
        self.grid = (int(grid[0]), int(grid[1]))
        self.check_resize_mode(resize_mode)
        self.resize_mode = resize_mode or (self.resize_modes[0] if self.resize_modes else None)
        self.ref_grid = (int(ref_grid[0]), int(ref_grid[1])) if ref_grid else self.grid
        self._per_grid_cache: dict = {}
        self.buffer_names: tuple[str, ...] = ()  # the names `build_buffers` registered
        self.register_load_state_dict_post_hook(rebuild_after_load)

    def per_grid(self, key, compute: Callable[[], T]) -> T:
        """`compute()`, memoised under `key` while the model evaluates (eval mode, gradients off), and
        always for a scheme without parameters. Valid until `train()` / `eval()`, a state-dict load,
        `forget_grids()`, or a move to another device or dtype (an in-place edit of a parameter under
        `no_grad` in eval mode needs `forget_grids()`)."""
        learned = next(self.parameters(), None) is not None
        if learned and (torch.is_grad_enabled() or self.training):
            return compute()
        anchor = next(itertools.chain(self.parameters(), self.buffers()), None)
        where = None if anchor is None else (anchor.device, anchor.dtype)
        hit = self._per_grid_cache.get(key)
        if hit is None or hit[0] != where:
            hit = self._per_grid_cache[key] = (where, compute())
        return hit[1]

    def forget_grids(self) -> None:
        """Drop every tensor `per_grid` memoised."""
        self._per_grid_cache.clear()

    def buffers_for(self, grid: Grid, device=None) -> dict[str, Tensor]:
        """The scheme's fixed tensors for `grid` by name, from the grid and the scheme's settings (never
        its parameters), fp32 or int64, computed on `device` (or on the CPU where the scheme wants the
        same bits on every device). Default: none. Their names are the scheme's buffers."""
        return {}

    def build_buffers(self) -> None:
        """(Re)build the non-persistent buffers, `buffers_for(self.grid)`, each on the device and in
        the dtype of the buffer it replaces (in a model cast to bf16: the fp32 values rounded once).
        Called at the end of every scheme's `__init__`, by `resize_to` and after `load_state_dict`."""
        old = self.built_buffers()
        fresh = self.buffers_for(self.grid, device=buffer_device(old))
        for name, value in fresh.items():
            self.register_buffer(name, value.to(old[name]) if name in old else value, persistent=False)
        self.buffer_names = tuple(fresh)

    def built_buffers(self) -> dict[str, Tensor]:
        """The buffers `build_buffers` registered, by name."""
        return {name: getattr(self, name) for name in self.buffer_names}

    def grid_buffers(self, grid: Grid) -> dict[str, Tensor]:
        """The fixed tensors of `grid`: the buffers for the built grid; for another grid,
        `buffers_for(grid)` on the buffers' device and in their dtypes, memoised with `per_grid`."""
        built = self.built_buffers()
        grid = (int(grid[0]), int(grid[1]))
        if grid == self.grid:
            return built
        return self.per_grid(
            ("buffers", grid),
            lambda: {
                name: value.to(built[name])
                for name, value in self.buffers_for(grid, device=buffer_device(built)).items()
            },
        )

    def train(self, mode: bool = True) -> PositionalEncoding:
        self.forget_grids()  # training changes parameters: what was derived from them goes
        return super().train(mode)

    @classmethod
    def check_resize_mode(cls, mode: str | None) -> None:
        if mode is None:
            return
        if not cls.resize_modes:
            raise ConfigError(
                f"pos={cls.scheme_name} has no positional state to resize, so it takes no "
                f"resize_mode (got {mode!r}); leave resize_mode unset"
            )
        check_choice(cls.scheme_name, "resize_mode", mode, cls.resize_modes)

    def resize_to(self, grid: Grid, mode: str | None = None) -> dict:
        """Convert this scheme's state to `grid` in place with its resize rule (checkpoint surgery;
        the same rule serves forward passes on other grids), in `mode` when given. Returns the
        constructor keyword arguments (besides dim/heads/depth/grid) that rebuild the converted
        scheme. Schemes implement `resize_state` and `buffers_for`, not this."""
        self.check_resize_mode(mode)
        self.resize_mode = mode or self.resize_mode
        new_grid = (int(grid[0]), int(grid[1]))
        self.resize_state(new_grid)
        self.grid = new_grid
        self.forget_grids()
        self.build_buffers()
        return self.init_kwargs()

    def resize_state(self, grid: Grid) -> None:
        """Resample learned state from `self.grid` to `grid` with `self.resize_mode` (default: none)."""

    def init_kwargs(self) -> dict:
        """Constructor arguments of the current state, exactly (plus `create_pos`'s `fuzzy`): the
        resize mode and reference grid where the scheme has them; subclasses add their own."""
        return {
            **({"resize_mode": self.resize_mode} if self.resize_modes else {}),
            **({"ref_grid": list(self.ref_grid)} if self.measures_in_ref_grid else {}),
            "fuzzy": self.fuzzy,
        }

    @classmethod
    def uses(cls, hook: str) -> bool:
        """True when this scheme overrides `hook` (one of HOOKS)."""
        return getattr(cls, hook) is not getattr(PositionalEncoding, hook)

    def add(self, x: Tensor, grid: Grid) -> Tensor:
        """Patch tokens (B, H*W, D) -> tokens with the position signal added."""
        return x

    def bias(self, layer: int, grid: Grid, q: Tensor | None = None) -> Tensor | None:
        """Attention-logit bias for block `layer`: (heads, H*W, H*W), or (B, heads, H*W, H*W) from the
        patch queries `q` (B, heads, H*W, head_dim) for a query-dependent bias; or None. The model
        always passes `q`; a bias independent of the input ignores it. An entry of -inf masks the
        pair (its attention weight is exactly 0); every query keeps a finite entry for its own key."""
        return None

    def rotate(self, layer: int, q: Tensor, k: Tensor, grid: Grid) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys (B, heads, H*W, head_dim) of block `layer`."""
        return q, k

    def after_block(self, layer: int, x: Tensor, grid: Grid) -> Tensor:
        """Patch tokens (B, H*W, D) after block `layer` -> tokens with the position signal."""
        return x

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of parameters excluded from weight decay.

        Default: every parameter, since a scheme's parameters are positional tables.
        """
        return {name for name, _ in self.named_parameters()}

    def draw_jitter(self, batch: int, grid: Grid, device=None) -> None:
        """Fuzzy positions (ViTAR, Fan et al. 2024): in training, every image's every token gets a
        (row, col) offset drawn from U[-0.5, 0.5) (torch's generator, so seeded and resumed with the
        run) for this forward pass; in evaluation, none. The model calls this once per forward."""
        self.jitter = (
            torch.rand(batch, grid[0] * grid[1], 2, device=device) - 0.5 if self.fuzzy and self.training else None
        )

    def jittered(self, rows: Tensor, cols: Tensor) -> tuple[Tensor, Tensor]:
        """Token coordinates (N,) each -> (B, N) each with this forward pass' fuzzy offsets, or
        unchanged when there are none (evaluation, or a scheme trained without `fuzzy`)."""
        if self.jitter is None or not self.training:
            return rows, cols
        return rows + self.jitter[..., 0], cols + self.jitter[..., 1]

    def extra_repr(self) -> str:
        return f"grid={self.grid}"


def buffer_device(buffers: dict[str, Tensor]) -> torch.device | None:
    """The device of a scheme's buffers (None when it has none: the default device)."""
    return next(iter(buffers.values())).device if buffers else None


def rebuild_after_load(scheme: PositionalEncoding, incompatible_keys) -> None:
    """The load_state_dict post-hook (a module-level function: ddp_spawn pickles the model): what
    was memoised from the old state goes, and the buffers are rebuilt."""
    scheme.forget_grids()
    scheme.build_buffers()


def axis_positions(grid: Grid, ref_grid: Grid, mode: str, device=None) -> tuple[Tensor, Tensor]:
    """Row (H,) and column (W,) coordinates of `grid` in fp32, for the fixed and rotary schemes'
    resize modes: `interpolate` = rescaled into `ref_grid`'s range (row * H_ref / H), as if the same
    image were sampled more finely; any other mode (`extrapolate`, `ntk`, `yarn`) = 0..H-1."""
    rows, cols = (torch.arange(n, dtype=torch.float32, device=device) for n in grid)
    if mode == "interpolate":
        rows, cols = rows * (ref_grid[0] / grid[0]), cols * (ref_grid[1] / grid[1])
    return rows, cols


def token_positions(
    grid: Grid, ref_grid: Grid | None = None, mode: str = "extrapolate", device=None
) -> tuple[Tensor, Tensor]:
    """`axis_positions` per token: the row and the column coordinate of every token, (H*W,) each in
    row-major order (default: 0..H-1, 0..W-1)."""
    rows, cols = axis_positions(grid, ref_grid or grid, mode, device=device)
    return rows.repeat_interleave(grid[1]), cols.repeat(grid[0])  # (H,), (W,) -> (H*W,) each


def check_divisible(scheme: str, dim: int, divisor: int, why: str) -> None:
    """Raise a clear error at construction instead of a silent broadcast later."""
    if dim % divisor:
        raise ConfigError(f"pos={scheme} needs the model dim to be divisible by {divisor} ({why}); got dim={dim}")


def check_choice(scheme: str, option: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise a clear error at construction for an unsupported option value."""
    if value not in choices:
        raise ConfigError(f"pos={scheme} does not support {option}={value!r}; choose one of {', '.join(choices)}")
