"""vitpos: Vision Transformers with a pluggable positional component."""

from .errors import ConfigError, DataNotFoundError, VitposError
from .model import VisionTransformer, create_model
from .pos import list_pos
from .resize import load_model

__all__ = [
    "ConfigError",
    "DataNotFoundError",
    "VisionTransformer",
    "VitposError",
    "create_model",
    "list_pos",
    "load_model",
]
__version__ = "0.1.0"
