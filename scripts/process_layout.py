"""The trainer and batch overrides with which `scripts/study.sh` trains a run, printed on one line.

    python scripts/process_layout.py recipe <experiment>   # one process with the recipe's global batch
    python scripts/process_layout.py saved <config.yaml>   # the layout a run started with, to resume it

`recipe`: `trainer.devices=1`, and where the recipe pins several processes (trainer=cpu_ddp, whose
data.batch_size is per process) also `trainer.strategy=auto` and the global batch. `saved`: the run's
own trainer.devices, trainer.strategy and data.batch_size.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from vitpos.config import compose_train_config
from vitpos.runs import devices


def one_process(experiment: str) -> str:
    config = compose_train_config([f"experiment={experiment}"])
    if str(config.trainer.devices) == "auto":  # trainer=default: data.batch_size is already the global batch
        return "trainer.devices=1"
    return f"trainer.devices=1 trainer.strategy=auto data.batch_size={config.data.batch_size * devices(config.trainer)}"


def saved_layout(config_file: Path) -> str:
    config = yaml.safe_load(config_file.read_text())
    trainer = config["trainer"]
    return (
        f"trainer.devices={trainer['devices']} trainer.strategy={trainer['strategy']} "
        f"data.batch_size={config['data']['batch_size']}"
    )


def main(argv: list[str]) -> int:
    how, what = argv
    print(one_process(what) if how == "recipe" else saved_layout(Path(what)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
