"""Every command-line tool's own options are checked against its table (`vitpos.options.Option`):
a value of the wrong kind or out of range, or an option the chosen mode would ignore, is one
`error:` line (exit 2) before anything runs. Generated over the tables, so a new option is covered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vitpos import ConfigError, diagnose, evaluate, figures
from vitpos.model import MODEL_ARGS
from vitpos.options import DATA_OPTIONS, SEED_LIMIT, TRAIN_OPTIONS, Option
from vitpos.train import train

ROOT = Path(__file__).resolve().parents[1]
TABLES = {
    "train": TRAIN_OPTIONS,
    "data": DATA_OPTIONS,  # train.py's data.<key>
    "evaluate": evaluate.OPTIONS,
    "diagnose": diagnose.OPTIONS,
    "figures": figures.OPTIONS,
}


def bad_values(option: Option) -> list:
    """Values of the wrong kind, and each side of the option's range."""
    return {
        "flag": ["maybe", 1],
        "count": [option.low - 1, "abc", 2.5, True],
        "seed": [-1, SEED_LIMIT, 2**64, "abc", 1.5],
        "choice": ["nosuch", 3],
        "name": [3],
    }[option.kind]


def good_value(option: Option):
    """A valid value other than the one that means "not used"."""
    if option.kind == "choice":
        return next(choice for choice in option.choices if choice != option.unset)
    return {"flag": True, "name": "interpolate"}[option.kind]


def text(value) -> str:
    """`value` as the command line writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def run(tool: str, key: str, value, make_config, tiny_overrides, tmp_path, capsys) -> str:
    """The one error line of `tool` given `key=value` (train: its ConfigError, as train.py prints it)."""
    option = f"{'++data.' if tool == 'data' else ''}{key}={text(value)}"
    if tool in ("train", "data"):
        with pytest.raises(ConfigError) as refused:
            train(make_config([*tiny_overrides, option]))
        assert not (tmp_path / "logs").exists()
        return f"error: {refused.value}"
    argv = {
        "evaluate": [f"ckpt={tmp_path}", "img_sizes=[32]", option],
        "diagnose": ["pos=none", option],
        "figures": ["pos=none", f"out={tmp_path / 'figures'}", option],
    }[tool]
    assert vitpos_module(tool).main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and not (tmp_path / "figures").exists()
    return lines[0]


def vitpos_module(tool: str):
    return {"evaluate": evaluate, "diagnose": diagnose, "figures": figures}[tool]


CASES = [(tool, key, value) for tool, table in TABLES.items() for key, o in table.items() for value in bad_values(o)]


@pytest.mark.parametrize("tool, key, value", CASES, ids=[f"{t}-{k}={v!r}" for t, k, v in CASES])
def test_a_bad_value_is_one_line_naming_what_the_option_takes(
    tool, key, value, make_config, tiny_overrides, tmp_path, capsys
):
    must, name = TABLES[tool][key].must(), f"{'data.' if tool == 'data' else ''}{key}"
    line = run(tool, key, value, make_config, tiny_overrides, tmp_path, capsys)
    assert line.startswith(f"error: {name}=") and f" must be {must}, e.g. {name}=" in line


NEEDS = [(tool, key) for tool, table in TABLES.items() for key, option in table.items() if option.needs]


@pytest.mark.parametrize("tool, key", NEEDS, ids=[f"{t}-{k}" for t, k in NEEDS])
def test_an_option_the_mode_ignores_is_refused(tool, key, make_config, tiny_overrides, tmp_path, capsys):
    option = TABLES[tool][key]
    line = run(tool, key, good_value(option), make_config, tiny_overrides, tmp_path, capsys)
    assert re.fullmatch(rf"error: {key}=.* only matters with {option.needs}=\.\.\.; set {option.needs}, .*", line)


def test_the_mode_pairs_are_declared():
    """The pairs found by reading the code: each is refused without its mode."""
    assert {(key, option.needs) for key, option in TRAIN_OPTIONS.items() if option.needs} == {
        ("resize_mode", "finetune_from"),
        ("attn_temperature", "finetune_from"),
        ("curriculum_batch", "curriculum"),
        ("batch_by_tokens", "train_img_sizes"),
        ("ema_warmup", "ema_decay"),
    }
    assert ("overwrite", "out") in {(key, option.needs) for key, option in evaluate.OPTIONS.items() if option.needs}


CHECKED_ELSEWHERE = {  # train.yaml keys checked by their own code (tests/test_bad_inputs.py), or free text
    "img_size", "train_img_sizes", "curriculum", "checkpoint_every_n_steps", "check_finite_every",
    "experiment", "run_name", "resume", "finetune_from", "finetune_recipe", "loss", "paths",
    "ema_decay", "test_flip",  # ImageClassifier's check_evaluation_settings (tests/test_ema_flip.py)
}  # fmt: skip


def test_every_top_level_option_of_train_yaml_is_checked(make_config):
    cfg = make_config([])
    groups = {"pos", "data", "model", "trainer", "optim", "scheduler", "logger", "callbacks", "hydra"}
    keys = set(cfg) - groups
    assert keys - CHECKED_ELSEWHERE == set(TRAIN_OPTIONS), "declare the new option in vitpos.options.TRAIN_OPTIONS"


@pytest.mark.parametrize("tool", ["diagnose", "figures"])
@pytest.mark.parametrize("key", sorted({"pos", *MODEL_ARGS}))
def test_a_model_setting_beside_ckpt_is_refused_not_ignored(tool, key, tmp_path, capsys):
    assert vitpos_module(tool).main([f"ckpt={tmp_path}", f"{key}=1"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: ckpt= builds the model the checkpoint records, which ignores {key}; drop it, or drop " + (
        "ckpt= for a fresh model\n"
    )


@pytest.mark.parametrize(
    "device, message", [("tpu", "must be auto, cpu, cuda or cuda:<index>"), ("cuda:99", "is not on this machine")]
)
def test_evaluate_refuses_a_device_it_cannot_use(device, message, tmp_path, capsys):
    assert evaluate.main([f"ckpt={tmp_path}", "img_sizes=[32]", f"device={device}"]) == 2
    assert message in capsys.readouterr().err


def test_evaluate_refuses_a_size_listed_twice(tmp_path, capsys):
    assert evaluate.main([f"ckpt={tmp_path}", "img_sizes=[32,48,32]"]) == 2
    assert capsys.readouterr().err == "error: img_sizes lists 32px more than once; give each size once\n"


def test_evaluate_refuses_an_unknown_data_config(tmp_path, capsys):
    """Hydra's own error for data=<unknown> is a multi-line traceback."""
    from vitpos.config import data_config

    with pytest.raises(ConfigError, match="data='nosuch' is not a data config; use one of cifar10, "):
        data_config("nosuch")
