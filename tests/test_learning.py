"""Learning a task that needs position: on `synthetic` the label is the relative placement of
two shapes, so `none` (a bag of patches under average pooling) cannot beat chance (25%) while
schemes with a position signal can. Same budget for every scheme, fixed seeds."""
from __future__ import annotations

import pytest

from conftest import compose_config

from vitpos.train import train

BUDGET = ["data=synthetic", "model=vit_micro", "data.num_train=2560", "data.val_size=256", "data.num_test=512",
          "trainer.max_epochs=40", "optim.lr=2e-3", "optim.warmup_steps=20", "seed=42", "figures_at_end=false"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("learning")
    return {pos: train(compose_config([f"pos={pos}", *BUDGET], tmp_path))["test/acc"]
            for pos in ("none", "2d_sin", "rel_bias")}


@pytest.mark.slow
def test_none_stays_at_chance(results):
    assert results["none"] < 0.35


@pytest.mark.slow
@pytest.mark.parametrize("pos", ["2d_sin", "rel_bias"])
def test_position_schemes_learn_the_arrangement(results, pos):
    assert results[pos] > 0.8
    assert results[pos] > results["none"] + 0.4
