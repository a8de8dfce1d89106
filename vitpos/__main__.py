"""Train a ViT with a pluggable positional scheme:  python -m vitpos pos=2d_sin [key=value ...]
(`python train.py ...` in a checkout is the same). Hydra entry point around `vitpos.train.train(cfg)`;
the configs are vitpos/configs/ (train.yaml and its groups), `--help` lists them."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from vitpos.config import CONFIG_DIR, compose_train_config, override_key
from vitpos.console import quiet_third_party
from vitpos.errors import EXIT_PREEMPTED, ConfigError, Preempted, VitposError, print_line
from vitpos.errors import report as report_error
from vitpos.finetune import finetune_config
from vitpos.runs import LEGACY_OPTIM_KEYS
from vitpos.train import train

METRICS_FILE = "VITPOS_METRICS_FILE"  # set by a sweep for a job it runs as its own command


def relaunches_command_line(trainer: DictConfig) -> bool:
    """Whether Lightning starts this run's other ranks by re-running the command line (its `ddp`
    launch over several local devices, as `trainer=cpu_ddp` and `trainer=ddp` do)."""
    strategy = str(trainer.get("strategy"))
    spawned = any(word in strategy for word in ("spawn", "fork", "notebook"))
    return strategy.startswith("ddp") and not spawned and str(trainer.get("devices")) != "1"


def run_job_as_its_own_command() -> dict:
    """Run this sweep job as a single `python -m vitpos <its overrides>` and return its metrics.
    Re-running a multirun's command line would start the whole sweep again in every other rank."""
    with tempfile.TemporaryDirectory() as scratch:
        metrics_file = Path(scratch, "metrics.json")
        importable_from = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, importable_from)), **{METRICS_FILE: str(metrics_file)}
        )
        job = subprocess.run([sys.executable, "-m", "vitpos", *HydraConfig.get().overrides.task], env=env)
        if job.returncode:
            sys.exit(job.returncode)  # the job printed its own error
        return json.loads(metrics_file.read_text())


USER_CONFIG_FLAGS = (
    "--config-dir",
    "-cd",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "hydra.searchpath",
    "+hydra.searchpath",
)
HYDRA_FLAGS_WITH_OWN_OUTPUT = ("-h", "--help", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion")


def is_sweep(override: str) -> bool:
    """`key=a,b,c` sweeps (a list value `key=[a,b]` is one value)."""
    value = override.split("=", 1)[1] if "=" in override else ""
    return "," in value and not value.startswith("[")


def sweep_variants(overrides: list[str], groups_only: bool = False) -> list[list[str]]:
    """A multirun's overrides as single runs: every value of each sweep once (the other sweeps at
    their first value); with `groups_only`, only config-group sweeps (`pos=a,b`, not `optim.lr=...`)
    get their other values."""
    first = [o.split(",")[0] if is_sweep(o) else o for o in overrides]
    variants = [first]
    for index, override in enumerate(overrides):
        key, _, values = override.partition("=")
        if is_sweep(override) and not (groups_only and "." in key):
            variants += [first[:index] + [f"{key}={value}"] + first[index + 1 :] for value in values.split(",")[1:]]
    return variants


# keys that moved when logger, callbacks, optimizer and schedule became config groups
MOVED_KEYS = {
    "figures_at_end": "callbacks.figures=null to switch the figures off (they are on by default)",
    **{f"optim.{key}": f"{group}.{key}" if group else key for key, group in LEGACY_OPTIM_KEYS.items()},
}


def check_moved_keys(overrides: list[str]) -> None:
    """One line naming the new key for an override of a key that moved."""
    for override in overrides:
        key = override_key(override)
        if key in MOVED_KEYS:
            sys.exit(report_error(ConfigError(f"{key} is not a key; use {MOVED_KEYS[key]}")))


def check_composes(argv: list[str]) -> None:
    """Compose the config as Hydra will, so that a composition error (an unknown option of a config
    group, a key the config does not have) ends as one `error:` line with exit status 2 instead of
    Hydra's multi-line report. A sweep (`-m key=a,b`) is checked at its first values and at every
    value of a config-group sweep; Hydra's own settings (`hydra.*`, `hydra/...`) and flags are left
    to Hydra."""
    if any(arg.split("=")[0] in HYDRA_FLAGS_WITH_OWN_OUTPUT for arg in argv):
        return
    if any(arg.startswith(USER_CONFIG_FLAGS) for arg in argv):
        return  # the user's own config folders take part in Hydra's composition: Hydra reports its errors
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [arg for arg in argv if not arg.startswith(("-", "hydra.", "hydra/", "+hydra", "~hydra"))]
    check_moved_keys(overrides)
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    for variant in sweep_variants(overrides, groups_only=True) if multirun else [overrides]:
        try:
            compose_train_config(variant)
        except (HydraException, OmegaConfBaseException, ValueError) as error:
            message = " ".join(str(error).split("Config search path")[0].split())  # Hydra's lines as one
            sys.exit(report_error(ConfigError(message)))


def main() -> float | None:
    """`python train.py` / `python -m vitpos`: the config checked, then Hydra's run."""
    check_composes(sys.argv[1:])
    return hydra_main()


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    quiet_third_party()
    try:
        if HydraConfig.get().mode == RunMode.MULTIRUN and relaunches_command_line(cfg.trainer):
            metrics = run_job_as_its_own_command()
        else:
            metrics = train(finetune_config(cfg))
    except VitposError as error:
        sys.exit(report_error(error))
    except Preempted as stop:
        print_line(f"vitpos: pre-empted: {stop}")
        sys.exit(EXIT_PREEMPTED)
    finally:
        end_process_group()
    if os.environ.get(METRICS_FILE) and rank_zero_only.rank == 0:
        Path(os.environ[METRICS_FILE]).write_text(json.dumps(metrics))
    return metrics.get("val/acc_best")


def end_process_group() -> None:
    """Destroy a DDP run's process group before the interpreter exits: Gloo's worker threads, left
    to the interpreter's finalization, abort the process now and then (SIGABRT, `terminate called
    without an active exception`), which the launcher reports as a failed job."""
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
