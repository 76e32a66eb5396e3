"""Benchmarks, one module each. A module exposes ``BENCHMARKS = {name: instance}`` of a
``base.Benchmark``; the registry below finds them, so adding a benchmark needs no edit here."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Sequence

from .base import Benchmark, CategoryData, MetricSettings, Record


def registry(declarations: Sequence[str | Path] = ()) -> dict[str, Benchmark]:
    """``{benchmark name: instance}`` over every module of this package, then the BBQ-format
    datasets declared in the YAML files ``declarations`` (``--bbq-dataset``; ``declared.py``).

    Raises:
        ConfigError: a declaration is refused (file, line and field named).
    """
    found: dict[str, Benchmark] = {}
    for mod in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{mod.name}")
        found.update(getattr(module, "BENCHMARKS", {}))
    if declarations:
        from .declared import declared_benchmarks

        found.update(declared_benchmarks(declarations, found))
    return found


__all__ = ["Benchmark", "CategoryData", "MetricSettings", "Record", "registry"]
