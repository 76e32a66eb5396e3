"""Model backends behind one interface (``base.Backend``) and the zoo of named models."""

from .base import Backend, ModelInfo
from .zoo import DEFAULT_MODEL, ZOO, load_model

__all__ = ["DEFAULT_MODEL", "Backend", "ModelInfo", "ZOO", "load_model"]
