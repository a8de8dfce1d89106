"""Training step time of one model across a resolution curriculum's sizes, in one process: at the
full size fresh, then at each smaller size, then at the full size again. It tells whether steps at
other shapes leave the full-size step slower (allocator, kernel caches). Not a test: it prints figures.

    python benchmarks/curriculum_steps.py                         # cpe, vit_800k, batch 64, 1 thread, 16/24/32 px
    python benchmarks/curriculum_steps.py --pos 2d_sin --sizes 16,24,32 --steps 40
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from vitpos.config import CONFIG_DIR
from vitpos.model import MODEL_ARGS, create_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pos", default="cpe")
    parser.add_argument("--model", default="vit_800k", help="configs/model/<name>.yaml")
    parser.add_argument("--sizes", default="16,24,32", help="the curriculum's sizes, the last the full size")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=40, help="steps per timed window")
    parser.add_argument("--threads", type=int, default=1, help="as one process of trainer=cpu_ddp")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sizes = [int(size) for size in args.sizes.split(",")]
    config = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "model" / f"{args.model}.yaml"))
    kwargs = {key: value for key, value in config.items() if key in MODEL_ARGS}  # not `compile`: eager steps
    model = create_model(args.pos, sizes[-1], **kwargs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def ms_per_step(size: int, steps: int) -> float:
        images, labels = torch.randn(args.batch, 3, size, size), torch.randint(10, (args.batch,))
        start = time.perf_counter()
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return (time.perf_counter() - start) / steps * 1000

    ms_per_step(sizes[-1], 5)  # warm-up
    rows = [(f"{sizes[-1]} px, fresh", ms_per_step(sizes[-1], args.steps))]
    rows += [(f"{size} px", ms_per_step(size, args.steps)) for size in sizes[:-1]]
    rows += [(f"{sizes[-1]} px, after the others", ms_per_step(sizes[-1], args.steps))]
    print(f"{args.pos}, {args.model}, batch {args.batch}, {args.threads} thread(s), bf16 autocast")
    for name, ms in rows:
        print(f"  {name:<26} {ms:7.1f} ms/step")


if __name__ == "__main__":
    main()
