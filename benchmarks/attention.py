"""vitpos's two attention paths against each other (`attn_impl=math`: matmul-softmax-matmul;
`sdpa`: torch's fused kernel, a logit bias passed as a float mask), per scheme, token grid and kind
of step, with the path `attn_impl=auto` takes: the measurement behind `auto`'s rule
(docs/PERFORMANCE.md). Not a test: it prints figures and writes JSON.

    python benchmarks/attention.py                                    # vit_800k, 8x8 to 24x24 grids
    python benchmarks/attention.py --schemes none,rel_bias --img-sizes 32,64 --batch 64

Each figure is images/s, the median over `--repeats` windows of `--steps` steps after warm-up:
`train` is forward, backward and AdamW step, `eval` an inference-mode forward, both in the
precision the CPU/GPU trains in (bf16 autocast where supported) and on the model's threads.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from throughput import MODEL, make_steps, use_model_size, window, write_results

import vitpos
from vitpos.precision import bf16_supported, cpu_name


def rate(step, args, device: torch.device) -> float:
    for _ in range(args.warmup):
        step()
    return statistics.median(args.batch * args.steps / window(step, args.steps, device) for _ in range(args.repeats))


def auto_path(model: vitpos.VisionTransformer, device: torch.device, kind: str) -> str:
    """The path `attn_impl=auto` takes for this model and kind of step."""
    with torch.set_grad_enabled(kind == "train"):
        return "sdpa" if model.blocks[0].attn.uses_sdpa(device, model.pos.uses("bias")) else "math"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_800k", help="the size of configs/model/<name>.yaml")
    parser.add_argument("--schemes", default="none,1d_learned,rel_bias,rope_axial")
    parser.add_argument("--img-sizes", default="32,64,96", help="input sizes in px (grids of the model's patch)")
    parser.add_argument("--kinds", default="train,eval")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed window")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/attention_<device>.json)")
    args = parser.parse_args()
    use_model_size(parser, args.model)
    kinds = args.kinds.split(",")
    if not set(kinds) <= {"train", "eval"}:
        parser.error(f"--kinds {args.kinds}: each kind is train or eval")
    device = torch.device(args.device)
    bf16 = bf16_supported(device.type)
    sizes = [int(size) for size in args.img_sizes.split(",")]
    print(
        f"{args.model}, batch {args.batch}, {'bf16 autocast' if bf16 else 'fp32'} on {device} "
        f"({cpu_name()}, {torch.get_num_threads()} threads)\n"
    )
    print("| scheme | grid | step | math img/s | sdpa img/s | sdpa / math | auto takes |")
    print("|---|---|---|---:|---:|---:|---|")
    rows = []
    for pos in args.schemes.split(","):
        auto = {kind: auto_path(vitpos.create_model(pos, **MODEL), device, kind) for kind in kinds}
        for size in sizes:
            models = {impl: vitpos.create_model(pos, attn_impl=impl, **MODEL) for impl in ("math", "sdpa")}
            steps = {impl: make_steps(model, args, device, bf16, img_size=size) for impl, model in models.items()}
            grid = f"{size // MODEL['patch_size']}x{size // MODEL['patch_size']}"
            for kind in kinds:
                index = ("train", "eval").index(kind)  # make_steps gives (train_step, eval_step)
                rates = {impl: rate(step[index], args, device) for impl, step in steps.items()}
                rows.append(
                    dict(
                        pos=pos,
                        grid=grid,
                        kind=kind,
                        auto=auto[kind],
                        math_img_s=rates["math"],
                        sdpa_img_s=rates["sdpa"],
                    )
                )
                print(
                    f"| {pos} | {grid} | {kind} | {rates['math']:.1f} | {rates['sdpa']:.1f} | "
                    f"{rates['sdpa'] / rates['math']:.2f}x | {auto[kind]} |",
                    flush=True,
                )
    write_results(Path(args.out or f"benchmarks/results/attention_{device.type}.json"), args, device, bf16, rows=rows)


if __name__ == "__main__":
    main()
