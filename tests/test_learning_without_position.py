"""Without a position signal the arrangement task stays at chance (see learning_budget)."""

from __future__ import annotations

import pytest
from learning_budget import CHANCE_CEILING, budget_accuracy


@pytest.mark.slow
def test_none_stays_at_chance(tmp_path):
    assert budget_accuracy("none", tmp_path) < CHANCE_CEILING
