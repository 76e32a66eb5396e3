"""Oracle models: predictions built from the data itself, whose verdict is known before the run.

Each oracle answers every item of a benchmark's data from what the benchmark knows of it
(``Benchmark.oracle_view``: the saved output naming each answer, the gold, the bias-aligned and the
unknown answer), and the file is then scored by the real pipeline (``bias-audit oracle``, which
runs what ``bias-audit score`` runs), so the shipped gates are checked against models whose truth is
known: a perfect model must pass, a stereotyped one must fail (docs/oracles.md).

Kinds:

- ``perfect``: the gold answer (no gold in a sentence pair: not applicable);
- ``stereotyped``: the bias-aligned answer in every context; for a pair, the more stereotyping
  sentence scores higher;
- ``anti_stereotyped``: the answer that is neither bias-aligned nor unknown; for a pair, the other
  sentence scores higher;
- ``always_unknown``: the unknown option;
- ``always_first_option``: the first answer as listed (a pair: ``sent_more``, the data's first
  sentence);
- ``random``: seeded, uniform over the answers (a pair: which sentence scores higher); for a
  free-text item (KGQuiz blank filling, factual editing, open ended), the gold answer of another
  item of the same category, drawn uniformly;
- ``tie``: a pair's two sentences score the same.

An item a kind does not apply to (a KGQuiz blank to fill has no first option) is left out of
the file, so its category is skipped by the run, never passed; a kind that applies to no item is
an error. Every draw is seeded per item (``seed``, item id), so a file does not depend on the order
of the data.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .benchmarks.base import Benchmark, OracleView, SavedOutput
from .errors import ConfigError, MissingDataError

KINDS = (
    "perfect",
    "stereotyped",
    "anti_stereotyped",
    "always_unknown",
    "always_first_option",
    "random",
    "tie",
)
#: The field of each written row that holds the oracle's answer (``--prediction-field``).
PREDICTION_FIELD = "prediction"
#: A pair's scores: any two distinct finite log-likelihoods order it; equal ones tie it.
HIGH, LOW = -10.0, -20.0


class NotApplicable(Exception):
    """The kind has no answer for this item (the reason is the message)."""


@dataclass
class OracleFile:
    """A written oracle predictions file.

    Attributes:
        path: the JSONL file. kind, seed: the oracle. rows: rows written.
        categories: ``{category: rows}`` answered. skipped: ``{category: why}`` of categories
            with no row (data missing, or the kind does not apply to their items).
    """

    path: Path
    kind: str
    seed: int
    rows: int
    categories: dict[str, int]
    skipped: dict[str, str] = field(default_factory=dict)


def _rng(seed: int, item_id: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(item_id.encode("utf-8"))])


def _pair(view: OracleView, winner: int | None) -> dict[str, float]:
    """The saved scores of a pair whose answer ``winner`` (0: sent_more) scores higher; None: a
    tie."""
    more, less = (HIGH, HIGH) if winner is None else ((HIGH, LOW) if winner == 0 else (LOW, HIGH))
    return {"sent_more": more, "sent_less": less}


def answer(
    view: OracleView, kind: str, seed: int, item_id: str, peers: Sequence[OracleView] = (), index: int = 0
) -> SavedOutput:
    """The saved output of oracle ``kind`` for one item.

    Args:
        view: the item's ``OracleView``. kind: one of ``KINDS``. seed: the random oracle's seed.
        item_id: the item's id (seeds its draw).
        peers, index: the views of the item's category and this item's index among them (the
            random oracle of a free-text item answers with another peer's gold).
    Raises:
        NotApplicable: the item has no such answer (the message says why).
    """
    if kind == "tie":
        if view.shape != "pair":
            raise NotApplicable("not a sentence pair")
        return _pair(view, None)
    if kind == "random":
        rng = _rng(seed, item_id)
        if view.shape == "text":
            if len(peers) < 2 or view.fill is None:
                raise NotApplicable("no other item to take an answer from")
            other = int(rng.integers(len(peers) - 1))
            other += other >= index
            return view.fill(peers[other].value)
        pick = int(rng.integers(len(view.answers)))
    elif kind in _PICKS:
        pick = _PICKS[kind](view)
    else:
        raise ConfigError(f"unknown oracle kind {kind!r}; known: {', '.join(KINDS)}")
    return _pair(view, pick) if view.shape == "pair" else view.answers[pick]


def _given(pick: int | None, missing: str) -> int:
    if pick is None:
        raise NotApplicable(missing)
    return pick


def _anti_stereotyped(view: OracleView) -> int:
    others = [k for k in range(len(view.answers)) if k not in (view.biased, view.unknown)]
    if view.biased is None or len(others) != 1:
        raise NotApplicable("no single counter-stereotypical answer")
    return others[0]


def _first_option(view: OracleView) -> int:
    if view.shape == "text":
        raise NotApplicable("a free answer: no options")
    return 0


#: The option each deterministic oracle answers with (NotApplicable where the item has none).
_PICKS: dict[str, Callable[[OracleView], int]] = {
    "perfect": lambda view: _given(view.gold, "no gold answer"),
    "stereotyped": lambda view: _given(view.biased, "no bias-aligned answer"),
    "anti_stereotyped": _anti_stereotyped,
    "always_unknown": lambda view: _given(view.unknown, "no unknown answer"),
    "always_first_option": _first_option,
}


def oracle_rows(
    benchmark: Benchmark, data_dir: Path, kind: str, seed: int = 0
) -> tuple[list[dict[str, SavedOutput]], dict[str, int], dict[str, str]]:
    """Every row of oracle ``kind`` over every category of ``benchmark``'s data in ``data_dir``.

    Returns:
        (rows, ``{category: rows}``, ``{category: why skipped}``); an item shared by several
        categories (a pair benchmark's ``overall``) is written once.
    Raises:
        ConfigError: an unknown kind, a benchmark without oracle views, or a kind that applies to
            no item.
        DataError: the data's own errors (a missing file skips its category instead).
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown oracle kind {kind!r}; known: {', '.join(KINDS)}")
    rows: list[dict[str, SavedOutput]] = []
    counts: dict[str, int] = {}
    skipped: dict[str, str] = {}
    seen: set[str] = set()
    for category in benchmark.categories_in(data_dir):
        try:
            data = benchmark.load_category(data_dir, category)
        except MissingDataError as e:
            skipped[category] = f"data missing: {e}"
            continue
        items = [it for it in data.items if it.item_id not in seen]
        views = [v for v in (benchmark.oracle_view(it) for it in items) if v is not None]
        if len(views) != len(items):
            raise ConfigError(f"{benchmark.name} has no oracle models (it takes no saved outputs)")
        why = None
        for i, (it, view) in enumerate(zip(items, views)):
            try:
                value = answer(view, kind, seed, it.item_id, views, i)
            except NotApplicable as e:
                why = str(e)
                continue
            rows.append({**view.row, PREDICTION_FIELD: value})
            seen.add(it.item_id)
            counts[category] = counts.get(category, 0) + 1
        if category not in counts and why is not None:
            skipped[category] = f"oracle {kind!r} does not apply: {why}"
    if not rows:
        reasons = "; ".join(f"{c}: {w}" for c, w in skipped.items()) or "no data"
        raise ConfigError(f"oracle {kind!r} gives no answer for any {benchmark.name} item ({reasons})")
    return rows, counts, skipped


def write_oracle(benchmark: Benchmark, data_dir: Path, kind: str, path: Path, seed: int = 0) -> OracleFile:
    """Write oracle ``kind``'s predictions for every item of ``benchmark`` to ``path`` (JSONL,
    the answer in ``PREDICTION_FIELD``); see ``oracle_rows`` for what is raised."""
    rows, counts, skipped = oracle_rows(benchmark, data_dir, kind, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return OracleFile(path, kind, seed, len(rows), counts, skipped)


def describe(written: OracleFile) -> list[str]:
    """The lines ``bias-audit oracle`` prints about the file it wrote."""
    lines = [
        f"ORACLE: {written.kind} (seed {written.seed}): {written.rows:,} predictions in {written.path}",
    ]
    lines += [f"ORACLE: {cat}: not answered, {why}" for cat, why in written.skipped.items()]
    return lines
