"""Exact resume after an interruption (SIGTERM, SIGKILL), atomic checkpoints, refused resumes.

Runs `train.py` in subprocesses, like a pre-empted job. The runs use augmentation and stochastic
depth, so the data order *and* the RNG stream must both be restored for the weights to match."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import forked_cli  # train.py as a new process, its imports paid once (tests/forked_cli.py)
import pytest
import torch

from vitpos.callbacks import AtomicCheckpointIO
from vitpos.errors import EXIT_PREEMPTED
from vitpos.module import PROGRESS_KEY

ROOT = Path(__file__).resolve().parents[1]
RUN = [
    "data=synthetic",
    "model=vit_70k",
    "data.num_train=640",
    "data.val_size=128",
    "data.num_test=128",
    "data.batch_size=64",
    "data.augment=standard",
    "model.drop_path_rate=0.1",
    "trainer.max_steps=12",
    "checkpoint_every_n_steps=4",
    "trainer.val_check_interval=4",
    "test_after_fit=false",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "trainer.devices=1",  # one process, whatever the machine: trainer=default would pick
    "pos=rel_bias",
]


# A curriculum whose batch follows the tokens: epochs of 2, 4 and 8 steps at 16, 24 and 32 px
# (batches of 256, 114 and 64 images), so a resume meets a loader rebuilt for its epoch's batch.
CURRICULUM = [
    *(o for o in RUN if not o.startswith(("trainer.max_steps", "trainer.val_check_interval"))),
    "trainer.max_steps=-1",
    "trainer.max_epochs=3",
    "curriculum=[[16,1],[24,1],[32,1]]",
    "curriculum_batch=tokens",
]


def train_py(cwd: Path, *overrides: str, run: list[str] = RUN) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "helpers"), OMP_NUM_THREADS="1")
    return forked_cli.run([str(ROOT / "train.py"), *run, *overrides], cwd=cwd, env=env, timeout=600)


def final_state(cwd: Path, run: str) -> tuple[int, dict]:
    checkpoint = torch.load(
        cwd / "logs" / run / "version_0" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False
    )
    return checkpoint["global_step"], checkpoint["state_dict"]


def run_uninterrupted(cwd: Path, run: list[str], augment: str = "standard") -> tuple[Path, tuple[int, dict], list[str]]:
    """The run of `run`'s settings with `data.augment=augment`, its final state and its batches' checksums."""
    result = train_py(
        cwd,
        "run_name=full",
        f"data.augment={augment}",
        "+callbacks.rec._target_=interrupt.RecordBatches",
        f"+callbacks.rec.path={cwd / 'full.batches'}",
        run=run,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return cwd, final_state(cwd, "full"), (cwd / "full.batches").read_text().splitlines()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_uninterrupted(tmp_path_factory.mktemp("resume"), RUN)


@pytest.fixture(scope="module")
def uninterrupted_randaugment(tmp_path_factory):
    return run_uninterrupted(tmp_path_factory.mktemp("resume_randaugment"), RUN, "randaugment")


@pytest.fixture(scope="module")
def uninterrupted_rrc(tmp_path_factory):
    return run_uninterrupted(tmp_path_factory.mktemp("resume_rrc"), RUN, "rrc")


@pytest.fixture(scope="module")
def uninterrupted_curriculum(tmp_path_factory):
    return run_uninterrupted(tmp_path_factory.mktemp("resume_curriculum"), CURRICULUM)


def images_in(batches: list[str]) -> int:
    """The images of RecordBatches' lines (`step checksum [labels] size`)."""
    return sum(len(ast.literal_eval(line[line.index("[") : line.index("]") + 1])) for line in batches)


@pytest.mark.slow
@pytest.mark.parametrize(
    "signal_name, expected_rc, data_path, schedule, augment, stop, saved_step",
    [
        # SIGTERM saves at the step it stops at; SIGKILL leaves the periodic checkpoint of step 4
        ("SIGTERM", EXIT_PREEMPTED, "dataloader", "fixed", "standard", 6, 6),
        ("SIGKILL", -9, "dataloader", "fixed", "standard", 6, 4),
        # also bit-identical to the DataLoader path
        ("SIGTERM", EXIT_PREEMPTED, "device_resident", "fixed", "standard", 6, 6),
        # its batched draws replay from the saved RNG state
        ("SIGKILL", -9, "device_resident", "fixed", "randaugment", 6, 4),
        # the random-resized crop's boxes too
        ("SIGTERM", EXIT_PREEMPTED, "dataloader", "fixed", "rrc", 6, 6),
        # inside the 24 px phase (steps 3-6)
        ("SIGTERM", EXIT_PREEMPTED, "dataloader", "curriculum", "standard", 4, 4),
        # at the 16 px phase's last step, the stop waits for the 24 px phase's first step: Lightning would
        # resume the next epoch at the batch count of the one it saved in (2 of 4 steps lost)
        ("SIGTERM", EXIT_PREEMPTED, "device_resident", "curriculum", "standard", 2, 3),
    ],
)
def test_interrupted_run_resumes_bit_identically(
    request, signal_name, expected_rc, data_path, schedule, augment, stop, saved_step
):
    fixed = schedule == "fixed"
    fixture = "uninterrupted" if fixed else "uninterrupted_curriculum"
    if augment != "standard":
        fixture = f"uninterrupted_{augment}"
    cwd, (full_step, full_weights), full_batches = request.getfixturevalue(fixture)
    if augment != "standard":  # the policy changes the batches, so the resume below replays its draws
        assert full_batches != request.getfixturevalue("uninterrupted")[2]
    run = f"{signal_name.lower()}_{data_path}"
    record = [
        "+callbacks.rec._target_=interrupt.RecordBatches",
        f"+callbacks.rec.path={cwd / run}.batches",
        f"data.device_resident={str(data_path == 'device_resident').lower()}",
        f"data.augment={augment}",
    ]
    settings = RUN if fixed else CURRICULUM
    first = train_py(
        cwd,
        f"run_name={run}",
        "+callbacks.stop._target_=interrupt.InterruptAtStep",
        f"+callbacks.stop.step={stop}",
        f"+callbacks.stop.signal_name={signal_name}",
        *record,
        run=settings,
    )
    assert first.returncode == expected_rc, first.stderr[-2000:]
    if signal_name == "SIGTERM":  # pre-empted, not finished: a scheduler or a script can tell
        last = Path("logs", run, "version_0", "checkpoints", "last.ckpt")
        assert f"pre-empted: SIGTERM at step {saved_step}: saved {last}; continue with resume=true" in first.stderr
        assert "Traceback" not in first.stderr and not (cwd / "logs" / run / "version_0" / "results.json").exists()
    step, _ = final_state(cwd, run)
    assert step == saved_step
    saved = torch.load(cwd / "logs" / run / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert saved[PROGRESS_KEY]["images"] == images_in(full_batches[:step])  # the images of its steps, no more
    second = train_py(cwd, f"run_name={run}", "resume=true", *record, run=settings)
    assert second.returncode == 0, second.stderr[-2000:]
    # the run's figures count both parts: every image of its steps, the fit time before the checkpoint too
    results = json.loads((cwd / "logs" / run / "version_0" / "results.json").read_text())
    full = json.loads((cwd / "logs" / "full" / "version_0" / "results.json").read_text())
    assert results["images_trained"] == full["images_trained"] == images_in(full_batches)
    assert results["fit_seconds"] > saved[PROGRESS_KEY]["fit_seconds"] > 0
    assert not (cwd / "logs" / run / "version_1").exists()  # the same run folder continues
    resumed_step, resumed_weights = final_state(cwd, run)
    assert resumed_step == full_step == (12 if fixed else 14)
    assert all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    # The batches after the resume point are the uninterrupted run's (order, augmentation, size).
    batches = (cwd / f"{run}.batches").read_text().splitlines()
    after_resume = {line.split()[0]: line for line in batches[len(batches) - (full_step - step) :]}
    assert [after_resume[line.split()[0]] for line in full_batches[step:]] == full_batches[step:]


@pytest.mark.slow
def test_a_sigterm_while_testing_keeps_the_finished_training_and_resume_only_tests_it(uninterrupted, tmp_path):
    """A pre-emption after fit, while the best checkpoint is tested: last.ckpt stays the finished
    training's, the run says so and exits like any pre-emption, and resume=true tests it. (The test
    holds the best checkpoint's weights and progress: saved as last.ckpt, they would count that
    checkpoint's images and minutes twice.)"""
    _, (full_step, full_weights), _ = uninterrupted
    run = ["run_name=t", "test_after_fit=true"]
    first = train_py(tmp_path, *run, "+callbacks.stop._target_=interrupt.InterruptAtTest")
    assert first.returncode == EXIT_PREEMPTED, first.stderr[-2000:]
    last = Path("logs", "t", "version_0", "checkpoints", "last.ckpt")
    assert f"pre-empted: SIGTERM while testing, after training finished at step 12: {last} holds it" in first.stderr
    assert "Traceback" not in first.stderr and not (tmp_path / "logs" / "t" / "version_0" / "results.json").exists()
    step, weights = final_state(tmp_path, "t")
    assert step == full_step == 12 and all(torch.equal(full_weights[k], weights[k]) for k in full_weights)
    saved = torch.load(tmp_path / last, weights_only=False)[PROGRESS_KEY]
    assert saved["images"] == 12 * 64
    second = train_py(tmp_path, *run, "resume=true")
    assert second.returncode == 0, second.stderr[-2000:]
    results = json.loads((tmp_path / "logs" / "t" / "version_0" / "results.json").read_text())
    assert results["images_trained"] == 12 * 64 and results["fit_seconds"] >= round(saved["fit_seconds"], 1)
    assert 0 <= results["test/acc"] <= 1


def best_checkpoint_state(checkpoint: Path) -> tuple[str, float]:
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    (state,) = [v for k, v in saved["callbacks"].items() if k.startswith("ModelCheckpoint")]
    return Path(state["best_model_path"]).name, float(state["best_model_score"])


@pytest.mark.slow
def test_a_periodic_save_due_at_an_epochs_last_step_waits_for_its_validation(tmp_path):
    """Lightning resumes from a checkpoint of an epoch's last step without running that epoch's
    validation, so its best checkpoint would stay on disk, unknown to the resumed run. A save due
    there (every 8 steps, epochs of 8) is written one step later, after the validation: a run
    killed at step 10 resumes from step 9 bit-identically and knows the same best checkpoint."""
    per_epoch = [o for o in RUN if not o.startswith(("trainer.val_check_interval", "checkpoint_every_n_steps"))]
    per_epoch.append("checkpoint_every_n_steps=8")
    full = train_py(tmp_path, "run_name=full", run=per_epoch)
    assert full.returncode == 0, full.stderr[-2000:]
    kill = ["+callbacks.stop._target_=interrupt.InterruptAtStep", "+callbacks.stop.step=10"]
    first = train_py(tmp_path, "run_name=cut", *kill, "+callbacks.stop.signal_name=SIGKILL", run=per_epoch)
    assert first.returncode == -9, first.stderr[-2000:]
    last = tmp_path / "logs" / "cut" / "version_0" / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 9
    assert best_checkpoint_state(last)[0] == "best-epoch0-step8.ckpt"
    second = train_py(tmp_path, "run_name=cut", "resume=true", run=per_epoch)
    assert second.returncode == 0, second.stderr[-2000:]
    (_, full_weights), (step, resumed_weights) = final_state(tmp_path, "full"), final_state(tmp_path, "cut")
    assert step == 12 and all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    full_last = tmp_path / "logs" / "full" / "version_0" / "checkpoints" / "last.ckpt"
    assert best_checkpoint_state(last) == best_checkpoint_state(full_last)


@pytest.mark.slow
def test_mixed_resolution_run_resumes_bit_identically(tmp_path):
    """With train_img_sizes, the size of every step is drawn again identically after a resume."""
    mixed = ["train_img_sizes=[24,32,40]", "+callbacks.rec._target_=interrupt.RecordBatches"]
    full = train_py(tmp_path, "run_name=mixed_full", *mixed, f"+callbacks.rec.path={tmp_path / 'full.batches'}")
    assert full.returncode == 0, full.stderr[-2000:]
    assert "training sizes 24-32-40px" in full.stdout
    shapes = {line.split()[-1] for line in (tmp_path / "full.batches").read_text().splitlines()}
    assert shapes == {"24x24", "32x32", "40x40"}  # every size was trained on
    first = train_py(
        tmp_path,
        "run_name=mixed_cut",
        *mixed,
        f"+callbacks.rec.path={tmp_path / 'cut.batches'}",
        "+callbacks.stop._target_=interrupt.InterruptAtStep",
        "+callbacks.stop.step=6",
    )
    assert first.returncode == EXIT_PREEMPTED, first.stderr[-2000:]
    second = train_py(
        tmp_path, "run_name=mixed_cut", "resume=true", *mixed, f"+callbacks.rec.path={tmp_path / 'cut.batches'}"
    )
    assert second.returncode == 0, second.stderr[-2000:]
    (_, full_weights), (step, resumed_weights) = final_state(tmp_path, "mixed_full"), final_state(tmp_path, "mixed_cut")
    assert step == 12 and all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    assert (tmp_path / "cut.batches").read_text().splitlines()[-6:] == (
        tmp_path / "full.batches"
    ).read_text().splitlines()[-6:]


@pytest.mark.slow
def test_fuzzy_positions_resume_bit_identically(tmp_path):
    """Fuzzy offsets come from the training RNG, which the checkpoint restores: a resumed fuzzy run
    ends with the uninterrupted run's weights (which differ from a run without fuzzy positions)."""
    fuzzy = ["pos=rope_mixed", "pos.fuzzy=true"]
    full = train_py(tmp_path, "run_name=fuzzy_full", *fuzzy)
    assert full.returncode == 0, full.stderr[-2000:]
    first = train_py(
        tmp_path,
        "run_name=fuzzy_cut",
        *fuzzy,
        "+callbacks.stop._target_=interrupt.InterruptAtStep",
        "+callbacks.stop.step=6",
    )
    assert first.returncode == EXIT_PREEMPTED, first.stderr[-2000:]
    second = train_py(tmp_path, "run_name=fuzzy_cut", "resume=true", *fuzzy)
    assert second.returncode == 0, second.stderr[-2000:]
    exact = train_py(tmp_path, "run_name=exact", "pos=rope_mixed")
    assert exact.returncode == 0, exact.stderr[-2000:]
    (_, full_weights), (step, resumed_weights) = final_state(tmp_path, "fuzzy_full"), final_state(tmp_path, "fuzzy_cut")
    assert step == 12 and all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    _, exact_weights = final_state(tmp_path, "exact")
    assert not torch.equal(exact_weights["model.pos.freqs"], full_weights["model.pos.freqs"])


def test_weight_ema_resumes_bit_identically(tmp_path):
    """The EMA's weights are in the checkpoint and its warm-up counts steps from the restored global
    step: a resumed run ends with the uninterrupted run's EMA (and model) weights."""
    ema = ["ema_decay=0.99", "ema_warmup=true"]
    full = train_py(tmp_path, "run_name=ema_full", *ema)
    assert full.returncode == 0, full.stderr[-2000:]
    first = train_py(
        tmp_path,
        "run_name=ema_cut",
        *ema,
        "+callbacks.stop._target_=interrupt.InterruptAtStep",
        "+callbacks.stop.step=6",
    )
    assert first.returncode == EXIT_PREEMPTED, first.stderr[-2000:]
    second = train_py(tmp_path, "run_name=ema_cut", "resume=true", *ema)
    assert second.returncode == 0, second.stderr[-2000:]
    (_, full_weights), (step, resumed_weights) = final_state(tmp_path, "ema_full"), final_state(tmp_path, "ema_cut")
    averaged = [k for k in full_weights if k.startswith("ema.module.")]
    assert step == 12 and averaged and full_weights.keys() == resumed_weights.keys()
    assert all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    assert not torch.equal(full_weights["model.head.weight"], full_weights["ema.module.head.weight"])


@pytest.mark.slow
def test_fresh_run_never_resumes_and_resume_needs_a_checkpoint(uninterrupted):
    cwd = uninterrupted[0]
    result = train_py(cwd, "run_name=full", "trainer.max_steps=2")
    assert result.returncode == 0 and (cwd / "logs" / "full" / "version_1").is_dir()
    assert final_state(cwd, "full")[0] == 12  # version_0 untouched
    missing = train_py(cwd, "run_name=nothing_here", "resume=true")
    assert missing.returncode == 2 and "no last.ckpt" in missing.stderr and "Traceback" not in missing.stderr


@pytest.mark.slow
@pytest.mark.parametrize("change", ["pos=2d_sin", "model.dim=96"])
def test_resume_with_another_model_is_refused(uninterrupted, change):
    cwd = uninterrupted[0]
    result = train_py(cwd, "run_name=full", "resume=true", change)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "cannot resume" in error[0] and ("pos" in error[0] or "dim" in error[0])


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, difference",
    [
        ("optim=sgd", "optim.lr: 0.001 -> 0.1"),
        ("optim.lr=0.5", "optim.lr: 0.001 -> 0.5"),
        ("loss.label_smoothing=0", "loss.label_smoothing: 0.1 -> 0"),
        ("curriculum=[[16,0.5],[32,0.5]]", "curriculum: None -> [[16, 0.5], [32, 0.5]]"),
        ("ema_decay=0.999", "ema_decay: None -> 0.999"),  # the checkpoint holds no EMA to continue
    ],
)
def test_resume_with_other_training_settings_is_refused(uninterrupted, change, difference):
    """A resumed run would train on with the checkpoint's optimizer state and record the new
    settings in its config.yaml: refused, naming what differs."""
    cwd = uninterrupted[0]
    result = train_py(cwd, "run_name=full", "resume=true", change)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert len(errors) == 1 and "its run trained with other settings" in errors[0] and difference in errors[0]


class Exploding:
    """Pickling this fails half-way through writing a checkpoint, like a crash during the save."""

    def __reduce__(self):
        raise KeyboardInterrupt("killed while saving")


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "weights": torch.ones(1000)}, path)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2, "weights": torch.zeros(1000), "boom": Exploding()}, path)
    assert torch.load(path, weights_only=False)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left


def test_sigkill_during_save_keeps_the_previous_checkpoint(tmp_path):
    """A process killed while its checkpoint is half written leaves the previous one loadable."""
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, path)
    # The child writes half of the new checkpoint's bytes, says so, and hangs there until killed.
    script = f"""
import io, sys, time, torch
from lightning.fabric.plugins.io import torch_io
from vitpos.callbacks import AtomicCheckpointIO

def half_write(checkpoint, filepath):
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    with open(filepath, "wb") as f:
        f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        f.flush()
        print("writing", flush=True)
        time.sleep(600)

torch_io._atomic_save = half_write
AtomicCheckpointIO().save_checkpoint({{"step": 2, "w": torch.randn(100_000)}}, {str(path)!r})
"""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    process.kill()
    process.wait()
    assert torch.load(path, weights_only=False)["step"] == 1  # the previous checkpoint, intact
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "last.ckpt"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".last.ckpt.tmp")  # the half-written file
    AtomicCheckpointIO().save_checkpoint({"step": 3}, path)  # the next save cleans it up
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    assert torch.load(path, weights_only=False)["step"] == 3


def test_periodic_last_checkpoint_is_saved_once_per_optimizer_step(make_config, tiny_overrides, monkeypatch):
    """With gradient accumulation the batch hook also runs between optimizer steps: the periodic
    save must happen once per step, never on a half-accumulated state."""
    import lightning as L

    from vitpos.train import train

    saves = []

    def record(trainer, path, *args, **kwargs):
        if Path(path).name == "last.ckpt":
            saves.append(trainer.global_step)

    monkeypatch.setattr(L.Trainer, "save_checkpoint", record)
    train(
        make_config(
            [
                *tiny_overrides,
                "trainer.max_steps=6",
                "trainer.accumulate_grad_batches=2",
                "checkpoint_every_n_steps=2",
                "test_after_fit=false",
                "trainer.limit_val_batches=0",
            ]
        )
    )
    # periodic saves after steps 2, 5 and 6 (once each, though the hook ran on two micro-batches
    # at each step; the one due at step 4, the last of the first epoch, after step 5), then the
    # end-of-training save
    assert saves == [2, 5, 6, 6]
