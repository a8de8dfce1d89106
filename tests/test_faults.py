"""Faults a run survives: a duplicate command started at the same moment, a full disk during a
checkpoint, a DDP rank that dies, SIGTERM to every rank or before training starts. Each ends with
one line and an exit status a scheduler can read, and loses no saved step (tests/helpers/interrupt.py
injects the faults)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from test_ddp import train_py as train_ddp
from test_resume import ROOT, RUN, train_py

from vitpos.errors import EXIT_PREEMPTED


@pytest.mark.slow
def test_two_identical_commands_started_together_get_their_own_version(tmp_path):
    """Each run claims its version folder atomically: two identical commands started at the same
    moment write version_0 and version_1, each whole, instead of one folder last-writer-wins."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "helpers"), OMP_NUM_THREADS="1")
    command = [sys.executable, str(ROOT / "train.py"), *RUN, "run_name=twin"]
    runs = [
        subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs[0][1][-2000:] + outputs[1][1][-2000:]
    printed = sorted(
        line.split(" | ")[0] for out, _ in outputs for line in out.splitlines() if line.startswith("vitpos: run ")
    )
    assert printed == ["vitpos: run logs/twin/version_0", "vitpos: run logs/twin/version_1"]
    for version in ("version_0", "version_1"):
        folder = tmp_path / "logs" / "twin" / version
        assert (folder / "results.json").is_file() and (folder / "config.yaml").is_file()
        assert len(list(folder.glob("events.out.tfevents*"))) == 1  # one event stream per run, none merged


@pytest.mark.slow
def test_a_sigterm_before_training_starts_leaves_no_folder_and_says_so(tmp_path):
    result = train_py(tmp_path, "run_name=early", "+callbacks.early._target_=interrupt.SignalWhenBuilt")
    assert result.returncode == EXIT_PREEMPTED and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "vitpos: pre-empted: SIGTERM at step 0, before anything to resume was saved; run the command again" in (
        result.stderr
    )
    assert not (tmp_path / "logs" / "early").exists()  # nothing half-written to resume from


def test_claiming_versions_from_many_threads_gives_each_its_own(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from vitpos.runs import claim_version

    (tmp_path / "run" / "version_3").mkdir(parents=True)  # numbering continues after the highest
    with ThreadPoolExecutor(8) as pool:
        claimed = list(pool.map(lambda _: claim_version(tmp_path / "run").name, range(8)))
    assert sorted(claimed, key=lambda name: int(name.split("_")[1])) == [f"version_{n}" for n in range(4, 12)]


@pytest.mark.slow
def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_previous_file(tmp_path):
    # the save due at step 8, the first epoch's last, is written after step 9: the disk fills there
    result = train_py(
        tmp_path, "run_name=full_disk", "+callbacks.full._target_=interrupt.DiskFullAtStep", "+callbacks.full.step=9"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    last = tmp_path / "logs" / "full_disk" / "version_0" / "checkpoints" / "last.ckpt"
    assert errors == [
        f"error: cannot write checkpoint {last.relative_to(tmp_path)} (No space left on device); the "
        f"previous last.ckpt is intact; free space in {last.parent.relative_to(tmp_path)} and continue "
        f"with resume=true"
    ]
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 4  # the periodic save before
    assert not list(last.parent.glob(".*tmp*"))  # no half-written temporary left


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, messages",
    [
        # rank 1 killed after step 5: rank 0's next collective fails
        (
            ["+callbacks.die._target_=interrupt.DieAtStep", "+callbacks.die.step=5"],
            ["error: another process of this 2-process run stopped ("],
        ),
        # rank 0's disk fills at step 5: rank 0 says so, rank 1 loses rank 0
        (
            ["+callbacks.full._target_=interrupt.DiskFullAtStep", "+callbacks.full.step=5"],
            ["error: cannot write checkpoint", "error: another process of this 2-process run stopped"],
        ),
    ],
    ids=["rank_dies", "disk_full"],
)
def test_a_fault_on_one_rank_ends_every_rank_with_one_error_line(fault, messages, tmp_path):
    result = train_ddp(tmp_path, "trainer.max_steps=20", "checkpoint_every_n_steps=2", *fault)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == len(messages) and all(any(e.startswith(m) for e in errors) for m in messages), errors
    assert all(line.endswith("continue with resume=true") for line in errors)
    last = next((tmp_path / "logs").rglob("last.ckpt"))
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 4  # the save before the fault


@pytest.mark.slow
def test_a_preempted_ddp_run_saves_and_every_rank_exits_with_the_preemption_status(tmp_path):
    """SIGTERM to every rank at once, as a scheduler signals a whole job: one last.ckpt at the step
    they stop at, and each rank exits with EXIT_PREEMPTED and one line."""
    result = train_ddp(
        tmp_path, "trainer.max_steps=20", "+callbacks.stop._target_=interrupt.InterruptAtStep", "+callbacks.stop.step=6"
    )
    assert result.returncode == EXIT_PREEMPTED and "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("vitpos: pre-empted")]
    assert len(lines) == 2 and all("SIGTERM at step 6: saved" in line for line in lines), lines
    last = next((tmp_path / "logs").rglob("last.ckpt"))
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 6


def test_lines_of_processes_sharing_stderr_never_run_into_each_other():
    """The ranks of a job share one stderr; with unbuffered streams (PYTHONUNBUFFERED, common in CI)
    `print` writes the text and its newline apart, so two ranks' lines can join. `print_line` writes
    each line whole."""
    code = "from vitpos.errors import print_line\nfor _ in range(3000):\n    print_line('error: ' + 'x' * 50)\n"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    writers = " & ".join([f'"{sys.executable}" -c "$CODE"'] * 4)
    result = subprocess.run(
        ["bash", "-c", f"{writers}; wait"], env=dict(env, CODE=code), capture_output=True, text=True, timeout=120
    )
    lines = result.stderr.splitlines()
    assert len(lines) == 4 * 3000 and set(lines) == {"error: " + "x" * 50}, result.stderr[:500]
