"""Train a ViT with a pluggable positional scheme:  python -m vitpos pos=2d_sin [key=value ...]
(`python train.py ...` in a checkout is the same). Hydra entry point around `vitpos.train.train(cfg)`;
the configs are vitpos/configs/ (train.yaml and its groups), `--help` lists them."""
import sys

import hydra
from omegaconf import DictConfig

from vitpos.config import CONFIG_DIR, finetune_config
from vitpos.errors import VitposError
from vitpos.errors import report as report_error
from vitpos.train import train


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = train(finetune_config(cfg))
    except VitposError as error:
        sys.exit(report_error(error))
    return metrics.get("val/acc_best")


if __name__ == "__main__":
    main()
