"""One evaluation pipeline for every category of every run: an item source (``sources``: a
seeded selection, or the items saved predictions answer) scored through the engine, at once or
in balanced sequential rounds (``pipeline.evaluate_category``, ``sequential_rounds``), giving a
typed ``CategoryEvaluation``; ``category_outcome`` makes it the results file's ``CategoryOutcome``
(which holds what it measured, ``CategoryMeasures``) and writes its records."""

from ..gates.judge import Coverage
from .category_outcome import CategoryOutcome, overall_from_records, pooled_outcome, write_records
from .item_sources import FixedSelection, ItemSource, ReplayedItems, Selection
from .pipeline import (
    CategoryEvaluation,
    CategoryMeasures,
    ParseSensitivity,
    Scoring,
    check_capabilities,
    evaluate_category,
)

__all__ = [
    "CategoryEvaluation",
    "CategoryMeasures",
    "CategoryOutcome",
    "Coverage",
    "FixedSelection",
    "ItemSource",
    "ParseSensitivity",
    "ReplayedItems",
    "Scoring",
    "Selection",
    "check_capabilities",
    "evaluate_category",
    "overall_from_records",
    "pooled_outcome",
    "write_records",
]
