"""Where the suite keeps what it makes for itself: converted models, fetched data, the result
cache. One root, ``$BIAS_AUDIT_CACHE`` (default ``~/.cache/bias-audit``)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "BIAS_AUDIT_CACHE"


def cache_dir() -> Path:
    """Root of everything the suite caches: ``$BIAS_AUDIT_CACHE`` or ``~/.cache/bias-audit``."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "bias-audit")).expanduser()


def scores_dir() -> Path:
    """The default result-cache folder, ``<cache_dir>/scores`` (``--cache-dir`` overrides)."""
    return cache_dir() / "scores"


def data_dir() -> Path:
    """The default data folder, ``<cache_dir>/data`` (``--data-dir``/``AUDIT_DATA_DIR`` override)."""
    return cache_dir() / "data"


def models_dir() -> Path:
    """Where zoo models are converted to, ``<cache_dir>/models``."""
    return cache_dir() / "models"
