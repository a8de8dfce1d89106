"""test_every_epoch: the test accuracy after every epoch, as published small-ViT ablations report
it, logged beside a training that stays exactly what it is without it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vitpos.module import ImageClassifier
from vitpos.train import train

pytestmark = pytest.mark.usefixtures("one_thread")


def scalars(run: str) -> dict[str, list[float]]:
    events = EventAccumulator(run, size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [event.value for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_best_test_over_epochs_is_the_max_of_the_epochs_and_leaves_the_run_unchanged(make_config, tiny_overrides):
    # dropout draws random numbers every step: an evaluation that drew any would change the weights
    common = [
        *tiny_overrides,
        "trainer.max_steps=-1",
        "trainer.max_epochs=4",
        "trainer.limit_train_batches=2",
        "model.drop_rate=0.2",
        "pos=rel_bias",
    ]
    runs = {
        flag: train(make_config([*common, f"test_every_epoch={flag}", f"run_name=every_{flag}"]))
        for flag in ("true", "false")
    }
    logged = scalars(runs["true"]["log_dir"])
    each, best = logged["test_each_epoch/acc"], logged["test_each_epoch/acc_best"]
    assert len(each) == len(best) == 4  # one per epoch, none for the sanity check
    assert best == [max(each[: i + 1]) for i in range(4)] and runs["true"]["test_each_epoch/acc_best"] == max(each)
    assert "test_each_epoch/acc" not in scalars(runs["false"]["log_dir"])
    assert runs["true"]["test/acc"] == runs["false"]["test/acc"]  # the best-by-validation checkpoint's
    assert logged["val/acc"] == scalars(runs["false"]["log_dir"])["val/acc"]
    weights = [
        torch.load(Path(runs[flag]["log_dir"]) / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
        for flag in ("true", "false")
    ]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[1])


def test_every_metric_a_monitor_may_name_is_logged_at_each_epoch(make_config, tiny_overrides):
    """epoch_metric_names is what check_monitors accepts: each is in Lightning's callback metrics
    after a run with a validation, so a monitor it lets through is one Lightning finds."""
    one_epoch = ["trainer.max_steps=-1", "trainer.max_epochs=1", "test_after_fit=false"]
    metrics = train(make_config([*tiny_overrides, *one_epoch]))
    module = ImageClassifier(model=dict(pos="none", img_size=32, num_classes=4, in_chans=3))  # the synthetic data's
    assert set(module.epoch_metric_names()) <= set(metrics)
