"""One category's evaluation: the items of an item source scored through the engine (at once,
or in sequential rounds until every sequential gate is decided), their records, the
benchmark's metrics over them and what else the category's outcome reports. It reads the run
through ``Scoring`` only, never the session."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from bias_metrics.result import MetricResult

from ..benchmarks.base import Benchmark, CategoryData, Item, MetricSettings, Record
from ..errors import ModelError
from ..gates import Gate
from ..gates.judge import Coverage
from ..gates.sequential import CategoryPlan, tracks_for
from .item_sources import ItemSource, Selection
from .sequential_rounds import build_rounds, round_size

if TYPE_CHECKING:
    from ..engine.executor import Engine
    from ..engine.progress import Progress
    from ..models.base import Backend
    from ..planning import PlanMeter


@dataclass
class Scoring:
    """What the pipeline scores with, shared by every category of one process.

    Attributes:
        engine: the run's ``engine.executor.Engine`` (its ``backend`` is the audited model).
        settings: the metrics' interval settings.
        records: ``{(benchmark, item id): Record}`` scored so far in this process: categories
            that share items (a pair benchmark's ``overall``) score each item once.
        progress: the run's ``engine.progress.Progress`` (one task per category).
        gates: ``{(benchmark, category): [Gate]}`` the process judges, or None (not known): a
            category with sequential gates stops once all of them are decided.
        sequential: ``--sequential``: every gate is sequential.
        meter: a plan's ``planning.PlanMeter``: the backend's scores are placeholders, so a
            category is counted and nothing is computed from them; None in a run.
    """

    engine: Engine
    settings: MetricSettings
    records: dict[tuple[str, str], Record]
    progress: Progress
    gates: Mapping[tuple[str, str], Sequence[Gate]] | None = None
    sequential: bool = False
    meter: PlanMeter | None = None


@dataclass(frozen=True)
class ParseSensitivity:
    """Generate mode: every metric as the other answer-parsing profile reads the outputs."""

    answer_parsing: str
    metrics: dict[str, MetricResult]

    def to_dict(self) -> dict[str, object]:
        return {
            "answer_parsing": self.answer_parsing,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
        }


@dataclass(kw_only=True)
class CategoryMeasures:
    """What a category's evaluation measured, as its evaluation (``CategoryEvaluation``) and its
    outcome (``category_outcome.CategoryOutcome``) both hold it: one declaration of each field.

    Attributes:
        metrics: the benchmark's metrics over the records (none in a plan), ``MetricResult``
            objects until the results file is written.
        excluded: ``{reason: [item ids]}`` left out (the loader's, the source's, the
            benchmark's).
        requests: the engine's counters for this category (``EngineStats.to_dict``: requests,
            distinct, from_cache, computed, tokens_forwarded, forwards, oom_retries).
        examples: a few invalid / out-of-choice outputs (``Benchmark.report_examples``).
        coverage: ``--backend replay``: the part of the category the predictions answer; None
            for a live run.
        sensitivity: generate mode: every metric under the other parsing profile; None when
            nothing is parsed.
        plan: ``--plan``: the category's counts (``planning.plan_row``); then nothing else is a
            score (no metrics, no records written).
    """

    metrics: dict[str, MetricResult] = field(default_factory=dict)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    coverage: Coverage | None = None
    sensitivity: ParseSensitivity | None = None
    plan: dict[str, Any] | None = None

    def measures(self) -> dict[str, object]:
        """Its ``CategoryMeasures`` fields by name, whatever subclass it is (what
        ``CategoryOutcome.to_dict`` writes of them)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(CategoryMeasures)}


@dataclass(kw_only=True)
class CategoryEvaluation(CategoryMeasures):
    """What one category's evaluation produced: what it measured (``CategoryMeasures``), and

    Attributes:
        data: the category's loaded data.
        records: the records of the items scored, in the selection's order.
        sequential: the category's ``gates.sequential.CategoryPlan`` (None: no sequential gate).
    """

    data: CategoryData
    records: list[Record]
    sequential: CategoryPlan | None = None


def check_capabilities(model: Backend, bench: Benchmark) -> None:
    """Raise ModelError when ``model`` cannot compute what ``bench`` needs (or, a server whose
    log-probabilities failed the alignment check, cannot be trusted with it)."""
    model.require_scores(bench.requires)
    missing = bench.requires - model.capabilities
    if missing:
        info = model.info
        raise ModelError(
            f"{bench.name} needs {', '.join(sorted(missing))}, which model "
            f"{info.name!r} ({info.kind} LM) cannot compute"
        )


def evaluate_category(
    scoring: Scoring, bench: Benchmark, category: str, data: CategoryData, source: ItemSource
) -> CategoryEvaluation:
    """Score ``category`` of ``bench`` (its loaded ``data``) on the items ``source`` selects.

    Raises:
        MissingDataError: the source has nothing of the category (its gates are skipped).
    """
    benchmark, engine = bench.name, scoring.engine
    selection = source.select(bench, benchmark, category, data)
    items = list(selection.items)
    todo = [it for it in items if (benchmark, it.item_id) not in scoring.records]
    engine.reset_stats()
    if scoring.meter is not None:
        scoring.meter.start()
    plan = None if scoring.meter is not None else sequential_plan(scoring, bench, category, items)
    # The selection's order: records are kept and scored in it whatever order the rounds
    # scored them in, so a bootstrap interval over the same items is the same interval.
    selected = {it.item_id: i for i, it in enumerate(items)}
    with scoring.progress.task(f"{benchmark}/{category}", len(todo)) as task:
        engine.progress = task
        try:
            if plan is not None and plan.can_stop:
                items = _score_in_rounds(scoring, bench, category, items, plan)
            else:
                _score(scoring, bench, todo)
                if plan is not None:
                    plan.scored_in_full(len(items))
        finally:
            engine.progress = None
    stats = engine.reset_stats().to_dict()
    items = sorted(items, key=lambda it: selected[it.item_id])
    records = [scoring.records[(benchmark, it.item_id)] for it in items]
    evaluation = CategoryEvaluation(data=data, records=records, excluded=dict(data.excluded), requests=stats)
    if scoring.meter is not None:
        evaluation.plan = scoring.meter.row(len(records), stats, new_items=len(todo))
        return evaluation
    _measure(evaluation, bench, scoring.settings, selection, plan)
    return evaluation


def _measure(
    evaluation: CategoryEvaluation,
    bench: Benchmark,
    settings: MetricSettings,
    selection: Selection,
    plan: CategoryPlan | None,
) -> None:
    """Fill in an evaluation of scored records: metrics, parse sensitivity, exclusions, examples."""
    records = evaluation.records
    evaluation.metrics = bench.metrics(records, settings)
    alt = bench.parse_sensitivity(records, settings)
    if alt is not None:
        evaluation.sensitivity = ParseSensitivity(alt["answer_parsing"], alt["metrics"])
    excluded = evaluation.excluded
    excluded.update(selection.excluded)
    for reason, ids in bench.exclusions(records).items():
        excluded.setdefault(reason, []).extend(ids)
    evaluation.examples = bench.report_examples(records)
    evaluation.coverage = selection.coverage
    evaluation.sequential = plan


def _score(scoring: Scoring, bench: Benchmark, items: Sequence[Item]) -> None:
    """Score the ``items`` not scored yet in this process and keep their records."""
    todo = [it for it in items if (bench.name, it.item_id) not in scoring.records]
    if todo:
        for record in bench.evaluate(scoring.engine, todo):
            scoring.records[(bench.name, record.item_id)] = record


def sequential_plan(
    scoring: Scoring, bench: Benchmark, category: str, items: Sequence[Item]
) -> CategoryPlan | None:
    """The category's ``gates.sequential.CategoryPlan`` (rounds of
    ``sequential_rounds.round_size``), or None when no gate of it is sequential."""
    if not scoring.gates:
        return None
    gates = scoring.gates.get((bench.name, category), [])
    # Every gate of the run that may be decided sequentially (a few may turn out fixed-n:
    # counting them too only makes a PASS more demanding).
    family = sum(1 for gs in scoring.gates.values() for g in gs if scoring.sequential or g.sequential)
    tracks = tracks_for(bench.sequential_form, gates, scoring.sequential, family=family)
    return CategoryPlan.for_category(tracks, items, round_size(len(items)))


def _score_in_rounds(
    scoring: Scoring, bench: Benchmark, category: str, items: Sequence[Item], plan: CategoryPlan
) -> list[Item]:
    """Score ``items`` in the plan's balanced rounds until every sequential gate is decided
    or the items run out; returns the items scored, in the order scored (the rounds are
    seeded, ``sequential_rounds.build_rounds``: that order can be rebuilt from the seed, so
    the records file keeps the selection's order and the sequences can still be recomputed)."""
    # Each round needs only the metrics' values and n (the rule's min_n and defined checks);
    # the bootstrap intervals are computed once, on the items finally scored.
    quick = dataclasses.replace(scoring.settings, n_resamples=0)
    scored: list[Item] = []
    salt = f"{bench.name}/{category}"
    for batch in build_rounds(items, bench.balance_key, scoring.settings.seed, salt, plan.size):
        _score(scoring, bench, batch)
        scored.extend(batch)
        records = [scoring.records[(bench.name, it.item_id)] for it in scored]
        plan.update(records, bench.metrics(records, quick))
        if plan.done:
            break
    return scored
