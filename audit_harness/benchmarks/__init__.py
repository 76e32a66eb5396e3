"""Benchmarks, one module each. A module exposes ``BENCHMARKS = {name: instance}``; the registry
below finds them, so adding a benchmark needs no edit here."""

from __future__ import annotations

import importlib
import pkgutil

from .base import BBQFamilyBenchmark, CategoryData, MCItem, balanced_sample


def registry() -> dict[str, BBQFamilyBenchmark]:
    """``{benchmark name: instance}`` over every module of this package."""
    found: dict[str, BBQFamilyBenchmark] = {}
    for mod in pkgutil.iter_modules(__path__):
        if mod.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{mod.name}")
        found.update(getattr(module, "BENCHMARKS", {}))
    return found


__all__ = ["BBQFamilyBenchmark", "CategoryData", "MCItem", "balanced_sample", "registry"]
