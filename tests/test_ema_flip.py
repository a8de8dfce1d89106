"""Weight EMA (`ema_decay`) and test-time flip averaging (`test_flip`): what the checkpoint holds,
what validation, test and `vitpos.evaluate` use, and the averages' defining properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from vitpos.evaluate import evaluate
from vitpos.model import create_model
from vitpos.resize import model_state
from vitpos.train import train
from vitpos.tta import flip_averaged, predict


def weights(checkpoint: Path, prefix: str) -> dict:
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


def run_folder(metrics: dict) -> Path:
    return Path(metrics["log_dir"])


def test_ema_with_decay_zero_is_the_model(make_config, tiny_overrides):
    metrics = train(make_config([*tiny_overrides, "ema_decay=0", "test_after_fit=false"]))
    last = run_folder(metrics) / "checkpoints" / "last.ckpt"
    ema, model = weights(last, "ema.module."), weights(last, "model.")
    assert ema.keys() == model.keys() and all(torch.equal(ema[k], model[k]) for k in model)


def test_ema_step_mixes_old_average_and_new_weights(make_config, tiny_overrides, tmp_path):
    """Validated at step 2 (the best checkpoint), stopped at step 3 (last.ckpt): one update apart,
    EMA_3 = d EMA_2 + (1 - d) model_3. Test, results.json and vitpos.evaluate use the EMA and the flip."""
    decay = 0.75
    overrides = [o for o in tiny_overrides if not o.startswith("trainer.max_steps")]
    run = [*overrides, "trainer.max_steps=3", "trainer.val_check_interval=2", f"ema_decay={decay}", "test_flip=true"]
    metrics = train(make_config(run))
    folder = run_folder(metrics)
    (best,) = (folder / "checkpoints").glob("best-*step2.ckpt")
    last = folder / "checkpoints" / "last.ckpt"
    old, new, mixed = weights(best, "ema.module."), weights(last, "model."), weights(last, "ema.module.")
    assert not all(torch.equal(old[k], new[k]) for k in new)  # the step changed the weights
    for key in new:
        torch.testing.assert_close(mixed[key], decay * old[key] + (1 - decay) * new[key], rtol=1e-5, atol=1e-6)
    assert all(torch.equal(model_state(torch.load(last, weights_only=False))[k], mixed[k]) for k in mixed)
    assert json.loads((folder / "results.json").read_text())["evaluated"] == f"ema {decay} + flip"
    rows = evaluate(ckpt=str(best), img_sizes=[32], limit=64, out=str(tmp_path / "eval"), test_flip=True)
    assert len(rows) == 1 and 0 <= rows[0]["acc"] <= 1


def test_flip_averaged_logits_ignore_a_flip_of_the_input():
    torch.manual_seed(0)
    model = create_model(pos="2d_learned", img_size=16, patch_size=4, num_classes=5, dim=32, depth=1, num_heads=2)
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(flip_averaged(model.eval(), images), flip_averaged(model, images.flip(-1)))
        assert not torch.allclose(model(images), model(images.flip(-1)))  # the model itself is not invariant


def test_flip_averaging_leaves_a_flip_invariant_model_unchanged():
    """A model that pools over the image sees a mirror as the image: same logits, same accuracy."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    images, labels = torch.randn(32, 3, 8, 8), torch.randint(0, 4, (32,))
    with torch.no_grad():
        plain, averaged = predict(model, images, test_flip=False), predict(model, images, test_flip=True)
    torch.testing.assert_close(averaged, plain)
    assert (averaged.argmax(1) == labels).float().mean() == (plain.argmax(1) == labels).float().mean()


@pytest.mark.parametrize(
    "setting, message",
    [("ema_decay=1.5", "ema_decay=1.5 must be"), ("test_flip=2", "test_flip=2 must be")],
)
def test_bad_settings_are_one_line(make_config, tiny_overrides, setting, message):
    from vitpos.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        train(make_config([*tiny_overrides, setting]))
