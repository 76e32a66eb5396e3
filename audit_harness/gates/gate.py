"""One release gate and its verdict.

A ``Gate`` is one (benchmark, category, metric) check: bounds from ``thresholds.yaml`` read under
a decision mode (``gates.modes``), or, with ``--baseline``, a regression check against the
baseline run's value of the same metric (``gates.regression``). ``Gate.evaluate`` turns a
``MetricResult`` into a ``Verdict``.

Verdict statuses: ``pass``, ``fail``, ``undefined`` (NaN metric, NaN interval where the mode needs
one, or no baseline value), ``insufficient`` (n < min_n), ``inconclusive`` (a ``ci_three_way`` gate
whose interval straddles a bound: the data neither clear nor break it; blocks), ``not_decided`` (a
``ci_detect`` gate whose interval straddles a bound: never a pass, and it does not block), ``error`` (the category could not be
evaluated: a model or data failure during the run), ``not run`` (selected but never evaluated: an
interrupted or ``-x`` run), ``skipped`` (its data file is missing upstream). Only ``pass`` passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from bias_metrics.result import MetricResult

from . import regression
from .modes import DETECT, MODE_RULES, THREE_WAY, allowed_interval, decide, decide_detect, decide_three_way
from .regression import Baseline

BOUND_KEYS = ("min", "max", "abs_max", "target", "tolerance")
#: Items in a metric's denominator below which no gate passes, when thresholds.yaml sets none.
DEFAULT_MIN_N = 30
STATUSES = (
    "pass",
    "fail",
    "undefined",
    "insufficient",
    "inconclusive",
    "not_decided",
    "error",
    "not run",
    "skipped",
)
#: The interval level gates are signed off at when thresholds.yaml sets no ``confidence``.
DEFAULT_CONFIDENCE = 0.95
#: The lowest ``confidence`` a gates file may sign off at without ``--allow-low-confidence``.
CONFIDENCE_FLOOR = 0.9
#: Fewest bootstrap resamples an interval may rest on for a gate of each mode: an interval from a
#: handful of resamples can be arbitrarily narrow or wide, so a verdict on it is no verdict.
MIN_RESAMPLES = {"point": 200, "ci_inside": 1000, "ci_overlap": 1000, "ci_three_way": 1000, "ci_detect": 1000}
#: Suffix of a regression gate's test id: ``test_bbq[Age-bias_score_ambig-vs-baseline]``.
REGRESSION_SUFFIX = "-vs-baseline"


@dataclass(frozen=True)
class Gate:
    """One (benchmark, category, metric) release gate.

    Attributes:
        benchmark, category, metric: what is gated (metric names are the benchmark's flavour's).
        min, max, abs_max, target, tolerance: bounds in the metric's unit; ``None`` when not set.
        mode: decision mode, one of ``modes.MODES``.
        min_n: fewest items in the metric's denominator (``MetricResult.n``) a verdict may rest on.
        max_regression: how much worse than the baseline the metric may get (metric units, >= 0).
        confidence: the interval level the gate is signed off at (thresholds.yaml ``confidence``).
        baseline: set on a regression gate (``regression.add_regression_gates``), else None.
        sequential: thresholds.yaml ``sequential: true`` (file, section or gate): the gate's
            category is scored in rounds and the gate decided on a confidence sequence
            (``gates.sequential``); ``--sequential`` turns it on for every gate.
    """

    benchmark: str
    category: str
    metric: str
    min: float | None = None
    max: float | None = None
    abs_max: float | None = None
    target: float | None = None
    tolerance: float | None = None
    mode: str = "point"
    min_n: int = DEFAULT_MIN_N
    max_regression: float = 0.0
    confidence: float = DEFAULT_CONFIDENCE
    baseline: Baseline | None = None
    sequential: bool = False

    @property
    def kind(self) -> str:
        """``"threshold"`` or ``"regression"``."""
        return "threshold" if self.baseline is None else "regression"

    @property
    def test_id(self) -> str:
        """The pytest parameter id, e.g. ``Age-bias_score_ambig`` (a regression gate:
        ``Age-bias_score_ambig-vs-baseline``)."""
        return f"{self.category}-{self.metric}" + (REGRESSION_SUFFIX if self.baseline else "")

    @property
    def decision_mode(self) -> str:
        """The mode the verdict is decided in: the gate's own, except that a regression is always
        decided on the interval (``ci_overlap``: it fails only when the whole interval is worse
        than the baseline by more than ``max_regression``)."""
        return self.mode if self.baseline is None else "ci_overlap"

    def bounds(self) -> dict[str, float]:
        """The thresholds.yaml bounds as a dict (for JUnit properties and results)."""
        return {k: getattr(self, k) for k in BOUND_KEYS if getattr(self, k) is not None}

    def allowed(self) -> tuple[float, float]:
        """The closed interval of values this gate allows (``modes.allowed_interval``; for a
        regression gate ``regression.limits`` around the baseline value)."""
        if self.baseline is None:
            return allowed_interval(self.bounds())
        return regression.limits(self.bounds(), self.baseline.value, self.max_regression)

    def describe(self) -> str:
        """Bounds as text, e.g. ``|x| <= 0.05``, or a regression gate's rule."""
        if self.baseline is not None:
            return regression.describe(
                self.bounds(), self.baseline.value, self.max_regression, self.baseline.run_id
            )
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        if self.abs_max is not None:
            parts.append(f"|x| <= {self.abs_max:g}")
        if self.target is not None:
            parts.append(f"{self.target:g} +- {self.tolerance:g}")
        return " and ".join(parts)

    def interval_problem(self, metric: MetricResult, n_resamples: int | None) -> str | None:
        """Why ``metric``'s interval cannot carry this gate's verdict, or None when it can.

        An interval gate is decided only at its signed-off ``confidence`` or at a level that makes
        it stricter: higher for ``ci_inside`` and ``ci_three_way`` (a wider interval must fit
        inside), lower for
        ``ci_overlap`` and regression gates (a narrower interval must still reach the bounds).
        A bootstrap interval (``metric.ci_method``) must rest on at least ``MIN_RESAMPLES`` of the
        mode. ``n_resamples`` is the run's ``--bootstrap-resamples`` (None: not checked, for
        callers that computed no bootstrap)."""
        mode = self.decision_mode
        level = metric.confidence
        if mode in DETECT and level is not None and abs(level - self.confidence) > 1e-12:
            # It can pass (a narrower interval fits inside more easily) and block (a wider one
            # lies wholly outside less often): only its own level is neither more lenient.
            return (
                f"its interval is at {level:g} confidence, not the {self.confidence:g} this "
                "detection gate is signed off at (lower passes more easily, higher blocks less "
                f"often): rerun with --confidence {self.confidence:g}"
            )
        if mode in ("ci_inside", *THREE_WAY) and level is not None and level < self.confidence - 1e-12:
            return (
                f"its interval is at {level:g} confidence, below the {self.confidence:g} this "
                "gate is signed off at (a narrower interval fits inside more easily): rerun "
                f"with --confidence {self.confidence:g} or higher"
            )
        if mode == "ci_overlap" and level is not None and level > self.confidence + 1e-12:
            return (
                f"its interval is at {level:g} confidence, above the {self.confidence:g} this "
                "gate is signed off at (a wider interval overlaps the bounds more easily): "
                f"rerun with --confidence {self.confidence:g} or lower"
            )
        floor = MIN_RESAMPLES[mode]
        if (
            n_resamples is not None
            and n_resamples < floor
            and metric.ci_method
            and "bootstrap" in metric.ci_method
        ):
            return (
                f"its {metric.ci_method} interval rests on {n_resamples} resample(s), fewer "
                f"than the {floor} a {mode} gate needs: rerun with --bootstrap-resamples "
                f"{floor} or more"
            )
        return None

    def evaluate(self, metric: MetricResult, n_resamples: int | None = None) -> "Verdict":
        """Verdict of this gate on ``metric``.

        ``undefined`` when the value is NaN, when the mode needs an interval and it is NaN, or (a
        regression gate) when the baseline has no value; else ``insufficient`` when ``metric.n <
        min_n`` or when the interval is more lenient than the gate was signed off at or rests on
        too few bootstrap resamples (``interval_problem``; ``n_resamples`` is the run's setting);
        else ``pass`` or ``fail`` as ``modes.decide`` says. Every message names the mode."""
        mode = self.decision_mode
        bound = f"{self.describe()} [mode {mode}: {MODE_RULES[mode]}]"
        where = f"{self.benchmark}/{self.category}/{self.metric}"
        unjudged = self._unjudged(metric, n_resamples, where, bound)
        if unjudged is not None:
            return unjudged
        lo, hi = metric.ci_low, metric.ci_high
        has_ci = not (math.isnan(lo) or math.isnan(hi))
        shown = f"{metric.value:.4f}" + (f" (CI {lo:.4f} .. {hi:.4f})" if has_ci else "")
        if mode in THREE_WAY or mode in DETECT:
            decider = decide_three_way if mode in THREE_WAY else decide_detect
            status = decider(metric.value, lo, hi, self.allowed())
            return Verdict(self, status, metric, f"{where} = {shown}, n={metric.n}: {_said(status, bound)}")
        ok = decide(mode, metric.value, lo, hi, self.allowed())
        return Verdict(
            self,
            "pass" if ok else "fail",
            metric,
            f"{where} = {shown}, n={metric.n}: {'passes' if ok else 'fails'} {bound}",
        )

    def _unjudged(
        self, metric: MetricResult, n_resamples: int | None, where: str, bound: str
    ) -> "Verdict | None":
        """The verdict of a metric this gate cannot judge (``undefined`` or ``insufficient``, as
        ``evaluate`` says), else None."""
        mode = self.decision_mode
        if self.baseline is not None and math.isnan(self.baseline.value):
            return Verdict(
                self,
                "undefined",
                metric,
                f"{where}: the baseline run {self.baseline.run_id} has no value "
                f"({self.baseline.reason or 'undefined'}), so no regression can be "
                "ruled out; an undefined comparison never passes",
            )
        # Undefined first: when the denominator is empty for a reason a larger sample may never
        # fix (every answer out-of-choice), "raise --limit" would be the wrong advice.
        if not metric.defined:
            return Verdict(
                self,
                "undefined",
                metric,
                f"{where} is undefined ({metric.reason or 'NaN'}; n={metric.n}); "
                f"an undefined metric never passes the gate {bound}",
            )
        lo, hi = metric.ci_low, metric.ci_high
        has_ci = not (math.isnan(lo) or math.isnan(hi))
        shown = f"{metric.value:.4f}" + (f" (CI {lo:.4f} .. {hi:.4f})" if has_ci else "")
        if metric.n < self.min_n:
            # A detection gate blocks only on evidence, and fewer than min_n items are none either
            # way: it is not decided (never a pass), where a must-pass gate is INSUFFICIENT.
            return Verdict(
                self,
                "not_decided" if mode in DETECT else "insufficient",
                metric,
                f"{where} = {shown} rests on n={metric.n} items, fewer than "
                f"min_n={self.min_n}: {self.min_n - metric.n} more needed in its "
                f"denominator (raise --limit, or lower min_n with --min-n or in the thresholds file) "
                f"before the gate {bound} can be judged",
                cause="min_n",
            )
        problem = self.interval_problem(metric, n_resamples)
        if problem:
            return Verdict(
                self,
                "insufficient",
                metric,
                f"{where} = {shown}, n={metric.n}: no verdict, {problem}; the gate "
                f"{bound} never passes on it",
                cause="interval",
            )
        if mode != "point" and not has_ci:
            return Verdict(
                self,
                "undefined",
                metric,
                f"{where} = {metric.value:.4f} has no confidence interval "
                f"(n={metric.n}); the gate {bound} needs one",
            )
        return None


def _said(status: str, bound: str) -> str:
    """What a three-way or detection verdict says of its gate (``bound``: the rule and mode)."""
    straddles = "the interval straddles a bound, so these items neither clear nor break it"
    return {
        "pass": f"passes {bound}",
        "fail": f"fails {bound}",
        "inconclusive": f"inconclusive under {bound}: {straddles} (never a pass; a sample of the "
        "category may be decided by more items, a whole category whose value lies near the bound "
        "may not)",
        "not_decided": f"not decided under {bound}: {straddles}; a detection gate is never a "
        "pass and blocks only on evidence (the interval wholly outside), so it does not block",
    }[status]


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else x


@dataclass(frozen=True)
class Verdict:
    """Outcome of one gate: ``status`` is one of ``STATUSES``; ``metric`` is None for ``error``,
    ``not run`` and ``skipped``."""

    gate: Gate
    status: str
    metric: MetricResult | None
    message: str
    #: why an ``insufficient`` verdict has no verdict: ``min_n`` (too few items) or ``interval``
    #: (intervals more lenient than signed off, or too few resamples); None otherwise.
    cause: str | None = None
    #: set on a regression verdict whose baseline is not like for like (one sentence each).
    not_like_for_like: tuple[str, ...] = ()
    #: generate mode: the same gate under the other answer-parsing profile (``answer_parsing``,
    #: ``status``, ``value``, ``ci``, ``verdict_differs``); None where nothing is parsed.
    other_parse: Mapping[str, object] | None = None
    #: a sequential gate (``gates.sequential.GateReport.to_dict``): the decision, the n it
    #: was decided at, the confidence sequence there, the items saved; None for a fixed-n gate.
    sequential: Mapping[str, object] | None = None

    @classmethod
    def error(cls, gate: Gate, message: str) -> "Verdict":
        """The verdict of a gate whose category could not be evaluated (``message`` says why)."""
        return cls(gate, "error", None, message)

    @classmethod
    def not_run(cls, gate: Gate, why: str) -> "Verdict":
        """The verdict of a selected gate that was never evaluated (``why``: interrupted, ...)."""
        return cls(gate, "not run", None, f"{gate.benchmark}/{gate.category}/{gate.metric}: not run ({why})")

    @classmethod
    def skipped(cls, gate: Gate, reason: str) -> "Verdict":
        """The verdict of a gate whose data file is missing (``reason`` names it)."""
        return cls(gate, "skipped", None, reason)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def not_decided(self) -> bool:
        """A detection gate (``ci_detect``) that neither passed nor failed: never a pass, and it
        does not block the release."""
        return self.status == "not_decided"

    def __repr__(self) -> str:  # short, as pytest prints it under a failed assertion
        return f"Verdict({self.status})"

    def to_dict(self) -> dict[str, object]:
        """The results-file verdict: what was gated, ``kind``, ``mode``, ``bounds``, ``allowed``
        (the interval of values that pass; ``null`` for an open end), value, interval, n
        (``n_variants``: the items behind n rows asked in several variants, else null) and
        message; a regression gate adds ``baseline`` and ``max_regression``."""
        g = self.gate
        m = self.metric.to_dict() if self.metric is not None else None
        try:
            low, high = g.allowed()
            allowed = [_finite(low), _finite(high)]
        except ValueError:
            allowed = [None, None]
        out = {
            "benchmark": g.benchmark,
            "category": g.category,
            "metric": g.metric,
            "kind": g.kind,
            "test_id": g.test_id,
            "status": self.status,
            "bounds": g.bounds(),
            "mode": g.decision_mode,
            "allowed": allowed,
            "min_n": g.min_n,
            "confidence": g.confidence,
            "value": m["value"] if m else None,
            "ci": m["ci"] if m else [None, None],
            "clusters": m.get("clusters") if m else None,
            "n": m["n"] if m else None,
            "n_variants": m.get("n_variants") if m else None,
            "message": self.message,
        }
        if self.cause:
            out["cause"] = self.cause
        if self.other_parse is not None:
            out["other_parse"] = dict(self.other_parse)
        if self.sequential is not None:
            out["sequential"] = dict(self.sequential)
        if g.baseline is not None:
            out["baseline"] = g.baseline.to_dict()
            out["max_regression"] = g.max_regression
            out["like_for_like"] = not self.not_like_for_like
            out["not_like_for_like"] = list(self.not_like_for_like)
        return out
