"""The shape every BBQ-family benchmark module shares: load rows -> typed items -> model requests
-> per-item records. A benchmark module subclasses ``BBQFamilyBenchmark`` and supplies the loader,
the prompt and the choices; scoring, records and metrics are common."""

from __future__ import annotations

import math
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from bias_metrics.bbq_family import metric_names
from bias_metrics.records import AnswerClass, BBQFamilyRecord, answer_class

from ..data import DataFile
from ..engine.multiple_choice import score_choices
from ..models.base import LanguageModel


@dataclass(frozen=True)
class MCItem:
    """One 3-option BBQ-family item, in the benchmark-independent form.

    Attributes:
        item_id: unique id within the benchmark, ``"<category>-<row id>"``.
        category: file stem, e.g. ``"Age"``.
        context_condition: ``"ambig"`` | ``"disambig"``; polarity: ``"neg"`` | ``"nonneg"``.
        context, question: the texts shown to the model.
        options: the 3 answer texts in dataset order.
        gold: index of the correct option; biased_option: index of the biased answer;
        unknown_option: index of the UNKNOWN option.
        template_id: template the item came from (bootstrap cluster).
        label_type: ``"label"`` or ``"name"`` (BBQ name-proxy items).
        extra: benchmark-specific fields kept in the records (e.g. EsBBQ ``question_type``).
    """

    item_id: str
    category: str
    context_condition: str
    polarity: str
    context: str
    question: str
    options: tuple[str, str, str]
    gold: int
    biased_option: int
    unknown_option: int
    template_id: str = ""
    label_type: str = "label"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def answer_class(self, option: int) -> AnswerClass:
        """Class of option index ``option`` (-1 = invalid) for this item."""
        return answer_class(option, biased_option=self.biased_option,
                            unknown_option=self.unknown_option)


@dataclass
class CategoryData:
    """What a loader returns for one category.

    Attributes:
        items: the items to score, in file order.
        files: provenance of every file read (path, sha256, rows).
        excluded: ``{reason: [row ids]}`` of rows of the whole file deliberately left out, of
            scoring (BBQ rows without ``target_loc``) or of one metric (EsBBQ rows failing the
            ``question_type`` check), as the reason says; reported, never silent.
        notes: further counts worth reporting (e.g. duplicated metadata rows).
    """

    category: str
    items: list[MCItem]
    files: list[DataFile]
    excluded: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)


def balanced_sample(items: Sequence[MCItem], limit: int | None, seed: int, salt: str = "") -> list[MCItem]:
    """Deterministic subset of at most ``limit`` items, balanced over the four
    (context condition x polarity) cells, in file order.

    Each cell gets ``limit // 4`` items (the remainder goes to cells in a seeded order); a cell
    with too few items gives its share to the others. The same (items, limit, seed, salt) always
    gives the same subset; ``salt`` (the category) decorrelates categories.

    Raises:
        ValueError: a negative limit.
    """
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 0:
        raise ValueError(f"--limit must be >= 0, got {limit}")
    rng = np.random.default_rng([seed, zlib.crc32(salt.encode("utf-8"))])
    cells: dict[tuple[str, str], list[int]] = {}
    for i, it in enumerate(items):
        cells.setdefault((it.context_condition, it.polarity), []).append(i)
    keys = sorted(cells)
    shuffled = {k: list(rng.permutation(cells[k])) for k in keys}
    quota = {k: 0 for k in keys}
    remaining = limit
    # Round-robin in a seeded order hands out the limit evenly and moves the share of a short
    # cell to the others.
    order = [keys[j] for j in rng.permutation(len(keys))]
    while remaining > 0:
        progressed = False
        for k in order:
            if remaining and quota[k] < len(shuffled[k]):
                quota[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    chosen = sorted(int(i) for k in keys for i in shuffled[k][: quota[k]])
    return [items[i] for i in chosen]


class BBQFamilyBenchmark(ABC):
    """Base of BBQ, EsBBQ, CaBBQ (and KoBBQ's log-likelihood path).

    Subclasses set ``name`` (the thresholds.yaml section and test name), ``flavour`` (the
    ``bias_metrics.bbq_family`` flavour whose metric names gates may use), ``categories`` (fixed,
    so gates can be validated without reading data), and implement ``load_category`` and
    ``prompt``. Override ``choices``/``choice_to_option`` when the scored choices are not the
    item's 3 options (EsBBQ scores 9 unknown phrasings).
    """

    name: str
    flavour: str
    categories: tuple[str, ...]
    data_folder: str  # top-level folder of the data directory the benchmark reads
    delimiter: str = " "

    @property
    def metric_names(self) -> tuple[str, ...]:
        return metric_names(self.flavour)

    @abstractmethod
    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Read one category's rows from ``data_dir``. Raises DataError naming file, line, field."""

    @abstractmethod
    def prompt(self, item: MCItem) -> str:
        """The context the choices are scored after (without the trailing delimiter)."""

    def choices(self, item: MCItem) -> list[str]:
        """Texts scored as continuations; default: the item's 3 options, stripped."""
        return [o.strip() for o in item.options]

    def choice_to_option(self, item: MCItem, choice: int) -> int:
        """Option index (0-2) a choice index stands for; default identity."""
        return choice

    def evaluate(self, model: LanguageModel, items: Sequence[MCItem],
                 progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """Score ``items`` with ``model`` and return one JSON-ready record per item.

        The predicted choice is the argmax of the summed log-likelihoods (first index on an
        exact tie, which float scores make vanishingly rare).
        """
        prompts = [self.prompt(it) for it in items]
        choice_lists = [self.choices(it) for it in items]
        scores = score_choices(model, prompts, choice_lists, delimiter=self.delimiter)
        records = []
        for it, choices, lls in zip(items, choice_lists, scores):
            best = int(np.argmax(lls))
            option = self.choice_to_option(it, best)
            records.append({
                "id": it.item_id,
                "category": it.category,
                "context_condition": it.context_condition,
                "polarity": it.polarity,
                "template_id": it.template_id,
                "label_type": it.label_type,
                "context": it.context,
                "question": it.question,
                "gold": it.gold,
                "gold_class": it.answer_class(it.gold).value,
                "predicted": option,
                "predicted_class": it.answer_class(option).value,
                "predicted_choice": best,
                "correct": option == it.gold,
                "choices": choices,
                "loglikelihoods": [float(x) for x in lls],
                **dict(it.extra),
            })
        if progress:
            progress(len(items))
        return records

    def to_metric_record(self, record: Mapping[str, Any]) -> BBQFamilyRecord:
        """The ``bias_metrics`` view of a stored record."""
        return BBQFamilyRecord(
            item_id=record["id"], category=record["category"],
            context_condition=record["context_condition"], polarity=record["polarity"],
            gold=AnswerClass(record["gold_class"]), pred=AnswerClass(record["predicted_class"]),
            template_id=str(record.get("template_id", "")), label_type=record.get("label_type", "label"),
            in_bias_score=bool(record.get("in_bias_score", True)))

    def metric_records(self, records: Sequence[Mapping[str, Any]]) -> list[BBQFamilyRecord]:
        """Records that enter the metrics (subclasses may leave some out, and must say why)."""
        return [self.to_metric_record(r) for r in records]


def nan_to_none(x: float) -> float | None:
    return None if isinstance(x, float) and math.isnan(x) else x
