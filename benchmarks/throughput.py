"""Training throughput of vitpos against timm's VisionTransformer, in one process, at identical
config, precision and batch (issue: "Speed"). Not a test: it prints figures and writes JSON.

    python benchmarks/throughput.py                         # ViT-Ti/4 @ 32 px, batch 256, bf16 where supported
    python benchmarks/throughput.py --batch 128 --steps 10 --out benchmarks/results/cpu.json
    python benchmarks/throughput.py --model vit_800k --schemes 1d_learned --loader-images 0   # another size

Measures, each as the median over `--repeats` rounds of `--steps` steps after warm-up, the rounds
taken round-robin over all models (so a drift of the machine's speed affects every model alike):
- training images/s (forward, backward, AdamW step) of timm's default ViT (fused SDPA attention),
  of the same timm model with its plain matmul-softmax attention (`fused_attn=False`, a reference)
  and of vitpos with `pos=1d_learned` (the like-for-like case), then every vitpos scheme, also
  relative to `pos=none`;
- eval images/s, peak memory of the training steps (CUDA: max allocated; CPU: RSS growth during
  the warm-up steps, sampled);
- loader images/s of both input paths (the DataLoader over in-memory uint8 tensors, and the
  device-resident batches), each with the batched crop/flip/normalise on the device;
- MFU: model FLOPs per image (counted on the meta device) x images/s / a matmul peak measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from lightning.fabric.utilities.throughput import measure_flops
from omegaconf import OmegaConf
from timm.models.vision_transformer import VisionTransformer as TimmViT

import vitpos
from vitpos.config import CONFIG_DIR
from vitpos.data import DeviceBatches, ImageDataModule, ShardedSampler
from vitpos.precision import bf16_supported, cpu_name

MODEL = dict(img_size=32, patch_size=4, dim=192, depth=6, num_heads=3, mlp_ratio=4.0, num_classes=10, in_chans=3)
SIZE_KEYS = ("patch_size", "dim", "depth", "num_heads", "mlp_ratio")  # what --model takes from configs/model/


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class PeakMemory:
    """Peak memory while the block runs: CUDA max allocated, or the CPU's RSS sampled every 2 ms
    above the level at entry (no CPU allocator exposes a peak counter)."""

    def __init__(self, device: torch.device):
        self.device, self.peak_mib = device, 0.0

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base, self.peak, self.running = self._rss(), self._rss(), True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.peak_mib = (torch.cuda.max_memory_allocated() - self.base) / 2**20
        else:
            self.running = False
            self.thread.join()
            self.peak_mib = (self.peak - self.base) / 2**20


def use_model_size(parser: argparse.ArgumentParser, name: str) -> None:
    """Set MODEL's size keys from configs/model/<name>.yaml (a parser error names the choices)."""
    path = CONFIG_DIR / "model" / f"{name}.yaml"
    if not path.is_file():
        choices = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        parser.error(f"--model {name}: no {path}; one of {choices}")
    MODEL.update({k: OmegaConf.load(path)[k] for k in SIZE_KEYS})


def write_results(out: Path, args, device: torch.device, bf16: bool, **figures) -> None:
    """The JSON of a benchmark: the machine, torch, precision, batch and model size, then `figures`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    machine = dict(device=str(device), processor=cpu_name(), threads=torch.get_num_threads(), torch=torch.__version__)
    setup = dict(precision="bf16-mixed" if bf16 else "fp32", batch=args.batch, model=MODEL, model_name=args.model)
    out.write_text(json.dumps(machine | setup | figures, indent=2) + "\n")
    print(f"\nwrote {out}")


def make_steps(model: torch.nn.Module, args, device: torch.device, bf16: bool, img_size: int | None = None):
    """(train_step, eval_step) closures of one model on a fixed random batch (of `img_size` px,
    default the model's own)."""
    model = model.to(device)
    size = img_size or MODEL["img_size"]
    images = torch.randn(args.batch, MODEL["in_chans"], size, size, device=device)
    labels = torch.randint(0, MODEL["num_classes"], (args.batch,), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step():
        model.train()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(images).float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def eval_step():
        model.eval()
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            model(images)

    return train_step, eval_step


def window(step, steps: int, device: torch.device) -> float:
    """Seconds for `steps` calls."""
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return time.perf_counter() - start


def measure_all(builds: dict, args, device: torch.device, bf16: bool) -> dict:
    """Train/eval images/s of every model, median over `repeats` rounds; the rounds go round-robin
    over the models, so a drift of the machine's speed during the run hits all models alike."""
    steps, rates = {}, {name: {"train": [], "eval": []} for name in builds}
    peaks = {}
    for name, build in builds.items():
        try:  # a compile mode the device or torch version cannot run is reported and left out
            steps[name] = make_steps(build(), args, device, bf16)
            with PeakMemory(device) as memory:
                for _ in range(args.warmup):
                    steps[name][0]()
            peaks[name] = memory.peak_mib
            for _ in range(args.warmup):
                steps[name][1]()
        except Exception as error:
            print(
                f"  {name}: failed, left out ({type(error).__name__}: {str(error).splitlines()[0][:200]})", flush=True
            )
            steps.pop(name, None)
            del rates[name]
    for _ in range(args.repeats):
        for name in steps:
            for kind, step in zip(("train", "eval"), steps[name]):
                rates[name][kind].append(args.batch * args.steps / window(step, args.steps, device))
    return {
        name: dict(
            train_img_s=statistics.median(r["train"]), eval_img_s=statistics.median(r["eval"]), peak_mem_mib=peaks[name]
        )
        for name, r in rates.items()
    }


def flops_per_image(build) -> float:
    """Training FLOPs (forward + backward) per image, counted on the meta device."""
    with torch.device("meta"):
        model = build()
        images = torch.randn(1, MODEL["in_chans"], MODEL["img_size"], MODEL["img_size"])
    return measure_flops(model, lambda: model(images), loss_fn=torch.Tensor.sum)


def matmul_peak(device: torch.device, dtype: torch.dtype, size: int = 2048, reps: int = 10) -> float:
    """Measured dense matmul FLOP/s at `dtype` (the denominator of MFU)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    seconds = statistics.median(window(lambda: a @ b, reps, device) for _ in range(3))
    return reps / seconds * 2 * size**3


class RandomCIFARShaped(ImageDataModule):
    """CIFAR-10-shaped uint8 data (50k x 3 x 32 x 32) to time the loader without files."""

    name, num_classes, in_chans, native_size = "random", 10, 3, (32, 32)
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)

    def load(self, train: bool):
        count = 50_000 if train else 10_000
        generator = torch.Generator().manual_seed(int(train))
        return (
            torch.randint(0, 256, (count, 3, 32, 32), dtype=torch.uint8, generator=generator),
            torch.randint(0, 10, (count,), generator=generator),
        )


def loader_throughput(args, device: torch.device) -> dict[str, float]:
    """Images/s of the two input paths, each up to normalised batches on `device`: the DataLoader
    (per-sample indexing, collate, host-to-device copy) and the device-resident batches."""
    datamodule = RandomCIFARShaped(batch_size=args.batch, val_size=5000, augment="standard")
    datamodule.setup()
    train_set = datamodule.train_set
    sampler = ShardedSampler(len(train_set), shuffle=True)
    paths = {
        "dataloader": lambda: datamodule.train_dataloader(),
        "device_resident": lambda: DeviceBatches(
            train_set.images.to(device), train_set.labels.to(device), sampler, args.batch, drop_last=True
        ),
    }
    rates = {}
    for name, make in paths.items():
        start, seen = time.perf_counter(), 0
        while seen < args.loader_images:
            for images, labels in make():
                datamodule.preprocess(images.to(device, non_blocking=True), train=True)
                seen += len(labels)
                if seen >= args.loader_images:
                    break
        sync(device)
        rates[name] = seen / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default=None,
        help="the size of configs/model/<name>.yaml (vit_800k, vit_tiny, ...); default ViT-Ti/4",
    )
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed window")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    parser.add_argument("--schemes", default=",".join(vitpos.list_pos()))
    parser.add_argument("--loader-images", type=int, default=20_000, help="0: no loader timing")
    parser.add_argument("--compile", action="store_true", help="also time vitpos 1d_learned under torch.compile")
    parser.add_argument(
        "--compile-modes",
        default="default",
        help="torch.compile modes to time with --compile, comma-separated (e.g. "
        "default,max-autotune-no-cudagraphs,reduce-overhead; the last uses CUDA graphs)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/<device>.json)")
    args = parser.parse_args()
    if args.model:
        use_model_size(parser, args.model)
    device = torch.device(args.device)
    bf16 = bf16_supported(device.type) if args.precision == "auto" else args.precision == "bf16"
    torch.manual_seed(0)

    def build_timm():
        return TimmViT(
            img_size=MODEL["img_size"],
            patch_size=MODEL["patch_size"],
            in_chans=MODEL["in_chans"],
            num_classes=MODEL["num_classes"],
            embed_dim=MODEL["dim"],
            depth=MODEL["depth"],
            num_heads=MODEL["num_heads"],
            mlp_ratio=MODEL["mlp_ratio"],
            class_token=False,
            global_pool="avg",
            fc_norm=False,
        )

    def build_timm_plain_attention():
        # timm's own non-fused path (matmul-softmax-matmul): what the attention kernel alone buys timm
        model = build_timm()
        for block in model.blocks:
            block.attn.fused_attn = False
        return model

    def build_vitpos(pos):
        return lambda: vitpos.create_model(pos, **MODEL)

    peak = matmul_peak(device, torch.bfloat16 if bf16 else torch.float32)
    print(
        f"device {device} ({cpu_name()}), threads {torch.get_num_threads()}, "
        f"precision {'bf16-mixed' if bf16 else 'fp32'}, batch {args.batch}; "
        f"measured matmul peak {peak / 1e12:.2f} TFLOP/s",
        flush=True,
    )

    def compiled(build, mode):
        def build_compiled():
            model = build()
            model.compile(mode=None if mode == "default" else mode)
            return model

        return build_compiled

    candidates = [
        ("timm (default)", build_timm),
        ("timm (plain attention)", build_timm_plain_attention),
        *((f"vitpos {p}", build_vitpos(p)) for p in args.schemes.split(",")),
    ]
    if args.compile:
        candidates += [
            (f"vitpos 1d_learned compiled {mode}", compiled(build_vitpos("1d_learned"), mode))
            for mode in args.compile_modes.split(",")
        ]
    builds = dict(candidates)
    rows = measure_all(builds, args, device, bf16)
    for name, result in rows.items():
        result["flops_per_img"] = flops_per_image(
            build_timm if name.startswith("timm") else build_vitpos(name.split()[1])
        )
        result["mfu"] = result["train_img_s"] * result["flops_per_img"] / peak
        print(
            f"  {name:<24} train {result['train_img_s']:8.1f} img/s  eval {result['eval_img_s']:8.1f} img/s  "
            f"peak mem {result['peak_mem_mib']:7.1f} MiB  MFU {100 * result['mfu']:5.1f}%",
            flush=True,
        )

    loader = loader_throughput(args, device) if args.loader_images > 0 else {}
    none = rows.get("vitpos none", {}).get("train_img_s")
    timm_rate = rows["timm (default)"]["train_img_s"]
    print(
        "\n| model | train img/s | vs timm | vs none | eval img/s | peak MiB | MFU |"
        "\n|---|---:|---:|---:|---:|---:|---:|"
    )
    for name, r in rows.items():
        versus_none = f"{r['train_img_s'] / none:.3f}" if none and name.startswith("vitpos") else "-"
        print(
            f"| {name} | {r['train_img_s']:.1f} | {r['train_img_s'] / timm_rate:.2f}x | {versus_none} | "
            f"{r['eval_img_s']:.1f} | {r['peak_mem_mib']:.0f} | {100 * r['mfu']:.1f}% |"
        )
    if "vitpos 1d_learned" in rows:
        print(f"\nvitpos 1d_learned / timm default: {rows['vitpos 1d_learned']['train_img_s'] / timm_rate:.2f}x")
    best = max(r["train_img_s"] for n, r in rows.items() if n.startswith("vitpos"))
    for name, rate in loader.items():
        print(f"loader ({name}): {rate:.0f} img/s = {rate / best:.1f}x the fastest vitpos training rate")

    write_results(
        Path(args.out or f"benchmarks/results/{device.type}.json"),
        args,
        device,
        bf16,
        matmul_peak_flops=peak,
        models=rows,
        loader_img_s=loader,
    )


if __name__ == "__main__":
    main()
