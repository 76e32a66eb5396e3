"""A gate judged on a run (``judge``): ``Gate.evaluate`` on the category's metric, then what only
the run knows, in this order: the sequential decision (``sequential_verdict``), the coverage of
saved predictions (``partial_coverage``), the same gate under the other answer-parsing profile
(the parse sensitivity) and, for a regression gate, whether its baseline is like for like
(``regression_notes``). The test that runs it (``run.gate_check``) only skips, fails and records."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from bias_metrics.result import MetricResult
from bias_metrics.sequential import PASS

from .comparability import comparability_notes
from .gate import Gate, Verdict
from .sequential import GateReport


@dataclass(frozen=True)
class Coverage:
    """The items a predictions file answers of those a category holds (``--backend replay``;
    a pooled category's adds up its members' and names no file)."""

    predicted: int
    available: int
    #: the predictions file (None for a pooled category).
    predictions: str | None = None

    def to_dict(self) -> dict[str, int | str]:
        """The category's ``coverage`` in results.json."""
        out: dict[str, int | str] = {"predicted": self.predicted, "available": self.available}
        if self.predictions is not None:
            out["predictions"] = self.predictions
        return out


@dataclass(frozen=True)
class Evidence:
    """What the run knows of a gate's category besides its metric."""

    #: ``--backend replay``: the rows the saved predictions answer of those the category holds;
    #: None for a live run.
    coverage: Coverage | None = None
    #: a sequential gate's report (``CategoryPlan.report``); None for a fixed-n gate.
    sequential: GateReport | None = None
    #: generate mode: the other answer-parsing profile and the gate's metric under it; None
    #: where nothing is parsed.
    other_parse: tuple[str, MetricResult] | None = None
    #: a regression gate's reasons its baseline is not like for like (``regression_notes``).
    unlike: tuple[str, ...] = ()


def judge(
    gate: Gate, metric: MetricResult, evidence: Evidence, *, n_resamples: int, allow_partial: bool
) -> Verdict:
    """The gate's verdict on ``metric`` with what the run knows (``evidence``).

    Parameters
    ----------
    gate : Gate
        The gate judged.
    metric : MetricResult
        Its metric on the items the category scored.
    evidence : Evidence
        Coverage, sequential report, other parsing profile and like-for-like notes.
    n_resamples : int
        The run's bootstrap resamples (``Gate.evaluate``).
    allow_partial : bool
        ``--allow-partial``: judge a category the predictions cover in part on the rows given.
    """
    verdict = gate.evaluate(metric, n_resamples=n_resamples)
    verdict = sequential_verdict(verdict, evidence.sequential)
    verdict = partial_coverage(verdict, evidence.coverage, allow_partial)
    if evidence.other_parse is not None and gate.baseline is None:
        profile, alt_metric = evidence.other_parse
        alt = partial_coverage(
            gate.evaluate(alt_metric, n_resamples=n_resamples), evidence.coverage, allow_partial
        )
        shown = alt_metric.to_dict()
        verdict = dataclasses.replace(
            verdict,
            other_parse={
                "answer_parsing": profile,
                "status": alt.status,
                "value": shown["value"],
                "ci": shown["ci"],
                "verdict_differs": alt.passed != verdict.passed,
            },
        )
    if evidence.unlike:
        verdict = dataclasses.replace(
            verdict,
            not_like_for_like=evidence.unlike,
            message=f"{verdict.message} [not like for like: {'; '.join(evidence.unlike)}]",
        )
    return verdict


def regression_notes(
    gate: Gate, baseline: Mapping[str, Any] | None, mine: Callable[[], Mapping[str, object]]
) -> tuple[str, ...]:
    """Why a regression gate's baseline run is not like for like with this run's category
    (``comparability_notes`` scoped to it); empty for a threshold gate or without a baseline
    document. ``mine`` gives this run's document of the category (``AuditSession.category_document``:
    the run's ``gates.identity.RunIdentity`` with the category's model, protocol, items and files),
    built only when needed."""
    if gate.baseline is None or baseline is None:
        return ()
    return tuple(comparability_notes(baseline, mine(), scope=(gate.benchmark, gate.category)))


def partial_coverage(verdict: Verdict, coverage: Coverage | None, allow_partial: bool) -> Verdict:
    """A judged verdict on a category the saved predictions cover only in part is no verdict:
    INSUFFICIENT (cause ``coverage``) unless ``--allow-partial``."""
    cov = coverage
    if (
        cov is None
        or allow_partial
        or cov.predicted >= cov.available
        or verdict.status not in ("pass", "fail", "inconclusive", "not_decided")
    ):
        return verdict
    g = verdict.gate
    share = 100.0 * cov.predicted / cov.available
    return dataclasses.replace(
        verdict,
        status="insufficient",
        cause="coverage",
        message=(
            f"{g.benchmark}/{g.category}/{g.metric}: no verdict, the predictions cover "
            f"{cov.predicted:,} of {cov.available:,} rows of the category ({share:.1f} %); "
            f"a partial category decides nothing (--allow-partial judges the rows given; "
            f"it would {'be ' if verdict.status in ('inconclusive', 'not_decided') else ''}"
            f"{verdict.status.replace('_', ' ')}: {verdict.message})"
        ),
    )


def sequential_verdict(verdict: Verdict, info: GateReport | None) -> Verdict:
    """The gate's verdict with its sequential report: the sequential decision when it made one
    (PASS or FAIL on the confidence sequence), else the fixed-n ``verdict`` with a note saying why.

    Parameters
    ----------
    verdict : Verdict
        ``Gate.evaluate`` on the items the category scored.
    info : GateReport or None
        ``CategoryPlan.report`` of the gate (``CategoryOutcome.sequential.gates[test_id]``);
        None for a fixed-n run: ``verdict`` is returned as it is.
    """
    if info is None:
        return verdict
    if info.verdict_from != "sequential" or info.cs is None:
        return dataclasses.replace(
            verdict, sequential=info.to_dict(), message=f"{verdict.message} [sequential {info.note}]"
        )
    g = verdict.gate
    passed = info.decision == PASS
    lo, hi = info.cs
    band = g.describe()
    m = verdict.metric
    shown = "undefined" if m is None or not m.defined else f"{m.value:.4f} (n={m.n})"
    message = (
        f"{g.benchmark}/{g.category}/{g.metric}: {'passes' if passed else 'fails'} {band} "
        f"sequentially after {info.n} of {info.population} items: the confidence sequence "
        f"[{lo:.4f}, {hi:.4f}] (alpha {info.alpha:g}"
        f"{', one-sided' if info.sides == 1 else ''}) lies {'inside' if passed else 'outside'} "
        f"its band; value over the {info.items_scored} items scored {shown}, "
        f"{info.items_saved} items saved"
    )
    return dataclasses.replace(
        verdict, status="pass" if passed else "fail", cause=None, message=message, sequential=info.to_dict()
    )
