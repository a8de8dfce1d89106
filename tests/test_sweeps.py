"""`python train.py -m` reads Hydra's whole override grammar (ranges, choice(), glob(), quoted values,
lists as values) as Hydra's own sweeper does: the check before Hydra composes every job's config as
Hydra will, a sweep runs one job per value, and a bad sweep is one `error:` line."""

from __future__ import annotations

import os
from pathlib import Path

import forked_cli  # train.py and vitpos' CLIs as new processes (tests/forked_cli.py)
import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from vitpos.__main__ import check_composes, sweep_variants

ROOT = Path(__file__).resolve().parents[1]

EXPANSIONS = [  # (a sweep, the key it sets, its value in each job's composed config)
    ("seed=range(0,3)", "seed", [0, 1, 2]),
    ("seed=range(4,10,3)", "seed", [4, 7]),
    ("seed=shuffle(range(0,3))", "seed", None),  # 0, 1, 2 in a random order
    ("pos=choice(none,cpe)", "pos.name", ["none", "cpe"]),
    ("pos=glob(rope_*)", "pos.name", ["rope_axial", "rope_mixed"]),
    ("pos=glob(*,exclude=[*_learned,*_sin,rope_*,rel_*,alibi_2d,cpb,lookhere,fire])", "pos.name", ["cpe", "none"]),
    ("train_img_sizes=[24,32],[32,40]", "train_img_sizes", [[24, 32], [32, 40]]),
    ("run_name='a,b'", "run_name", ["a,b"]),  # a quoted comma is one value, not a sweep
    ("run_name='a b','c,d'", "run_name", ["a b", "c,d"]),
    ("trainer.max_time=choice('00:01:00:00',\"00:02:00\")", "trainer.max_time", ["00:01:00:00", "00:02:00"]),
]


@pytest.mark.parametrize("sweep, key, values", EXPANSIONS, ids=[s for s, _, _ in EXPANSIONS])
def test_a_sweep_expands_to_one_job_per_value(sweep, key, values, tmp_path):
    jobs = [OmegaConf.select(compose_config(variant, tmp_path), key) for variant in sweep_variants([sweep])]
    jobs = [OmegaConf.to_container(job) if OmegaConf.is_config(job) else job for job in jobs]
    assert jobs == values if values is not None else sorted(jobs) == [0, 1, 2]


def test_every_value_of_a_group_sweep_is_checked_and_the_other_sweeps_at_their_first_value():
    variants = sweep_variants(["seed=range(0,3)", "pos=choice(none,cpe)", "img_size=16"], groups_only=True)
    assert variants == [["seed=0", "pos=none", "img_size=16"], ["seed=0", "pos=cpe", "img_size=16"]]


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "seed=range(0,3)", "pos=choice(none,cpe)"],
        ["-m", "pos=glob(rope_*)", "train_img_sizes=[24,32],[32,40]"],
        ["-m", "pos='none','cpe'", "run_name='a,b'"],
        ["run_name='a,b'", "train_img_sizes=[24,32]"],
    ],
)
def test_every_form_of_the_grammar_passes_the_check(args, capsys):
    check_composes(args)
    assert capsys.readouterr().err == ""


BAD_SWEEPS = [  # (arguments, the one error line)
    (["-m", "seed=range(0,3"], "error: cannot parse 'seed=range(0,3' (no viable alternative at input 'range(0,3')"),
    (["seed=range(a)"], "error: cannot parse 'seed=range(a)' (TypeError while evaluating 'range(a)'"),
    (["-m", "pos=choice(none,nosuch)"], "error: In 'train': Could not find 'pos/nosuch' Available options in 'pos'"),
    (["-m", "pos='none','nosuch'"], "error: In 'train': Could not find 'pos/nosuch'"),
    (["-m", "pos=glob(nosuch*)"], "error: pos=glob(nosuch*) sweeps no value, so Hydra would run no job; the options"),
    (["-m", "seed=range(0,0)"], "error: seed=range(0,0) sweeps no value, so Hydra would run no job"),
    (["-m", "optim.lr=interval(0.1,1)"], "error: optim.lr=interval(0.1,1): Hydra's basic sweeper cannot sample"),
    (["seed=range(0,2)"], "error: Sweep parameters 'seed=range(0,2)' requires --multirun"),
]


@pytest.mark.parametrize("args, message", BAD_SWEEPS, ids=[" ".join(a) for a, _ in BAD_SWEEPS])
def test_a_bad_sweep_is_one_error_line(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        check_composes(args)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


TINY = [
    "data=synthetic",
    "model=vit_70k",
    "data.num_train=640",
    "data.num_test=128",
    "data.val_size=128",
    "data.batch_size=64",
    "trainer.max_steps=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "trainer.precision=32-true",
    "trainer.accelerator=cpu",
    "trainer.devices=1",  # in-process jobs: 2 processes would run each job as its own command
    "trainer.enable_progress_bar=false",
    "callbacks.figures=null",
]

SWEEPS = [  # (a 2-job sweep, the run folders it writes)
    ("seed=range(0,2)", ["2d_sin_synthetic_32px_seed0", "2d_sin_synthetic_32px_seed1"]),
    ("pos=choice(none,cpe)", ["cpe_synthetic_32px_seed42", "none_synthetic_32px_seed42"]),
    (
        "train_img_sizes=[24,32],[32,40]",
        ["2d_sin_synthetic_32px_train24-32px_seed42", "2d_sin_synthetic_32px_train32-40px_seed42"],
    ),
]


@pytest.mark.parametrize("sweep, runs", SWEEPS, ids=[s for s, _ in SWEEPS])
def test_a_sweep_runs_one_job_per_value(sweep, runs, tmp_path):
    result = forked_cli.run(
        [str(ROOT / "train.py"), "-m", sweep, *TINY, f"paths.log_dir={tmp_path / 'logs'}"],
        cwd=tmp_path,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    finished = sorted(path.parent.parent.name for path in (tmp_path / "logs").glob("*/version_0/results.json"))
    assert finished == runs
