"""RandAugment and TrivialAugment batched on the training device (`vitpos.data.AutoAugmentBatch`,
what `data.augment=randaugment|trivialaugment` runs) against torchvision's transform applied to
each image in DataLoader workers (the input path these policies used to take); `--policies rrc`:
the batched random-resized crop of `data.augment=rrc` against torchvision's RandomResizedCrop.
Not a test: it prints figures and writes JSON.

    python benchmarks/augment.py                                   # batch 128, 32 px, 4 workers
    python benchmarks/augment.py --out benchmarks/results/augment_cpu.json
    python benchmarks/augment.py --policies rrc

Each figure is uint8 augmented images/s (what each path hands to the crop, flip and normalisation
they share), the median over `--rounds` rounds of `--batches` batches; the ratio is the median of
the rounds' ratios. A round times the worker path once its workers are up, shuts them down, then
times the batched policy, so the two never share the cores. The batched policy runs on `--threads`
threads (1: as in each process of trainer=cpu_ddp), the workers each on one (DataLoader's rule),
all on CIFAR-shaped random images.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision.transforms import v2

from vitpos.data import BATCH_POLICIES, UInt8ImageDataset, random_resized_crop
from vitpos.precision import cpu_name

RRC_SCALE, RRC_RATIO = (0.35, 1.0), (3 / 4, 4 / 3)  # the data configs' rrc_scale and rrc_ratio
PER_IMAGE = {  # torchvision's defaults, for an image side of `size`
    "randaugment": lambda size: v2.RandAugment(),
    "trivialaugment": lambda size: v2.TrivialAugmentWide(),
    "rrc": lambda size: v2.RandomResizedCrop(size, scale=RRC_SCALE, ratio=RRC_RATIO),
}
BATCHED = {  # rrc runs on the float batch the resize hands it: the conversion is timed with it
    **BATCH_POLICIES,
    "rrc": lambda images: random_resized_crop(images.float().div_(255), RRC_SCALE, RRC_RATIO),
}


class PerImage(UInt8ImageDataset):
    """The worker path: torchvision's transform on each image as the DataLoader's workers index it."""

    def __init__(self, images: torch.Tensor, transform):
        super().__init__(images, torch.zeros(len(images), dtype=torch.long))
        self.transform = transform

    def __getitem__(self, index: int):
        image, label = super().__getitem__(index)
        return self.transform(image), label


def worker_rate(images: torch.Tensor, policy: str, args) -> float:
    loader = DataLoader(PerImage(images, PER_IMAGE[policy](args.size)), batch_size=args.batch, num_workers=args.workers)
    batches = iter(loader)
    for _ in range(2 * args.workers):  # every worker has started and handed in a batch
        next(batches)
    start = time.perf_counter()
    for _ in range(args.batches):
        next(batches)
    seconds = time.perf_counter() - start
    del batches  # shuts the workers down before the batched policy is timed
    return args.batch * args.batches / seconds


def batched_rate(images: torch.Tensor, policy: str, args, device: torch.device) -> float:
    augment, images = BATCHED[policy], images.to(device)
    augment(images[: args.batch])  # warm-up: caches the gathers the draws need first
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for index in range(args.batches):
        augment(images[index * args.batch : (index + 1) * args.batch])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return args.batch * args.batches / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", default="randaugment,trivialaugment")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--size", type=int, default=32, help="image side in px")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers of the per-image path")
    parser.add_argument("--batches", type=int, default=40, help="batches per timed window")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the batched policy")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="JSON path (default: print only)")
    args = parser.parse_args()
    policies = args.policies.split(",")
    if not set(policies) <= set(PER_IMAGE):
        parser.error(f"--policies {args.policies}: each is one of {', '.join(PER_IMAGE)}")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: the old setting
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch * (args.batches + 1 + 2 * args.workers), 3, args.size, args.size)
    images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    print(
        f"batch {args.batch}, {args.size} px; batched on {device} ({args.threads} threads) vs "
        f"{args.workers} workers ({cpu_name()})\n"
    )
    print("| policy | round | workers img/s | batched img/s | batched / workers |")
    print("|---|---:|---:|---:|---:|")
    rows = []
    for policy in policies:
        for round_ in range(1, args.rounds + 1):
            workers, batched = worker_rate(images, policy, args), batched_rate(images, policy, args, device)
            rows.append(dict(policy=policy, round=round_, workers_img_s=workers, batched_img_s=batched))
            print(f"| {policy} | {round_} | {workers:,.0f} | {batched:,.0f} | {batched / workers:.1f}x |")
        mine = [row for row in rows if row["policy"] == policy]
        workers = statistics.median(row["workers_img_s"] for row in mine)
        batched = statistics.median(row["batched_img_s"] for row in mine)
        ratio = statistics.median(row["batched_img_s"] / row["workers_img_s"] for row in mine)  # pairs back to back
        print(f"| {policy} | median | {workers:,.0f} | {batched:,.0f} | **{ratio:.1f}x** |")
    if args.out:
        machine = dict(device=str(device), processor=cpu_name(), threads=args.threads, torch=torch.__version__)
        settings = dict(batch=args.batch, size=args.size, workers=args.workers, batches=args.batches)
        Path(args.out).write_text(json.dumps({**machine, **settings, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
