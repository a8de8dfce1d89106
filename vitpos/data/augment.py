"""Augmentation on the training device: the policy names, RandAugment and TrivialAugmentWide on a
batch (`AutoAugmentBatch`), the batched random crop + flip and the batched random-resized crop."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

AUGMENTS = ("none", "standard", "randaugment", "trivialaugment", "rrc")
NUM_MAGNITUDE_BINS = 31  # torchvision's default for both policies


def _linear(largest: float):
    return lambda height, width: torch.linspace(0.0, largest, NUM_MAGNITUDE_BINS)


def _posterize_bits(halving: int):
    """8 bits at bin 0 down to 8 - halving bits at the last bin, rounded (torchvision's formula)."""
    return lambda height, width: (8 - torch.arange(NUM_MAGNITUDE_BINS) / ((NUM_MAGNITUDE_BINS - 1) / halving)).round()


def _solarize(height: int, width: int) -> Tensor:
    return torch.linspace(1.0, 0.0, NUM_MAGNITUDE_BINS)


# The op spaces of torchvision 0.29's transforms.v2.RandAugment and TrivialAugmentWide, in its order
# (an image's op is an index into it): name -> (magnitude of every bin at (height, width), or None;
# whether a random sign applies). Copied because torchvision keeps them private; tests/test_augment.py
# checks them against torchvision's transforms image by image.
RANDAUGMENT_SPACE = {
    "Identity": (None, False),
    "ShearX": (_linear(0.3), True),
    "ShearY": (_linear(0.3), True),
    "TranslateX": (lambda height, width: torch.linspace(0.0, 150.0 / 331.0 * width, NUM_MAGNITUDE_BINS), True),
    "TranslateY": (lambda height, width: torch.linspace(0.0, 150.0 / 331.0 * height, NUM_MAGNITUDE_BINS), True),
    "Rotate": (_linear(30.0), True),
    "Brightness": (_linear(0.9), True),
    "Color": (_linear(0.9), True),
    "Contrast": (_linear(0.9), True),
    "Sharpness": (_linear(0.9), True),
    "Posterize": (_posterize_bits(4), False),
    "Solarize": (_solarize, False),
    "AutoContrast": (None, False),
    "Equalize": (None, False),
}
TRIVIALAUGMENT_SPACE = {
    "Identity": (None, False),
    "ShearX": (_linear(0.99), True),
    "ShearY": (_linear(0.99), True),
    "TranslateX": (_linear(32.0), True),
    "TranslateY": (_linear(32.0), True),
    "Rotate": (_linear(135.0), True),
    "Brightness": (_linear(0.99), True),
    "Color": (_linear(0.99), True),
    "Contrast": (_linear(0.99), True),
    "Sharpness": (_linear(0.99), True),
    "Posterize": (_posterize_bits(6), False),
    "Solarize": (_solarize, False),
    "AutoContrast": (None, False),
    "Equalize": (None, False),
}


def apply_op(images: Tensor, name: str, magnitude: float) -> Tensor:
    """One op of the spaces above on uint8 images (..., C, H, W) (the geometric ops: any dtype), all
    at `magnitude`: torchvision's functional call with the arguments its auto-augment transforms
    pass (nearest interpolation, zero fill, shears about the top-left corner, integer translations)."""
    nearest = InterpolationMode.NEAREST
    if name == "Identity":
        return images
    if name in ("ShearX", "ShearY"):
        degrees = math.degrees(math.atan(magnitude))
        shear = [degrees, 0.0] if name == "ShearX" else [0.0, degrees]
        return TF.affine(
            images, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, interpolation=nearest, center=[0, 0]
        )
    if name in ("TranslateX", "TranslateY"):
        translate = [int(magnitude), 0] if name == "TranslateX" else [0, int(magnitude)]
        return TF.affine(images, angle=0.0, translate=translate, scale=1.0, shear=[0.0, 0.0], interpolation=nearest)
    if name == "Rotate":
        return TF.rotate(images, angle=magnitude, interpolation=nearest)
    factors = {
        "Brightness": TF.adjust_brightness,
        "Color": TF.adjust_saturation,
        "Contrast": TF.adjust_contrast,
        "Sharpness": TF.adjust_sharpness,
    }
    if name in factors:
        return factors[name](images, 1.0 + magnitude)
    if name == "Posterize":
        return TF.posterize(images, bits=int(magnitude))
    if name == "Solarize":
        return TF.solarize(images, threshold=255 * magnitude)
    return {"AutoContrast": TF.autocontrast, "Equalize": TF.equalize}[name](images)


# Ops run as a gather, found by applying torchvision's op to a probe image once: the geometric ops,
# under nearest interpolation, copy pixels and never mix them; Solarize maps each value on its own.
# On a CPU the gather is 5-10x faster than torchvision's grid_sample and its torch.where on uint8
# (Brightness and Posterize, pointwise too, are as fast as a table already).
GEOMETRIC_OPS = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
POINTWISE_OPS = ("Solarize",)


@functools.cache
def source_pixels(name: str, magnitude: float, height: int, width: int, device: torch.device) -> Tensor:
    """(H*W,) int64: the flat index of the pixel each output pixel of a geometric op takes, H*W
    for the fill; from the op applied to an image of pixel numbers."""
    numbers = torch.arange(1, height * width + 1, dtype=torch.float32, device=device).reshape(1, height, width)
    moved = apply_op(numbers, name, magnitude).flatten().long()  # 1-based source, 0 = the fill
    return torch.where(moved > 0, moved - 1, height * width)


@functools.cache
def value_table(name: str, magnitude: float, device: torch.device) -> Tensor:
    """(256,) uint8: what a pointwise op makes of each value; from the op applied to all 256."""
    return apply_op(torch.arange(256, dtype=torch.uint8, device=device).reshape(1, 1, 256), name, magnitude).flatten()


def apply_gather_op(images: Tensor, name: str, magnitude: float) -> Tensor:
    """`apply_op` of a geometric or pointwise op as its gather; images uint8 (B, C, H, W)."""
    if name in POINTWISE_OPS:
        return value_table(name, magnitude, images.device).take(images.long())
    source = source_pixels(name, magnitude, *images.shape[-2:], images.device)
    flat = F.pad(images.flatten(2), (0, 1))  # (B, C, H*W + 1): a zero pixel at index H*W
    return flat.gather(2, source.expand(*flat.shape[:2], -1)).reshape(images.shape)  # 5x index_select's speed


class AutoAugmentBatch:
    """RandAugment (Cubuk et al. 2020) or TrivialAugmentWide (Müller & Hutter 2021) on a batch,
    with the distribution of torchvision's transform applied to each image: every image draws its
    own op, magnitude bin (`magnitude`, or uniform when None) and sign in each of `num_ops` rounds.
    A round sorts the batch by what each image drew and calls torchvision's functional op once
    per group, so its cost grows with the number of distinct draws, not of images.

    images: uint8 (B, C, H, W) on any device. The draws come from the global CPU torch RNG on
    every device: the grouping needs them on the host, and a seed draws the same ops anywhere.
    """

    def __init__(self, space: dict, num_ops: int, magnitude: int | None):
        self.space, self.num_ops, self.magnitude = space, num_ops, magnitude
        self.names = list(space)
        self.has_magnitude = torch.tensor([magnitudes is not None for magnitudes, _ in space.values()])
        self.signed = torch.tensor([signed for _, signed in space.values()])
        self._magnitudes: dict[tuple[int, int], list[list[float]]] = {}

    def draw(self, batch: int) -> tuple[Tensor, Tensor, Tensor]:
        """One round's draws: op index (B,), magnitude bin (B,) and negation (B,) of each image.
        Ops without magnitudes get bin 0 and unsigned ops no negation, so equal draws group."""
        ops = torch.randint(len(self.names), (batch,))
        if self.magnitude is None:
            bins = torch.randint(NUM_MAGNITUDE_BINS, (batch,))
        else:
            bins = torch.full((batch,), self.magnitude)
        negate = torch.rand(batch) <= 0.5  # torchvision negates where rand() <= 0.5
        return ops, bins * self.has_magnitude[ops], negate & self.signed[ops]

    def apply(self, images: Tensor, ops: Tensor, bins: Tensor, negate: Tensor) -> Tensor:
        """One round: image i gets op `ops[i]` at bin `bins[i]`, negated where `negate[i]` (CPU draws)."""
        keys = (ops * NUM_MAGNITUDE_BINS + bins) * 2 + negate  # (B,) equal keys, equal transforms
        order = keys.argsort()
        distinct, counts = torch.unique_consecutive(keys[order], return_counts=True)
        magnitudes = self.magnitudes(*images.shape[-2:])
        # index_select, not images[order]: advanced indexing of a uint8 batch is ~20x slower on a CPU
        grouped = images.index_select(0, order.to(images.device)).split(counts.tolist())  # sorted by key
        outputs = []
        for group, key in zip(grouped, distinct.tolist()):
            op, bin_ = divmod(key // 2, NUM_MAGNITUDE_BINS)
            name, magnitude = self.names[op], -magnitudes[op][bin_] if key % 2 else magnitudes[op][bin_]
            gather = name in GEOMETRIC_OPS or name in POINTWISE_OPS
            outputs.append((apply_gather_op if gather else apply_op)(group, name, magnitude))
        return torch.cat(outputs).index_select(0, order.argsort().to(images.device))  # the batch's order

    def magnitudes(self, height: int, width: int) -> list[list[float]]:
        """Every op's magnitude of every bin at this image size (0.0 for the ops without one), memoised."""
        if (height, width) not in self._magnitudes:
            self._magnitudes[height, width] = [
                [0.0] * NUM_MAGNITUDE_BINS if magnitudes is None else magnitudes(height, width).tolist()
                for magnitudes, _ in self.space.values()
            ]
        return self._magnitudes[height, width]

    def __call__(self, images: Tensor) -> Tensor:
        for _ in range(self.num_ops):
            images = self.apply(images, *self.draw(len(images)))
        return images


# torchvision's defaults, as the per-image transforms v2.RandAugment() and v2.TrivialAugmentWide()
BATCH_POLICIES = {
    "randaugment": AutoAugmentBatch(RANDAUGMENT_SPACE, num_ops=2, magnitude=9),
    "trivialaugment": AutoAugmentBatch(TRIVIALAUGMENT_SPACE, num_ops=1, magnitude=None),
}


def random_crop_flip(images: Tensor, padding: int, hflip: bool) -> Tensor:
    """Batched random crop with zero padding and random horizontal flip, one draw per sample.

    images: (B, C, H, W) float, returned contiguous (the crop's indexing leaves them channels-last,
    which gives cpe's convolution gradients another layout than its weights: DDP warns and copies).
    Uses the global torch RNG of the images' device.
    """
    batch, _, height, width = images.shape
    if padding > 0:
        padded = F.pad(images, (padding, padding, padding, padding))  # (B, C, H+2p, W+2p)
        dy = torch.randint(0, 2 * padding + 1, (batch,), device=images.device)
        dx = torch.randint(0, 2 * padding + 1, (batch,), device=images.device)
        rows = dy[:, None] + torch.arange(height, device=images.device)  # (B, H)
        cols = dx[:, None] + torch.arange(width, device=images.device)  # (B, W)
        batch_index = torch.arange(batch, device=images.device)[:, None, None]
        # advanced indexing on dims 0, 2, 3 -> (B, H, W, C)
        images = padded.permute(0, 2, 3, 1)[batch_index, rows[:, :, None], cols[:, None, :]]
        images = images.permute(0, 3, 1, 2).contiguous()  # (B, C, H, W)
    if hflip:
        flip = torch.rand(batch, device=images.device) < 0.5
        images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    return images


RRC_TRIES = 10  # torchvision's RandomResizedCrop draws up to 10 boxes, then falls back to a central crop


def random_resized_boxes(
    batch: int, height: int, width: int, scale, ratio, device: torch.device | None = None
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per image, the box of torchvision v2 `RandomResizedCrop.make_params` on an H x W image: area
    share uniform in `scale`, aspect ratio (width / height) log-uniform in `ratio`, the first of 10
    draws that fits, at a uniform position; else the central crop of the ratio's nearest bound.
    Returns top, left, box height, box width: int64 (B,) each. Uses the global RNG of `device`."""
    area = torch.empty(batch, RRC_TRIES, device=device).uniform_(*scale) * (height * width)
    aspect = torch.empty(batch, RRC_TRIES, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1])).exp()
    box_w, box_h = (area * aspect).sqrt().round(), (area / aspect).sqrt().round()  # round half to even, as round()
    fits = (box_w > 0) & (box_w <= width) & (box_h > 0) & (box_h <= height)  # (B, tries)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first try that fits (0 where none does)
    box_h, box_w = box_h.gather(1, first)[:, 0].long(), box_w.gather(1, first)[:, 0].long()
    top = (torch.rand(batch, device=device) * (height - box_h + 1)).long().clamp_(max=height - box_h)
    left = (torch.rand(batch, device=device) * (width - box_w + 1)).long().clamp_(max=width - box_w)
    if width / height < ratio[0]:  # the fallback: the whole image, cut to the ratio's range
        fallback_h, fallback_w = round(width / ratio[0]), width
    elif width / height > ratio[1]:
        fallback_h, fallback_w = height, round(height * ratio[1])
    else:
        fallback_h, fallback_w = height, width
    fallback = ~fits.any(dim=1)
    box_h, box_w = box_h.masked_fill(fallback, fallback_h), box_w.masked_fill(fallback, fallback_w)
    top = top.masked_fill(fallback, (height - fallback_h) // 2)
    left = left.masked_fill(fallback, (width - fallback_w) // 2)
    return top, left, box_h, box_w


def resized_crop(images: Tensor, top: Tensor, left: Tensor, box_h: Tensor, box_w: Tensor) -> Tensor:
    """Each image's box resized to the images' size, bilinear, as torchvision's `resized_crop` of the
    box (align_corners=False, the box's edge pixels repeated beyond it). images: float (B, C, H, W).

    One `grid_sample` over the batch, not `resized_crop` per image: every image has its own box. A
    box never exceeds the image, so the resize only enlarges and torchvision's antialias is a no-op."""
    height, width = images.shape[-2:]

    def source(start: Tensor, extent: Tensor, size: int) -> Tensor:  # (B, size): the pixel coordinate sampled
        centres = torch.arange(size, device=images.device, dtype=images.dtype) + 0.5
        coords = start[:, None] + centres * (extent[:, None] / size) - 0.5
        return torch.minimum(torch.maximum(coords, start[:, None]), (start + extent - 1)[:, None])

    rows = source(top.to(images.dtype), box_h.to(images.dtype), height) * (2 / max(height - 1, 1)) - 1  # (B, H)
    cols = source(left.to(images.dtype), box_w.to(images.dtype), width) * (2 / max(width - 1, 1)) - 1  # (B, W)
    # grid (B, H, W, 2): (x, y) in [-1, 1], corners aligned to the first and last pixel centres
    grid = torch.stack(torch.broadcast_tensors(cols[:, None, :], rows[:, :, None]), dim=-1)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=True)


def random_resized_crop(images: Tensor, scale, ratio) -> Tensor:
    """Batched random-resized crop (torchvision v2 `RandomResizedCrop` to the images' own size, one
    draw per image, see `random_resized_boxes`) of float images (B, C, H, W); uses the global torch
    RNG of the images' device."""
    return resized_crop(images, *random_resized_boxes(len(images), *images.shape[-2:], scale, ratio, images.device))
