"""User-facing errors: `train.py` and the CLIs print their message as one line, no traceback."""
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


def is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_setting(setting: str, value, valid: bool, must: str) -> None:
    """Raise `setting=value must <must>` as a ConfigError unless `valid`."""
    if not valid:
        raise ConfigError(f"{setting}={value!r} must {must}")


def report(error: Exception) -> int:
    """Print `error` as the one `error:` line the CLIs show; return their exit status."""
    print(f"error: {error}", file=sys.stderr)
    return EXIT_USER_ERROR
