"""Positional schemes: one file per family, one interface (`PositionalEncoding`), one registry."""

from .base import HOOKS, Grid, PositionalEncoding
from .registry import create_pos, get_pos_class, import_families, list_pos, register

import_families(__path__, __name__)  # every module here, so each family file's `@register` runs

__all__ = [
    "HOOKS",
    "Grid",
    "PositionalEncoding",
    "create_pos",
    "get_pos_class",
    "import_families",
    "list_pos",
    "register",
]
