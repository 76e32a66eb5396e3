"""Model backends behind one interface (``base.LanguageModel``) and the zoo of named models."""

from .base import LanguageModel, ModelInfo
from .zoo import DEFAULT_MODEL, ZOO, load_model

__all__ = ["DEFAULT_MODEL", "LanguageModel", "ModelInfo", "ZOO", "load_model"]
