"""The shared scheme interface: every registered scheme knows its name and uses a hook; resize modes
are checked at construction; `init_kwargs` rebuilds the scheme; fixed state follows one buffer
protocol (`buffers_for` / `build_buffers` / `grid_buffers`); a scheme is found by discovery alone.
Rectangular grids throughout, so a swapped H/W or a grid inferred with sqrt(N) shows up."""

from __future__ import annotations

import inspect
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import vitpos
from vitpos.config import CONFIG_DIR
from vitpos.pos import HOOKS, create_pos, get_pos_class, import_families, registry

pytestmark = pytest.mark.usefixtures("one_thread")

DIM, HEADS, DEPTH, GRID, OTHER = 32, 2, 2, (4, 6), (6, 5)
PACKAGE = Path(vitpos.__file__).resolve().parent


def scheme(pos: str, **kwargs):
    torch.manual_seed(0)
    return create_pos(pos, dim=DIM, num_heads=HEADS, depth=DEPTH, grid=GRID, **kwargs)


def own_arguments(cls) -> dict:
    """A scheme's constructor arguments besides dim, num_heads, depth, grid, with their defaults."""
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return {p.name: p.default for p in parameters if p.name not in ("dim", "num_heads", "depth", "grid")}


def other_value(value):
    """Another valid value of a default argument, so that a value `init_kwargs` forgets shows up."""
    if isinstance(value, bool) or not isinstance(value, (int, float, list, tuple)):
        return value  # modes, grids and flags: the resized variant changes the modes and grids
    if isinstance(value, float):
        return value / 2
    if isinstance(value, int):
        return value + 2  # an odd kernel size stays odd
    return [DEPTH - 1 - i for i in value]  # block indices


def non_default(pos: str):
    return scheme(pos, **{name: other_value(value) for name, value in own_arguments(get_pos_class(pos)).items()})


def resized(pos: str):
    """The scheme (non-default arguments) converted to OTHER in its last resize mode: init_kwargs
    then carry a mode and a reference grid that are not the defaults either."""
    converted = non_default(pos)
    converted.resize_to(OTHER, converted.resize_modes[-1] if converted.resize_modes else None)
    return converted


def hook_outputs(pos_scheme, grid) -> list[torch.Tensor]:
    """Every hook of every layer on fixed random inputs, in evaluation."""
    generator = torch.Generator().manual_seed(1)
    tokens = grid[0] * grid[1]
    x = torch.randn(2, tokens, DIM, generator=generator)
    q, k = torch.randn(2, 2, HEADS, tokens, DIM // HEADS, generator=generator)
    pos_scheme.eval()
    with torch.no_grad():
        outputs = [pos_scheme.add(x, grid)]
        for layer in range(DEPTH):
            outputs += [
                pos_scheme.bias(layer, grid, q),
                *pos_scheme.rotate(layer, q, k, grid),
                pos_scheme.after_block(layer, x, grid),
            ]
    return [o for o in outputs if o is not None]


def assert_same_tensors(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for name in expected:
        assert got[name].dtype == expected[name].dtype and torch.equal(got[name], expected[name]), name


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


@pytest.mark.parametrize("converted", [False, True], ids=["built", "resized"])
@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_init_kwargs_are_the_constructor_arguments_that_rebuild_the_scheme(pos, converted):
    original = resized(pos) if converted else non_default(pos)
    kwargs = {k: v for k, v in original.init_kwargs().items() if k != "fuzzy"}
    # every constructor argument, but the base class' resize_mode / ref_grid where the scheme has none
    unused = {
        name
        for name, has in [("resize_mode", original.resize_modes), ("ref_grid", original.measures_in_ref_grid)]
        if not has
    }
    assert set(kwargs) == set(own_arguments(type(original))) - unused
    rebuilt = type(original)(dim=DIM, num_heads=HEADS, depth=DEPTH, grid=original.grid, **kwargs)
    assert rebuilt.init_kwargs() == original.init_kwargs() and repr(rebuilt) == repr(original)
    rebuilt.load_state_dict(original.state_dict())  # strict: the same parameters, of the same shapes
    assert_same_tensors(dict(rebuilt.named_buffers()), dict(original.named_buffers()))
    for grid in (original.grid, (3, 7)):
        for got, expected in zip(hook_outputs(rebuilt, grid), hook_outputs(original, grid), strict=True):
            assert torch.equal(got, expected)


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_buffers_are_buffers_for_the_built_grid_after_construction_resize_and_load(pos):
    pos_scheme = scheme(pos)
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), pos_scheme.buffers_for(GRID))
    assert_same_tensors(pos_scheme.grid_buffers(GRID), pos_scheme.buffers_for(GRID))
    assert_same_tensors(pos_scheme.grid_buffers(OTHER), pos_scheme.buffers_for(OTHER))
    pos_scheme.resize_to(OTHER)
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), pos_scheme.buffers_for(OTHER))
    for buffer in pos_scheme.buffers(recurse=False):
        buffer.zero_()  # an edited buffer is rebuilt by a load
    pos_scheme.load_state_dict(pos_scheme.state_dict())
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), pos_scheme.buffers_for(OTHER))


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_a_bf16_model_has_the_fp32_fixed_tensors_rounded_once(pos):
    """Buffers follow `.to()`; rebuilt after a resize or a load, and computed for another grid, they
    keep the buffers' dtype: the fp32 values rounded to bf16 once, as the cast of the model gives."""

    def rounded(grid):
        return {
            name: value.to(torch.bfloat16) if value.is_floating_point() else value
            for name, value in scheme(pos).buffers_for(grid).items()
        }

    pos_scheme = scheme(pos).to(torch.bfloat16)
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), rounded(GRID))
    pos_scheme.eval()
    assert_same_tensors(pos_scheme.grid_buffers(OTHER), rounded(OTHER))
    pos_scheme.load_state_dict(pos_scheme.state_dict())
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), rounded(GRID))
    pos_scheme.resize_to(OTHER)
    assert_same_tensors(dict(pos_scheme.named_buffers(recurse=False)), rounded(OTHER))


def test_a_load_forgets_memoised_grids_and_the_scheme_pickles_with_its_hook():
    pos_scheme = scheme("alibi_2d").eval()
    memo = pos_scheme.bias(0, OTHER)
    assert pos_scheme.bias(0, OTHER) is memo  # memoised
    pos_scheme.load_state_dict({})
    assert pos_scheme.bias(0, OTHER) is not memo
    copy = pickle.loads(pickle.dumps(pos_scheme))  # ddp_spawn pickles the model, post-hook included
    copy.cached.zero_()
    copy.load_state_dict({})
    assert torch.equal(copy.cached, pos_scheme.cached)


FAMILY = '''
"""A family file written by tests/test_pos_interface.py: one scheme, found by discovery alone."""
import torch
from torch import nn

from vitpos.pos import PositionalEncoding, register


@register("test_scheme_xyz")
class RampPosition(PositionalEncoding):
    """A learned per-channel scale times a fixed ramp over the token index."""

    def __init__(self, dim, num_heads, depth, grid, slope: float = 1.0):
        super().__init__(dim, num_heads, depth, grid)
        self.slope = float(slope)
        self.scale = nn.Parameter(torch.ones(dim))
        self.build_buffers()

    def buffers_for(self, grid, device=None):
        return {"ramp": self.slope * torch.arange(grid[0] * grid[1], dtype=torch.float32, device=device)}

    def add(self, x, grid):
        return x + self.grid_buffers(grid)["ramp"][:, None] * self.scale

    def init_kwargs(self):
        return {**super().init_kwargs(), "slope": self.slope}
'''
YAML = "name: test_scheme_xyz\nslope: 0.5\nfuzzy: false\n"


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry and the imported modules as they were before the test."""
    monkeypatch.setattr(registry, "_SCHEMES", dict(registry._SCHEMES))
    yield
    for name in [m for m in sys.modules if m.split(".")[0] == "xyz_families"]:
        del sys.modules[name]


def test_a_new_family_file_and_its_yaml_are_all_a_scheme_needs(tmp_path, monkeypatch, scratch_registry):
    """The family file is found by the discovery vitpos.pos runs on itself, given another package's
    path; its YAML next to the others is composed by Hydra; the model builds and runs."""
    families = tmp_path / "xyz_families"
    families.mkdir()
    (families / "__init__.py").write_text("")
    (families / "ramp.py").write_text(FAMILY)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "test_scheme_xyz" not in vitpos.list_pos()
    assert import_families([str(families)], "xyz_families") == ["xyz_families.ramp"]
    assert "test_scheme_xyz" in vitpos.list_pos()

    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    (configs / "pos" / "test_scheme_xyz.yaml").write_text(YAML)
    with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
        pos_kwargs = OmegaConf.to_container(compose(config_name="train", overrides=["pos=test_scheme_xyz"]).pos)
    model = vitpos.create_model(
        pos_kwargs.pop("name"),
        img_size=(16, 24),
        patch_size=4,
        dim=DIM,
        depth=1,
        num_heads=HEADS,
        num_classes=3,
        pos_kwargs=pos_kwargs,
    )
    assert model.pos.slope == 0.5 and model.pos.buffer_names == ("ramp",)
    for size in [(16, 24), (24, 16)]:
        logits = model(torch.randn(2, 3, *size))
        assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    tokens = torch.zeros(1, 24, DIM)
    assert torch.equal(model.pos.add(tokens, (4, 6))[0, :, 0], 0.5 * torch.arange(24.0))


def test_vitpos_pos_registers_a_family_file_dropped_into_the_package(tmp_path):
    """A copy of vitpos with one more file in pos/: `import vitpos` lists its scheme (no import to add)."""
    shutil.copytree(PACKAGE, tmp_path / "vitpos", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "vitpos" / "pos" / "ramp.py").write_text(FAMILY)
    script = (
        "import json, vitpos\n"
        "scheme = vitpos.pos.create_pos('test_scheme_xyz', dim=8, num_heads=1, depth=1, grid=(2, 3))\n"
        "print(json.dumps([vitpos.__file__, vitpos.list_pos(), type(scheme).__name__]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    where, names, cls = json.loads(result.stdout.splitlines()[-1])
    assert Path(where).parent == tmp_path / "vitpos"  # the copy, not the package under test
    assert names == sorted([*vitpos.list_pos(), "test_scheme_xyz"]) and cls == "RampPosition"
