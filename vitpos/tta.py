"""Test-time horizontal-flip averaging: the mean of a model's logits for each image and its mirror,
the flip that training's augmentation draws (validation and test in training, `vitpos.evaluate`)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor


def flip_averaged(model: Callable[[Tensor], Tensor], images: Tensor) -> Tensor:
    """Logits (B, classes) averaged over `images` (B, C, H, W) and their left-right mirrors."""
    return (model(images) + model(images.flip(-1))) / 2


def predict(model: Callable[[Tensor], Tensor], images: Tensor, test_flip: bool) -> Tensor:
    """`model`'s logits for `images`, flip-averaged when `test_flip`."""
    return flip_averaged(model, images) if test_flip else model(images)
