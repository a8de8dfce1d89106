"""User-facing errors: `train.py` and the CLIs print their message as one line, no traceback."""

import os
import sys

EXIT_USER_ERROR = 2


class VitposError(Exception):
    """Base class for errors caused by the user's input (config, files, data), not by a bug."""


class ConfigError(VitposError, ValueError):
    """An option or combination of options that cannot work (unknown scheme, bad sizes)."""


class DataNotFoundError(VitposError, FileNotFoundError):
    """A dataset is missing and cannot be downloaded."""


class NonFiniteLossError(VitposError, FloatingPointError):
    """The training loss became NaN or infinite (on any rank)."""


class CheckpointWriteError(VitposError, OSError):
    """A checkpoint could not be written (a full disk, a quota); the previous file is intact."""


class RankLostError(VitposError, RuntimeError):
    """Another process of a distributed run stopped (killed, crashed, out of memory)."""


EXIT_PREEMPTED = 143  # 128 + SIGTERM, as a shell reports a process that SIGTERM ended


class Preempted(Exception):
    """Training stopped on SIGTERM (last.ckpt saved once a step was trained): not finished, exit EXIT_PREEMPTED."""


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_setting(setting: str, value, valid: bool, must: str) -> None:
    """Raise `setting=value must <must>` as a ConfigError unless `valid`."""
    if not valid:
        raise ConfigError(f"{setting}={value!r} must {must}")


def print_line(text: str) -> None:
    """`text` and its newline to stderr in one write, so that the lines of processes sharing the
    stream (the ranks of a DDP job) never run into each other."""
    line = text + "\n"
    try:
        descriptor = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a file (captured, redirected in-process)
        sys.stderr.write(line)
        sys.stderr.flush()
        return
    sys.stderr.flush()
    os.write(descriptor, line.encode())


def report(error: Exception) -> int:
    """Print `error` as the one `error:` line the CLIs show; return their exit status."""
    print_line(f"error: {error}")
    return EXIT_USER_ERROR
