"""The resolution curriculum (`curriculum=[[size, share], ...]`): its plan over the run's epochs, every
scheme training through it on the same parameters and optimizer state, and what a run of it records."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import pytest
import torch
import yaml

import vitpos
from vitpos.data.curriculum import Curriculum, curriculum_tag
from vitpos.module import ImageClassifier
from vitpos.train import train

THREE_PHASES = [[16, 0.3], [24, 0.3], [32, 0.4]]


def test_shares_become_epochs_at_the_rounded_cumulative_share():
    plan = Curriculum(THREE_PHASES, (32, 32), batch_size=64).plan(35)
    # 0.3 x 35 = 10.5 rounds up to 11, 0.6 x 35 = 21: epochs 0-10, 11-20, 21-34
    assert [(p.size, p.first_epoch, p.epochs, p.batch_size) for p in plan] == [
        ((16, 16), 0, 11, 64),
        ((24, 24), 11, 10, 64),
        ((32, 32), 21, 14, 64),
    ]
    phases = [Curriculum(THREE_PHASES, (32, 32), 64).phase_at(epoch, 35).size[0] for epoch in range(35)]
    assert phases == [16] * 11 + [24] * 10 + [32] * 14


def test_epochs_written_as_integers_plan_the_same_run_and_share_its_tag():
    shares = Curriculum(THREE_PHASES, (32, 32), 64)
    epochs = Curriculum([[16, 11], [24, 10], [32, 14]], (32, 32), 64)
    assert shares.plan(35) == epochs.plan(35)
    assert shares.tag(35) == epochs.tag(35) == "16-24-32px_11-10-14ep"


def test_tokens_batch_keeps_the_tokens_of_a_step_about_equal():
    curriculum = Curriculum(THREE_PHASES, (32, 32), 64, batch="tokens")
    batches = [p.batch_size for p in curriculum.plan(10)]
    assert batches == [256, 114, 64]  # 64 x (32/16)^2, 64 x (32/24)^2 = 113.8, 64
    tokens = [b * (size // 4) ** 2 for b, size in zip(batches, (16, 24, 32))]  # patches of 4 px
    assert max(tokens) / min(tokens) < 1.01
    assert curriculum.tag(10) == "16-24-32px_3-3-4ep_tokens"  # a tokens run is named apart from a fixed one


@pytest.fixture
def curriculum_run(make_config, tiny_overrides):
    """`run(pos, *overrides)`: a three-epoch curriculum run of one step per epoch (16, 24, 32 px,
    batch by tokens) -> (metrics, what the module saw: per step its images' size and count, its
    parameters and optimizer state at the start and the end)."""

    def run(pos: str, *overrides: str):
        seen: dict = {"steps": []}

        class Capture(ImageClassifier):
            def on_train_start(self):
                super().on_train_start()
                seen["start"] = {name: (p, p.detach().clone()) for name, p in self.named_parameters()}

            def on_train_batch_start(self, batch, batch_idx):
                seen["steps"].append((tuple(batch[0].shape[-2:]), len(batch[1])))
                if self.global_step == 1:  # after the 16 px step
                    seen["after_first"] = {name: p.detach().clone() for name, p in self.named_parameters()}

            def on_train_end(self):
                optimizer = self.optimizers().optimizer
                seen["end"] = dict(self.named_parameters())
                seen["optimized"] = [p for group in optimizer.param_groups for p in group["params"]]
                seen["adam_steps"] = {id(p): int(optimizer.state[p]["step"]) for p in seen["optimized"]}

        cfg_overrides = [
            f"pos={pos}",
            "curriculum=[[16,1],[24,1],[32,1]]",
            "curriculum_batch=tokens",
            "data.batch_size=16",
            "trainer.max_steps=-1",
            "trainer.max_epochs=3",
            "trainer.limit_train_batches=1",
            *overrides,
        ]
        with mock.patch("vitpos.assembly.ImageClassifier", Capture):
            metrics = train(make_config([*tiny_overrides, *cfg_overrides]))
        return metrics, seen

    return run


@pytest.mark.parametrize("pos", vitpos.list_pos())
def test_every_scheme_trains_through_the_curriculum_on_the_same_parameters(pos, curriculum_run):
    """Each phase trains at its size (batch by tokens); a phase at another grid runs the scheme's resize
    rule inside the forward pass, so the model's parameters stay the same objects, the optimizer's
    state of each is kept across phases, and the first phase already trains the native tables; the
    run ends, tests and saves at the last phase's size (the model's built grid)."""
    metrics, seen = curriculum_run(pos)
    assert seen["steps"] == [((16, 16), 64), ((24, 24), 28), ((32, 32), 16)]
    assert seen["end"].keys() == seen["start"].keys()
    assert all(seen["end"][name] is param for name, (param, _) in seen["start"].items())
    assert {id(p) for p in seen["optimized"]} == {id(p) for p, _ in seen["start"].values()}
    assert set(seen["adam_steps"].values()) == {3}  # one moment estimate per parameter, over all phases
    positional = [name for name in seen["start"] if name.startswith("model.pos.")]
    assert all(not torch.equal(seen["after_first"][n], seen["start"][n][1]) for n in positional)
    run = Path(metrics["log_dir"])
    assert run.parent.name == f"{pos}_synthetic_32px_curriculum16-24-32px_1-1-1ep_tokens_seed42"
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["hyper_parameters"]["model"]["img_size"] == 32
    assert torch.isfinite(torch.tensor(metrics["test/loss"]))
    assert yaml.safe_load((run / "hparams.yaml").read_text())["curriculum"] == "16-24-32px_1-1-1ep_tokens"


def test_a_fixed_batch_curriculum_steps_with_the_configured_batch(curriculum_run):
    _, seen = curriculum_run("2d_sin", "curriculum_batch=fixed")
    assert seen["steps"] == [((16, 16), 16), ((24, 24), 16), ((32, 32), 16)]


def test_the_progress_log_names_each_phase(make_config, tiny_overrides, capsys):
    cfg = make_config(
        [
            *tiny_overrides,
            "curriculum=[[16,0.5],[32,0.5]]",
            "trainer.max_steps=-1",
            "trainer.max_epochs=2",
            "trainer.limit_train_batches=2",
            "trainer.enable_progress_bar=true",
            "test_after_fit=false",
        ]
    )
    train(cfg)
    out = capsys.readouterr().out
    assert "| curriculum 16px for 1 epoch, 32px for 1 (batch 64 per process) |" in out
    steps = [line for line in out.splitlines() if line.startswith("vitpos: step ")]
    assert steps[0].startswith("vitpos: step 1/4 (25%) | epoch 1/2 at 16px")
    assert steps[-1].startswith("vitpos: step 4/4 (100%) | epoch 2/2 at 32px")
    phases = [line for line in out.splitlines() if line.startswith("vitpos: curriculum: ")]
    assert len(phases) == 2
    assert re.fullmatch(
        r"vitpos: curriculum: 16px done at \d+ img/s; 32px from epoch 2, 64 images per step and process", phases[0]
    )
    assert re.fullmatch(r"vitpos: curriculum: 32px done at \d+ img/s", phases[1])


def test_compare_tags_a_run_from_its_saved_config():
    config = {
        "curriculum": [[16, 0.5], [32, 0.5]],
        "curriculum_batch": "tokens",
        "img_size": 32,
        "data": {"batch_size": 64},
        "trainer": {"max_epochs": 10},
    }
    assert curriculum_tag(config) == "16-32px_5-5ep_tokens"
    assert curriculum_tag({**config, "curriculum": None}) == curriculum_tag({"img_size": 32}) == "-"
