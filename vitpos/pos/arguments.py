"""What a scheme's constructor arguments take, declared once on its class (`arguments`) and checked
by `create_pos` before the scheme is built: a bad value is one ConfigError naming the argument and
its range, never a failure deep inside torch."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from ..errors import ConfigError, is_integer, is_number

MODEL_GIVEN = {"dim": "model.dim", "num_heads": "model.num_heads", "depth": "model.depth", "grid": "img_size"}


@dataclass(frozen=True)
class Argument:
    """The values one constructor argument takes: a finite `number`, an `integer`, a list of
    `integers`, or a `grid` ([H, W] of integers), each within `low`..`high`; an `open` end is
    refused itself. Or a `choice`: one of the words in `choices`. `meaning` says what it is, in the
    error message."""

    meaning: str
    kind: str = "number"  # number | integer | integers | grid | choice
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    odd: bool = False
    example: str | None = None  # for the message, where the default is none
    choices: tuple[str, ...] = ()  # the words a `choice` takes

    def accepts(self, value) -> bool:
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "integers":
            return isinstance(value, (list, tuple)) and all(self.accepts_one(item) for item in value)
        if self.kind == "grid":
            return isinstance(value, (list, tuple)) and len(value) == 2 and all(self.accepts_one(n) for n in value)
        return self.accepts_one(value)

    def accepts_one(self, value) -> bool:
        if self.kind == "number":
            if not (is_number(value) and math.isfinite(value)):
                return False
        elif not is_integer(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return not self.odd or value % 2 == 1

    def must(self) -> str:
        """`a positive integer`, `an odd integer >= 1`, `a number with 0 < x <= 360`, `a list of
        integers >= 0`, `one of zeros, circular`, ..."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        plural = self.kind in ("integers", "grid")
        noun = ("number" if self.kind == "number" else "integer") + ("s" if plural else "")
        low = None if self.low is None else f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.high is not None:
            left = "" if self.low is None else f"{self.low:g} {'<' if self.low_open else '<='} "
            one = f"{noun} with {left}x {'<' if self.high_open else '<='} {self.high:g}"
        elif low in ("> 0", ">= 1") and (low == "> 0" or self.kind != "number"):
            one = f"positive {noun}"
        else:
            one = f"{noun} {low}" if low else noun
        one = f"odd {one}" if self.odd else one
        if self.kind == "grid":
            return f"an [H, W] pair of {one}"
        if plural:
            return f"a list of {one}"
        return f"{'an' if one[0] in 'aeiou' else 'a'} {one}"


def declared_arguments(cls) -> dict[str, Argument]:
    """Every `arguments` declaration of `cls` and its bases, the class's own winning."""
    merged: dict[str, Argument] = {}
    for klass in reversed(cls.__mro__):
        merged.update(getattr(klass, "arguments", {}) or {})
    return merged


def scheme_parameters(cls) -> dict[str, inspect.Parameter]:
    """The constructor arguments a user sets (`pos.<name>=`), besides those the model gives."""
    parameters = inspect.signature(cls.__init__).parameters
    unused = {"self", *MODEL_GIVEN}
    unused |= set() if cls.resize_modes else {"resize_mode"}
    unused |= set() if cls.measures_in_ref_grid else {"ref_grid"}
    return {name: p for name, p in parameters.items() if name not in unused}


def check_model_given(pos_kwargs: dict) -> None:
    """Refuse a scheme argument that the model gives every scheme (its width, heads, depth, grid)."""
    for key in pos_kwargs:
        if key in MODEL_GIVEN:
            raise ConfigError(f"pos.{key} is not a scheme setting: the model gives it; set {MODEL_GIVEN[key]} instead")


def check_arguments(cls, kwargs: dict) -> None:
    """Refuse an unknown argument and a value outside its declared range (the arguments the model
    gives are checked by `check_model_given`)."""
    name = cls.scheme_name
    parameters = scheme_parameters(cls)
    signature = {key: p.default for key, p in inspect.signature(cls.__init__).parameters.items()}
    for key, value in kwargs.items():
        if key in MODEL_GIVEN or (value is None and signature.get(key, inspect.Parameter.empty) is None):
            continue  # the model's own, checked where it is built; None where None means "unset"
        if key == "resize_mode":
            cls.check_resize_mode(value)  # one of the scheme's modes, or none where it has none
            continue
        if key not in parameters:
            takes = ", ".join([*parameters, "fuzzy"])
            raise ConfigError(f"pos={name} has no argument {key!r}; it takes {takes}")
        argument, default = declared_arguments(cls).get(key), parameters[key].default
        if argument is None or argument.accepts(value):
            continue
        default = list(default) if isinstance(default, tuple) else default  # as a user writes it: [0]
        example = argument.example or (None if default in (None, inspect.Parameter.empty) else f"{default!r}")
        hint = f", e.g. {key}={example}" if example and argument.kind != "choice" else ""  # a choice lists them
        raise ConfigError(
            f"pos={name} needs {key} to be {argument.must()} ({argument.meaning}){hint}; got {key}={value!r}"
        )
