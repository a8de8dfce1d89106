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

from vitpos.config import CONFIG_DIR, finetune_config
from vitpos.console import quiet_third_party
from vitpos.errors import VitposError
from vitpos.errors import report as report_error
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
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, importable_from)),
                   **{METRICS_FILE: str(metrics_file)})
        job = subprocess.run([sys.executable, "-m", "vitpos", *HydraConfig.get().overrides.task], env=env)
        if job.returncode:
            sys.exit(job.returncode)  # the job printed its own error
        return json.loads(metrics_file.read_text())


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    quiet_third_party()
    try:
        if HydraConfig.get().mode == RunMode.MULTIRUN and relaunches_command_line(cfg.trainer):
            metrics = run_job_as_its_own_command()
        else:
            metrics = train(finetune_config(cfg))
    except VitposError as error:
        sys.exit(report_error(error))
    if os.environ.get(METRICS_FILE) and rank_zero_only.rank == 0:
        Path(os.environ[METRICS_FILE]).write_text(json.dumps(metrics))
    return metrics.get("val/acc_best")


if __name__ == "__main__":
    main()
