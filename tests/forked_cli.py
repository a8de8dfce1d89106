"""Run a command-line script as a new process without paying its imports each time.

A `python train.py` subprocess spends most of a tiny test run importing torch, torchvision, timm
and Lightning. multiprocessing's forkserver imports vitpos' command line once, in a server that
runs no torch operation (so no thread pool exists to break across a fork), then forks one child
per run. The child takes the run's folder, environment, arguments and thread count, runs the
script as __main__ and exits with its code; a signal ends it as it ends a process. The result is a
`subprocess.CompletedProcess`, as `subprocess.run(..., capture_output=True, text=True)` gives.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

# torch, timm, Lightning, Hydra, matplotlib and vitpos' modules: what its command lines import
PRELOAD = ["vitpos.__main__", "vitpos.compare", "vitpos.evaluate", "vitpos.figures", "vitpos.diagnose"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(PRELOAD)


def _exit_code(code) -> int:
    """The status `sys.exit(code)` gives a process: None is 0, an int itself, anything else printed and 1."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _run_as_main(argv: list[str], cwd: str, env: dict, stdout: str, stderr: str) -> None:
    """In the forked child: become the process `python argv...` would be, run it, exit with its status."""
    for fd, path in ((1, stdout), (2, stderr)):
        file = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(file, fd)
        os.close(file)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if "OMP_NUM_THREADS" in env:  # read when torch loaded, in the server: set it as a new process would
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        if argv[0] == "-m":  # python -m module args...: argv[0] becomes the module's file, as there
            sys.argv = [argv[1], *argv[2:]]
            sys.modules.pop(argv[1], None)  # preloaded; python -m would find it unimported
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # os._exit below skips them, as a process's normal exit would not
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(
    argv: list, cwd: Path | None = None, env: dict | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """`python argv...` (a script or `-m module`, then its arguments) in `cwd` (default: this one)
    with environment `env` (default: this one): its exit status (negative: the signal that ended
    it) and its stdout and stderr as text."""
    with tempfile.TemporaryDirectory() as folder:
        outputs = [Path(folder, "stdout"), Path(folder, "stderr")]
        for path in outputs:
            path.touch()
        environment = dict(os.environ if env is None else env)  # env={} is an empty one, as for subprocess.run
        child = _context.Process(
            target=_run_as_main, args=(list(map(str, argv)), str(cwd or os.getcwd()), environment, *map(str, outputs))
        )
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(argv, timeout, *(path.read_text() for path in outputs))
        stdout, stderr = (path.read_text() for path in outputs)
    return subprocess.CompletedProcess(argv, child.exitcode, stdout, stderr)
