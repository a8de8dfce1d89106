"""The positional-encoding debugging checklist as a command:

    python -m vitpos.diagnose pos=<scheme> [img_size=32] [dim=192 depth=6 num_heads=3 ...]
    python -m vitpos.diagnose ckpt=<checkpoint or run folder> [img_size=...]

Builds the model (or loads `ckpt`: a file, or a run folder for its best checkpoint, as evaluate
takes) and reports, for one random batch at `img_size` (default: the checkpoint's own size, else 32):
- the grid it assumes for the input size (never inferred from a token count);
- whether the position signal reaches the output: logits before vs after shuffling the patches
  of the images (they must differ, except for `none`);
- which positional tensors are fixed buffers and which are learned parameters, and whether every
  learned one receives a gradient;
- for additive schemes, the ratio of the positional table's norm to the patch tokens' norm
  after the `add` hook (a tiny ratio means positions are drowned out, a huge one that content is);
- the conversions the scheme offers for another resolution (its resize modes, the attention
  temperature) and whether it can train with fuzzy positions.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from timm.layers import to_2tuple

from .cli import parse_options, refuse_beside_ckpt
from .errors import ConfigError, VitposError
from .errors import report as report_error
from .model import MODEL_ARGS, VisionTransformer, create_model
from .options import Option, check_options
from .pos import HOOKS
from .resize import load_model
from .runs import find_checkpoints

SHUFFLE_NOISE = 1e-6  # relative logit change that fp32 round-off alone produces (none: ~1e-7)
DEFAULTS = dict(pos=None, ckpt=None, img_size=None, in_chans=3, num_classes=10, batch=8, seed=0)
OPTIONS = {"batch": Option("count", "batch=8"), "seed": Option("seed", "seed=0")}


def shuffle_patches(images: torch.Tensor, patch: int, permutation: torch.Tensor) -> torch.Tensor:
    """Images (B, C, H, W) with their patch x patch tiles permuted (row-major tile order)."""
    batch, chans, height, width = images.shape
    rows, cols = height // patch, width // patch
    tiles = images.reshape(batch, chans, rows, patch, cols, patch).permute(0, 2, 4, 1, 3, 5)  # (B, r, c, C, p, p)
    tiles = tiles.reshape(batch, rows * cols, chans, patch, patch)[:, permutation]
    tiles = tiles.reshape(batch, rows, cols, chans, patch, patch).permute(0, 3, 1, 4, 2, 5)  # (B, C, r, p, c, p)
    return tiles.reshape(batch, chans, height, width)


def diagnose(model: VisionTransformer, img_size, batch: int = 8, seed: int = 0) -> dict:
    """The checklist's findings for `model` at `img_size` (see the module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    height, width = to_2tuple(img_size)
    grid = model.grid_for((height, width))
    images = torch.randn(batch, model.config["in_chans"], height, width, generator=generator)
    permutation = torch.randperm(grid[0] * grid[1], generator=generator)
    model.eval()
    with torch.no_grad():
        logits = model(images)
        shuffled = model(shuffle_patches(images, model.patch_size, permutation))
    change = ((shuffled - logits).norm() / logits.norm().clamp_min(1e-12)).item()

    model.train()
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(images), torch.arange(batch) % model.config["num_classes"]).backward()
    learned = {
        name: (param.grad is not None and param.grad.abs().max().item() > 0)
        for name, param in model.pos.named_parameters()
    }
    fixed = [name for name, _ in model.pos.named_buffers()]

    ratio = None
    if model.pos.uses("add"):
        with torch.no_grad():
            tokens = model.patch_embed(images).flatten(1, 2)  # (B, N, D)
            table = model.pos.add(torch.zeros_like(tokens), grid)
            ratio = (table.norm(dim=-1).mean() / tokens.norm(dim=-1).mean()).item()
    return dict(
        scheme=model.config["pos"],
        grid=grid,
        built_grid=model.grid,
        shuffle_change=change,
        learned=learned,
        fixed=fixed,
        pos_to_token_norm=ratio,
        hooks=[hook for hook in HOOKS if model.pos.uses(hook)],
        resize_modes=list(model.pos.resize_modes),
        resize_mode=model.pos.resize_mode,
        attn_temperature=model.attn_temperature,
        fuzzy=model.pos.fuzzy,
        fuzzy_ok=model.pos.supports_fuzzy,
    )


def report(findings: dict) -> str:
    lines = [
        f"scheme {findings['scheme']}: hooks {', '.join(findings['hooks']) or 'none'}",
        f"grid: {findings['grid'][0]} x {findings['grid'][1]} patches for this input "
        f"(built for {findings['built_grid'][0]} x {findings['built_grid'][1]})",
    ]
    change = findings["shuffle_change"]
    reaches = change > SHUFFLE_NOISE
    verdict = "ok" if reaches == bool(findings["hooks"]) else "PROBLEM"  # a scheme with no hook must not reach
    strength = " (weak: typical of learned tables at initialisation)" if reaches and change < 1e-3 else ""
    lines.append(
        f"[{verdict}] position signal {'reaches' if reaches else 'does not reach'} the output: shuffling "
        f"the patches changes the logits by {100 * change:.3g}%{strength}"
    )
    for name, has_grad in findings["learned"].items():
        lines.append(
            f"[{'ok' if has_grad else 'PROBLEM'}] learned pos.{name} {'receives' if has_grad else 'gets no'} gradient"
        )
    for name in findings["fixed"]:
        lines.append(f"[ok] fixed pos.{name} is a buffer (not trained)")
    if findings["pos_to_token_norm"] is not None:
        ratio = findings["pos_to_token_norm"]
        verdict = "ok" if 0.01 <= ratio <= 10 else "PROBLEM"
        lines.append(f"[{verdict}] positional / patch-token norm after `add`: {ratio:.3g}")
    modes = findings["resize_modes"]
    lines.append(
        f"conversions to another resolution: resize_mode={'|'.join(modes)} (now {findings['resize_mode']})"
        if modes
        else "conversions to another resolution: none needed (no positional state to resize)"
    )
    lines.append(
        f"  attn_temperature=none|log (now {findings['attn_temperature']}); evaluate with "
        f"resize_mode=best to pick on the validation split"
    )
    lines.append(
        f"fuzzy positions in training: {'on' if findings['fuzzy'] else 'off'}"
        + ("" if findings["fuzzy_ok"] else " (not offered: no continuous coordinates)")
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    try:
        options = parse_options(argv, DEFAULTS, __doc__, extra_keys=MODEL_ARGS)
        check_options(options, OPTIONS)
        refuse_beside_ckpt(argv, {"pos", *MODEL_ARGS})
        model_args = {k: v for k, v in OmegaConf.to_container(options).items() if k in MODEL_ARGS - set(DEFAULTS)}
        if options.ckpt:
            model = load_model(find_checkpoints(options.ckpt)[0])
        elif options.pos:
            model = create_model(
                options.pos,
                img_size=options.img_size or 32,
                num_classes=options.num_classes,
                in_chans=options.in_chans,
                **model_args,
            )
        else:
            raise ConfigError("pass pos=<scheme> (or ckpt=<checkpoint>), e.g. python -m vitpos.diagnose pos=2d_sin")
        torch.manual_seed(options.seed)
        size = options.img_size or model.config["img_size"]
        print(report(diagnose(model, size, options.batch, options.seed)))
    except VitposError as error:
        return report_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
