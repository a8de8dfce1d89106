"""Which precision a run uses (`auto` is bf16 mixed precision where bf16 is native, else fp32), how
many processes train fastest on this machine, and the device's description."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from .errors import ConfigError

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


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (/proc/cpuinfo) with its family and model numbers where a virtual
    machine names only the vendor line ('AMD EPYC', family 25 model 1), or what the platform says."""
    try:
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in cpuinfo.read_text().splitlines())
            if value
        )
    except OSError:
        fields = {}
    if "model name" not in fields:
        return platform.processor() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        return f"{fields['model name']}, family {fields['cpu family']} model {fields['model']}"
    return fields["model name"]


def cpu_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def fastest_processes(accelerator: str = "auto") -> tuple[int, str]:
    """How many processes train a small ViT fastest on this machine where `accelerator` runs, and
    why, as a phrase: one on a GPU; two (DDP) on a CPU of two cores or more, where a second process
    gains more than a second thread (docs/PERFORMANCE.md); one on a single core."""
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return 1, f"one process on GPU {torch.cuda.get_device_name(0)} (trainer=ddp trains on several)"
    cores = cpu_cores()
    if accelerator not in ("auto", "cpu"):
        return 1, f"one process on accelerator {accelerator}"
    if cores < 2:
        return 1, "one process on this 1-core CPU"
    return 2, (
        f"2 processes (DDP) on this {cores}-core CPU: a small ViT trains faster on a second process than on a "
        f"second thread"
    )


def device_description(device: torch.device) -> str:
    """`GPU NVIDIA H200` or `CPU AMD EPYC (2 cores, native bf16)`: what a run's times depend on."""
    if device.type == "cuda":
        return f"GPU {torch.cuda.get_device_name(device)}"
    native = "native bf16" if bf16_supported("cpu") else "no native bf16"
    return f"CPU {cpu_name()} ({cpu_cores()} cores, {native})"


def chosen_device(device) -> torch.device:
    """`auto` (a GPU where torch sees one, else the CPU), `cpu`, `cuda` or `cuda:<index>`, refused
    where this machine has no such device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        chosen = None
    if chosen is None or chosen.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={device!r} must be auto, cpu, cuda or cuda:<index>")
    if chosen.type == "cuda" and (chosen.index or 0) >= (torch.cuda.device_count() if torch.cuda.is_available() else 0):
        raise ConfigError(
            f"device={device!r} is not on this machine ({torch.cuda.device_count()} CUDA devices); "
            f"use device=auto or device=cpu"
        )
    return chosen
