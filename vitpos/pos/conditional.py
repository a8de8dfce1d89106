"""Conditional positional encoding, applied to the token grid after a block (`after_block` hook).

`cpe`: the Positional Encoding Generator of CPVT (Chu et al. 2021, "Conditional Positional
Encodings for Vision Transformers"): a depthwise 3x3 convolution over the tokens laid out as an
H x W map, added residually after the first block. Zero padding at the borders gives it absolute
cues; it works on any grid with no resizing. `padding_mode=circular` wraps the map around instead:
the convolution stays local but sees no border, so it carries no absolute position.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..errors import ConfigError
from .arguments import Argument
from .base import Grid, PositionalEncoding
from .registry import register


@register("cpe")
class ConditionalPositionalEncoding(PositionalEncoding):
    """PEG after the blocks listed in `after_layers` (default: after the first block only).

    Args:
        after_layers: block indices after which a PEG is applied.
        kernel_size: odd depthwise kernel size.
        padding_mode: `zeros` (CPVT's) or `circular` (no border cue).
    """

    arguments = {
        "after_layers": Argument("block indices after which a PEG is applied", kind="integers", low=0),
        "kernel_size": Argument("the depthwise kernel's size", kind="integer", low=1, odd=True),
        "padding_mode": Argument("how the convolution pads the border", kind="choice", choices=("zeros", "circular")),
    }

    def __init__(
        self,
        dim: int,
        num_heads: int,
        depth: int,
        grid: Grid,
        after_layers: tuple[int, ...] | list[int] = (0,),
        kernel_size: int = 3,
        padding_mode: str = "zeros",
    ):
        super().__init__(dim, num_heads, depth, grid)
        if not after_layers or any(i >= depth for i in after_layers):
            raise ConfigError(
                f"pos=cpe needs after_layers to list blocks within 0..{depth - 1} (model.depth={depth}), "
                f"e.g. after_layers=[0]; got after_layers={list(after_layers)}"
            )
        self.after_layers, self.kernel_size = [int(i) for i in after_layers], int(kernel_size)
        self.padding_mode = padding_mode
        same_size = dict(padding=kernel_size // 2, padding_mode=padding_mode)
        self.pegs = nn.ModuleDict(
            {str(i): nn.Conv2d(dim, dim, kernel_size, groups=dim, **same_size) for i in after_layers}
        )

    def after_block(self, layer: int, x: Tensor, grid: Grid) -> Tensor:
        if str(layer) not in self.pegs:
            return x
        peg = self.pegs[str(layer)]
        batch, num_tokens, dim = x.shape
        feature_map = x.transpose(1, 2).reshape(batch, dim, grid[0], grid[1])  # (B, D, H, W)
        return x + peg(feature_map).flatten(2).transpose(1, 2)  # (B, H*W, D)

    def init_kwargs(self) -> dict:
        return {
            **super().init_kwargs(),
            "after_layers": list(self.after_layers),
            "kernel_size": self.kernel_size,
            "padding_mode": self.padding_mode,
        }

    def no_weight_decay(self) -> set[str]:
        """The PEG is a convolution, not a table: its kernels decay like any weight."""
        return set()
