"""The shared scheme interface: every registered scheme knows its name and uses a hook; resize modes
are checked at construction. Rectangular grids throughout, so a swapped H/W or a grid inferred with
sqrt(N) shows up."""
from __future__ import annotations

import pytest

import vitpos
from vitpos.pos import HOOKS, get_pos_class

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_registered_class_knows_its_name_and_uses_a_hook(pos):
    cls = get_pos_class(pos)
    assert cls.scheme_name == pos
    used = [hook for hook in HOOKS if cls.uses(hook)]
    if pos == "none":
        assert used == [], "`none` must inject no position signal at all"
    else:
        assert used, f"{pos} overrides none of the hooks {HOOKS}, so it adds no position signal"


@pytest.mark.parametrize("pos, mode", [("1d_learned", "linear"), ("2d_learned", "bicubic")])
def test_unsupported_resize_mode_fails_at_construction(pos, mode):
    with pytest.raises(vitpos.ConfigError, match=f"resize_mode='{mode}'"):
        vitpos.create_model(pos, dim=32, depth=1, num_heads=2, pos_kwargs={"resize_mode": mode})
