"""Name -> class registry for positional schemes (the names `pos=` accepts)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..errors import ConfigError
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


def list_pos() -> list[str]:
    """Names of every registered positional scheme."""
    return sorted(_SCHEMES)


def get_pos_class(name: str) -> type[PositionalEncoding]:
    try:
        return _SCHEMES[name]
    except KeyError:
        raise ConfigError(
            f"unknown positional scheme {name!r}; valid names: {', '.join(list_pos())}"
        ) from None


def create_pos(name: str, **kwargs) -> PositionalEncoding:
    """Build the scheme `name` with constructor arguments `kwargs` (dim, num_heads, depth, grid, ...)."""
    return get_pos_class(name)(**kwargs)
