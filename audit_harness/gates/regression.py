"""Regression gates: is the new model worse than the baseline run by more than ``max_regression``?

"Worse" follows the gate's bounds (``modes.allowed_interval``):

- only a lower bound (``min``): lower is worse;
- only an upper bound (``max``): higher is worse;
- both ends (``abs_max``, ``target`` +- ``tolerance``, ``min`` and ``max``): farther from the
  middle of the allowed band is worse (``abs_max``: farther from 0; ``target``: from the target).

With the baseline value ``b`` and ``r = max_regression`` the values that are not a regression form
one interval: ``x >= b - r``; ``x <= b + r``; or ``|x - c| <= |b - c| + r`` around the middle ``c``.
The verdict is decided on the new run's interval: the gate fails only when the whole interval lies
outside (``ci_overlap``), i.e. when even the most favourable value the new data allow is worse than
the baseline by more than ``r``. The baseline's point value is the reference: it is the released
model's measured number, and its own interval is shown next to it in reports.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from .modes import allowed_interval

if TYPE_CHECKING:  # gate.py imports this module
    from .gate import Gate


@dataclass(frozen=True)
class Baseline:
    """The baseline run's value of one gated metric (``--baseline``).

    Attributes:
        value: the point estimate; NaN when undefined in the baseline or absent from it.
        ci_low, ci_high: its interval (NaN when not computed).
        n: the items it rests on (None when absent).
        run_id: the baseline run's id.
        reason: why ``value`` is NaN (None when defined).
    """

    value: float
    ci_low: float = math.nan
    ci_high: float = math.nan
    n: int | None = None
    run_id: str = ""
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if math.isnan(x) else x

        return {
            "value": clean(self.value),
            "ci": [clean(self.ci_low), clean(self.ci_high)],
            "n": self.n,
            "run_id": self.run_id,
            "reason": self.reason,
        }


def direction(bounds: Mapping[str, float]) -> tuple[str, float]:
    """Which way is worse for a gate with ``bounds``.

    Returns
    -------
    (kind, centre) : (str, float)
        ``("lower", nan)``, ``("higher", nan)`` or ``("centre", c)`` with ``c`` the middle of the
        allowed band.

    Raises
    ------
    ValueError
        No bound at all (nothing says what "worse" means).
    """
    low, high = allowed_interval(bounds)
    if math.isinf(low) and math.isinf(high):
        raise ValueError("a gate without bounds has no direction of worse")
    if math.isinf(high):
        return "lower", math.nan
    if math.isinf(low):
        return "higher", math.nan
    return "centre", (low + high) / 2


def limits(bounds: Mapping[str, float], baseline: float, max_regression: float) -> tuple[float, float]:
    """The closed interval of new values that are no regression from ``baseline``.

    Parameters
    ----------
    bounds : mapping
        The threshold gate's bounds (they fix the direction of worse).
    baseline : float
        The baseline run's value (NaN gives a NaN interval).
    max_regression : float
        Allowed worsening in the metric's unit, >= 0.
    """
    kind, centre = direction(bounds)
    if kind == "lower":
        return baseline - max_regression, math.inf
    if kind == "higher":
        return -math.inf, baseline + max_regression
    half = abs(baseline - centre) + max_regression
    return centre - half, centre + half


def describe(bounds: Mapping[str, float], baseline: float, max_regression: float, run_id: str) -> str:
    """A regression gate's rule as text, e.g. ``x >= 0.6120 - 0.02 (baseline run R)``."""
    kind, centre = direction(bounds)
    if kind == "lower":
        rule = f"x >= {baseline:.4f} - {max_regression:g}"
    elif kind == "higher":
        rule = f"x <= {baseline:.4f} + {max_regression:g}"
    else:
        rule = f"|x - {centre:g}| <= |{baseline:.4f} - {centre:g}| + {max_regression:g}"
    return f"no worse than the baseline: {rule} (baseline run {run_id or '?'})"


def baseline_of(results: Mapping[str, Any], benchmark: str, category: str, metric: str) -> Baseline:
    """The ``gate.Baseline`` of one metric in a baseline results document (NaN with a reason when
    the baseline did not compute it)."""
    run_id = str(results.get("run_id", ""))
    entry = (results["benchmarks"].get(benchmark) or {}).get(category) or {}
    m = (entry.get("metrics") or {}).get(metric)
    if m is None and not entry:
        # A pooled category is no category of the results: its value is its gate's verdict's.
        m = next(
            (
                v
                for v in results.get("gates") or ()
                if (v.get("benchmark"), v.get("category"), v.get("metric"), v.get("kind", "threshold"))
                == (benchmark, category, metric, "threshold")
                and v.get("n") is not None
            ),
            None,
        )
    if m is None:
        why = (
            f"the category failed there: {entry['error']}"
            if entry.get("status") == "error"
            else f"it did not compute {benchmark}/{category}/{metric}"
        )
        return Baseline(math.nan, run_id=run_id, reason=why)

    def num(x: float | None) -> float:
        return math.nan if x is None else float(x)

    lo, hi = (m.get("ci") or [None, None])[:2]
    return Baseline(
        num(m.get("value")),
        num(lo),
        num(hi),
        m.get("n"),
        run_id,
        None if m.get("value") is not None else (m.get("reason") or "undefined there"),
    )


def add_regression_gates(
    gates: Mapping[str, list[Gate]], results: Mapping[str, Any]
) -> dict[str, list[Gate]]:
    """Every threshold gate followed by its regression gate against ``results`` (the baseline run),
    ``test_<bench>[<category>-<metric>-vs-baseline]``, with the same bounds (for the direction),
    ``min_n`` and ``max_regression``."""
    out: dict[str, list[Gate]] = {}
    for bench, gs in gates.items():
        out[bench] = []
        for g in gs:
            out[bench].append(g)
            out[bench].append(
                dataclasses.replace(g, baseline=baseline_of(results, bench, g.category, g.metric))
            )
    return out
