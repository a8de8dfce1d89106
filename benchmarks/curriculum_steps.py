"""Training step time of one model across a resolution curriculum's sizes, in one process: at the
full size fresh, then at each smaller size, then at the full size again. It tells whether steps at
other shapes leave the full-size step slower (allocator, kernel caches). Not a test: it prints figures.

    python benchmarks/curriculum_steps.py                         # cpe, vit_800k, batch 64, 1 thread, 16/24/32 px
    python benchmarks/curriculum_steps.py --pos 2d_sin --sizes 16,24,32 --steps 40
"""

from __future__ import annotations

import argparse

import torch
from throughput import MODEL, make_steps, use_model_size, window

import vitpos
from vitpos.precision import bf16_supported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pos", default="cpe")
    parser.add_argument("--model", default="vit_800k", help="the size of configs/model/<name>.yaml")
    parser.add_argument("--sizes", default="16,24,32", help="the curriculum's sizes, the last the full size")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40, help="steps per timed window")
    parser.add_argument("--threads", type=int, default=1, help="as one process of trainer=cpu_ddp")
    args = parser.parse_args()
    use_model_size(parser, args.model)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device, bf16 = torch.device("cpu"), bf16_supported("cpu")
    sizes = [int(size) for size in args.sizes.split(",")]
    model = vitpos.create_model(args.pos, **{**MODEL, "img_size": sizes[-1]})  # one model through every size

    def ms_per_step(size: int) -> float:
        train_step, _ = make_steps(model, args, device, bf16, img_size=size)
        train_step()  # untimed: the window's optimizer state
        return window(train_step, args.steps, device) / args.steps * 1000

    window(make_steps(model, args, device, bf16, img_size=sizes[-1])[0], 5, device)  # warm-up
    rows = [(f"{sizes[-1]} px, fresh", ms_per_step(sizes[-1]))]
    rows += [(f"{size} px", ms_per_step(size)) for size in sizes[:-1]]
    rows += [(f"{sizes[-1]} px, after the others", ms_per_step(sizes[-1]))]
    print(
        f"{args.pos}, {args.model}, batch {args.batch}, {args.threads} thread(s), {'bf16 autocast' if bf16 else 'fp32'}"
    )
    for name, ms in rows:
        print(f"  {name:<26} {ms:7.1f} ms/step")


if __name__ == "__main__":
    main()
