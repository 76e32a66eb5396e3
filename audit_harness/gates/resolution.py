"""What a judged gate can resolve: its interval's half-width, the smallest band this run could have
certified, and, for a gate the data did not decide (``inconclusive``, ``not_decided``), what would
decide it. Pure arithmetic on a verdict's numbers; the displays (terminal, results.json, the
reports, JUnit) only call it, so they cannot disagree.

The certifiable band is stated in the gate's own bound kinds: an ``abs_max`` gate could have
certified ``|x| <= max(|low|, |high|)``, a ``max`` gate ``x <= high``, a ``min`` gate
``x >= low``, a ``target +- tolerance`` gate ``target +- max(|low - target|, |high - target|)``.

What would decide an undecided gate rests on the usual approximation that an interval's half-width
shrinks as ``1 / sqrt(n)`` while the value holds: about ``(side / distance) ** 2`` times the items
(or the clusters, where the interval resamples templates), where ``distance`` is the value's
distance to the bound the interval straddles and ``side`` the interval's reach beyond the value
towards it. A value on a bound can be decided by no sample size; a value beyond a bound can never
be certified, only shown outside the band (a FAIL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, TypedDict

from .modes import BOUND_SLACK, allowed_interval

#: Verdict statuses whose entry says what would decide the gate.
UNDECIDED = ("inconclusive", "not_decided")


def status_word(status: str) -> str:
    """A verdict status as every display prints it: upper case, words apart.

    Examples
    --------
    >>> status_word("not_decided"), status_word("inconclusive"), status_word("not run")
    ('NOT DECIDED', 'INCONCLUSIVE', 'NOT RUN')
    """
    return status.replace("_", " ").upper()


def half_width(ci_low: float | None, ci_high: float | None) -> float:
    """Half the interval's width, ``(high - low) / 2``; NaN without a finite interval.

    Examples
    --------
    >>> half_width(-0.02, 0.08)
    0.05
    >>> half_width(float("nan"), 0.1), half_width(None, None)
    (nan, nan)
    """
    interval = _finite_pair(ci_low, ci_high)
    if interval is None:
        return math.nan
    low, high = interval
    return (high - low) / 2


def certifiable_band(
    bounds: Mapping[str, float], ci_low: float | None, ci_high: float | None
) -> dict[str, float] | None:
    """The smallest band of the gate's own kind that the interval ``[ci_low, ci_high]`` lies
    inside: what this run could have certified.

    Parameters
    ----------
    bounds : mapping
        The gate's bounds (``min``, ``max``, ``abs_max``, ``target`` with ``tolerance``).
    ci_low, ci_high : float or None
        The interval.

    Returns
    -------
    dict or None
        The same keys as ``bounds`` with the tightest values the interval satisfies (``target``
        kept as it is); None without a finite interval or without bounds.

    Examples
    --------
    >>> certifiable_band({"abs_max": 0.05}, -0.02, 0.08)
    {'abs_max': 0.08}
    >>> certifiable_band({"max": 0.1}, 0.02, 0.13), certifiable_band({"min": 0.5}, 0.43, 0.6)
    ({'max': 0.13}, {'min': 0.43})
    >>> certifiable_band({"target": 1.0, "tolerance": 0.1}, 0.95, 1.12)
    {'target': 1.0, 'tolerance': 0.12}
    >>> certifiable_band({"abs_max": 0.05}, float("nan"), float("nan")) is None
    True
    """
    interval = _finite_pair(ci_low, ci_high)
    if not bounds or interval is None:
        return None
    low, high = interval
    band: dict[str, float] = {}
    if bounds.get("min") is not None:
        band["min"] = _round(low)
    if bounds.get("max") is not None:
        band["max"] = _round(high)
    if bounds.get("abs_max") is not None:
        band["abs_max"] = _round(max(abs(low), abs(high)))
    if bounds.get("target") is not None:
        t = bounds["target"]
        band["target"] = t
        band["tolerance"] = _round(max(abs(low - t), abs(high - t)))
    return band or None


def describe_band(band: Mapping[str, float] | None) -> str:
    """A band as the gates are described (``Gate.describe``), to three decimals rounded outwards
    (a band printed narrower than the interval would claim what the run could not certify).

    Examples
    --------
    >>> describe_band({"abs_max": 0.0812})
    '|x| <= 0.082'
    >>> describe_band({"min": 0.4, "max": 0.61}), describe_band(None)
    ('>= 0.4 and <= 0.61', '-')
    >>> describe_band({"target": 1.0, "tolerance": 0.12})
    '1 +- 0.12'
    """
    if not band:
        return "-"
    parts = []
    if "min" in band:
        parts.append(f">= {_outwards(band['min'], -1):g}")
    if "max" in band:
        parts.append(f"<= {_outwards(band['max'], 1):g}")
    if "abs_max" in band:
        parts.append(f"|x| <= {_outwards(band['abs_max'], 1):g}")
    if "target" in band:
        parts.append(f"{band['target']:g} +- {_outwards(band['tolerance'], 1):g}")
    return " and ".join(parts)


class ToDecideRecord(TypedDict):
    """``ToDecide`` as results.json records it (under ``to_decide``, with its ``text``)."""

    outcome: str
    scale: float | None
    items: int | None
    clusters: int | None


@dataclass(frozen=True)
class ToDecide:
    """What would decide a gate the data left undecided.

    Attributes
    ----------
    outcome : str
        ``pass`` (the value lies inside the band: more data would certify it), ``fail`` (the value
        lies beyond a bound: no sample size would certify it, more data would show it outside)
        or ``none`` (the value is on a bound: no sample size would decide it).
    scale : float or None
        About how many times the items (or clusters) would decide it; None for ``none``.
    items, clusters : int or None
        ``scale`` times the run's ``n`` and clusters (templates), rounded up; None where unknown.
    """

    outcome: str
    scale: float | None
    items: int | None
    clusters: int | None

    def to_dict(self) -> ToDecideRecord:
        return {"outcome": self.outcome, "scale": self.scale, "items": self.items, "clusters": self.clusters}


def to_decide(
    value: float | None,
    ci: tuple[float | None, float | None],
    bounds: Mapping[str, float],
    n: int | None = None,
    clusters: int | None = None,
) -> ToDecide | None:
    """About how much more data would decide a gate whose interval straddles a bound.

    Parameters
    ----------
    value : float or None
        The point estimate.
    ci : (low, high)
        The interval.
    bounds : mapping
        The gate's bounds.
    n : int, optional
        Items in the metric's denominator.
    clusters : int, optional
        Clusters (templates) the interval resamples, where it resamples them.

    Returns
    -------
    ToDecide or None
        None without a finite value and interval, or with bounds no value satisfies.

    Examples
    --------
    >>> to_decide(0.02, (-0.02, 0.06), {"abs_max": 0.05}, n=300)  # 0.04 reaches 0.03 past 0.02
    ToDecide(outcome='pass', scale=1.78, items=534, clusters=None)
    >>> to_decide(0.09, (0.04, 0.14), {"abs_max": 0.05}, n=300, clusters=40)
    ToDecide(outcome='fail', scale=1.56, items=469, clusters=63)
    >>> to_decide(0.05, (0.0, 0.1), {"abs_max": 0.05}, n=300)
    ToDecide(outcome='none', scale=None, items=None, clusters=None)
    >>> to_decide(0.6, (0.45, 0.75), {"min": 0.5}, n=100).outcome
    'pass'
    >>> to_decide(0.02, (float("nan"), float("nan")), {"abs_max": 0.05}) is None
    True
    """
    interval = _finite_pair(*ci)
    if value is None or not _finite(value) or interval is None:
        return None
    lo, hi = interval
    try:
        allowed = allowed_interval(bounds)
    except ValueError:
        return None
    if allowed[0] > allowed[1]:
        return None
    found = _scale(value, lo, hi, allowed)
    if found is None:
        return ToDecide("none", None, None, None)
    outcome, scale = found
    return ToDecide(
        outcome,
        round(scale, 2),
        None if n is None else math.ceil(n * scale),
        None if clusters is None else math.ceil(clusters * scale),
    )


def _scale(value: float, lo: float, hi: float, allowed: tuple[float, float]) -> tuple[str, float] | None:
    """(``pass`` or ``fail``, the factor on the sample size) that would decide the gate, or None
    when the value is on a bound (``modes.BOUND_SLACK``)."""
    low, high = allowed
    for bound in (low, high):
        if math.isfinite(bound) and abs(value - bound) <= BOUND_SLACK * max(1.0, abs(bound)):
            return None
    # Each bound the interval reaches across: the factor by which the interval's reach beyond
    # the value towards it (one side: intervals of rates are not symmetric) must shrink.
    if low < value < high:
        needs = [((hi - value) / (high - value)) ** 2 if math.isfinite(high) else 0.0]
        needs.append(((value - lo) / (value - low)) ** 2 if math.isfinite(low) else 0.0)
        return "pass", max(*needs, 1.0)
    need = ((value - lo) / (value - high)) ** 2 if value > high else ((hi - value) / (low - value)) ** 2
    return "fail", max(need, 1.0)


def describe_band_clause(band: Mapping[str, float] | None) -> str:
    """``this run could certify <band>``, the clause every to-decide sentence starts with."""
    return f"this run could certify {describe_band(band)}"


def to_decide_text(todo: ToDecide | None, band: Mapping[str, float] | None) -> str:
    """One sentence of what would decide an undecided gate.

    Examples
    --------
    >>> todo = ToDecide("pass", 2.25, 675, 90)
    >>> to_decide_text(todo, {"abs_max": 0.081})
    'this run could certify |x| <= 0.081; about 2.2x the items (n ~ 675, ~ 90 templates) would certify the band if the value held'
    >>> to_decide_text(ToDecide("none", None, None, None), {"abs_max": 0.1})
    'this run could certify |x| <= 0.1; the value lies on the bound: no sample size would decide it'
    >>> to_decide_text(ToDecide("fail", 1.5, 450, None), {"max": 0.2})
    'this run could certify <= 0.2; the value lies beyond the bound: no sample size would certify the band; about 1.5x the items (n ~ 450) would show it outside (FAIL) if the value held'
    """
    said = describe_band_clause(band)
    if todo is None:
        return said
    if todo.outcome == "none":
        return f"{said}; the value lies on the bound: no sample size would decide it"
    if todo.scale is None:  # no factor to state (``to_decide`` gives one to every other outcome)
        return said
    more = [f"n ~ {todo.items:,}"] if todo.items is not None else []
    if todo.clusters is not None:
        more.append(f"~ {todo.clusters:,} templates")
    times = f"{todo.scale:.1f}" if todo.scale < 10 else f"{todo.scale:,.0f}"
    how = f"about {times}x the items" + (f" ({', '.join(more)})" if more else "")
    if todo.outcome == "pass":
        return f"{said}; {how} would certify the band if the value held"
    return (
        f"{said}; the value lies beyond the bound: no sample size would certify the band; "
        f"{how} would show it outside (FAIL) if the value held"
    )


def of_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The resolution fields of a results.json verdict entry (``Verdict.to_dict``):
    ``half_width``, ``certifiable_band`` and, for an undecided gate, ``to_decide`` (with its
    sentence under ``text``). A regression gate's bounds are around its baseline: it gets the
    half-width alone.

    Examples
    --------
    >>> e = {"status": "inconclusive", "kind": "threshold", "bounds": {"abs_max": 0.05},
    ...      "value": 0.02, "ci": [-0.02, 0.06], "n": 300, "clusters": None}
    >>> r = of_entry(e)
    >>> r["half_width"], r["certifiable_band"], r["to_decide"]["scale"]
    (0.04, {'abs_max': 0.06}, 1.78)
    >>> of_entry({"status": "error", "value": None, "ci": [None, None]})
    {'half_width': None, 'certifiable_band': None, 'to_decide': None}
    """
    lo, hi = entry.get("ci") or (None, None)
    hw = half_width(lo, hi)
    threshold = entry.get("kind", "threshold") == "threshold"
    band = certifiable_band(entry.get("bounds") or {}, lo, hi) if threshold else None
    todo: dict[str, object] | None = None
    if threshold and entry.get("status") in UNDECIDED:
        found = to_decide(
            entry.get("value"), (lo, hi), entry.get("bounds") or {}, entry.get("n"), entry.get("clusters")
        )
        todo = {**(found.to_dict() if found else {}), "text": to_decide_text(found, band)}
        if entry.get("cause") == "min_n":
            # Too few items to be judged at all: that, not the interval, is what decides it first.
            n, min_n = entry.get("n") or 0, entry.get("min_n") or 0
            todo["text"] = (
                f"it rests on n={n} items, fewer than min_n={min_n}: at least {min_n - n} more "
                f"before it is judged; {describe_band_clause(band)}"
            )
    return {
        "half_width": None if math.isnan(hw) else _round(hw),
        "certifiable_band": band,
        "to_decide": todo,
    }


def _outwards(x: float, direction: int) -> float:
    # Three decimals, away from the band's inside; 1e-9 keeps 0.08 (stored 0.0800000000001) 0.08.
    scaled = x * 1000
    return (math.ceil(scaled - 1e-9) if direction > 0 else math.floor(scaled + 1e-9)) / 1000


def _finite(x: float | None) -> bool:
    return x is not None and not isinstance(x, bool) and math.isfinite(x)


def _finite_pair(low: float | None, high: float | None) -> tuple[float, float] | None:
    # An interval both of whose ends are finite numbers, else None (no interval to read).
    if low is None or high is None or not (_finite(low) and _finite(high)):
        return None
    return low, high


def _round(x: float) -> float:
    # Twelve digits: the interval's own digits, without a float subtraction's last-bit noise
    # (0.08 - -0.02 printed as 0.09999999999999999 in results.json).
    return round(x, 12)
