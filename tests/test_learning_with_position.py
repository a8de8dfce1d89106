"""With a position signal the arrangement task is learned, far above the chance level `none`
stays at (tests/test_learning_without_position.py; see learning_budget): a scheme for three of
the four ways a position enters the model (added to the tokens, a logits bias, a rotation)."""

from __future__ import annotations

import pytest
from learning_budget import LEARNED_FLOOR, budget_accuracy


@pytest.mark.slow
@pytest.mark.parametrize("pos", ["2d_sin", "cpb", "rope_axial"])
def test_position_schemes_learn_the_arrangement(pos, tmp_path):
    assert budget_accuracy(pos, tmp_path) > LEARNED_FLOOR  # > 0.8 where none stays < 0.35
