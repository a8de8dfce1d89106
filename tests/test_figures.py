"""`vitpos.figures`: which figures a scheme gets (by its hooks), what they measure, and the two
ways they are produced (the command on a checkpoint, the callback at the end of training)."""

from __future__ import annotations

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import vitpos
import vitpos.figures
from vitpos.plots import attention_distances, centre_index, make_figures, mosaic, positional_table, save_figures
from vitpos.train import train

pytestmark = pytest.mark.usefixtures("one_thread")


def build(pos: str, img_size=16, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return vitpos.create_model(
        pos, img_size=img_size, num_classes=4, in_chans=3, dim=16, depth=2, num_heads=2, patch_size=4, **kwargs
    )


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_every_scheme_gets_the_figures_of_its_hooks(pos, tmp_path):
    model = build(pos, img_size=(16, 12))
    figures = make_figures(model, torch.randn(3, 3, 16, 12))
    expected = {"attention_distance"}
    if model.pos.uses("add"):
        expected |= {"similarity", "table"}
    if model.pos.uses("bias"):
        expected.add("bias")
    if model.pos.uses("rotate"):
        expected.add("rotary")
    assert set(figures) == expected
    for path in save_figures(figures, tmp_path):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_mosaic_puts_each_patch_map_at_its_patch():
    grid = (2, 3)
    maps = torch.arange(6 * 6, dtype=torch.float32).reshape(6, 2, 3)  # map of patch n holds 6n..6n+5
    image = mosaic(maps, grid)
    assert image.shape == (2 * 3, 3 * 4)
    for patch in range(6):
        row, col = divmod(patch, 3)
        torch.testing.assert_close(image[row * 3 : row * 3 + 2, col * 4 : col * 4 + 3], maps[patch])
    assert torch.isnan(image[2]).all() and torch.isnan(image[:, 3]).all()  # separators


def test_centre_index():
    assert centre_index((3, 3)) == 4 and centre_index((8, 8)) == 4 * 8 + 4 and centre_index((2, 5)) == 5 + 2


@pytest.mark.parametrize("pos", ["1d_sin", "2d_sin", "2d_learned"])
def test_positional_table_is_what_add_adds(pos):
    model = build(pos)
    tokens = torch.randn(2, 16, 16)
    torch.testing.assert_close(
        model.pos.add(tokens, (4, 4)) - tokens, positional_table(model, (4, 4)).expand(2, -1, -1)
    )


def pairwise_mean_distance(grid, patch):  # independent of vitpos.figures.patch_distances
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    points = torch.stack([rows.flatten(), cols.flatten()], dim=-1).double() * patch
    return (points[:, None] - points[None]).norm(dim=-1).mean().item()


@pytest.mark.parametrize("pool", ["gap", "cls"])
def test_attention_distance_of_uniform_attention_is_the_mean_pairwise_distance(pool):
    model = build("none", img_size=(16, 12), pool=pool).eval()
    with torch.no_grad():
        for block in model.blocks:  # q = k = 0: every query attends uniformly
            block.attn.qkv.weight.zero_()
            block.attn.qkv.bias.zero_()
    distances = attention_distances(model, torch.randn(2, 3, 16, 12))
    assert distances.shape == (2, 2)
    torch.testing.assert_close(distances, torch.full((2, 2), pairwise_mean_distance((4, 3), 4)).float())


def test_attention_distance_follows_a_local_bias():
    """alibi_2d with huge slopes attends to the patch itself: distance ~0 (well above 0 with its own)."""
    model = build("alibi_2d").eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.zero_()
            block.attn.qkv.bias.zero_()
    images = torch.randn(2, 3, 16, 16)
    far = attention_distances(model, images)
    model.pos.cached.mul_(1e4)  # the built grid's bias table: 10^4 x the slopes
    near = attention_distances(model, images)
    assert near.max() < 1e-3 and far.min() > 1.0


@pytest.fixture
def figure_run(make_config, tiny_overrides):
    return train(
        make_config(
            ["pos=rope_axial", *tiny_overrides, "callbacks.figures={_target_:vitpos.callbacks.PositionalFigures}"]
        )
    )


def test_training_logs_the_figures_and_the_command_redraws_them(figure_run, tmp_path):
    run_dir = figure_run["log_dir"]
    events = EventAccumulator(run_dir, size_guidance={"images": 0})
    events.Reload()
    assert set(events.Tags()["images"]) == {"figures/rotary", "figures/attention_distance"}
    logged = sorted(p.name for p in (tmp_path / "logs").rglob("figures/*.png"))
    assert logged == ["attention_distance.png", "rotary.png"]

    out = tmp_path / "cli"
    result = forked_cli.run(
        [
            "-m",
            "vitpos.figures",
            f"ckpt={figure_run['checkpoint']}",
            f"out={out}",
            "images=8",
            f"data_dir={tmp_path / 'data'}",
        ]
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.glob("*.png")) == ["attention_distance.png", "rotary.png"]


@pytest.mark.parametrize("args", [[], ["ckpt=missing.ckpt"], ["pos=nope"], ["pos=none", "split=train"]])
def test_figures_cli_errors_are_one_line(args, capsys):
    assert vitpos.figures.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
