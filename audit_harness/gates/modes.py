"""Gate decision modes: how a value and its confidence interval are read against a gate's bounds.

Every set of bounds a gate can hold (``min``, ``max``, ``abs_max``, ``target`` +- ``tolerance``, or
several of them) allows one closed interval of values, ``[low, high]`` (an end may be infinite), so
each mode is one comparison of two intervals:

- ``point`` (default): the point estimate must lie inside.
- ``ci_inside`` (strict, for sign-off): the whole confidence interval must lie inside.
- ``ci_overlap`` (lenient, for small runs): fails only when the whole interval lies outside, i.e.
  when the data rule out every allowed value at the interval's confidence.
- ``ci_three_way`` (the shipped default): passes when the whole interval lies inside, fails when
  the whole interval lies outside, and is ``inconclusive`` (never a pass) when it straddles a
  bound. A model whose true value is inside the bounds fails with probability at most (1 -
  confidence) / 2, and one whose true value is outside passes with at most that probability,
  whatever the sample size: a small sample reads inconclusive instead of deciding on noise
  (docs/gates.md, "What each shipped gate promises").
- ``ci_detect`` (a detection gate): passes when the whole interval lies inside, fails when the
  whole interval lies outside (evidence that the bound is broken), and is ``not_decided`` otherwise.
  A ``not_decided`` verdict is never a pass and never blocks a release: the gate stops a model only
  on evidence. The shipped gates use it per category, beside pooled gates that must pass.
"""

from __future__ import annotations

import math
from typing import Mapping

MODES = ("point", "ci_inside", "ci_overlap", "ci_three_way", "ci_detect")
#: The modes whose verdict can be ``inconclusive`` (which blocks).
THREE_WAY = ("ci_three_way",)
#: The modes whose verdict can be ``not_decided`` (which does not block).
DETECT = ("ci_detect",)
#: A value within this (relative) distance of a bound is on it. The metrics are ratios of counts
#: computed in floating point, so a score that is exactly on a bound can land a rounding error
#: either side of it (2 * 19/40 - 1 = -0.050000000000000044 against ``abs_max: 0.05``). Two
#: distinct ratios with denominators below 10**6 differ by more than 1e-12, so the slack never
#: lets a value that truly lies outside a bound pass.
BOUND_SLACK = 1e-12
#: What each mode asks, as printed in verdicts and reports.
MODE_RULES = {
    "point": "the point estimate must be inside the bounds",
    "ci_inside": "the whole interval must be inside the bounds",
    "ci_overlap": "fails only when the whole interval is outside the bounds",
    "ci_three_way": "passes when the whole interval is inside the bounds, fails when it is wholly "
    "outside, else inconclusive",
    "ci_detect": "passes when the whole interval is inside the bounds, fails (blocks) when it is "
    "wholly outside, else not decided (never a pass, does not block)",
}


def allowed_interval(bounds: Mapping[str, float]) -> tuple[float, float]:
    """The closed interval of values that satisfy every bound in ``bounds``.

    Parameters
    ----------
    bounds : mapping
        Any of ``min``, ``max``, ``abs_max``, ``target`` (with ``tolerance``), in the metric's unit.

    Returns
    -------
    (low, high) : tuple of float
        ``-inf``/``inf`` for an open side. ``low > high`` when the bounds contradict each other
        (no value passes).

    Raises
    ------
    ValueError
        ``target`` without ``tolerance``.
    """
    low, high = -math.inf, math.inf
    if bounds.get("min") is not None:
        low = max(low, bounds["min"])
    if bounds.get("max") is not None:
        high = min(high, bounds["max"])
    if bounds.get("abs_max") is not None:
        low, high = max(low, -bounds["abs_max"]), min(high, bounds["abs_max"])
    if bounds.get("target") is not None:
        if bounds.get("tolerance") is None:
            raise ValueError("a target bound needs a tolerance")
        low = max(low, bounds["target"] - bounds["tolerance"])
        high = min(high, bounds["target"] + bounds["tolerance"])
    return low, high


def _widened(allowed: tuple[float, float]) -> tuple[float, float]:
    low, high = allowed
    return low - BOUND_SLACK * max(1.0, abs(low)), high + BOUND_SLACK * max(1.0, abs(high))


def decide(mode: str, value: float, ci_low: float, ci_high: float, allowed: tuple[float, float]) -> bool:
    """True when the gate passes under ``mode``.

    Parameters
    ----------
    mode : {"point", "ci_inside", "ci_overlap", "ci_three_way", "ci_detect"}
    value : float
        The point estimate (finite; NaN is the caller's ``undefined`` verdict).
    ci_low, ci_high : float
        The confidence interval (finite for the two interval modes).
    allowed : (low, high)
        From ``allowed_interval``.

    Raises
    ------
    ValueError
        An unknown mode, or an interval mode given a NaN interval.

    Examples
    --------
    >>> decide("point", 2 * 19 / 40 - 1, float("nan"), float("nan"), (-0.05, 0.05))  # on the bound
    True
    >>> decide("ci_detect", 0.04, -0.01, 0.09, (-0.05, 0.05))  # straddles: never a pass
    False
    >>> decide("point", 2 * 18 / 40 - 1, float("nan"), float("nan"), (-0.05, 0.05))
    False
    """
    low, high = _widened(allowed)
    if mode == "point":
        return low <= value <= high
    if mode not in MODES:
        raise ValueError(f"unknown gate mode {mode!r}; known: {', '.join(MODES)}")
    if math.isnan(ci_low) or math.isnan(ci_high):
        raise ValueError(f"mode {mode} needs a confidence interval")
    if mode in ("ci_inside", "ci_three_way", "ci_detect"):
        return low <= ci_low and ci_high <= high and low <= value <= high
    return ci_low <= high and ci_high >= low


def decide_three_way(value: float, ci_low: float, ci_high: float, allowed: tuple[float, float]) -> str:
    """``"pass"``, ``"fail"`` or ``"inconclusive"`` under ``ci_three_way``.

    Parameters
    ----------
    value : float
        The point estimate (finite).
    ci_low, ci_high : float
        The confidence interval (finite).
    allowed : (low, high)
        From ``allowed_interval``.

    Returns
    -------
    str
        ``pass`` when the interval (and the value) lie inside ``allowed``, ``fail`` when the
        interval lies wholly outside it, else ``inconclusive``.

    Raises
    ------
    ValueError
        A NaN interval.

    Examples
    --------
    >>> decide_three_way(0.01, -0.02, 0.03, (-0.05, 0.05))
    'pass'
    >>> decide_three_way(0.04, -0.01, 0.09, (-0.05, 0.05))   # straddles +0.05
    'inconclusive'
    >>> decide_three_way(0.12, 0.07, 0.17, (-0.05, 0.05))
    'fail'
    """
    if decide("ci_three_way", value, ci_low, ci_high, allowed):
        return "pass"
    if not decide("ci_overlap", value, ci_low, ci_high, allowed):
        return "fail"
    return "inconclusive"


def decide_detect(value: float, ci_low: float, ci_high: float, allowed: tuple[float, float]) -> str:
    """``"pass"``, ``"fail"`` or ``"not_decided"`` under ``ci_detect``: ``decide_three_way``'s
    outcome for the same arguments (and its ``ValueError`` on a NaN interval), with its third
    outcome named ``not_decided``.

    Only the name differs, and with it what a run makes of it: ``inconclusive`` blocks a release,
    ``not_decided`` does not (``outcome.BLOCKING``). A model whose true value is inside the bounds
    is FAILed with probability at most (1 - confidence) / 2 at any sample size; a model outside
    them is stopped only when the data show it.

    Examples
    --------
    An interval that straddles +0.05 (a pass and a fail are ``decide_three_way``'s):

    >>> straddling = (0.04, -0.01, 0.09, (-0.05, 0.05))
    >>> decide_three_way(*straddling), decide_detect(*straddling)
    ('inconclusive', 'not_decided')
    """
    status = decide_three_way(value, ci_low, ci_high, allowed)
    return "not_decided" if status == "inconclusive" else status
