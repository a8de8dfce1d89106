"""tests/forked_cli.py stands in for `subprocess.run([sys.executable, ...])`: a forked run must
answer as a new process does, or the tests that use it would test something else."""

from __future__ import annotations

import os
import subprocess
import sys

import forked_cli

SCRIPT = """
import os, signal, sys
from pathlib import Path
print("out", " ".join(sys.argv[1:]), Path.cwd().name, os.environ.get("FORKED_CLI_PROBE"))
print("err", file=sys.stderr)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "raise":
    raise ValueError("boom")
sys.exit("a message" if sys.argv[1] == "message" else int(sys.argv[1]))
"""


def test_a_forked_run_answers_as_a_new_process(tmp_path):
    """Exit codes (0, 3, a message, an exception), death by a signal, stdout and stderr, the
    arguments, the folder and the environment: the same from a fork as from a new interpreter."""
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    (tmp_path / "work").mkdir()
    env = dict(os.environ, FORKED_CLI_PROBE="seen")
    for first in ["0", "3", "message", "raise", "kill"]:
        argv = [str(script), first, "x=1"]
        real = subprocess.run([sys.executable, *argv], cwd=tmp_path / "work", env=env, capture_output=True, text=True)
        forked = forked_cli.run(argv, cwd=tmp_path / "work", env=env)
        assert forked.returncode == real.returncode, first
        assert forked.stdout == real.stdout == f"out {first} x=1 work seen\n"
        # a traceback names the frames that ran it (runpy's, in a fork): compare its first and last lines
        real_lines, forked_lines = real.stderr.splitlines(), forked.stderr.splitlines()
        assert (forked_lines[:2], forked_lines[-1]) == (real_lines[:2], real_lines[-1]), first
    assert [forked_cli.run([str(script), code]).returncode for code in ("0", "kill")] == [0, -9]
