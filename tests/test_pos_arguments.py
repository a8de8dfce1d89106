"""Every scheme's constructor arguments are checked against the ranges its class declares
(`arguments`), before anything is built: generated over `list_pos()` and those declarations, so a
new scheme or argument is covered without a new test."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest

import vitpos
from vitpos.pos import get_pos_class, list_pos
from vitpos.pos.arguments import Argument, declared_arguments, scheme_parameters
from vitpos.train import train

ROOT = Path(__file__).resolve().parents[1]
CHOSEN_FROM_A_LIST = {"resize_mode"}  # one of the scheme's `resize_modes`, not a range


def bad_values(argument: Argument) -> list:
    """Values outside `argument`'s declaration: the wrong type, each side of its range, not finite;
    for a choice, a word it does not list and a non-word."""
    if argument.kind == "choice":
        return ["abc", 3, True, argument.choices[0].upper()]
    low = argument.low if argument.low is not None else 0
    below = low if argument.low_open else low - 1
    if argument.kind == "number":
        above = [] if argument.high is None else [argument.high + 1] + ([argument.high] if argument.high_open else [])
        return ["abc", True, math.nan, math.inf, below, *above]
    one = [int(below), int(low) + 1 if argument.odd else low + 0.5]  # an even number where odd ones are asked
    if argument.kind == "integer":
        return ["abc", True, *one]
    if argument.kind == "integers":
        return ["abc", 3, *[[value] for value in one]]
    return ["abc", [8], [8, 8, 8], *[[value, 8] for value in one]]  # an [H, W] grid


def user_arguments(name: str) -> dict[str, inspect.Parameter]:
    return {k: p for k, p in scheme_parameters(get_pos_class(name)).items() if k not in CHOSEN_FROM_A_LIST}


CASES = [
    (name, key, value)
    for name in list_pos()
    for key, argument in declared_arguments(get_pos_class(name)).items()
    if key in user_arguments(name)
    for value in bad_values(argument)
]


def build(name: str, **pos_kwargs):
    return vitpos.create_model(name, img_size=16, dim=32, depth=2, num_heads=2, patch_size=4, pos_kwargs=pos_kwargs)


@pytest.mark.parametrize("name", list_pos())
def test_every_argument_a_user_sets_is_declared_and_its_default_is_in_range(name):
    cls = get_pos_class(name)
    declared = declared_arguments(cls)
    for key, parameter in user_arguments(name).items():
        assert key in declared, f"pos={name}: declare the range of {key!r} in `arguments`"
        default = parameter.default
        assert default is None or declared[key].accepts(list(default) if isinstance(default, tuple) else default)
    build(name)  # the defaults build


def test_every_scheme_with_arguments_is_covered():
    """No scheme escapes the generated cases below by declaring nothing it takes."""
    covered = {name for name, _, _ in CASES}
    assert covered == {name for name in list_pos() if user_arguments(name)}
    assert {"theta", "temperature", "hidden_dim", "kernel_size", "ref_grid", "padding_mode"} <= {
        key for _, key, _ in CASES
    }


@pytest.mark.parametrize("name, key, value", CASES, ids=[f"{n}-{k}={v!r}" for n, k, v in CASES])
def test_an_argument_out_of_its_range_is_one_value_error_naming_it_and_its_range(name, key, value):
    argument = declared_arguments(get_pos_class(name))[key]
    with pytest.raises(ValueError) as refused:
        build(name, **{key: value})
    assert isinstance(refused.value, vitpos.ConfigError)
    message = str(refused.value)
    assert message.startswith(f"pos={name} needs {key} to be {argument.must()} ({argument.meaning})")
    assert message.endswith(f"got {key}={value!r}") and "\n" not in message


@pytest.mark.parametrize("name", list_pos())
def test_an_unknown_argument_is_refused_with_those_the_scheme_takes(name):
    with pytest.raises(vitpos.ConfigError, match=rf"^pos={name} has no argument 'hidden_size'; it takes .*fuzzy$"):
        build(name, hidden_size=8)


@pytest.mark.parametrize("key, setting", [("dim", "model.dim"), ("depth", "model.depth"), ("grid", "img_size")])
def test_an_argument_the_model_gives_is_refused_naming_the_model_setting(key, setting):
    with pytest.raises(vitpos.ConfigError, match=rf"pos.{key} is not a scheme setting: .* set {setting} instead"):
        build("2d_sin", **{key: 8})


def override(name: str, key: str, value: str) -> str:
    """`pos.key=value`, appended (`+`) where the scheme's YAML does not list the key."""
    listed = key in (ROOT / "configs" / "pos" / f"{name}.yaml").read_text()
    return f"{'' if listed else '+'}pos.{key}={value}"


CLI_CASES = sorted({(name, key) for name, key, _ in CASES})


@pytest.mark.parametrize("name, key", CLI_CASES, ids=[f"{n}-{k}" for n, k in CLI_CASES])
def test_a_bad_argument_on_the_command_line_is_refused_before_a_run_exists(
    name, key, make_config, tiny_overrides, tmp_path
):
    """Through Hydra a number may arrive as text (`pos.theta=abc`) or the wrong kind (`-1`)."""
    for value in ("abc", "-1"):
        with pytest.raises(vitpos.ConfigError, match=rf"^pos={name} needs {key} to be .* got {key}="):
            train(make_config([*tiny_overrides, f"pos={name}", override(name, key, value)]))
    assert not (tmp_path / "logs").exists()


def test_train_py_prints_the_one_line_and_exits_2(tmp_path):
    result = forked_cli.run(
        [
            str(ROOT / "train.py"),
            "data=synthetic",
            "model=vit_70k",
            "pos=cpb",
            "pos.hidden_dim=0",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "error: pos=cpb needs hidden_dim to be a positive integer (the MLP's hidden width), e.g. hidden_dim=512; "
        "got hidden_dim=0"
    )
    assert not (tmp_path / "logs").exists()
