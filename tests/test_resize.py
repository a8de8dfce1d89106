"""Resolution transfer: checkpoints converted to other input sizes with each scheme's resize rule
(`load_model`, `VisionTransformer.resize`), the evaluate command, fine-tuning from a checkpoint at
another size, and the one-line errors of the whole path.

The per-scheme matrix uses checkpoints written directly in the format `read_checkpoint` reads (a
dict with `hyper_parameters.model` and a `model.`-prefixed `state_dict`), with the positional
parameters perturbed so that resampling is not a no-op; the evaluate and fine-tune tests use a
checkpoint written by a real (tiny) `train(cfg)` run.
"""

from __future__ import annotations

import csv
import math
import os
import shutil
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
import torch
from conftest import compose_config  # the Hydra composition train.py uses (tests/conftest.py)
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import vitpos
from vitpos import ConfigError, create_model, load_model
from vitpos.compare import compare
from vitpos.evaluate import main as evaluate_main
from vitpos.evaluate import subset_mask
from vitpos.pos import get_pos_class
from vitpos.resize import model_state, read_checkpoint
from vitpos.train import resume_checkpoint, train

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = vitpos.list_pos()
NUM_CLASSES = 4  # data=synthetic
TRAIN_SIZE = 32  # vit_70k has patch 4: an 8 x 8 grid
OTHER_SIZES = [48, (32, 48), (16, 64)]  # larger, rectangular, and same token count as 32x32 but 4 x 16


pytestmark = pytest.mark.usefixtures("one_thread")


def subprocess_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


# ----------------------------------------------------------------------------------------------
# checkpoints


def model_kwargs(pos: str, **pos_overrides) -> dict:
    """`create_model` arguments as train.py builds them: configs/model/vit_70k + configs/pos/<pos>."""
    pos_kwargs = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "pos" / f"{pos}.yaml"))
    pos_kwargs.pop("name")
    pos_kwargs.update(pos_overrides)
    model = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "vit_70k.yaml"))
    model.pop("compile")  # a training option, not an architecture argument (as in vitpos.assembly.model_config)
    return dict(model, pos=pos, pos_kwargs=pos_kwargs, img_size=TRAIN_SIZE, num_classes=NUM_CLASSES, in_chans=3)


def save_checkpoint(model: vitpos.VisionTransformer, path: Path, model_args: dict | None = None) -> Path:
    """Write `model` in the (Lightning) checkpoint layout `read_checkpoint` / `load_model` accept."""
    data = dict(
        _target_="vitpos.data.SyntheticDataModule",
        data_dir=str(path.parent / "data"),
        img_size=TRAIN_SIZE,
        batch_size=64,
        augment="none",
        num_train=256,
        num_test=64,
        val_size=64,
        seed=0,
    )
    checkpoint = {
        "hyper_parameters": {"model": model_args or model.config, "data": data},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
    }
    torch.save(checkpoint, path)
    return path


def perturb_positional_(model: vitpos.VisionTransformer, seed: int, std: float = 0.5) -> None:
    """Random positional parameters, far from their (near-zero) init, so resampling is non-trivial."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.pos.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * std)


@pytest.fixture(scope="module")
def scheme_ckpts(tmp_path_factory) -> dict[str, Path]:
    """One 32 px checkpoint per scheme (vit_70k, 4 classes), positional parameters perturbed."""
    folder = tmp_path_factory.mktemp("scheme_ckpts")
    paths = {}
    for index, pos in enumerate(SCHEMES):
        kwargs = model_kwargs(pos)
        torch.manual_seed(index)
        model = create_model(**kwargs)
        perturb_positional_(model, seed=100 + index)
        paths[pos] = save_checkpoint(model, folder / f"{pos}.ckpt", model_args=kwargs)
    return paths


@pytest.fixture(scope="module")
def _real_runs(tmp_path_factory) -> dict:
    return {"root": tmp_path_factory.mktemp("real_runs")}


@pytest.fixture
def real_ckpt(_real_runs, tiny_overrides) -> Path:
    """A checkpoint written by a real tiny `train(cfg)` run (2d_sin, synthetic data, 32 px),
    trained once per module (the first test asking for it pays)."""
    if "ckpt" not in _real_runs:
        cfg = compose_config(["pos=2d_sin", *tiny_overrides], _real_runs["root"])
        metrics = train(cfg)
        _real_runs["ckpt"] = Path(metrics["checkpoint"])
    return _real_runs["ckpt"]


def images(size, batch: int = 3) -> torch.Tensor:
    height, width = as_pair(size)
    generator = torch.Generator().manual_seed(height * 1000 + width)
    return torch.randn(batch, 3, height, width, generator=generator)


def logits(model: vitpos.VisionTransformer, size) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(images(size))


def as_pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def positional_state(model: vitpos.VisionTransformer) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of the scheme (learned tables and the fixed tables' caches)."""
    return {k: v.detach().clone() for k, v in [*model.pos.named_parameters(), *model.pos.named_buffers()]}


def rebuilt(model: vitpos.VisionTransformer) -> vitpos.VisionTransformer:
    """The model rebuilt from its own config and state dict alone."""
    copy = create_model(**model.config)
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def mode_cases() -> list[tuple[str, str | None]]:
    """(scheme, resize_mode) for every mode of every scheme; None for schemes without modes."""
    return [(pos, mode) for pos in SCHEMES for mode in (get_pos_class(pos).resize_modes or (None,))]


# ----------------------------------------------------------------------------------------------
# loading at the checkpoint's own size


@pytest.mark.parametrize("pos", SCHEMES)
def test_load_at_own_size_is_bit_identical(pos, scheme_ckpts):
    checkpoint = read_checkpoint(scheme_ckpts[pos])
    original = create_model(**checkpoint["hyper_parameters"]["model"])
    original.load_state_dict(model_state(checkpoint))
    expected = logits(original, TRAIN_SIZE)
    for model in (
        load_model(scheme_ckpts[pos]),
        load_model(scheme_ckpts[pos], img_size=TRAIN_SIZE),
        load_model(scheme_ckpts[pos], img_size=(TRAIN_SIZE, TRAIN_SIZE)),
    ):
        assert not model.training
        assert model.grid == (8, 8) and model.config["img_size"] == [TRAIN_SIZE, TRAIN_SIZE]
        assert torch.equal(logits(model, TRAIN_SIZE), expected)
        assert all(torch.equal(v, original.state_dict()[k]) for k, v in model.state_dict().items())


# ----------------------------------------------------------------------------------------------
# loading at another size


@pytest.mark.parametrize("size", OTHER_SIZES, ids=str)
@pytest.mark.parametrize("pos", SCHEMES)
def test_load_at_other_size_is_converted_and_self_describing(pos, size, scheme_ckpts, tmp_path):
    model = load_model(scheme_ckpts[pos], img_size=size)
    height, width = as_pair(size)
    out = logits(model, size)
    assert out.shape == (3, NUM_CLASSES) and torch.isfinite(out).all()
    assert model.grid == (height // 4, width // 4) and model.pos.grid == model.grid
    assert model.config["img_size"] == [height, width]
    assert torch.equal(logits(rebuilt(model), size), out)  # create_model(**config) + state dict
    # ... and so is a checkpoint written from the converted model
    again = load_model(save_checkpoint(model, tmp_path / "converted.ckpt"))
    assert again.grid == model.grid and torch.equal(logits(again, size), out)


@pytest.mark.parametrize("size", OTHER_SIZES, ids=str)
@pytest.mark.parametrize("pos,mode", mode_cases())
def test_converted_model_matches_the_unconverted_model_on_the_fly(pos, mode, size, scheme_ckpts):
    """One rule serves both paths: converting to `size` == feeding `size` images to the 32 px model."""
    on_the_fly = load_model(scheme_ckpts[pos], resize_mode=mode)  # still 32 px, configured with `mode`
    assert on_the_fly.grid == (8, 8)
    converted = load_model(scheme_ckpts[pos], img_size=size, resize_mode=mode)
    expected = logits(on_the_fly, size)
    torch.testing.assert_close(logits(converted, size), expected, atol=1e-5, rtol=0)
    # the rebuilt converted model too (its config carries the mode and, for sin-cos, the reference grid)
    torch.testing.assert_close(logits(rebuilt(converted), size), expected, atol=1e-5, rtol=0)


# Arguments other than the configs' defaults, per scheme: converting must keep them in the config
# (schemes not listed are checked with their config's arguments).
NON_DEFAULT_KWARGS = {
    "1d_learned": {"resize_mode": "bilinear"},
    "2d_learned": {"resize_mode": "nearest"},
    "1d_sin": {"temperature": 100.0, "resize_mode": "interpolate"},
    "2d_sin": {"temperature": 100.0, "resize_mode": "interpolate"},
    "rel_bias": {"resize_mode": "geometric"},
    "cpe": {"after_layers": [0, 1], "kernel_size": 5},
    "rope_axial": {"theta": 10000.0, "resize_mode": "interpolate"},
    "rope_mixed": {"theta": 100.0, "resize_mode": "interpolate"},
    "cpb": {"hidden_dim": 64},
    "alibi_2d": {"bias_max": 4.0},
    "rel_shaw": {"max_distance": 3},
    "lookhere": {"directions": 4, "field_of_view": 90.0, "slope": 0.5, "resize_mode": "extrapolate"},
    "fire": {"hidden_dim": 16},
}


@pytest.mark.parametrize("pos", SCHEMES)
def test_conversion_keeps_every_constructor_argument(pos):
    kwargs = model_kwargs(pos, **NON_DEFAULT_KWARGS.get(pos, {}))
    torch.manual_seed(0)
    model = create_model(**kwargs)
    perturb_positional_(model, seed=1)
    model.resize(48)  # no mode given: every scheme argument must survive
    kept = {k: model.config["pos_kwargs"].get(k, "<dropped>") for k in kwargs["pos_kwargs"]}
    assert kept == kwargs["pos_kwargs"], f"resize dropped or changed scheme arguments of pos={pos}"
    torch.testing.assert_close(logits(rebuilt(model), 48), logits(model, 48), atol=0, rtol=0)


# ----------------------------------------------------------------------------------------------
# round trips 32 -> 48 -> 32


def smooth_field(shape: tuple[int, int], channels: int, generator: torch.Generator) -> torch.Tensor:
    """A random smooth function sampled on an (H, W) grid: (H, W, C), three cosines per channel of
    at most one period over the grid's extent."""
    height, width = shape
    u = ((torch.arange(height) + 0.5) / height)[:, None, None, None]  # (H, 1, 1, 1)
    v = ((torch.arange(width) + 0.5) / width)[None, :, None, None]  # (1, W, 1, 1)
    amp, fy, fx, phase = (
        torch.rand(4, 3, channels, generator=generator) * torch.tensor([2.0, 1, 1, 2 * math.pi])[:, None, None]
    ).unbind(0)  # each (3, C)
    return (amp * torch.cos(2 * math.pi * (fy * u + fx * v) + phase)).sum(dim=2)  # (H, W, C)


def smooth_1d_learned(pos, generator):
    pos.embedding.copy_(smooth_field(pos.grid, pos.dim, generator).reshape(1, -1, pos.dim))


def smooth_2d_learned(pos, generator):
    pos.rows.copy_(smooth_field((pos.grid[0], 1), pos.dim // 2, generator)[:, 0])
    pos.cols.copy_(smooth_field((1, pos.grid[1]), pos.dim // 2, generator)[0])


def smooth_rel_bias(pos, generator):
    offsets = (2 * pos.grid[0] - 1, 2 * pos.grid[1] - 1)
    for layer in pos.layers:
        table = smooth_field(offsets, pos.num_heads, generator)  # (2H-1, 2W-1, heads)
        layer.relative_position_bias_table.copy_(table.reshape(-1, pos.num_heads))


SMOOTH_TABLES = {"1d_learned": smooth_1d_learned, "2d_learned": smooth_2d_learned, "rel_bias": smooth_rel_bias}

# Round trip 32 -> 48 -> 32 of a learned table resamples twice, which is lossy; how lossy depends
# on the table. Learned position tables are smooth (neighbouring positions get similar vectors,
# ViT fig. 7), so the tables here are random smooth fields (`smooth_field`). Measured over seeds
# 0..9 (relative L2 error of all the scheme's tables; max |logit error| / max(1, max |logit|)):
#   1d_learned (bicubic up, antialiased bicubic down): table 2.9-3.2e-2, logits 1.3-4.3e-3
#   2d_learned (linear, half-pixel centres):           table 3.5-4.3e-2, logits 0.5-1.7e-2
#   rel_bias   (bicubic, corners aligned):             table 3.0-7.6e-3, logits 0.5-2.3e-5
# The error is the blur of resampling twice (only 60 % of it at the border positions, so not just
# edge clamping). The bounds below are about 2x the worst measured value. (iid noise tables, which
# no resampler can keep, lose 38 %, 29 % and 8 %: the round trip is a low-pass filter, not a bug.)
# Fixed sin-cos tables are recomputed from positions measured on the reference grid, so their
# round trip is exact up to float rounding; schemes without positional state are untouched.
ROUND_TRIP_TOL = {  # scheme -> (relative table error, relative logit error)
    "1d_learned": (6e-2, 1e-2),
    "2d_learned": (8e-2, 3.5e-2),
    "rel_bias": (1.5e-2, 1e-4),
}
EXACT_TOL = (1e-6, 1e-5)  # everything else, a new scheme included until it states its own


def round_trip_cases() -> list[tuple[str, str | None]]:
    """Fixed schemes (no parameters) in every mode; learned schemes in their default mode."""
    cases = []
    for pos in SCHEMES:
        learned = bool(list(create_model(**model_kwargs(pos)).pos.parameters()))
        modes = get_pos_class(pos).resize_modes
        cases += [(pos, None)] if learned or not modes else [(pos, mode) for mode in modes]
    return cases


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("pos,mode", round_trip_cases())
def test_round_trip_32_48_32(pos, mode, seed):
    torch.manual_seed(seed)
    model = create_model(**model_kwargs(pos))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        SMOOTH_TABLES.get(pos, lambda *_: perturb_positional_(model, seed))(model.pos, generator)
    before, expected = positional_state(model), logits(model, TRAIN_SIZE)

    model.resize(48, mode)
    assert model.grid == (12, 12)
    model.resize(TRAIN_SIZE)
    assert model.grid == (8, 8) and model.config["img_size"] == [TRAIN_SIZE, TRAIN_SIZE]

    table_tol, logit_tol = ROUND_TRIP_TOL.get(pos, EXACT_TOL)
    after = positional_state(model)
    assert after.keys() == before.keys()
    for name, table in before.items():
        assert after[name].shape == table.shape, name
        if not table.is_floating_point():  # index buffers
            assert torch.equal(after[name], table), name
    floats = [name for name, table in before.items() if table.is_floating_point()]
    if floats:
        old = torch.cat([before[n].flatten() for n in floats])
        new = torch.cat([after[n].flatten() for n in floats])
        assert (new - old).norm() <= table_tol * old.norm()
    out = logits(model, TRAIN_SIZE)
    assert (out - expected).abs().max() <= logit_tol * max(1.0, expected.abs().max().item())


# ----------------------------------------------------------------------------------------------
# what the fixed sin-cos modes mean


@pytest.mark.parametrize("pos", ["2d_sin", "1d_sin"])
def test_interpolate_rescales_and_extrapolate_extends(pos):
    native = create_model(**model_kwargs(pos))  # 32 px: 8 x 8
    table8 = native.pos.table((8, 8)).reshape(8, 8, -1)

    interpolated = create_model(**model_kwargs(pos)).resize(64, "interpolate")  # 16 x 16, same image finer
    table16 = interpolated.pos.table(interpolated.grid).reshape(16, 16, -1)
    torch.testing.assert_close(table16[2, 2], table8[1, 1], atol=1e-6, rtol=0)
    torch.testing.assert_close(table16[::2, ::2], table8, atol=1e-6, rtol=0)  # every even position
    assert (table16[1::2, 1::2] - table8).abs().max() > 1e-2  # odd positions lie in between

    extrapolated = create_model(**model_kwargs(pos)).resize(64, "extrapolate")  # 16 x 16, larger image
    table16 = extrapolated.pos.table(extrapolated.grid).reshape(16, 16, -1)
    if pos == "2d_sin":  # row and column are separate channels: the top-left block is the old table
        torch.testing.assert_close(table16[:8, :8], table8, atol=1e-6, rtol=0)
    else:  # 1d_sin counts tokens row-major: the first row continues past the old width
        torch.testing.assert_close(table16[0, :8], table8[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(table16.reshape(256, -1)[:64], table8.reshape(64, -1), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------------------------
# same token count, another shape (the timm PR #2737 bug: such a 1D table came back unchanged)


@pytest.mark.parametrize("old_size,new_size", [(32, (16, 64)), ((16, 64), 32)], ids=["8x8->4x16", "4x16->8x8"])
@pytest.mark.parametrize("mode", get_pos_class("1d_learned").resize_modes)
def test_1d_learned_same_token_count_other_shape_is_resampled(old_size, new_size, mode):
    kwargs = dict(model_kwargs("1d_learned", resize_mode=mode), img_size=old_size)
    model = create_model(**kwargs)
    old_grid, dim = model.grid, model.config["dim"]
    new_grid = (as_pair(new_size)[0] // 4, as_pair(new_size)[1] // 4)
    assert old_grid[0] * old_grid[1] == new_grid[0] * new_grid[1] and old_grid != new_grid
    generator = torch.Generator().manual_seed(0)

    def converted(embedding: torch.Tensor) -> torch.Tensor:
        copy = create_model(**kwargs)
        with torch.no_grad():
            copy.pos.embedding.copy_(embedding.reshape(1, -1, dim))
        on_the_fly = copy.pos.table(new_grid).detach().clone()
        copy.resize(new_size)  # the configured mode
        table = copy.pos.embedding.detach()[0]
        torch.testing.assert_close(table, on_the_fly, atol=1e-6, rtol=0)  # the forward path agrees
        return table.reshape(*new_grid, dim)

    # a random table is really resampled, not reinterpreted row-major
    embedding = torch.randn(*old_grid, dim, generator=generator)
    assert not torch.allclose(converted(embedding), embedding.reshape(*new_grid, dim), atol=1e-2)

    # an embedding that varies only by column still varies only by column (and likewise for rows)
    by_col = torch.randn(1, old_grid[1], dim, generator=generator).expand(*old_grid, dim)
    table = converted(by_col)
    torch.testing.assert_close(table, table[:1].expand_as(table), atol=1e-5, rtol=0)
    assert (table[0, 1:] - table[0, :-1]).abs().amax(dim=-1).min() > 1e-3
    by_row = torch.randn(old_grid[0], 1, dim, generator=generator).expand(*old_grid, dim)
    table = converted(by_row)
    torch.testing.assert_close(table, table[:, :1].expand_as(table), atol=1e-5, rtol=0)
    assert (table[1:, 0] - table[:-1, 0]).abs().amax(dim=-1).min() > 1e-3


# ----------------------------------------------------------------------------------------------
# the evaluate command


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_outputs(out: Path, pos: str) -> list[dict]:
    for name in ("resolution.md", "resolution.csv", "resolution.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "resolution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_csv(out / "resolution.csv")
    assert [row["img_size"] for row in rows] == ["32px", "48px"]  # one row per size
    assert [row["pixels"] for row in rows] == ["native", "upsampled"]  # of the 32 px synthetic images
    for row in rows:
        assert row["pos"] == pos and row["trained_at"] == "32px" and row["split"] == "test"
        assert 0.0 <= float(row["acc"]) <= 1.0
    lines = (out / "resolution.md").read_text().split("\n\n")[0].splitlines()  # the table, then a subset's note
    assert lines[0] == "| run | pos | trained at | 32px native | 48px upsampled |"
    assert len(lines) == 3 and f"| {pos} | 32px |" in lines[2]
    assert lines[2].endswith(" | ".join(f"{100 * float(row['acc']):.2f}" for row in rows) + " |")
    return rows


@pytest.fixture
def real_run_copy(real_ckpt, tmp_path) -> Path:
    """The real checkpoint in a private copy of its run folder (evaluate writes TensorBoard events there)."""
    run_root = real_ckpt.parents[2]  # logs/<run>/version_N/checkpoints/<file>
    copy = tmp_path / "logs" / run_root.name
    shutil.copytree(run_root, copy)
    return copy / real_ckpt.relative_to(run_root)


def test_evaluate_writes_table_csv_plot_and_tensorboard(real_run_copy, tmp_path):
    out = tmp_path / "eval"
    # limit=99 ends on a partial batch. (This 2-step model predicts one class everywhere, so its macro
    # accuracy is 0.25 at every size: the checks below are about wiring, not about the values.)
    assert evaluate_main([f"ckpt={real_run_copy}", "img_sizes=[32,48]", f"out={out}", "batch_size=64", "limit=99"]) == 0
    rows = check_outputs(out, "2d_sin")
    assert all(row["checkpoint"] == str(real_run_copy) for row in rows)
    assert {row["images"] for row in rows} == {"99"}  # the subset is named in the CSV and under the table
    assert (out / "resolution.md").read_text().endswith("\n\nOn 99 test images drawn at random (`limit=99`, seed 0).\n")

    run_dir = real_run_copy.parent.parent
    events = EventAccumulator(str(run_dir))
    events.Reload()
    tags = events.Tags()["scalars"]  # 99 of the split's images: a tag of their own, never the whole split's
    assert "resolution/test_acc_99img" in tags and "resolution/test_acc" not in tags
    logged = {event.step: event.value for event in events.Scalars("resolution/test_acc_99img")}
    assert sorted(logged) == [32, 48]  # step = image height
    for row in rows:  # the CSV rounds to 4 decimals
        assert abs(logged[int(row["img_size"].removesuffix("px"))] - float(row["acc"])) <= 5e-5

    # the same through the command line, with the run folder instead of the file
    cli_out = tmp_path / "eval_cli"
    result = forked_cli.run(
        [
            "-m",
            "vitpos.evaluate",
            f"ckpt={run_dir}",
            "img_sizes=[32,48]",
            f"out={cli_out}",
            "batch_size=64",
            "limit=99",
        ],
        cwd=tmp_path,
        env=subprocess_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    cli_rows = check_outputs(cli_out, "2d_sin")
    assert [row["acc"] for row in cli_rows] == [row["acc"] for row in rows]


def test_evaluate_best_chooses_on_validation_and_tests_only_the_choice(scheme_ckpts, tmp_path, monkeypatch):
    """resize_mode=best: every (mode, temperature) pair is scored on the validation split, and only
    the winner is evaluated on the test split, whose numbers cannot change the choice."""
    val_scores = {"extrapolate": 0.1, "interpolate": 0.3, "ntk": 0.2, "yarn": 0.25}
    test_calls = []

    def fake_accuracy(model, datamodule, split, device, mask, doing="", flip=False):
        mode, temperature = model.config["pos_kwargs"]["resize_mode"], model.config["attn_temperature"]
        if split == "val":
            return val_scores[mode] + (0.01 if temperature == "log" else 0.0)
        test_calls.append((datamodule.img_size, mode, temperature))
        return 0.9 if mode == "extrapolate" else 0.5  # the test split would prefer another conversion

    monkeypatch.setattr("vitpos.evaluate.accuracy", fake_accuracy)
    out = tmp_path / "eval"
    assert (
        evaluate_main(
            [f"ckpt={scheme_ckpts['2d_sin']}", "img_sizes=[32,48]", "resize_mode=best", "batch_size=64", f"out={out}"]
        )
        == 0
    )
    # at the trained size every conversion is the model as trained (identities tested above): no search
    assert test_calls == [((32, 32), "extrapolate", "none"), ((48, 48), "interpolate", "log")]
    rows = read_csv(out / "resolution.csv")
    assert [(r["resize_mode"], r["attn_temperature"], r["chosen_on"], r["acc"]) for r in rows] == [
        ("extrapolate", "none", "trained size", "0.9"),
        ("interpolate", "log", "val", "0.5"),
    ]


def test_evaluate_all_gives_every_conversion_the_numbers_and_tag_of_its_own_command(
    scheme_ckpts, real_run_copy, tmp_path
):
    """resize_mode=all: each (mode, temperature) pair of the scheme on the split, each the accuracy
    the same conversion forced in its own command gets, and logged under that command's tag."""
    options = ["img_sizes=[32,48]", "batch_size=64", "limit=64"]
    assert (
        evaluate_main([f"ckpt={scheme_ckpts['2d_sin']}", "resize_mode=all", *options, f"out={tmp_path / 'all'}"]) == 0
    )
    rows = read_csv(tmp_path / "all" / "resolution.csv")
    pairs = [(mode, t) for mode in get_pos_class("2d_sin").resize_modes for t in ("none", "log")]
    assert sorted((r["img_size"], r["resize_mode"], r["attn_temperature"]) for r in rows) == sorted(
        (size, mode, t) for size in ("32px", "48px") for mode, t in pairs
    )
    for mode, t in [("ntk", "log"), ("extrapolate", "none")]:
        out = tmp_path / f"{mode}_{t}"
        forced = [f"resize_mode={mode}", f"attn_temperature={t}"]
        assert evaluate_main([f"ckpt={scheme_ckpts['2d_sin']}", *forced, *options, f"out={out}"]) == 0
        alone = {r["img_size"]: r["acc"] for r in read_csv(out / "resolution.csv")}
        together = {r["img_size"]: r["acc"] for r in rows if (r["resize_mode"], r["attn_temperature"]) == (mode, t)}
        assert together == alone
    table = (tmp_path / "all" / "resolution.md").read_text().splitlines()
    assert "conversion" in table[0] and len(table) == 2 + len(pairs)  # a row per conversion
    assert {r["images"] for r in rows} == {"64"}  # the whole test split: limit=64 drew no subset, nor says so

    run = real_run_copy.parents[1]
    assert evaluate_main([f"ckpt={real_run_copy}", "resize_mode=all", *options, f"out={tmp_path / 'run'}"]) == 0
    events = EventAccumulator(str(run))
    events.Reload()
    logged = {tag for tag in events.Tags()["scalars"] if tag.startswith("resolution/")}
    assert logged == {f"resolution/test_acc_{mode}_t{t}_64img" for mode, t in pairs}  # limit=64: a subset
    # compare files the grid under extrapolation.md (a row per conversion, then the best per size), not the table
    compare(tmp_path / "logs", out=tmp_path / "compared")
    grid = (tmp_path / "compared" / "extrapolation.md").read_text().split("The best conversion at each size:")
    assert len(grid) == 2 and sum(line.startswith("| 2d_sin | exact |") for line in grid[0].splitlines()) == len(pairs)
    assert [line.split(" | ")[:2] for line in grid[1].splitlines() if line.startswith("| 2d_sin")] == [
        ["| 2d_sin", "exact"]
    ]
    assert "_tlog" not in (tmp_path / "compared" / "compare.md").read_text()


def test_a_limited_evaluation_draws_every_class_of_a_split_stored_class_by_class():
    labels = torch.arange(10).repeat_interleave(100)  # an image tree's order: class by class
    mask = subset_mask(len(labels), 50)
    assert mask.sum() == 50 and torch.equal(mask, subset_mask(len(labels), 50))  # the same images every time
    assert set(labels[mask].tolist()) == set(range(10))  # not the first 50 (one class)
    assert subset_mask(len(labels), None) is None and subset_mask(len(labels), 5000) is None


def test_load_model_with_a_temperature_measures_it_from_the_training_size(scheme_ckpts):
    model = load_model(scheme_ckpts["rope_axial"], img_size=64, attn_temperature="log")
    assert model.config["attn_temperature"] == "log" and model.config["temperature_ref_size"] == [32, 32]
    assert model.temperature(model.grid) == pytest.approx(math.log(16 * 16) / math.log(8 * 8))
    assert load_model(scheme_ckpts["rope_axial"], img_size=64).temperature(model.grid) == 1.0


def test_evaluate_reads_but_never_writes_into_an_unfinished_run(real_run_copy, tmp_path, capsys):
    run = real_run_copy.parent.parent
    (run / "results.json").unlink()  # as a run still training
    assert (
        evaluate_main(
            [f"ckpt={real_run_copy}", "img_sizes=[32]", f"out={tmp_path / 'eval'}", "batch_size=64", "limit=64"]
        )
        == 0
    )
    assert "has not finished (no results.json)" in capsys.readouterr().out
    assert not list(run.glob("*.resolution"))  # no events written into the run
    assert read_csv(tmp_path / "eval" / "resolution.csv")[0]["img_size"] == "32px"


def test_evaluate_says_what_it_evaluates_and_prints_percent(scheme_ckpts, tmp_path, capsys):
    """A line on stderr before each evaluation (which checkpoint of how many, the size, the split),
    and each accuracy in percent, as training's summary prints it."""
    checkpoints = f"ckpt=[{scheme_ckpts['2d_sin']},{scheme_ckpts['cpe']}]"
    out = tmp_path / "eval"
    assert evaluate_main([checkpoints, "img_sizes=[32,48]", "batch_size=64", "limit=40", f"out={out}"]) == 0
    printed = capsys.readouterr()
    announced = [line for line in printed.err.splitlines() if line.startswith("vitpos.evaluate: ")]
    assert [line.split(" (", 1)[1] for line in announced] == [
        f"checkpoint {n}/2) at {size}px ({pixels}), test split, 40 images"
        for n in (1, 2)
        for size, pixels in ((32, "native pixels"), (48, "upsampled from 32px"))
    ]
    rows = read_csv(out / "resolution.csv")
    results = [line for line in printed.out.splitlines() if " test acc " in line]
    assert [line.rsplit(" test acc ", 1)[1] for line in results] == [f"{100 * float(r['acc']):.2f}%" for r in rows]


def test_evaluate_names_a_scheme_setting_away_from_its_yaml_as_compare_does(scheme_ckpts, tmp_path):
    """Two cpe checkpoints, one with circular padding: their rows say which is which, with the label
    `vitpos.compare` gives the run (`runs.scheme_label`), so a table never takes one for the other."""
    circular = torch.load(scheme_ckpts["cpe"], map_location="cpu", weights_only=False)
    circular["hyper_parameters"]["model"]["pos_kwargs"]["padding_mode"] = "circular"
    torch.save(circular, tmp_path / "circular.ckpt")
    out = tmp_path / "eval"
    checkpoints = f"ckpt=[{scheme_ckpts['cpe']},{tmp_path / 'circular.ckpt'}]"
    assert evaluate_main([checkpoints, "img_sizes=[32]", "batch_size=64", "limit=40", f"out={out}"]) == 0
    rows = read_csv(out / "resolution.csv")
    assert [(row["run"], row["pos"]) for row in rows] == [("cpe", "cpe"), ("circular", "cpe+padding_mode=circular")]
    assert "| circular | cpe+padding_mode=circular | 32px |" in (out / "resolution.md").read_text()


def test_evaluate_never_overwrites_an_earlier_evaluation(scheme_ckpts, tmp_path, monkeypatch, capsys):
    """By default each evaluation writes a folder of its own (logs/evaluate/<date>_<time>, `_2` for a
    second one in the same second); an out= that holds tables is refused unless overwrite=true."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VITPOS_LOG_DIR", raising=False)
    options = [f"ckpt={scheme_ckpts['none']}", "img_sizes=[32]", "batch_size=64", "limit=8"]

    class Clock:  # both evaluations start in the same second
        @staticmethod
        def now():
            return datetime(2030, 1, 2, 3, 4, 5)

    monkeypatch.setattr("vitpos.resolution_report.datetime", Clock)
    assert evaluate_main(options) == 0 and evaluate_main(options) == 0
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("resolution.md"))
    assert written == [
        "logs/evaluate/2030-01-02_03-04-05/resolution.md",
        "logs/evaluate/2030-01-02_03-04-05_2/resolution.md",
    ]
    earlier = tmp_path / "logs" / "evaluate" / "2030-01-02_03-04-05"
    before = (earlier / "resolution.csv").read_text()
    capsys.readouterr()
    assert evaluate_main([*options, "img_sizes=[48]", f"out={earlier}"]) == 2
    assert capsys.readouterr().err == (
        f"error: {earlier} holds an earlier evaluation's resolution.md, resolution.csv, resolution.png; pass "
        "another out= (by default each evaluation writes a new folder under logs/evaluate/), or overwrite=true "
        "to replace them\n"
    )
    assert (earlier / "resolution.csv").read_text() == before
    assert evaluate_main([*options, "img_sizes=[48]", f"out={earlier}", "overwrite=true"]) == 0
    assert read_csv(earlier / "resolution.csv")[0]["img_size"] == "48px"


def test_evaluate_cli_missing_checkpoint_is_one_error_line(tmp_path):
    result = forked_cli.run(
        ["-m", "vitpos.evaluate", "ckpt=/nonexistent"], cwd=tmp_path, env=subprocess_env(), timeout=300
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert "checkpoint not found" in error_lines[0] and "/nonexistent" in error_lines[0]
    assert not (tmp_path / "logs").exists()  # nothing written


# ----------------------------------------------------------------------------------------------
# fine-tuning from a checkpoint at another size


def test_finetune_starts_from_the_converted_checkpoint(real_ckpt, make_config, tiny_overrides):
    # lr=0: AdamW (with weight decay scaled by lr) leaves every weight where fine-tuning started
    cfg = make_config(["pos=2d_sin", *tiny_overrides, "img_size=48", f"finetune_from={real_ckpt}", "optim.lr=0.0"])
    metrics = train(cfg)
    assert math.isfinite(metrics["test/loss"])
    run_dir = Path(metrics["log_dir"])
    assert "48px" in run_dir.parent.name and "from_32px" in run_dir.parent.name
    assert run_dir.parent.name == f"2d_sin_synthetic_48px_from_32px_seed{cfg.seed}"
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["hyper_parameters"]["model"]["img_size"] == [48, 48]
    expected = load_model(real_ckpt, img_size=48).state_dict()
    state = model_state(checkpoint)
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], v) for k, v in expected.items())
    finetuned = load_model(run_dir / "checkpoints" / "last.ckpt")  # and the result loads at 48 px
    assert finetuned.grid == (12, 12) and torch.isfinite(logits(finetuned, 48)).all()


# ----------------------------------------------------------------------------------------------
# errors: one line, vitpos.ConfigError, naming the fix


def assert_one_line(error: pytest.ExceptionInfo, *parts: str) -> None:
    message = str(error.value)
    assert isinstance(error.value, ConfigError)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


def test_finetune_from_another_scheme_is_refused(real_ckpt, make_config, tiny_overrides, tmp_path):
    cfg = make_config(["pos=1d_learned", *tiny_overrides, "img_size=48", f"finetune_from={real_ckpt}"])
    with pytest.raises(ConfigError) as error:
        train(cfg)
    assert_one_line(error, str(real_ckpt), "pos=2d_sin", "pos=1d_learned", "pass pos=2d_sin")
    assert not list((tmp_path / "logs").glob("1d_learned*"))  # no half-made run folder


@pytest.mark.parametrize("size", [30, (32, 30)], ids=str)
def test_size_not_divisible_by_patch(size, scheme_ckpts):
    height, width = as_pair(size)
    for pos in SCHEMES:
        with pytest.raises(ConfigError) as error:
            load_model(scheme_ckpts[pos], img_size=size)
        assert_one_line(error, f"{height}x{width}", "patch size 4", "use a multiple of 4")


def test_finetune_to_size_not_divisible_by_patch(real_ckpt, make_config, tiny_overrides):
    cfg = make_config(["pos=2d_sin", *tiny_overrides, "img_size=30", f"finetune_from={real_ckpt}"])
    with pytest.raises(ConfigError) as error:
        train(cfg)
    assert_one_line(error, "30x30", "patch size 4", "use a multiple of 4")


def test_resume_takes_a_checkpoint_of_the_same_model_and_names_what_another_one_changes(tmp_path):
    """Resuming with the model arguments the checkpoint records is no change of model; another
    drop_rate is one, named with its old and new value."""
    today = model_kwargs("2d_sin")
    path = tmp_path / "run" / "version_0" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    save_checkpoint(create_model(**today), path, model_args=today)
    resume = OmegaConf.create({"resume": str(path)})
    assert resume_checkpoint(resume, tmp_path, "run", SimpleNamespace(hparams={"model": today})) == path
    with pytest.raises(ConfigError, match=r"drop_rate: 0\.0 -> 0\.1"):
        resume_checkpoint(resume, tmp_path, "run", SimpleNamespace(hparams={"model": {**today, "drop_rate": 0.1}}))


def test_missing_checkpoint(tmp_path):
    missing = tmp_path / "no_such.ckpt"
    with pytest.raises(ConfigError) as error:
        load_model(missing)
    assert_one_line(error, "checkpoint not found", str(missing), "pass a run folder or the path of a .ckpt")
    with pytest.raises(ConfigError) as error:
        load_model(tmp_path)  # a folder stands for the best checkpoint of its run: there is none
    assert_one_line(error, "no checkpoint found in", str(tmp_path))


CORRUPT = "cannot read checkpoint"
CORRUPT_FIX = "no other checkpoint is beside it"  # each of these tests' folder holds the one file


def test_a_corrupt_last_checkpoint_names_the_best_one_beside_it(tmp_path):
    for name in ("best-epoch2-step30.ckpt", "best-epoch9-step90.ckpt"):
        (tmp_path / name).write_bytes(b"a checkpoint")
    last = tmp_path / "last.ckpt"
    last.write_bytes(b"garbage")
    with pytest.raises(ConfigError) as error:
        load_model(last)
    best = tmp_path / "best-epoch9-step90.ckpt"
    assert_one_line(error, CORRUPT, str(last), f"use {best} beside it", f"resume={best}")


@pytest.mark.parametrize("fraction", [0.0, 1e-5, 0.01, 0.5, 0.999])
def test_truncated_checkpoint(fraction, real_ckpt, tmp_path):
    data = real_ckpt.read_bytes()
    path = tmp_path / "truncated.ckpt"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ConfigError) as error:
        load_model(path)
    assert_one_line(error, CORRUPT, str(path), CORRUPT_FIX)


CORRUPT_CONTENTS = {
    "random": bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0)).tolist()),
    "text": b"hello, this is not a checkpoint\n",
    "html": b"<!DOCTYPE html>\n<html><body>404 Not Found</body></html>\n",
    "git_lfs_pointer": b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 884813\n",
    "zero_filled": bytes(4096),  # a preallocated file never written (crash while saving)
}


@pytest.mark.parametrize("name", CORRUPT_CONTENTS)
def test_corrupt_checkpoint(name, tmp_path):
    path = tmp_path / f"{name}.ckpt"
    path.write_bytes(CORRUPT_CONTENTS[name])
    with pytest.raises(ConfigError) as error:
        load_model(path)
    assert_one_line(error, CORRUPT, str(path), CORRUPT_FIX)


def test_random_bytes_never_escape_as_another_exception(tmp_path):
    """Whatever random bytes a corrupt file holds (every possible first byte, which picks the
    pickle opcode torch.load starts with), reading it is a one-line ConfigError."""
    path = tmp_path / "random.ckpt"
    escaped = {}
    for first in range(256):
        tail = torch.randint(0, 256, (512,), generator=torch.Generator().manual_seed(first)).tolist()
        path.write_bytes(bytes([first, *tail]))
        try:
            read_checkpoint(path)
            escaped[first] = "no error"
        except ConfigError as error:
            assert "\n" not in str(error)
        except Exception as error:  # collecting what escapes
            escaped[first] = f"{type(error).__name__}: {str(error)[:60]}"
    assert not escaped, f"{len(escaped)} of 256 first bytes escape: {escaped}"


def test_file_that_is_not_a_vitpos_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(ConfigError) as error:
        load_model(path)
    assert_one_line(error, "not a vitpos checkpoint", "use a .ckpt written by train.py")


def test_mode_the_scheme_does_not_support(scheme_ckpts):
    with pytest.raises(ConfigError) as error:
        load_model(scheme_ckpts["rel_bias"], resize_mode="interpolate")
    assert_one_line(error, "pos=rel_bias", "'interpolate'", "choose one of bicubic, geometric")
    with pytest.raises(ConfigError) as error:
        load_model(scheme_ckpts["cpe"], resize_mode="bicubic")
    assert_one_line(error, "pos=cpe", "'bicubic'", "leave resize_mode unset")


@pytest.mark.parametrize("size", [None, 48], ids=str)
@pytest.mark.parametrize("pos", SCHEMES)
def test_unknown_mode_names_the_choices(pos, size, scheme_ckpts):
    with pytest.raises(ConfigError) as error:
        load_model(scheme_ckpts[pos], img_size=size, resize_mode="no_such_mode")
    modes = get_pos_class(pos).resize_modes
    assert_one_line(
        error,
        f"pos={pos}",
        "'no_such_mode'",
        f"choose one of {', '.join(modes)}" if modes else "leave resize_mode unset",
    )


def test_cli_finetune_takes_the_checkpoints_data_and_refuses_architecture_overrides(real_ckpt, tmp_path):
    """`python train.py pos=... img_size=48 finetune_from=...` with no data= fine-tunes on the
    checkpoint's dataset (synthetic here, not the default CIFAR-10), says so, and prints the grid
    conversion; a model override the checkpoint would replace is refused with the difference."""
    common = [
        str(ROOT / "train.py"),
        "pos=2d_sin",
        "img_size=48",
        f"finetune_from={real_ckpt}",
        f"paths.log_dir={tmp_path / 'logs'}",
        "trainer.max_steps=1",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
        "trainer.devices=1",
        "callbacks.figures=null",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = forked_cli.run(common, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fine-tuning on data=synthetic" in result.stdout
    assert "grid 8x8 -> 12x12 (extrapolate)" in result.stdout
    refused = forked_cli.run([*common, "model.depth=3"], cwd=tmp_path, env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert [line for line in refused.stderr.splitlines() if line.startswith("error:")] == [
        "error: fine-tuning keeps the checkpoint's architecture, but model.depth=3 (checkpoint: 2); drop these "
        "overrides (resize_mode= picks how positions are converted)"
    ]
