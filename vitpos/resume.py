"""A resumed run's checkpoint: the one `resume=` names, refused when the config builds another
model or trains with other optimizer, schedule, loss or size settings than the run it continues."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from .config import to_container
from .errors import ConfigError
from .resize import read_checkpoint
from .runs import run_dir, version_of

if TYPE_CHECKING:
    from .module import ImageClassifier

# the settings a resumed run must share with the run it continues, besides the model (its saved config.yaml)
TRAINING_SETTINGS = ("optim", "scheduler", "loss")
TRAINING_SIZES = ("train_img_sizes", "batch_by_tokens", "curriculum", "curriculum_batch")  # top-level keys, likewise
WEIGHT_AVERAGING = ("ema_decay", "ema_warmup")  # top-level keys, likewise (the EMA's weights are in the checkpoint)


def resume_checkpoint(cfg: DictConfig, log_root: Path, run_name: str, module: ImageClassifier) -> Path:
    """The checkpoint `resume=` names (`true`: the newest version of this run with a last.ckpt),
    refused when it was made for another model than the config builds, or its run trained with other
    optimizer, schedule or loss settings (its config.yaml)."""
    path = newest_last_checkpoint(Path(log_root, run_name)) if cfg.resume is True else Path(str(cfg.resume))
    saved = read_checkpoint(path)["hyper_parameters"]["model"]
    changed = {k: (saved.get(k), v) for k, v in module.hparams["model"].items() if saved.get(k) != v}
    if changed:
        diff = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
        raise ConfigError(
            f"cannot resume {path}: the config builds another model ({diff}); resume with the "
            f"run's original settings, or start a fresh run without resume"
        )
    if run_dir(path) is None or not run_dir(path).name.startswith("version_"):
        raise ConfigError(f"cannot resume {path}: expected a checkpoint under <run>/version_N/checkpoints/")
    check_same_training(cfg, path)
    return path


def newest_last_checkpoint(run: Path) -> Path:
    """`<run>/version_N/checkpoints/last.ckpt` of the highest N that has one."""
    candidates = sorted(run.glob("version_*/checkpoints/last.ckpt"), key=lambda p: version_of(p.parent.parent))
    if not candidates:
        raise ConfigError(
            f"resume=true but no last.ckpt under {run}/version_*/"
            f"checkpoints; pass resume=<path to a .ckpt> or drop resume to start a fresh run"
        )
    return candidates[-1]


def check_same_training(cfg: DictConfig, path: Path) -> None:
    """Refuse to resume `path` when its run's config.yaml trained with other TRAINING_SETTINGS or
    TRAINING_SIZES than `cfg` (a key the saved config lacks counts as unchanged)."""
    saved_config = run_dir(path) / "config.yaml"
    if not saved_config.is_file():
        return
    saved = OmegaConf.load(saved_config)
    changed = [
        f"{group}.{key}: {to_container(saved[group][key])} -> {value}"
        for group in TRAINING_SETTINGS
        if group in saved
        for key, value in to_container(cfg[group]).items()
        if key in saved[group] and to_container(saved[group][key]) != value
    ]
    changed += [
        f"{key}: {to_container(saved[key])} -> {to_container(cfg.get(key))}"
        for key in (*TRAINING_SIZES, *WEIGHT_AVERAGING)
        if key in saved and to_container(saved[key]) != to_container(cfg.get(key))
    ]
    if changed:
        raise ConfigError(
            f"cannot resume {path}: its run trained with other settings ({', '.join(changed)}); resume with "
            f"the run's own settings (its config.yaml), or start a fresh run"
        )
