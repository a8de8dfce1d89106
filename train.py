"""Train a ViT with a pluggable positional scheme:  python train.py pos=2d_sin [key=value ...]

Thin Hydra entry point around `vitpos.train.train(cfg)`; see configs/train.yaml and README.md.
"""
import sys

import hydra
from omegaconf import DictConfig

from vitpos.config import with_finetune_data
from vitpos.errors import VitposError
from vitpos.errors import report as report_error
from vitpos.train import train


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    try:
        metrics = train(with_finetune_data(cfg))
    except VitposError as error:
        sys.exit(report_error(error))
    return metrics.get("val/acc_best")


if __name__ == "__main__":
    main()
