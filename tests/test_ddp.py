"""Distributed data parallel on CPU (gloo): 2 processes equal 1 process with twice the batch,
validation counts every sample once, the real `ddp` launch works, a NaN on one rank stops all.

Lightning's `strategy=ddp` re-launches the command line, so in-process tests use `ddp_spawn` and
the real `ddp` launch is tested through `train.py` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from vitpos.module import ImageClassifier
from vitpos.precision import cpu_cores as precision_cores
from vitpos.train import train

ROOT = Path(__file__).resolve().parents[1]
VIT_MICRO = dict(patch_size=4, dim=64, depth=2, num_heads=2, mlp_ratio=2.0, drop_path_rate=0.0, img_size=32)
BASE = [
    "data=synthetic",
    "model=vit_70k",
    "data.num_train=640",
    "data.val_size=127",
    "data.num_test=64",
    "trainer.precision=32-true",
    "trainer.max_steps=3",
    "trainer.val_check_interval=3",
    "test_after_fit=false",
    "trainer.log_every_n_steps=1",
]


def weights(metrics: dict) -> dict:
    path = Path(metrics["log_dir"]) / "checkpoints" / "last.ckpt"
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


# a curriculum with its batch by tokens: the ranks agree on each epoch's size and batch (2 steps of
# 256 images at 16 px, then 8 of 64 at 32 px), the loader rebuilt for the second phase
CURRICULUM = [
    "trainer.max_steps=-1",
    "trainer.max_epochs=2",
    "trainer.val_check_interval=null",
    "curriculum=[[16,1],[32,1]]",
    "curriculum_batch=tokens",
]


# a weight EMA per rank (the ranks' weights are equal, so are their averages) and flip-averaged validation
EMA_AND_FLIP = ["ema_decay=0.9", "test_flip=true"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "pos, schedule",
    [("1d_learned", []), ("rel_bias", []), ("rel_bias", CURRICULUM), ("rel_bias", EMA_AND_FLIP)],
    ids=["1d_learned", "rel_bias", "rel_bias-curriculum", "rel_bias-ema-flip"],
)
def test_two_processes_equal_one_with_twice_the_batch(pos, schedule, make_config):
    single = train(make_config([*BASE, f"pos={pos}", "data.batch_size=64", "run_name=single", *schedule]))
    double = train(
        make_config(
            [
                *BASE,
                *schedule,
                f"pos={pos}",
                "data.batch_size=32",
                "run_name=ddp",
                "trainer.strategy=ddp_spawn",
                "trainer.devices=2",
            ]
        )
    )
    one, two = weights(single), weights(double)
    assert one.keys() == two.keys()
    L.seed_everything(42)  # train() seeds like this before building the model: the initial weights
    initial = ImageClassifier(model=dict(pos=pos, num_classes=4, in_chans=3, **VIT_MICRO)).state_dict()
    assert any(not torch.equal(initial[k], one[k]) for k in one)  # the steps did change the weights
    for key in one:
        torch.testing.assert_close(two[key], one[key], atol=2e-6, rtol=1e-5, msg=lambda m, key=key: f"{key}: {m}")
    # 127 validation images: shards of 64 and 63, no padding sample counted twice
    assert double["val/acc"] == pytest.approx(single["val/acc"], abs=1e-6)


def train_py(cwd: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "helpers"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "trainer=cpu_ddp",
            *BASE,
            "pos=2d_sin",
            "trainer.enable_progress_bar=false",
            "data.batch_size=32",
            *overrides,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_real_ddp_launch_writes_one_run(tmp_path):
    result = train_py(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((tmp_path / "logs").glob("2d_sin_synthetic_32px_seed*/version_*"))
    assert len(runs) == 1  # rank 0 alone logs and checkpoints
    assert (runs[0] / "checkpoints" / "last.ckpt").is_file()
    assert list(runs[0].glob("events.out.tfevents*"))


@pytest.mark.slow
def test_study_sweep_trains_each_run_on_two_processes(tmp_path):
    """The study's form, `train.py -m experiment=fmnist_cpu pos=a,b`, with the recipe's own trainer
    (2 CPU processes): each job of the sweep launches its second rank once, and that rank runs
    this job, not the sweep again (which would write extra runs or versions)."""
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "-m",
            "experiment=fmnist_cpu",
            "pos=none,2d_sin",
            *BASE,
            "trainer.enable_progress_bar=false",
            "callbacks.figures=null",
        ],
        cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("MEMBER: 2/2") == 2 and output.count("MEMBER: 1/2") == 2  # 2 ranks per job
    versions = sorted(
        str(v.relative_to(tmp_path / "logs" / "fmnist_cpu"))
        for v in (tmp_path / "logs" / "fmnist_cpu").glob("*/version_*")
    )
    assert versions == ["2d_sin_synthetic_28px_seed42/version_0", "none_synthetic_28px_seed42/version_0"]


@pytest.mark.slow
def test_nan_on_one_rank_stops_the_whole_job(tmp_path):
    result = train_py(
        tmp_path,
        "trainer.max_steps=20",
        "+callbacks.nan._target_=interrupt.NaNLossAtStep",
        "+callbacks.nan.step=6",
        "+callbacks.nan.rank=1",
        "check_finite_every=4",
    )
    assert result.returncode == 2  # both ranks stopped (a hang would time out instead)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    # NaN from step 6 on rank 1; checks after steps 3, 7, ...: the check after step 7 stops the job
    assert errors and "non-finite training loss between steps 4 and 7" in errors[0]


CHOICES = [  # (machine: CUDA visible, CPU cores; overrides; devices, strategy, batch per process; words of the line)
    ((False, 2), [], 2, "ddp", 64, "2 processes (DDP) on this 2-core CPU"),
    ((False, 16), [], 2, "ddp", 64, "2 processes (DDP) on this 16-core CPU"),
    ((False, 1), [], 1, "auto", 128, "one process on this 1-core CPU"),
    ((True, 16), ["trainer.accelerator=auto"], 1, "auto", 128, "one process on GPU A Test GPU"),
    ((True, 16), [], 2, "ddp", 64, "2 processes (DDP) on this 16-core CPU"),  # accelerator=cpu asked for
    ((False, 2), ["data.batch_size=65"], 1, "auto", 65, "one process: data.batch_size=65 does not split over 2"),
    ((False, 2), ["trainer.devices=1"], 1, "auto", 128, None),  # pinned: no choice, no line
    ((False, 2), ["trainer=cpu_ddp", "data.batch_size=64"], 2, "ddp", 64, None),
    ((False, 2), ["trainer=gpu"], 1, "auto", 128, None),
]


@pytest.mark.parametrize("machine, overrides, processes, strategy, batch, line", CHOICES)
def test_the_default_trainer_picks_the_fastest_form_for_the_machine(
    machine, overrides, processes, strategy, batch, line, make_config, monkeypatch
):
    """trainer=default (devices=auto) on the command line: 2 DDP processes on a multi-core CPU, each
    with half of data.batch_size, so the global batch (and every optimizer step) is one process's;
    one process on a GPU or a single core; a line saying which. A trainer that names its devices is
    left as it is."""
    from vitpos import precision
    from vitpos.__main__ import choose_processes

    cuda, cores = machine
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "A Test GPU")
    monkeypatch.setattr(precision, "cpu_cores", lambda: cores)
    cfg = make_config(["data=synthetic", *overrides])  # make_config asks for trainer.accelerator=cpu
    if "trainer.accelerator=auto" in overrides:
        cfg.trainer.accelerator = "auto"
    chosen, said = choose_processes(cfg)
    assert (int(chosen.trainer.devices), chosen.trainer.strategy, chosen.data.batch_size) == (
        processes,
        strategy,
        batch,
    )
    if line is None:
        assert said is None and chosen == cfg
    else:
        assert said.startswith(f"vitpos: trainer: {line}")
        assert cfg.trainer.devices == "auto"  # the choice is a new config
        if processes > 1:
            assert chosen.data.batch_size * processes == cfg.data.batch_size and "trainer.devices=1" in said


def test_a_run_started_in_process_trains_as_one_process(make_config):
    """train(cfg) called from Python cannot re-run a command line: devices=auto is one process there."""
    from vitpos.assembly import trainer_config

    cfg = make_config(["data=synthetic"])
    assert cfg.trainer.devices == "auto" and trainer_config(cfg)["devices"] == 1


@pytest.mark.slow
@pytest.mark.skipif(precision_cores() < 2, reason="one core: the default trainer runs one process")
def test_the_default_trainer_trains_on_two_processes_on_a_multicore_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *BASE, "pos=2d_sin", "data.batch_size=64"],
        cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "vitpos: trainer: 2 processes (DDP) on this" in result.stdout
    assert "data.batch_size=64 is split, 32 per process" in result.stdout
    output = result.stdout + result.stderr
    assert output.count("MEMBER: 1/2") == 1 and output.count("MEMBER: 2/2") == 1
    runs = list((tmp_path / "logs").glob("2d_sin_synthetic_32px_seed*/version_*"))
    assert len(runs) == 1 and "batch_size: '64'" in (runs[0] / "hparams.yaml").read_text()  # the global batch
