"""Which precision a run uses: `auto` is bf16 mixed precision where bf16 is native, else fp32."""
from __future__ import annotations

from pathlib import Path

import torch

# x86 flags of native bf16 matmul; without them (AVX2-only CPUs) bf16 is emulated, ~100x slower than fp32
BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def bf16_supported(accelerator: str = "auto") -> bool:
    """Whether bf16 mixed precision runs natively where this run will train."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    if accelerator in ("auto", "cpu"):
        return bool(cpu_flags() & BF16_CPU_FLAGS)
    return False


def resolve_precision(precision, accelerator: str = "auto"):
    """`auto` -> `bf16-mixed` where bf16 is native, else `32-true`; anything else is Lightning's."""
    if str(precision) != "auto":
        return precision
    return "bf16-mixed" if bf16_supported(accelerator) else "32-true"
