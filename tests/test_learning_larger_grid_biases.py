"""The two logits biases built for larger grids learn the arrangement task (see learning_budget),
which depends on the relative placement of two shapes: `lookhere` (fixed cones and distances, so
the content path must read them) and `fire` (a learned function of normalised offsets)."""

from __future__ import annotations

import pytest
from learning_budget import LEARNED_FLOOR, budget_accuracy


@pytest.mark.slow
@pytest.mark.parametrize("pos", ["lookhere", "fire"])
def test_larger_grid_biases_learn_the_arrangement(pos, tmp_path):
    assert budget_accuracy(pos, tmp_path) > LEARNED_FLOOR  # > 0.8 where none stays < 0.35
