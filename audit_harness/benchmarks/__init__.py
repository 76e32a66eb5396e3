"""Benchmarks, one module each. A module exposes ``BENCHMARKS = {name: instance}`` of a
``base.Benchmark``; the registry below finds them, so adding a benchmark needs no edit here."""

from __future__ import annotations

import importlib
import pkgutil

from .base import Benchmark, CategoryData, MetricSettings, Record


def registry() -> dict[str, Benchmark]:
    """``{benchmark name: instance}`` over every module of this package."""
    found: dict[str, Benchmark] = {}
    for mod in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{mod.name}")
        found.update(getattr(module, "BENCHMARKS", {}))
    return found


__all__ = ["Benchmark", "CategoryData", "MetricSettings", "Record", "registry"]
