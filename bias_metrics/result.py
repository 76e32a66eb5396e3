"""The value object every metric in ``bias_metrics`` returns.

A metric is never a bare float: reviewers need to know how many items it rests on, the counts it
came from, its uncertainty, and, when it is undefined, why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class MetricResult:
    """One metric value with its provenance.

    Attributes:
        name: the paper's metric name, e.g. ``"bias_score_disambig"``.
        value: the point estimate in the paper's unit: a fraction for the BBQ family and KGQuiz
            (BBQ's paper prints x100), percent for WinoQueer / CrowS-Pairs (50 = unbiased);
            ``nan`` when undefined.
        n: number of items the value is computed over (after any documented exclusions).
        ci_low, ci_high: bounds of the confidence interval; ``nan`` when not computed or undefined.
        ci_method: ``"wilson"``, ``"bootstrap"`` (items), ``"bayes-bootstrap-cluster"`` (see
            ``intervals.hierarchical_bayesian_bootstrap``) or ``None``.
        confidence: the interval's nominal coverage, e.g. 0.95.
        counts: the integer counts the value was computed from (names are metric specific).
        reason: why the value is undefined (``None`` when it is defined).
        source: the paper section or code the definition follows.
        clusters: number of independent clusters (templates) the interval resamples, when it
            resamples clusters; ``None`` otherwise.
    """

    name: str
    value: float
    n: int
    ci_low: float = math.nan
    ci_high: float = math.nan
    ci_method: str | None = None
    confidence: float | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    source: str = ""
    clusters: int | None = None

    @property
    def defined(self) -> bool:
        """True when ``value`` is a finite number."""
        return not math.isnan(self.value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes ``None`` so that strict JSON readers accept it."""

        def clean(x: float) -> float | None:
            return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

        return {
            "name": self.name,
            "value": clean(self.value),
            "n": int(self.n),
            "ci": [clean(self.ci_low), clean(self.ci_high)],
            "ci_method": self.ci_method,
            "confidence": self.confidence,
            "counts": {k: int(v) for k, v in self.counts.items()},
            "reason": self.reason,
            "source": self.source,
            "clusters": None if self.clusters is None else int(self.clusters),
        }


    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MetricResult":
        """Inverse of ``to_dict`` (``None`` back to NaN). Raises KeyError on a missing key."""

        def nan(x: float | None) -> float:
            return math.nan if x is None else float(x)

        return cls(name=d["name"], value=nan(d["value"]), n=int(d["n"]), ci_low=nan(d["ci"][0]),
                   ci_high=nan(d["ci"][1]), ci_method=d.get("ci_method"),
                   confidence=d.get("confidence"), counts=dict(d.get("counts", {})),
                   reason=d.get("reason"), source=d.get("source", ""),
                   clusters=d.get("clusters"))


def undefined(name: str, reason: str, n: int = 0, counts: Mapping[str, int] | None = None,
              source: str = "") -> MetricResult:
    """A NaN ``MetricResult`` carrying the reason it is undefined (e.g. an empty denominator)."""
    return MetricResult(name=name, value=math.nan, n=n, counts=dict(counts or {}), reason=reason,
                        source=source)
