"""vitpos.evaluate on a model trained below the data's own resolution: at the native size it sees
the stored pixels, below it their once-downsampled images, above it their upsampling, and every
row, column and console line says which."""

from __future__ import annotations

import csv

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

import vitpos.evaluate
from vitpos import create_model
from vitpos.data import SyntheticDataModule

DATA = dict(_target_="vitpos.data.SyntheticDataModule", batch_size=32, num_train=128, num_test=40, val_size=32, seed=0)


def test_a_16px_model_meets_the_native_32px_pixels_at_32px(tmp_path, monkeypatch, capsys):
    model = create_model(
        img_size=16, patch_size=4, dim=16, depth=1, num_heads=2, mlp_ratio=2.0, num_classes=4, in_chans=3, pos="2d_sin"
    )
    data = dict(DATA, data_dir=str(tmp_path / "data"), img_size=16, augment="none")
    checkpoint = {
        "hyper_parameters": {"model": model.config, "data": data},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
    }
    torch.save(checkpoint, tmp_path / "low.ckpt")
    seen: dict[int, list[torch.Tensor]] = {}  # height -> the batches the model was given

    def recording(*args, **kwargs):
        converted = model_from_checkpoint(*args, **kwargs)
        converted.register_forward_pre_hook(
            lambda _, inputs: seen.setdefault(inputs[0].shape[-2], []).append(inputs[0])
        )
        return converted

    model_from_checkpoint = vitpos.evaluate.model_from_checkpoint
    monkeypatch.setattr(vitpos.evaluate, "model_from_checkpoint", recording)
    out = tmp_path / "eval"
    args = [f"ckpt={tmp_path / 'low.ckpt'}", "img_sizes=[16,32,48]", f"out={out}", "device=cpu", "batch_size=16"]
    assert vitpos.evaluate.main(args) == 0

    native = SyntheticDataModule(**{k: v for k, v in data.items() if k != "_target_"} | {"img_size": 32})
    native.setup()
    stored = native.test_set.images.float() / 255  # the 32 px test images as the data set holds them
    mean = torch.tensor(native.mean)[None, :, None, None]
    std = torch.tensor(native.std)[None, :, None, None]
    given = {height: torch.cat(batches) * std + mean for height, batches in seen.items()}
    assert torch.equal((given[32] * 255).round().to(torch.uint8), native.test_set.images)  # exactly the stored pixels
    torch.testing.assert_close(given[32], stored, atol=1e-6, rtol=0)
    downsampled = TF.resize(native.test_set.images, [16, 16], InterpolationMode.BICUBIC, antialias=True)
    torch.testing.assert_close(given[16], downsampled.float() / 255, atol=1e-6, rtol=0)
    upsampled = F.interpolate(stored, size=(48, 48), mode="bicubic", antialias=True, align_corners=False).clamp(0, 1)
    torch.testing.assert_close(given[48], upsampled, atol=1e-5, rtol=0)

    with open(out / "resolution.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["img_size"], row["pixels"]) for row in rows] == [
        ("16px", "downsampled"),
        ("32px", "native"),
        ("48px", "upsampled"),
    ]
    header = (out / "resolution.md").read_text().splitlines()[0]
    assert header == "| run | pos | trained at | 16px downsampled | 32px native | 48px upsampled |"
    printed = capsys.readouterr()
    assert "at 16px (downsampled from 32px), test split" in printed.err
    assert "at 32px (native pixels), test split" in printed.err
    assert "at 48px (upsampled from 32px), test split" in printed.err
    assert [line.split()[3] for line in printed.out.splitlines() if " test acc " in line] == [
        "downsampled",
        "native",
        "upsampled",
    ]
