"""`python -m vitpos.diagnose`: the checklist's findings are right for every scheme."""

from __future__ import annotations

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
import torch

import vitpos
from vitpos.diagnose import SHUFFLE_NOISE, diagnose, report

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = dict(dim=64, depth=2, num_heads=2)


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_findings(pos):
    model = vitpos.create_model(pos, img_size=32, **SMALL)
    findings = diagnose(model, (32, 48))
    assert findings["grid"] == (8, 12) and findings["built_grid"] == (8, 8)
    assert (findings["shuffle_change"] > SHUFFLE_NOISE) == (pos != "none")
    assert set(findings["learned"]) == {name for name, _ in model.pos.named_parameters()}
    assert all(findings["learned"].values())  # every learned positional tensor gets a gradient
    assert set(findings["fixed"]) == {name for name, _ in model.pos.named_buffers()}
    assert (findings["pos_to_token_norm"] is not None) == model.pos.uses("add")
    assert "PROBLEM" not in report(findings)


def test_broken_scheme_is_reported():
    model = vitpos.create_model("1d_learned", img_size=32, **SMALL)
    model.pos.embedding.requires_grad_(False)  # a learned table that no longer trains
    model.pos.embedding.data.mul_(1e4)  # and drowns the patch content
    text = report(diagnose(model, 32))
    assert "[PROBLEM] learned pos.embedding gets no gradient" in text
    assert "[PROBLEM] positional / patch-token norm" in text


def test_cli():
    result = forked_cli.run(["-m", "vitpos.diagnose", "pos=2d_sin", "dim=64", "depth=2", "num_heads=2"])
    assert result.returncode == 0 and "[ok] position signal reaches the output" in result.stdout
    bad = forked_cli.run(["-m", "vitpos.diagnose", "pos=2d_sin", "img_size=30"])
    assert bad.returncode == 2 and bad.stderr.startswith("error: image size 30x30")


def test_a_run_folder_is_checked_at_its_checkpoints_own_size(tmp_path, capsys):
    from vitpos.diagnose import main

    model = vitpos.create_model("1d_learned", img_size=28, **SMALL)  # a 7 x 7 grid: 32 px would not divide
    checkpoints = tmp_path / "run" / "version_0" / "checkpoints"
    checkpoints.mkdir(parents=True)
    checkpoint = {
        "hyper_parameters": {"model": model.config},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
    }
    torch.save(checkpoint, checkpoints / "best-epoch3-step40.ckpt")
    assert main([f"ckpt={tmp_path / 'run'}"]) == 0
    out = capsys.readouterr().out
    assert "grid: 7 x 7 patches for this input (built for 7 x 7)" in out
    assert "conversions to another resolution: resize_mode=bicubic|bilinear (now bicubic)" in out
    assert "fuzzy positions in training: off" in out
