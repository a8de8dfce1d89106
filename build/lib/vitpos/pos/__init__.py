"""Positional schemes: one file per family, one interface (`PositionalEncoding`), one registry."""
from . import absolute, conditional, none, relative, rotary  # noqa: F401  (registers the schemes)
from .base import HOOKS, Grid, PositionalEncoding
from .registry import create_pos, get_pos_class, list_pos, register

__all__ = ["HOOKS", "Grid", "PositionalEncoding", "create_pos", "get_pos_class", "list_pos", "register"]
