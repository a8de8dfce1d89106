"""The closing summary of a run: its results, where they are, and the next commands (evaluate,
fine-tune, compare, TensorBoard) with this run filled in."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from .config import CONFIG_DIR, to_container
from .model import image_size


def group_choices() -> list[str]:
    """`optim=sgd`-style overrides of this run's optimizer, schedule and logger where the command
    line chose other than train.yaml's defaults (known when Hydra runs the job)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    chosen = HydraConfig.get().runtime.choices
    defaults = {
        k: v
        for entry in OmegaConf.load(CONFIG_DIR / "train.yaml").defaults
        if OmegaConf.is_dict(entry)
        for k, v in entry.items()
    }
    return [
        f"{group}={chosen[group]}"
        for group in ("optim", "scheduler", "logger")
        if chosen.get(group, defaults[group]) != defaults[group]
    ]


def finetune_command(cfg: DictConfig, run: Path, bigger: str) -> str:
    """The closing summary's fine-tune line, safe to paste: the experiment's fine-tune recipe where it
    names one, else a short fine-tune at twice the size (one pass over at most 10k images, a fifth of
    the run's lr); into the run's own log root, from the same copy of the data."""
    source = [
        f"finetune_from={run}",
        f"paths.log_dir={cfg.paths.log_dir}",
        *([f"data.root={cfg.data.root}"] if cfg.data.get("root") else []),
    ]
    source += group_choices()
    if cfg.get("finetune_recipe"):
        return " ".join(["python -m vitpos", f"experiment={cfg.finetune_recipe}", f"pos={cfg.pos.name}", *source])
    subset = ["data.train_subset=10000"] if "train_subset" in cfg.data else []
    return " ".join(
        [
            "python -m vitpos",
            f"pos={cfg.pos.name}",
            f"img_size={bigger}",
            *source,
            "trainer.max_epochs=1",
            *subset,
            f"optim.lr={cfg.optim.lr / 5:g}",
            "scheduler.warmup_steps=10",
        ]
    )


def summary(cfg: DictConfig, metrics: dict) -> str:
    """The closing block: results, where they are, and the next commands with this run filled in."""
    run, minutes = Path(metrics["log_dir"]), metrics["fit_seconds"] / 60
    accuracy = lambda key: f"{100 * metrics[key]:.2f}%" if key in metrics else "-"  # noqa: E731
    size = to_container(cfg.img_size)
    height, width = image_size(size)
    square = height == width  # a rectangle is written [H,W] in the commands, a square as one int
    sizes = f"[{height},{2 * height}]" if square else f"[[{height},{width}],[{2 * height},{2 * width}]]"
    bigger = f"{2 * height}" if square else f"[{2 * height},{2 * width}]"
    root = run.parent.parent
    lines = [
        f"vitpos: finished {run}",
        f"  best val acc {accuracy('val/acc_best')} | test acc {accuracy('test/acc')} (top-1) | "
        f"fit {minutes:.1f} min, {metrics['images_per_s']:.0f} img/s",
        f"  checkpoint   {metrics['checkpoint']}",
        *([f"  figures      {run / 'figures'}"] if (run / "figures").is_dir() else []),
        "  next:",
        f"    python -m vitpos.evaluate ckpt={run} img_sizes={sizes}",
        f"    {finetune_command(cfg, run, bigger)}",
        f"    python -m vitpos.compare {root}",
        *([f"    tensorboard --logdir {root}"] if any(run.glob("events.out.tfevents*")) else []),
    ]
    return "\n".join(lines)
