"""Augmentation: the policy names, the per-sample policies that run in the DataLoader workers
(RandAugment, TrivialAugment) and the batched random crop + flip that runs on the training
device."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

AUGMENTS = ("none", "standard", "randaugment", "trivialaugment")
PER_SAMPLE_AUGMENTS = ("randaugment", "trivialaugment")


def sample_transform(augment: str):
    """The per-sample policy of `augment` on uint8 images (DataLoader workers), before the batched
    crop/flip; None for the policies without one."""
    from torchvision.transforms import v2

    policies = {"randaugment": v2.RandAugment, "trivialaugment": v2.TrivialAugmentWide}
    return policies.get(augment, lambda: None)()


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
