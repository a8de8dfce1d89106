"""Name -> class registry for positional schemes (the names `pos=` accepts)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from typing import TypeVar

from ..errors import ConfigError
from .arguments import check_arguments
from .base import PositionalEncoding

_SCHEMES: dict[str, type[PositionalEncoding]] = {}

T = TypeVar("T", bound=type[PositionalEncoding])


def register(name: str) -> Callable[[T], T]:
    """Class decorator: make a scheme available as `pos=<name>`."""

    def wrap(cls: T) -> T:
        if name in _SCHEMES:
            raise RuntimeError(f"positional scheme {name!r} registered twice")
        cls.scheme_name = name
        _SCHEMES[name] = cls
        return cls

    return wrap


def import_families(path: Iterable[str], package: str) -> list[str]:
    """Import every module of `package` found on `path` (a package's `__path__`), so that each
    family file's `@register` runs: a new scheme needs its class in a file there and its YAML, no
    list of imports. Returns the names imported, in file-name order."""
    names = [module.name for module in pkgutil.iter_modules(list(path), prefix=f"{package}.")]
    for name in names:
        importlib.import_module(name)
    return names


def list_pos() -> list[str]:
    """Names of every registered positional scheme."""
    return sorted(_SCHEMES)


def get_pos_class(name: str) -> type[PositionalEncoding]:
    try:
        return _SCHEMES[name]
    except KeyError:
        raise ConfigError(f"unknown positional scheme {name!r}; valid names: {', '.join(list_pos())}") from None


def fuzzy_schemes() -> list[str]:
    """Names of the schemes that can be trained with fuzzy positions (`pos.fuzzy=true`)."""
    return [name for name in list_pos() if _SCHEMES[name].supports_fuzzy]


def create_pos(name: str, fuzzy: bool = False, **kwargs) -> PositionalEncoding:
    """Build the scheme `name` with constructor arguments `kwargs` (dim, num_heads, depth, grid, ...);
    `fuzzy` turns on fuzzy positions in training (`PositionalEncoding.draw_jitter`). An unknown
    argument or one outside the range its class declares (`arguments`) is a ConfigError."""
    cls = get_pos_class(name)
    if not isinstance(fuzzy, bool):
        raise ConfigError(f"pos.fuzzy={fuzzy!r} must be true or false")
    if fuzzy and not cls.supports_fuzzy:
        raise ConfigError(
            f"pos={name} has no continuous coordinates to jitter, so it cannot train with "
            f"pos.fuzzy=true; schemes that can: {', '.join(fuzzy_schemes())}"
        )
    check_arguments(cls, kwargs)
    scheme = cls(**kwargs)
    scheme.fuzzy = fuzzy
    return scheme
