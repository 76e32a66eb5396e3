"""``CategoryOutcome``: a category's evaluation as the results file keeps it (JSON-ready), and the
records file it writes."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..benchmarks.base import Benchmark, MetricSettings, Record
from ..errors import DataError
from ..gates.judge import Coverage
from ..gates.sequential import SequentialSummary
from .pipeline import CategoryEvaluation, CategoryMeasures

#: results.json's keys of a category's outcome, in order; ``CategoryMeasures`` gives those not
#: named by the outcome itself.
_KEYS = (
    "benchmark",
    "category",
    "n_available",
    "n_scored",
    "metrics",
    "excluded",
    "notes",
    "files",
    "seconds",
    "records_path",
    "requests",
    "examples",
    "coverage",
    "sensitivity",
    "plan",
    "sequential",
)


@dataclass
class CategoryOutcome:
    """One (benchmark, category) evaluated: where and what it read, and what it measured
    (``measures``: the evaluation itself, a ``CategoryMeasures``, held, not copied), JSON-ready
    via ``to_dict``.

    The metrics, the coverage and the sequential summary stay typed objects while the run judges
    its gates; they become dicts only in ``to_dict``, the form the results file and the xdist
    controller read."""

    benchmark: str
    category: str
    n_available: int
    n_scored: int
    notes: dict[str, int]
    files: list[dict[str, Any]]
    seconds: float
    records_path: str
    measures: CategoryMeasures = field(default_factory=CategoryMeasures)
    #: a category with sequential gates (``gates.sequential.CategoryPlan.summary``): rounds,
    #: items scored and saved, and each gate's report by test id; None when no gate is sequential.
    sequential: SequentialSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        m = self.measures
        doc: dict[str, Any] = {**vars(self), **m.measures()}
        doc["metrics"] = {k: v.to_dict() for k, v in m.metrics.items()}
        doc["coverage"] = m.coverage.to_dict() if m.coverage is not None else None
        doc["sensitivity"] = m.sensitivity.to_dict() if m.sensitivity is not None else None
        doc["sequential"] = self.sequential.to_dict() if self.sequential is not None else None
        return {k: doc[k] for k in _KEYS}

    @classmethod
    def of(
        cls, benchmark: str, category: str, ev: CategoryEvaluation, records_path: str, seconds: float
    ) -> CategoryOutcome:
        """The outcome of an evaluation whose records are at ``records_path`` (relative to the
        run folder; empty for a plan, which writes none)."""
        data = ev.data
        return cls(
            benchmark=benchmark,
            category=category,
            n_available=len(data.items),
            n_scored=0 if ev.plan is not None else len(ev.records),
            notes=data.notes,
            files=[f.__dict__ for f in data.files],
            seconds=seconds,
            records_path=records_path,
            measures=ev,
            sequential=ev.sequential.summary() if ev.sequential is not None else None,
        )


def write_records(run_dir: Path, benchmark: str, category: str, ev: CategoryEvaluation) -> str:
    """Write the category's records (JSON lines, the selection's order) under ``run_dir``;
    returns their path relative to it. A plan writes none (its scores are placeholders): ``""``."""
    if ev.plan is not None:
        return ""
    path = run_dir / "records" / benchmark / f"{category}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in ev.records:
            f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
    return str(path.relative_to(run_dir))


def overall_from_records(
    benchmarks: Mapping[str, Benchmark],
    outcomes: Sequence[Mapping[str, Any]],
    run_dir: Path,
    settings: MetricSettings,
) -> dict[str, dict[str, Any]]:
    """Per benchmark, its ``Benchmark.overall`` aggregates over the evaluated categories, from the
    records files the processes of the run wrote (each category's ``records_path`` under
    ``run_dir``), so pooled numbers come from the same records as the per-category ones.

    Returns:
        ``{benchmark: {"categories": [...], label: {metric: MetricResult dict}}}``.
    Raises:
        DataError: a records file is missing or unreadable.
    """
    by_bench: dict[str, dict[str, list[Record]]] = {}
    for o in outcomes:
        records = read_records(benchmarks[o["benchmark"]], run_dir / o["records_path"])
        by_bench.setdefault(o["benchmark"], {})[o["category"]] = records
    out: dict[str, dict[str, Any]] = {}
    for name, per_cat in sorted(by_bench.items()):
        aggregates = benchmarks[name].overall(per_cat, settings)
        out[name] = {
            "categories": sorted(per_cat),
            **{label: {k: v.to_dict() for k, v in metrics.items()} for label, metrics in aggregates.items()},
        }
    return out


def read_records(bench: Benchmark, path: Path) -> list[Record]:
    """The records a category wrote to ``path`` (``write_records``).

    Raises:
        DataError: the file is missing or unreadable.
    """
    try:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read records {path}: {e}") from None
    return bench.read_records(rows)


def pooled_outcome(
    bench: Benchmark,
    category: str,
    members: Sequence[CategoryOutcome],
    run_dir: Path,
    settings: MetricSettings,
) -> CategoryOutcome:
    """The outcome of a pooled category (``Benchmark.pooled_groups``): the benchmark's metrics
    over the records of every member category together, read back from the records files the
    members wrote (so the pooled numbers come from the same records as theirs; each record keeps
    its (category, template) cluster). Coverage of saved predictions adds up; nothing is written
    (``records_path`` empty), and the outcome is not one of the run's categories: results.json
    keeps it in the gates' verdicts and in ``overall``, never beside the categories.

    Parameters
    ----------
    bench : Benchmark
        The configured benchmark.
    category : str
        The pooled category's name (``pooled``, ``pooled_en``...).
    members : sequence of CategoryOutcome
        The outcomes of the categories it pools (those with data).
    run_dir : Path
        The run folder the members' ``records_path`` are relative to.
    settings : MetricSettings
        The run's interval settings.
    """
    plans = [m.measures.plan for m in members if m.measures.plan is not None]
    records = [] if plans else [r for m in members for r in read_records(bench, run_dir / m.records_path)]
    cov = [m.measures.coverage for m in members if m.measures.coverage is not None]
    metrics = dict(bench.metrics(records, settings)) if records else {}
    stopped = [m.category for m in members if m.sequential is not None and m.sequential.stopped_early]
    if stopped:
        # Categories that stopped on their own gates' decisions hold a sample chosen by the
        # data: no fixed-n interval covers their items pooled, so no pooled verdict rests on it.
        why = (
            f"pooled over categories scored sequentially that stopped early ({', '.join(stopped)}): "
            "a pooled gate needs every selected item; score them in full (no --sequential)"
        )
        metrics = {k: dataclasses.replace(v, value=math.nan, reason=why) for k, v in metrics.items()}
    return CategoryOutcome(
        benchmark=bench.name,
        category=category,
        n_available=sum(m.n_available for m in members),
        n_scored=sum(m.n_scored for m in members),
        notes={"categories_pooled": len(members)},
        files=[f for m in members for f in m.files],
        seconds=0.0,
        records_path="",
        measures=CategoryMeasures(
            metrics=metrics,
            coverage=(
                Coverage(predicted=sum(c.predicted for c in cov), available=sum(c.available for c in cov))
                if cov
                else None
            ),
            plan={"pooled": [m.category for m in members]} if plans else None,
        ),
    )
