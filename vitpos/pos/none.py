"""`none`: no position signal. With average pooling the ViT is then permutation-invariant over
patches, the baseline every positional ablation needs."""

from .base import PositionalEncoding
from .registry import register


@register("none")
class NoPosition(PositionalEncoding):
    """Uses no hook."""
