"""The learning tests' shared budget: on `synthetic` the label is the relative placement of two
shapes, so `none` (a bag of patches under average pooling) cannot beat chance (25%) while schemes
with a position signal can. Same budget for every scheme, fixed seeds. The schemes are split over
three test files (3, 2 and 1 runs) so that `pytest -n 2 --dist loadfile` keeps both workers busy."""

from __future__ import annotations

from conftest import compose_config

from vitpos.train import train

BUDGET = [
    "data=synthetic",
    "model=vit_70k",
    "data.num_train=2560",
    "data.val_size=256",
    "data.num_test=512",
    "trainer.max_epochs=12",
    "optim.lr=2e-3",
    "scheduler.warmup_steps=20",
    "seed=42",
    "callbacks.figures=null",
]
CHANCE_CEILING = 0.35  # 4 classes: 25% plus the spread of 512 test images
LEARNED_FLOOR = 0.8


def budget_accuracy(pos: str, tmp_path) -> float:
    return train(compose_config([f"pos={pos}", *BUDGET], tmp_path))["test/acc"]
