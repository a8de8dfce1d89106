"""The paths that differ on a GPU, on every device this machine has (CPU always, CUDA when visible;
`scripts/gpu_check.sh` runs this file on a GPU): bf16 attention with a bias mask through SDPA
against the plain math path, the rotary autograd on the device, device-resident batches, the
batched RandAugment / TrivialAugment, and a short Lightning fit on the device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import compose_config

import vitpos
from vitpos.data import BATCH_POLICIES, DeviceBatches, ShardedSampler
from vitpos.data.augment import apply_op
from vitpos.train import train

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SMALL = dict(dim=32, depth=2, num_heads=2, patch_size=4, num_classes=10, in_chans=3)
pytestmark = pytest.mark.usefixtures("one_thread")


def bf16_on(device: str) -> bool:
    return device == "cuda" and torch.cuda.is_bf16_supported()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_sdpa_and_math_attention_agree_with_gradients(device, pos):
    """The fused kernel (bias as attn_mask, rotated q/k) computes what the math path computes, in
    the forward pass and in the gradients of the positional parameters (bf16 autocast on CUDA)."""
    outputs, grads = {}, {}
    for impl in ("sdpa", "math"):
        torch.manual_seed(0)
        model = vitpos.create_model(pos, img_size=24, attn_impl=impl, **SMALL).to(device)
        x = torch.randn(4, 3, 24, 32, generator=torch.Generator().manual_seed(1)).to(device)  # another grid than built
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16_on(device)):
            logits = model(x).float()
        F.cross_entropy(logits, torch.arange(4, device=device)).backward()
        outputs[impl] = logits
        grads[impl] = {
            n: p.grad.float() for n, p in model.named_parameters() if n.startswith("pos.") and p.grad is not None
        }
    tolerance = 3e-2 if bf16_on(device) else 1e-4
    torch.testing.assert_close(outputs["sdpa"], outputs["math"], atol=tolerance, rtol=tolerance)
    assert grads["sdpa"].keys() == grads["math"].keys()
    for name in grads["math"]:
        scale = grads["math"][name].abs().max().clamp(min=1e-6)
        assert (grads["sdpa"][name] - grads["math"][name]).abs().max() / scale < 10 * tolerance, name


@pytest.mark.parametrize("device", DEVICES)
def test_device_batches_stay_on_the_device_in_sampler_order(device):
    images = torch.arange(10, dtype=torch.uint8)[:, None, None, None].expand(10, 1, 2, 2).contiguous()
    labels = torch.arange(10)
    sampler = ShardedSampler(10, shuffle=True, seed=5)
    batches = list(DeviceBatches(images.to(device), labels.to(device), sampler, batch_size=4, drop_last=True))
    assert len(batches) == 2 and all(b[0].device.type == device for b in batches)
    assert torch.cat([b[1] for b in batches]).cpu().tolist() == list(sampler)[:8]
    assert all(torch.equal(b[0][:, 0, 0, 0].long(), b[1]) for b in batches)  # images travel with their labels


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("policy", list(BATCH_POLICIES))
def test_batched_augmentation_on_the_device_is_torchvisions_op_on_each_image(device, policy):
    """On the device the batch and its images live on, a round of mixed draws gives each image
    torchvision's op for its draw, run there image by image (the gathers are found there too)."""
    augment = BATCH_POLICIES[policy]
    images = torch.randint(0, 256, (96, 3, 24, 20), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    images = images.to(device)
    torch.manual_seed(0)
    ops, bins, negate = augment.draw(len(images))
    out = augment.apply(images, ops, bins, negate)
    assert out.device.type == device
    magnitudes = augment.magnitudes(24, 20)
    for i, image in enumerate(images):
        value = magnitudes[ops[i]][bins[i]]
        expected = apply_op(image[None], augment.names[ops[i]], -value if negate[i] else value)[0]
        assert torch.equal(out[i], expected), (augment.names[ops[i]], int(bins[i]), bool(negate[i]))


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_short_fit_on_the_device_with_device_resident_data(tmp_path, device):
    accelerator = "gpu" if device == "cuda" else "cpu"
    cfg = compose_config(
        [
            "data=synthetic",
            "model=vit_70k",
            "pos=rope_mixed",
            "data.num_train=640",
            "data.num_test=128",
            "data.val_size=128",
            "data.batch_size=64",
            "trainer.max_steps=4",
            "data.device_resident=true",
            "callbacks.figures=null",
        ],
        tmp_path,
    )
    cfg.trainer.accelerator = accelerator
    metrics = train(cfg)
    assert torch.isfinite(torch.tensor(metrics["train/loss"])) and 0.0 <= metrics["test/acc"] <= 1.0
    last = torch.load(Path(metrics["log_dir"]) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4
    # the position Lightning saved is the device batches' own: 4 steps x 64 images into epoch 0
    assert {"epoch": 0, "consumed": 256} in last["loops"]["fit_loop"]["state_dict"]["combined_loader"]
