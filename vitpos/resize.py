"""Checkpoints across resolutions: rebuild a model from a checkpoint alone and convert its
positional state to another input size with the scheme's own resize rule."""

from __future__ import annotations

from pathlib import Path

import torch
from timm.layers import to_2tuple

from .errors import ConfigError
from .model import VisionTransformer, create_model
from .runs import checkpoint_step, find_checkpoints


def checkpoint_file(spec: str | Path) -> Path:
    """The checkpoint `spec` names: a file, or a run folder (`<run>` or `<run>/version_N`) for its
    best checkpoint (`runs.best_checkpoint`); a folder holding several runs is an error."""
    path = Path(spec).expanduser()
    if not path.is_dir():
        return path
    found = find_checkpoints(path)
    if len(found) > 1:
        raise ConfigError(f"{path} holds {len(found)} runs' checkpoints; pass one run's folder or a .ckpt file")
    return found[0]


def read_checkpoint(path: str | Path) -> dict:
    """Load a vitpos (Lightning) checkpoint on the CPU, with one-line errors for the usual problems;
    a run folder stands for its best checkpoint (`checkpoint_file`)."""
    path = checkpoint_file(path)
    if not path.is_file():
        raise ConfigError(
            f"checkpoint not found: {path}; pass a run folder or the path of a .ckpt written by "
            f"train.py (logs/<run>/version_N/checkpoints/)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # unpickling garbage raises almost any exception type
        others = sorted((p for p in path.parent.glob("*.ckpt") if p != path), key=checkpoint_step)
        instead = (
            f"use {others[-1]} beside it (to continue a run from it: resume={others[-1]})"
            if others
            else "no other checkpoint is beside it: train again (without resume)"
        )
        raise ConfigError(
            f"cannot read checkpoint {path} (corrupt or truncated? {type(error).__name__}); {instead}"
        ) from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint.get("hyper_parameters", {}):
        raise ConfigError(
            f"{path} is not a vitpos checkpoint (no model hyper-parameters); use a .ckpt written by train.py"
        )
    return checkpoint


def model_state(checkpoint: dict) -> dict:
    """The ViT's state dict inside a Lightning checkpoint (keys without their prefix): the weight EMA's
    (`ema.module.`) where the run kept one (`ema_decay`), the ones it validated and tested, else `model.`."""
    state = checkpoint["state_dict"]
    prefix = "ema.module." if any(k.startswith("ema.module.") for k in state) else "model."
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def load_model(
    ckpt_path: str | Path,
    img_size: int | tuple[int, int] | None = None,
    resize_mode: str | None = None,
    attn_temperature: str | None = None,
) -> VisionTransformer:
    """Rebuild the model of a checkpoint (no config needed), converted to `img_size` when given.

    Args:
        ckpt_path: a checkpoint written by `train.py`.
        img_size: new input size (int or (H, W)); the positional state is converted with the
            scheme's resize rule. None keeps the training size.
        resize_mode: the rule's mode (e.g. `bicubic` for learned tables, `extrapolate` or
            `interpolate` for sin-cos, `ntk` / `yarn` for 2d_sin and RoPE); None keeps the scheme's
            configured mode.
        attn_temperature: `none` or `log` (logits scaled by log(N) / log(N_train) on N tokens; see
            `VisionTransformer`); None keeps the checkpoint's.
    """
    return model_from_checkpoint(read_checkpoint(ckpt_path), img_size, resize_mode, attn_temperature)


def model_from_checkpoint(
    checkpoint: dict,
    img_size: int | tuple[int, int] | None = None,
    resize_mode: str | None = None,
    attn_temperature: str | None = None,
) -> VisionTransformer:
    """`load_model` for a checkpoint already read with `read_checkpoint`."""
    model = create_model(**checkpoint["hyper_parameters"]["model"])
    model.load_state_dict(model_state(checkpoint))
    if attn_temperature is not None:
        model.set_attn_temperature(attn_temperature)
    if img_size is not None or resize_mode is not None:
        size = to_2tuple(img_size) if img_size is not None else model.config["img_size"]
        model.resize(size, resize_mode)
    return model.eval()
