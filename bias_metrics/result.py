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

    Parameters
    ----------
    name : str
        The paper's metric name, e.g. ``"bias_score_disambig"``.
    value : float
        The point estimate in the paper's unit: a fraction for the BBQ family and KGQuiz (BBQ's
        paper prints x100), percent for WinoQueer / CrowS-Pairs (50 = unbiased); ``nan`` when
        undefined.
    n : int
        Number of items the value is computed over (after any documented exclusions); where the
        items are variants of fewer sampled rows (KoBBQ's 15 per test row, MBBQ's 5 per row), the
        number of distinct rows, and ``n_variants`` the items.
    ci_low, ci_high : float, default=nan
        Bounds of the confidence interval; ``nan`` when not computed or undefined.
    ci_method : str or None, default=None
        ``"wilson"``, ``"bootstrap"`` (items), ``"bayes-bootstrap-cluster"`` (see
        ``intervals.cell_ratio_interval``) or ``None``.
    confidence : float or None, default=None
        The interval's nominal coverage, e.g. 0.95.
    counts : Mapping[str, int], default={}
        The integer counts the value was computed from (names are metric specific).
    reason : str or None, default=None
        Why the value is undefined (``None`` when it is defined).
    source : str, default=""
        The paper section or code the definition follows.
    clusters : int or None, default=None
        Number of independent clusters (templates) the interval resamples, when it resamples
        clusters; ``None`` otherwise.
    n_variants : int or None, default=None
        Number of items (variants) behind the ``n`` rows, when rows were asked in several
        variants; ``None`` when every item is its own row.

    Examples
    --------
    >>> from bias_metrics import MetricResult
    >>> r = MetricResult("acc_ambig", 0.75, n=4, counts={"correct": 3, "n": 4})
    >>> r.defined, r.reason
    (True, None)
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
    n_variants: int | None = None

    @property
    def defined(self) -> bool:
        """True when ``value`` is a finite number.

        Examples
        --------
        >>> from bias_metrics import MetricResult
        >>> MetricResult("acc_ambig", 0.5, n=2).defined, MetricResult("acc_ambig", float("nan"), n=0).defined
        (True, False)
        """
        return not math.isnan(self.value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; NaN becomes ``None`` so that strict JSON readers accept it.

        Returns
        -------
        dict
            Keys ``name``, ``value``, ``n``, ``ci`` (``[low, high]``), ``ci_method``, ``confidence``,
            ``counts``, ``reason``, ``source``, ``clusters``, ``n_variants``.

        Examples
        --------
        >>> import json
        >>> from bias_metrics import MetricResult
        >>> d = MetricResult("acc_ambig", 0.75, n=4).to_dict()
        >>> d["value"], d["ci"]
        (0.75, [None, None])
        >>> json.dumps(d, allow_nan=False)[:40]
        '{"name": "acc_ambig", "value": 0.75, "n"'
        """

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
            "n_variants": None if self.n_variants is None else int(self.n_variants),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MetricResult":
        """Inverse of ``to_dict`` (``None`` back to NaN).

        Parameters
        ----------
        d : Mapping[str, Any]
            A dict as written by ``to_dict``.

        Returns
        -------
        MetricResult

        Raises
        ------
        KeyError
            A missing ``name``, ``value``, ``n`` or ``ci`` key.

        Examples
        --------
        >>> from bias_metrics import MetricResult
        >>> r = MetricResult("acc_ambig", 0.75, n=4, ci_low=0.3, ci_high=0.95, ci_method="wilson")
        >>> MetricResult.from_dict(r.to_dict()) == r
        True
        >>> MetricResult.from_dict({"name": "s", "value": None, "n": 0, "ci": [None, None]}).defined
        False
        """

        def nan(x: float | None) -> float:
            return math.nan if x is None else float(x)

        return cls(
            name=d["name"],
            value=nan(d["value"]),
            n=int(d["n"]),
            ci_low=nan(d["ci"][0]),
            ci_high=nan(d["ci"][1]),
            ci_method=d.get("ci_method"),
            confidence=d.get("confidence"),
            counts=dict(d.get("counts", {})),
            reason=d.get("reason"),
            source=d.get("source", ""),
            clusters=d.get("clusters"),
            n_variants=d.get("n_variants"),
        )


def undefined(
    name: str, reason: str, n: int = 0, counts: Mapping[str, int] | None = None, source: str = ""
) -> MetricResult:
    """A NaN ``MetricResult`` carrying the reason it is undefined (e.g. an empty denominator).

    Parameters
    ----------
    name : str
        The metric's name.
    reason : str
        Why it is undefined.
    n : int, default=0
        Number of items it would rest on.
    counts : Mapping[str, int] or None, default=None
        The counts it was computed from.
    source : str, default=""
        The definition it follows.

    Returns
    -------
    MetricResult
        ``value`` NaN, no interval, ``reason`` set.

    Examples
    --------
    >>> from bias_metrics.result import undefined
    >>> r = undefined("bias_score_ambig", "no ambiguous answer is non-unknown", n=3)
    >>> r.value, r.defined, r.reason
    (nan, False, 'no ambiguous answer is non-unknown')
    """
    return MetricResult(
        name=name, value=math.nan, n=n, counts=dict(counts or {}), reason=reason, source=source
    )
