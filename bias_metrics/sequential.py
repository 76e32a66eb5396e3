"""Sequential release gates: anytime-valid confidence sequences and the PASS / FAIL / CONTINUE rule.

Items of a category are scored in rounds. After each round every gate gets a confidence sequence
(CS) for its metric, an interval that covers the metric's value *at every round at once* with
probability at least 1 - alpha, however the rounds are chosen and whenever scoring stops. A gate is
decided PASS when its CS lies wholly inside its band, FAIL when the CS is disjoint from the band,
and otherwise scoring goes on; when the items run out the suite's ordinary fixed-n verdict applies
(the rule may still say CONTINUE then, see ``sequential_gate``). A fixed-n interval checked after
every round does not have this property: its error rate grows with the number of looks
(``tests/test_sequential_stats.py`` measures it; docs/metrics.md §5).

The CS is the hedged-capital betting CS of Waudby-Smith & Ramdas (2023, JRSS-B 86(1), "Estimating
means of bounded random variables by betting", §4 and §6), in its *without-replacement* form: the
metric's target is the value over all items of the category (what the fixed-n run would report),
and items are drawn from that finite population in a uniformly random order. It is computed on a
grid of candidate values. The ``confseq`` package (Howard, Ramdas, Waudby-Smith) was not used: it
ships no wheel, only a source distribution with a C++ extension (Boost, pybind11) that needs a
compiler at install time, for a computation of a few lines of numpy.

**How the CS is computed** (``betting_cs_path``; the other CS functions call it). For each
candidate mean m of the grid two gamblers start with capital 1/2 each; before item i one bets that
the item exceeds the mean the remaining items must have if the population mean is m, the other
that it falls short:

``K+_i(m) = K+_{i-1}(m) (1 + lam+_i(m) (z_i - mu_i(m)))``,
``K-_i(m) = K-_{i-1}(m) (1 - lam-_i(m) (z_i - mu_i(m)))``.

Without replacement (``population_size`` N given) ``mu_i(m) = (N m - sum_{j<i} z_j) / (N - i + 1)``
is the mean of the items not yet drawn (Waudby-Smith & Ramdas 2023, §6); with ``None`` it is m
(i.i.d. items, §4).

**Bets.** The predictable plug-in bets of §4 (lambda^PrPl,
``lam_i = sqrt(2 log(2/alpha) / (sigma2_{i-1} i log(1 + i)))`` from the running variance) make a
CS that is tight over all times; a gate only needs to be tight early, at the item counts where
stopping saves work. So without replacement each bet is at least the one §3 tunes for a fixed
sample of n* values, ``sqrt(2 log(2/alpha) / (sigma2_{i-1} n*))``, with n* the defined values
expected among ``horizon_share`` x N items (N x share x the defined share so far). Both use only
the items before i, so the bet stays predictable and the guarantee below is unchanged; the
larger bet near n* decides a clear gate sooner (a seeded simulation of BBQ-sized categories:
about 18 % fewer items for an accuracy 0.115 below its bound), the PrPl bet keeps the start.
Bets are truncated at ``c / mu_i(m)`` and ``c / (1 - mu_i(m))`` with c = 1/2 so that no factor
is negative. At the true mean both capitals are non-negative martingales, so the hedged capital
``theta K+ + (1 - theta) K-`` (theta = 1/2, both starting at 1) is one of mean 1 and exceeds
1/alpha at *any* time with probability <= alpha (Ville's inequality). m is rejected from the
first item on which ``max(theta K+, (1 - theta) K-) >= 1/alpha`` (the paper's hedged process,
below the sum), and stays rejected: the CS is the running intersection over items.
A candidate whose remaining mean would leave [0, 1] is impossible and is rejected at once.

**An empty sequence.** When the bets have rejected every candidate that is still possible, the
sequence has certainly missed the true value (which is never rejected as impossible): that
happens with probability at most alpha, and a decision resting on it would rest on nothing.
With ``empty="vacuous"`` (the default, what gates use) the CS is then [0, 1] from that item on,
so it decides nothing and the gate falls back to its fixed-n verdict; ``empty="mean"`` reports
the running mean widened to the next grid points instead, so a simulation can count the miss.
Once no grid point is possible (the last items of a population larger than the grid resolves)
the CS is the running mean in both modes: it has closed on the exact value, not missed.

**Sampling.** With ``population_size`` the CS is for the mean over all N items of the category
(the value the fixed-n run reports) and assumes only that the items are scored in a *uniformly
random order*, drawn without replacement: no independence between items is assumed, so items
that share a template are fine, and the CS collapses to the exact value when all N are scored.
If the order is not random (dataset order), there is no guarantee; shuffle with a recorded seed.
With ``None`` the items must be i.i.d. draws and the target is their distribution's mean: valid
for a random permutation of a finite population too but conservative, as it ignores that the
items not yet drawn are fewer and fewer (use the population form when N is known).

**Items outside the denominator** (NaN: an unknown answer for a share of biased answers, an
invalid or out-of-choice answer for an accuracy) are part of the population but not of the
metric. For a candidate m such an item counts as m: the population mean of these values is m
exactly when the mean over the other items is m, so the test of m stays exact although the
metric's denominator is not known before the end. N counts these items too.

**Grid.** The CS is the hull of the candidates not rejected and of the running mean, widened to
the next grid point on each side (to 0 or 1 past the grid's ends). It is exact for a true mean on
the grid; a true mean between two grid points is covered whenever either neighbour is (the
default grid's step is 0.0005).

Metrics that are not plain means are composed (``s_dis_cs``, ``s_amb_cs``, ``diff_bias_cs``,
``pair_score_cs``); regression gates are shifted bands (``regression_band``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "PASS",
    "FAIL",
    "CONTINUE",
    "SequentialDecision",
    "betting_cs",
    "betting_cs_path",
    "decide",
    "sequential_gate",
    "difference_interval",
    "product_interval",
    "s_dis_cs",
    "s_amb_cs",
    "diff_bias_cs",
    "pair_score_cs",
    "regression_band",
    "oracle_sprt_n",
]

PASS, FAIL, CONTINUE = "PASS", "FAIL", "CONTINUE"

#: Default candidate means: 2001 points, step 0.0005.
DEFAULT_GRID_POINTS = 2001

_HEDGE = 0.5  # theta: weight of the capital betting on "mean above m"; the rest bets on "below"
_TRUNCATION = 0.5  # c: a bet never risks more than half of the current capital
_FEASIBLE_SLACK = 1e-9  # floating-point allowance when a candidate's remaining mean is at 0 or 1
#: Without replacement, bets are never smaller than those tuned for a fixed sample of this share of
#: the population (see the module's "Bets").
HORIZON_SHARE = 0.25

_SOURCE = (
    "Waudby-Smith & Ramdas 2023 (JRSS-B), hedged-capital betting CS, sampling without replacement "
    "(§4, §6); docs/metrics.md §5"
)


def _check_alpha(alpha: float, label: str = "alpha") -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{label} must be a number in (0, 1), got {alpha!r}") from exc
    if not 0.0 < a < 1.0:
        raise ValueError(f"{label} must be in (0, 1), got {alpha!r}")
    return a


def _check_values(
    values: ArrayLike, label: str = "values", *, low: float = 0.0, high: float = 1.0
) -> np.ndarray:
    """The one input check: numbers in [low, high] or NaN (an item outside the metric's denominator)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{label} must be numbers in [{low:g}, {high:g}] or NaN, could not convert: {exc}"
        ) from exc
    if arr.ndim == 0:
        raise ValueError(f"{label} must be a sequence of per-item values, got a scalar {values!r}")
    finite = arr[~np.isnan(arr)]
    bad = finite[(finite < low) | (finite > high)]
    if bad.size:
        raise ValueError(
            f"{label} must lie in [{low:g}, {high:g}] (NaN for items outside the denominator), got {float(bad[0])!r}"
        )
    return arr


def _check_population(
    population_size: float | None, n_seen: int, label: str = "population_size"
) -> int | None:
    if population_size is None:
        return None
    try:
        whole = not isinstance(population_size, bool) and float(population_size).is_integer()
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"{label} must be a whole number of items or None, got {population_size!r}")
    size = int(population_size)
    if size < 1 or size < n_seen:
        raise ValueError(f"{label} must be >= 1 and >= the {n_seen} items scored so far, got {size}")
    return size


def _check_grid(grid: ArrayLike | None) -> np.ndarray:
    if grid is None:
        return np.linspace(0.0, 1.0, DEFAULT_GRID_POINTS)
    g = np.asarray(grid, dtype=np.float64)
    if g.ndim != 1 or g.size < 2 or np.isnan(g).any() or (g < 0).any() or (g > 1).any():
        raise ValueError(f"grid must be a 1-D array of >= 2 candidate means in [0, 1], got {grid!r}")
    if (np.diff(g) <= 0).any():
        raise ValueError("grid must be strictly increasing")
    return g


def _check_band(band: Iterable[float]) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in band)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"band must be a pair (lo, hi) of numbers, got {band!r}") from exc
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError(f"band must not contain NaN, got {band!r}")
    if lo > hi:
        raise ValueError(f"band is empty: lo = {lo} > hi = {hi}")
    return lo, hi


def betting_cs_path(
    values: ArrayLike,
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
    checkpoints: Sequence[int] | None = None,
    horizon_share: float | None = HORIZON_SHARE,
    empty: str = "vacuous",
) -> tuple[np.ndarray, np.ndarray]:
    """Hedged-capital betting confidence sequence after every item (or at checkpoints).

    The method is the module's **How the CS is computed**; its paragraphs "Bets", "An empty
    sequence", "Sampling", "Items outside the denominator" and "Grid" say what each option changes.

    Parameters
    ----------
    values : array_like of float
        Shape (t,) or (runs, t): per-item values in [0, 1] in the order scored, NaN for items outside
        the metric's denominator. A 2-D array computes independent sequences (simulations) at once.
    alpha : float, default=0.05
        Error probability over the whole sequence, in (0, 1).
    population_size : int or None, default=None
        N, the items of the category (NaN items included) sampled without replacement; >= t.
    grid : array_like of float, optional
        Strictly increasing candidate means in [0, 1]; default 2001 equally spaced points.
    checkpoints : sequence of int, optional
        Item counts (1..t) after which to report the CS; default every item.
    horizon_share : float or None, default=HORIZON_SHARE
        With ``population_size``: the share of N that the bets are tuned for ("Bets"); None for
        the PrPl bets alone. Ignored without a population.
    empty : {"vacuous", "mean"}, default="vacuous"
        What an empty sequence reports ("An empty sequence").

    Returns
    -------
    low, high : numpy.ndarray
        Shape (len(checkpoints),) or (runs, len(checkpoints)); [0, 1] before any value is defined.

    Raises
    ------
    ValueError
        Values outside [0, 1], alpha outside (0, 1), a bad grid, a population smaller than the items
        scored, or checkpoints outside 1..t.

    Examples
    --------
    >>> import numpy as np
    >>> from bias_metrics.sequential import betting_cs_path
    >>> x = np.random.default_rng(0).permutation(np.repeat([1.0, 0.0], [700, 300]))
    >>> low, high = betting_cs_path(x, 0.05, population_size=1000, checkpoints=[100, 500, 1000])
    >>> bool((low <= 0.7).all() and (0.7 <= high).all()), bool(np.all(np.diff(high - low) < 0))
    (True, True)
    >>> float(low[-1]) <= 0.7 <= float(high[-1]) and float(high[-1] - low[-1]) < 0.0011
    True
    """
    a = _check_alpha(alpha)
    x, single = _as_runs(_check_values(values))
    runs, t_total = x.shape
    n_pop = _check_population(population_size, t_total)
    g = _check_grid(grid)
    checks = np.arange(1, t_total + 1) if checkpoints is None else np.asarray(checkpoints, dtype=np.int64)
    want = _item_counts(checks, t_total, "checkpoints", checkpoints)
    if horizon_share is not None and not 0.0 < float(horizon_share) <= 1.0:
        raise ValueError(f"horizon_share must be in (0, 1] or None, got {horizon_share!r}")
    horizon = None if n_pop is None or horizon_share is None else float(horizon_share) * n_pop
    if empty not in ("vacuous", "mean"):
        raise ValueError(f"empty must be 'vacuous' or 'mean', got {empty!r}")
    bets = _Bets(runs, g, a, n_pop, horizon)
    reported: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i in range(t_total):
        bets.add(i, x[:, i : i + 1])
        if want[i + 1]:
            reported[i + 1] = bets.interval(empty)
    low = np.stack([reported[int(c)][0] for c in checks], axis=1)
    high = np.stack([reported[int(c)][1] for c in checks], axis=1)
    if single:
        return low[0], high[0]
    return low, high


def _as_runs(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """``x`` as (runs, items), and whether it was one run (1-D)."""
    single = x.ndim == 1
    if single:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"values must be 1-D (items) or 2-D (runs, items), got shape {x.shape}")
    return x, single


def _item_counts(steps: np.ndarray, total: int, label: str, given: object) -> np.ndarray:
    """A mask over 0..total of the item counts ``steps`` (``given`` by the caller), all in 1..total."""
    if steps.ndim != 1 or (steps < 1).any() or (steps > total).any():
        raise ValueError(f"{label} must be item counts in 1..{total}, got {given!r}")
    mask = np.zeros(total + 1, dtype=bool)
    mask[steps] = True
    return mask


class _Bets:
    """The gamblers' log-capitals for every (run, candidate mean) and the running statistics of the
    defined values that set the next bets (the module's "How the CS is computed")."""

    def __init__(self, runs: int, g: np.ndarray, alpha: float, n_pop: int | None, horizon: float | None):
        # Reject m once the hedged capital max(theta K+, (1 - theta) K-) reaches 1/alpha, theta = 1/2.
        self.threshold = math.log(1.0 / alpha) - math.log(_HEDGE)
        self.bet_scale = 2.0 * math.log(2.0 / alpha)
        self.g, self.m, self.n_pop, self.horizon = g, g[None, :], n_pop, horizon
        self.log_up = np.zeros((runs, g.size))
        self.log_down = np.zeros((runs, g.size))
        self.rejected = np.zeros((runs, g.size), dtype=bool)  # by the bets
        self.impossible = np.zeros((runs, g.size), dtype=bool)  # by the items' totals (without replacement)
        self.sum_x = np.zeros((runs, 1))  # sum of defined values so far
        self.n_def = np.zeros((runs, 1))  # how many values were defined
        self.n_nan = np.zeros((runs, 1))  # how many items were outside the denominator
        self.sq_sum = np.full((runs, 1), 0.25)  # 1/4 + sum of (x_j - mu-hat_j)^2

    def add(self, i: int, xi: np.ndarray) -> None:
        """Item i (0-based) of every run, shape (runs, 1): settle its bets, then update the statistics."""
        m, n_pop = self.m, self.n_pop
        is_nan = np.isnan(xi)
        # z_i(m): the item's value, or m itself for an item outside the denominator.
        z = np.where(is_nan, m, np.nan_to_num(xi))
        if n_pop is None:
            mu = np.broadcast_to(m, self.log_up.shape)
        else:
            # Mean of the N - i items not yet drawn if the population mean is m.
            mu = np.clip((m * (n_pop - self.n_nan) - self.sum_x) / (n_pop - i), 0.0, 1.0)
        lam = self._bet(i)
        floor = _TRUNCATION / lam  # min(lam, c / mu) == c / max(mu, c / lam)
        lam_up = _TRUNCATION / np.maximum(mu, floor)
        lam_down = _TRUNCATION / np.maximum(1.0 - mu, floor)
        d = z - mu
        self.log_up += np.log1p(lam_up * d)
        self.log_down += np.log1p(-lam_down * d)
        self.rejected |= np.maximum(self.log_up, self.log_down) >= self.threshold
        # Running statistics of the defined values (they set the next bet).
        defined = ~is_nan
        xv = np.where(defined, xi, 0.0)
        self.sum_x = self.sum_x + xv
        self.n_def = self.n_def + defined
        self.n_nan = self.n_nan + is_nan
        if n_pop is not None:
            # m is impossible once the items not yet drawn would need a total outside [0, left].
            left_total = m * (n_pop - self.n_nan) - self.sum_x
            slack = _FEASIBLE_SLACK * n_pop
            self.impossible |= (left_total < -slack) | (left_total > n_pop - (i + 1) + slack)
        # The paper's mu-hat_i = (1/2 + sum x) / (i + 1) includes item i itself.
        mean_hat = (0.5 + self.sum_x) / (self.n_def + 1.0)
        self.sq_sum = self.sq_sum + np.where(defined, (xv - mean_hat) ** 2, 0.0)

    def _bet(self, i: int) -> np.ndarray:
        """The untruncated bet on item i from the items before it (the module's "Bets")."""
        k = self.n_def + 1.0  # this item's index among the defined values
        sigma2 = self.sq_sum / k
        lam = np.sqrt(self.bet_scale / (sigma2 * k * np.log1p(k)))
        if self.horizon is not None:
            # Defined values expected among the horizon's items, from the items before this one.
            n_star = self.horizon * (self.n_def + 1.0) / (i + 1.0)
            lam = np.maximum(lam, np.sqrt(self.bet_scale / (sigma2 * n_star)))
        return lam

    def interval(self, empty: str) -> tuple[np.ndarray, np.ndarray]:
        """Per run, the CS after the items added so far (the module's "Grid", "An empty sequence")."""
        out = self.rejected | self.impossible
        lo, hi = _hull(self.g, out, self.sum_x[:, 0], self.n_def[:, 0])
        if empty == "vacuous":
            # Every candidate out, yet some were possible: the bets rejected the true value.
            missed = out.all(axis=1) & ~self.impossible.all(axis=1)
            lo, hi = np.where(missed, 0.0, lo), np.where(missed, 1.0, hi)
        return lo, hi


def _hull(
    g: np.ndarray, rejected: np.ndarray, sum_x: np.ndarray, n_def: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per run: hull of the candidates not rejected and the running mean, out to the next grid point."""
    alive = ~rejected
    any_alive = alive.any(axis=1)
    first = np.where(any_alive, alive.argmax(axis=1), g.size - 1)
    last = np.where(any_alive, g.size - 1 - alive[:, ::-1].argmax(axis=1), 0)
    lo_in = np.where(any_alive, g[first], np.inf)
    hi_in = np.where(any_alive, g[last], -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n_def > 0, sum_x / np.maximum(n_def, 1), np.nan)
    has_mean = ~np.isnan(mean)
    lo_in = np.where(has_mean, np.minimum(lo_in, np.nan_to_num(mean, nan=np.inf)), lo_in)
    hi_in = np.where(has_mean, np.maximum(hi_in, np.nan_to_num(mean, nan=-np.inf)), hi_in)
    # Widen to the next grid point strictly outside (0 or 1 past the grid's ends).
    j_lo = np.searchsorted(g, lo_in, side="left") - 1
    j_hi = np.searchsorted(g, hi_in, side="right")
    low = np.where(j_lo >= 0, g[np.clip(j_lo, 0, g.size - 1)], 0.0)
    high = np.where(j_hi < g.size, g[np.clip(j_hi, 0, g.size - 1)], 1.0)
    nothing = ~any_alive & ~has_mean
    low = np.where(nothing, 0.0, low)
    high = np.where(nothing, 1.0, high)
    return low, high


def betting_cs(
    values: ArrayLike,
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
) -> tuple[float, float]:
    """The betting confidence sequence after the items scored so far (``betting_cs_path``'s last).

    Parameters
    ----------
    values : array_like of float
        Shape (t,): per-item values in [0, 1] in the order scored; NaN for an item outside the
        metric's denominator. t = 0 gives (0.0, 1.0).
    alpha : float, default=0.05
        Error probability over the whole sequence, in (0, 1).
    population_size : int or None, default=None
        Items of the category, sampled without replacement in random order (see
        ``betting_cs_path``, "Sampling"); None for i.i.d. items.
    grid : array_like of float, optional
        Candidate means; default 2001 points.

    Returns
    -------
    low, high : float
        Covers the mean at every t simultaneously with probability >= 1 - alpha.

    Raises
    ------
    ValueError
        As ``betting_cs_path``.

    Examples
    --------
    >>> from bias_metrics.sequential import betting_cs
    >>> low, high = betting_cs([1, 0, 1, 1] * 50, 0.05, population_size=1000)
    >>> bool(low < 0.75 < high), round(high - low, 2) < 0.35
    (True, True)
    >>> betting_cs([], 0.05)
    (0.0, 1.0)
    >>> betting_cs([1.5], 0.05)
    Traceback (most recent call last):
    ...
    ValueError: values must lie in [0, 1] (NaN for items outside the denominator), got 1.5
    """
    x = _check_values(values)
    if x.ndim != 1:
        raise ValueError(f"values must be 1-D (one value per item), got shape {x.shape}")
    if x.size == 0:
        _check_alpha(alpha)
        _check_population(population_size, 0)
        _check_grid(grid)
        return (0.0, 1.0)
    low, high = betting_cs_path(x, alpha, population_size=population_size, grid=grid, checkpoints=[x.size])
    return (float(low[0]), float(high[0]))


def decide(interval: tuple[float, float], band: tuple[float, float]) -> str:
    """PASS when the interval lies inside the closed band, FAIL when disjoint from it, else CONTINUE.

    Parameters
    ----------
    interval : (float, float)
        A confidence sequence's current (low, high) on the metric's scale.
    band : (float, float)
        The gate's allowed values [lo, hi], closed; -inf / inf for a one-sided gate.

    Returns
    -------
    str
        ``PASS``, ``FAIL`` or ``CONTINUE``.

    Raises
    ------
    ValueError
        An empty band (lo > hi), NaN in the band or interval, or low > high.

    Examples
    --------
    >>> from bias_metrics.sequential import decide
    >>> decide((-0.03, 0.04), (-0.05, 0.05)), decide((0.06, 0.2), (-0.05, 0.05)), decide((0.0, 0.1), (-0.05, 0.05))
    ('PASS', 'FAIL', 'CONTINUE')
    """
    lo, hi = _check_band(band)
    try:
        low, high = (float(v) for v in interval)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"interval must be a pair (low, high), got {interval!r}") from exc
    if math.isnan(low) or math.isnan(high) or low > high:
        raise ValueError(f"interval must be (low, high) with low <= high, got {interval!r}")
    if lo <= low and high <= hi:
        return PASS
    if high < lo or low > hi:
        return FAIL
    return CONTINUE


@dataclass(frozen=True)
class SequentialDecision:
    """One gate's state after a round: the decision and the confidence sequence it rests on.

    Parameters
    ----------
    decision : str
        ``PASS``, ``FAIL`` or ``CONTINUE``.
    low, high : float
        The CS on the metric's scale.
    n : int
        Items scored so far (NaN items included).
    alpha : float
        The gate's error probability over the whole run.
    exhausted : bool
        True when all ``population_size`` items are scored: a CONTINUE then hands the gate to the
        ordinary fixed-n verdict.
    method : str
        How the CS was made, e.g. ``"betting-wor"``.
    source : str
        The paper and section followed.

    Examples
    --------
    >>> from bias_metrics.sequential import sequential_gate
    >>> sequential_gate([1.0] * 200, (0.5, 1.0), 0.05, population_size=1000).decision
    'PASS'
    """

    decision: str
    low: float
    high: float
    n: int
    alpha: float
    exhausted: bool
    method: str
    source: str = _SOURCE


def _method(population_size: int | None) -> str:
    return "betting-iid" if population_size is None else "betting-wor"


def sequential_gate(
    values: ArrayLike,
    band: tuple[float, float],
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
) -> SequentialDecision:
    """The sequential rule for a gate on a mean: the betting CS, then ``decide``.

    PASS / FAIL are final (the CS is anytime-valid, so stopping at the first decision keeps the
    error below alpha); CONTINUE asks for another round. **At exhaustion** (all
    ``population_size`` items scored) the CS has shrunk to the exact value, within a grid step, yet
    the rule may still say CONTINUE, e.g. for a value within a grid step of a bound, or for a metric
    with no defined item; ``exhausted`` is then True and the caller must apply the suite's ordinary
    fixed-n verdict (this function never does).

    Parameters
    ----------
    values : array_like of float
        Per-item values in [0, 1] so far, in the order scored; NaN outside the denominator.
    band : (float, float)
        The gate's band [lo, hi] on the mean's scale (closed; -inf / inf allowed).
    alpha : float, default=0.05
        The gate's probability of a wrong PASS or FAIL over the whole run.
    population_size, grid
        As ``betting_cs``.

    Returns
    -------
    SequentialDecision

    Raises
    ------
    ValueError
        An empty band, alpha outside (0, 1), values outside [0, 1] (as ``betting_cs_path``).

    Examples
    --------
    >>> import numpy as np
    >>> from bias_metrics.sequential import sequential_gate
    >>> x = np.random.default_rng(1).permutation(np.repeat([1.0, 0.0], [800, 200]))
    >>> [sequential_gate(x[:n], (0.5, 1.0), 0.05, population_size=1000).decision for n in (10, 20)]
    ['CONTINUE', 'PASS']
    >>> sequential_gate(x[:20], (0.6, 0.5), 0.05)
    Traceback (most recent call last):
    ...
    ValueError: band is empty: lo = 0.6 > hi = 0.5
    """
    band = _check_band(band)
    x = _check_values(values)
    n_pop = _check_population(population_size, x.size)
    low, high = betting_cs(x, alpha, population_size=n_pop, grid=grid)
    exhausted = n_pop is not None and x.size == n_pop
    decision = decide((low, high), band)
    return SequentialDecision(
        decision, low, high, int(x.size), _check_alpha(alpha), exhausted, _method(n_pop)
    )


def difference_interval(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Interval of a - b for a in ``a`` and b in ``b``: (a_low - b_high, a_high - b_low).

    Examples
    --------
    >>> from bias_metrics.sequential import difference_interval
    >>> difference_interval((0.7, 0.9), (0.6, 0.65))
    (0.04999999999999993, 0.30000000000000004)
    """
    return (float(a[0]) - float(b[1]), float(a[1]) - float(b[0]))


def product_interval(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Interval of a x b for a in ``a`` and b in ``b``: min and max of the four corner products.

    Examples
    --------
    >>> from bias_metrics.sequential import product_interval
    >>> product_interval((0.2, 0.5), (-0.4, 0.6))
    (-0.2, 0.3)
    """
    corners = [float(x) * float(y) for x in a for y in b]
    return (min(corners), max(corners))


def _codes(codes: ArrayLike, label: str) -> np.ndarray:
    arr = _check_values(codes, label, low=-1.0, high=1.0)
    finite = arr[~np.isnan(arr)]
    if not np.isin(finite, (-1.0, 0.0, 1.0)).all():
        raise ValueError(f"{label} must be +1 (biased), -1 (counter-biased), 0 (unknown) or NaN (invalid)")
    return arr


def _signed(share_cs: tuple[float, float]) -> tuple[float, float]:
    """A CS for a share p as one for 2p - 1 (increasing in p: endpoint by endpoint)."""
    lo, hi = share_cs
    return (2.0 * lo - 1.0, 2.0 * hi - 1.0)


def s_dis_cs(
    codes: ArrayLike,
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
) -> tuple[float, float]:
    """CS for BBQ's s_DIS = 2 n_B / (n_B + n_C) - 1 (docs/metrics.md §1.1): one mean, no alpha split.

    The share p = n_B / (n_B + n_C) is a mean over the non-unknown answers; unknown and invalid
    answers are outside its denominator (NaN items of ``betting_cs_path``), and s_DIS = 2p - 1 is
    increasing in p, so the CS maps endpoint by endpoint.

    Parameters
    ----------
    codes : array_like of float
        Per disambiguated item in scored order: +1 biased answer, -1 counter-biased, 0 unknown,
        NaN invalid output.
    alpha : float, default=0.05
        In (0, 1).
    population_size : int or None, default=None
        Disambiguated items of the category (every answer class counted).
    grid : array_like of float, optional
        Candidate values of p.

    Returns
    -------
    low, high : float
        In [-1, 1].

    Raises
    ------
    ValueError
        Codes other than -1, 0, 1, NaN; alpha outside (0, 1).

    Examples
    --------
    >>> from bias_metrics.sequential import s_dis_cs
    >>> low, high = s_dis_cs([1, 1, -1, 0] * 100, 0.05, population_size=1000)
    >>> bool(low < 1 / 3 < high)
    True
    """
    c = _codes(codes, "codes")
    share = np.where(c == 0, np.nan, (c + 1.0) / 2.0)
    return _signed(betting_cs(share, alpha, population_size=population_size, grid=grid))


def s_amb_cs(
    codes: ArrayLike,
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
    method: str = "product",
) -> tuple[float, float]:
    """CS for BBQ's s_AMB = (1 - acc_ambig) x (2 n_B / (n_B + n_C) - 1) over ambiguous items.

    ``method="product"`` (the paper's form): a CS at alpha/2 for 1 - acc_ambig, the share of
    non-unknown answers among valid ones, and one at alpha/2 for s = 2p - 1 as in ``s_dis_cs``; by
    the union bound both hold at all times with probability >= 1 - alpha, and then s_AMB lies in
    their ``product_interval``. ``method="identity"`` uses s_AMB = (n_B - n_C)/n
    (docs/metrics.md §1.1): a single mean of (code + 1)/2 at the full alpha, narrower; it also covers
    the all-unknown case where the product form is undefined (value 0).

    Parameters
    ----------
    codes : array_like of float
        Per ambiguous item: +1 biased, -1 counter-biased, 0 unknown (correct), NaN invalid.
    alpha : float, default=0.05
        In (0, 1).
    population_size : int or None, default=None
        Ambiguous items of the category.
    grid : array_like of float, optional
        Candidate means of each part.
    method : {"product", "identity"}, default="product"

    Returns
    -------
    low, high : float
        In [-1, 1].

    Raises
    ------
    ValueError
        Bad codes, alpha outside (0, 1) or an unknown method.

    Examples
    --------
    Toy B1's ambiguous half (4 biased, 2 counter-biased, 4 unknown; s_AMB = 0.2), repeated:

    >>> from bias_metrics.sequential import s_amb_cs
    >>> codes = [1, 1, -1, 0, 0, 1, 1, -1, 0, 0] * 40
    >>> p_lo, p_hi = s_amb_cs(codes, 0.05, population_size=1000)
    >>> i_lo, i_hi = s_amb_cs(codes, 0.05, population_size=1000, method="identity")
    >>> bool(p_lo < 0.2 < p_hi and i_lo < 0.2 < i_hi), bool(i_hi - i_lo < p_hi - p_lo)
    (True, True)
    """
    c = _codes(codes, "codes")
    a = _check_alpha(alpha)
    if method == "identity":
        return _signed(betting_cs((c + 1.0) / 2.0, a, population_size=population_size, grid=grid))
    if method != "product":
        raise ValueError(f"method must be 'product' or 'identity', got {method!r}")
    not_unknown = np.where(np.isnan(c), np.nan, (c != 0).astype(np.float64))
    factor = betting_cs(not_unknown, a / 2.0, population_size=population_size, grid=grid)
    score = s_dis_cs(c, a / 2.0, population_size=population_size, grid=grid)
    return product_interval(factor, score)


def diff_bias_cs(
    correct_aligned: ArrayLike,
    correct_nonaligned: ArrayLike,
    alpha: float = 0.05,
    *,
    population_sizes: tuple[int, int] | None = None,
    grid: ArrayLike | None = None,
) -> tuple[float, float]:
    """CS for KoBBQ's diff-bias_d = acc(aligned) - acc(non-aligned) (docs/metrics.md §1.3).

    Each accuracy gets a CS at alpha/2 (union bound); the difference lies in their
    ``difference_interval``. Each side is its own finite population: the aligned (b/d) and the
    non-aligned (a/c) disambiguated rows, which a random order of all disambiguated rows visits in
    random order. Also EsBBQ's ``bias_score_disambig``.

    Parameters
    ----------
    correct_aligned, correct_nonaligned : array_like of float
        Per row in scored order: 1 correct, 0 wrong, NaN out-of-choice / invalid.
    alpha : float, default=0.05
        In (0, 1).
    population_sizes : (int, int) or None, default=None
        Aligned and non-aligned rows of the category; None for i.i.d. rows.
    grid : array_like of float, optional
        Candidate accuracies.

    Returns
    -------
    low, high : float
        In [-1, 1].

    Raises
    ------
    ValueError
        Values outside [0, 1], alpha outside (0, 1), a bad ``population_sizes``.

    Examples
    --------
    Toy B1: aligned accuracy 4/5, non-aligned 2/5 (diff-bias_d 0.4), each repeated 100 times:

    >>> from bias_metrics.sequential import diff_bias_cs
    >>> low, high = diff_bias_cs([1, 1, 0, 1, 1] * 100, [1, 0, 1, 0, 0] * 100, 0.05, population_sizes=(600, 600))
    >>> bool(low < 0.4 < high), bool(low > 0)
    (True, True)
    """
    a = _check_alpha(alpha)
    n_a, n_n = _size_pair(population_sizes)
    aligned = _check_values(correct_aligned, "correct_aligned")
    nonaligned = _check_values(correct_nonaligned, "correct_nonaligned")
    acc_a = betting_cs(aligned, a / 2.0, population_size=n_a, grid=grid)
    acc_n = betting_cs(nonaligned, a / 2.0, population_size=n_n, grid=grid)
    return difference_interval(acc_a, acc_n)


def _size_pair(population_sizes: tuple[int, int] | None) -> tuple[int | None, int | None]:
    if population_sizes is None:
        return None, None
    try:
        n_a, n_n = population_sizes
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"population_sizes must be a pair (aligned, non-aligned), got {population_sizes!r}"
        ) from exc
    return n_a, n_n


def pair_score_cs(
    outcomes: ArrayLike,
    alpha: float = 0.05,
    *,
    population_size: int | None = None,
    grid: ArrayLike | None = None,
) -> tuple[float, float]:
    """CS for the WinoQueer / CrowS-Pairs bias score in PERCENT (docs/metrics.md §1.6).

    The score is 100 x the share of stereotyped pairs with ties kept in the denominator as
    non-stereotyped (as upstream), so each pair is worth 1 (stereotyped) or 0 (tie or not): a plain
    mean, no alpha split.

    Parameters
    ----------
    outcomes : array_like of float
        Per pair in scored order: 1 stereotyped (score(x) > score(y)), 0 tie, -1 not.
    alpha : float, default=0.05
        In (0, 1).
    population_size : int or None, default=None
        Pairs of the subset.
    grid : array_like of float, optional
        Candidate shares.

    Returns
    -------
    low, high : float
        In [0, 100].

    Raises
    ------
    ValueError
        Outcomes other than -1, 0, 1 or alpha outside (0, 1).

    Examples
    --------
    >>> from bias_metrics.sequential import pair_score_cs
    >>> low, high = pair_score_cs([1, 1, 0, -1] * 100, 0.05, population_size=500)
    >>> bool(low < 50.0 < high)
    True
    """
    o = _check_values(outcomes, "outcomes", low=-1.0, high=1.0)
    if np.isnan(o).any() or not np.isin(o, (-1.0, 0.0, 1.0)).all():
        raise ValueError("outcomes must be 1 (stereotyped), 0 (tie) or -1 (not stereotyped)")
    lo, hi = betting_cs((o == 1).astype(np.float64), alpha, population_size=population_size, grid=grid)
    return (100.0 * lo, 100.0 * hi)


def regression_band(
    baseline: float, max_regression: float, kind: str, *, center: float = 0.0
) -> tuple[float, float]:
    """The band of a regression gate (docs/gates.md): the baseline is fixed, so it is just a band.

    With b the baseline value and r the allowed regression, no regression means x >= b - r for a
    ``min`` gate, x <= b + r for a ``max`` gate, and |x - c| <= |b - c| + r for ``abs_max`` (c = 0)
    and ``target`` (c = the target) gates.

    Parameters
    ----------
    baseline : float
        The old run's value b.
    max_regression : float
        r >= 0.
    kind : {"min", "max", "abs_max", "target"}
        The gate's bound type.
    center : float, default=0.0
        c for ``target`` gates.

    Returns
    -------
    lo, hi : float
        -inf / inf on the open side.

    Raises
    ------
    ValueError
        A NaN baseline, a negative or NaN ``max_regression``, an unknown kind.

    Examples
    --------
    >>> from bias_metrics.sequential import regression_band
    >>> regression_band(0.03, 0.02, "abs_max")
    (-0.05, 0.05)
    >>> regression_band(0.8, 0.02, "min")
    (0.78, inf)
    """
    b, r, c = float(baseline), float(max_regression), float(center)
    if math.isnan(b) or math.isnan(c):
        raise ValueError(f"baseline and center must be numbers, got {baseline!r}, {center!r}")
    if math.isnan(r) or r < 0:
        raise ValueError(f"max_regression must be >= 0, got {max_regression!r}")
    if kind == "min":
        return (b - r, math.inf)
    if kind == "max":
        return (-math.inf, b + r)
    if kind in ("abs_max", "target"):
        c = 0.0 if kind == "abs_max" else c
        w = abs(b - c) + r
        return (c - w, c + w)
    raise ValueError(f"kind must be 'min', 'max', 'abs_max' or 'target', got {kind!r}")


def oracle_sprt_n(
    values: ArrayLike,
    edges: Iterable[tuple[float, float]],
    *,
    looks: Sequence[int] | None = None,
    min_n: int = 0,
) -> np.ndarray:
    """Items scored before an oracle that knows the population's value settles a gate: a reference
    for how early *any* level-alpha sequential rule can stop (not a rule the suite uses).

    For each edge m of the band (the candidate values a decision must rule out) the oracle runs
    Wald's sequential probability ratio test of "the population's share is m" against "it is
    the true share" (known: ``values`` holds every item of the population). Items are drawn
    without replacement in the order given; with D defined values of which K are 1, the next
    defined value is 1 with probability ``(K - ones so far) / (D - defined so far)``, and K_m =
    the whole count nearest m x D on the far side from the truth (the first population the
    decision must rule out). Undefined items (NaN) fall at the same places under both, so they
    leave the ratio unchanged. The ratio is a martingale of mean 1 under the edge, so it reaches
    1 / alpha with probability at most alpha (Ville's inequality): a valid test. Since it bets
    with the true value, for i.i.d. items its expected sample size meets Wald's lower bound for
    any level-alpha sequential test, log(1 / alpha) / KL (Wald 1947, *Sequential Analysis*,
    §4.4), up to the overshoot of its last step: a rule that must estimate the value, as the
    betting CS does, needs about this many items or more.

    Parameters
    ----------
    values : array_like of float
        Shape (N,) or (runs, N): every item of the population in the order drawn, 0 or 1, NaN for
        an item outside the metric's denominator.
    edges : sequence of (float, float)
        (m, alpha) per edge to rule out, m a share in [0, 1] that the population's share is not,
        alpha in (0, 1) that edge's error probability (one side of a CS: half the CS's alpha).
    looks : sequence of int, optional
        Item counts after which stopping is allowed (a run's round ends); default every item.
    min_n : int, default=0
        Defined values needed before stopping (a gate's min_n).

    Returns
    -------
    numpy.ndarray of int
        Shape () or (runs,): the first look below N at which every edge is rejected and min_n
        holds; N when there is none (every item scored).

    Raises
    ------
    ValueError
        Values other than 0, 1 or NaN, an edge equal to the true share, alpha outside (0, 1),
        or looks outside 1..N.

    Examples
    --------
    A population of 200 with a share of 0.3: ruling out 0.5 (a gate ``>= 0.5`` failing, one side
    at alpha 0.05) takes the oracle a few dozen items.

    >>> import numpy as np
    >>> from bias_metrics.sequential import oracle_sprt_n
    >>> x = np.random.default_rng(1).permutation(np.repeat([1.0, 0.0], [60, 140]))
    >>> n = int(oracle_sprt_n(x, [(0.5, 0.05)], looks=range(10, 201, 10)))
    >>> 20 <= n <= 120
    True
    """
    x, single = _as_runs(_check_values(values))
    finite = x[~np.isnan(x)]
    if ((finite != 0.0) & (finite != 1.0)).any():
        raise ValueError("oracle_sprt_n needs values of 0, 1 or NaN (a share)")
    n_pop = x.shape[1]
    steps = np.arange(1, n_pop + 1) if looks is None else np.asarray(list(looks), dtype=np.int64)
    allowed = _item_counts(steps, n_pop, "looks", looks)
    stop = _sprt_stops(x, edges, allowed, min_n)
    return stop[0] if single else stop


def _sprt_stops(
    x: np.ndarray, edges: Iterable[tuple[float, float]], allowed: np.ndarray, min_n: int
) -> np.ndarray:
    """Per run of ``x`` (runs, N), the first allowed item count below N at which the SPRT has
    rejected every edge with ``min_n`` defined values seen; N when there is none."""
    runs, n_pop = x.shape
    defined = ~np.isnan(x)
    d_total = defined.sum(axis=1).astype(np.float64)
    k_true = np.nansum(x, axis=1)
    k_null, limit = _sprt_edges(edges, d_total, k_true)
    log_lr = np.zeros_like(k_null)
    done = np.zeros_like(k_null, dtype=bool)
    seen = np.zeros(runs)
    ones = np.zeros(runs)
    stop = np.full(runs, n_pop)
    open_runs = np.ones(runs, dtype=bool)
    for i in range(n_pop):
        d = defined[:, i]
        xi = np.nan_to_num(x[:, i])
        left = np.maximum(d_total - seen, 1.0)
        step = _log_likelihood_ratio(xi, (k_true - ones) / left, (k_null - ones[:, None]) / left[:, None])
        log_lr = np.where(d[:, None], log_lr + step, log_lr)
        done |= log_lr >= limit
        seen += d
        ones += xi * d
        if allowed[i + 1] and i + 1 < n_pop:
            hit = open_runs & done.all(axis=1) & (seen >= min_n)
            stop = np.where(hit, i + 1, stop)
            open_runs &= ~hit
    return stop


def _sprt_edges(
    edges: Iterable[tuple[float, float]], d_total: np.ndarray, k_true: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per run and edge, the count of ones K_m the oracle tests against; per edge, log(1 / alpha)."""
    nulls, thresholds = [], []
    for m, a in edges:
        m, a = float(m), _check_alpha(a, "an edge's alpha")
        if not 0.0 <= m <= 1.0:
            raise ValueError(f"an edge must be a share in [0, 1], got {m!r}")
        above = m * d_total > k_true
        k_m = np.where(above, np.ceil(m * d_total - 1e-9), np.floor(m * d_total + 1e-9))
        if (k_m == k_true).any():
            raise ValueError(f"edge {m!r} is the population's own share: the oracle cannot rule it out")
        nulls.append(k_m)
        thresholds.append(math.log(1.0 / a))
    return np.stack(nulls, axis=1), np.array(thresholds)[None, :]  # (runs, edges), (1, edges)


def _log_likelihood_ratio(xi: np.ndarray, p_true: np.ndarray, p_null: np.ndarray) -> np.ndarray:
    """log P(x_i | the true share) - log P(x_i | an edge's), per run and edge; p_* are P(x_i = 1)."""
    tiny = 1e-300
    p_true = p_true[:, None]
    like_true = np.where(xi[:, None] == 1.0, p_true, 1.0 - p_true)
    like_null = np.where(xi[:, None] == 1.0, p_null, 1.0 - p_null)
    return np.log(np.maximum(like_true, tiny)) - np.log(np.maximum(like_null, tiny))
