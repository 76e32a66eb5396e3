"""Confidence intervals: Wilson score intervals for proportions, and for ratios of cell counts a
cluster bootstrap, a Bayesian bootstrap and a Dirichlet count posterior.

The resampling works on *count vectors*: every BBQ-family metric is a function of a handful of
per-item cell counts, so resampling clusters (templates) means summing their count vectors with
random weights. That makes 10,000 resamples of a 58k-item benchmark a matrix product rather than
10,000 Python loops, and it resamples whole template groups as the items within a template are
not independent (they share wording and names).

Resampling clusters alone degenerates on small or uniform samples: with two templates that
answered alike every resample repeats the sample, a zero-width interval that looks like certainty.
The BBQ-family metrics therefore report ``cell_ratio_interval``, the hull of a Bayesian bootstrap
over templates and a Jeffreys-prior Dirichlet posterior on the answer counts: never zero-width at
finite n, near nominal coverage from 2 templates on (measured in ``tests/test_interval_coverage.py``).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence, TypedDict

import numpy as np
from scipy.stats import binomtest, norm

from .result import MetricResult, undefined

#: A statistic of count arrays: (..., n_cells) counts to (...) values, NaN where undefined.
Statistic = Callable[[np.ndarray], np.ndarray]


class Resampling(TypedDict, total=False):
    """The nominal coverage and the number of draws of a resampled interval."""

    confidence: float
    n_resamples: int


class Draws(Resampling, total=False):
    """The settings of a resampled interval, as keyword arguments of ``cell_ratio_interval``."""

    seed: int


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (Wilson 1927), via ``scipy.stats``.

    Parameters
    ----------
    k : int
        Successes, 0 <= k <= n.
    n : int
        Trials, >= 0.
    confidence : float, default=0.95
        Nominal coverage in (0, 1).

    Returns
    -------
    low, high : float
        Within [0, 1]; (nan, nan) when n == 0.

    Raises
    ------
    ValueError
        k or n negative, k > n, or confidence outside (0, 1).

    Examples
    --------
    >>> from bias_metrics.intervals import wilson_interval
    >>> [round(x, 4) for x in wilson_interval(5, 10)]
    [0.2366, 0.7634]
    >>> [round(x, 4) for x in wilson_interval(0, 10)]
    [0.0, 0.2775]
    >>> wilson_interval(0, 0)
    (nan, nan)
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n, got k={k}, n={n}")
    check_confidence(confidence)
    if n == 0:
        return (math.nan, math.nan)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def wilson_share_interval(share: float, n: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``share`` observed over an effective sample of ``n``
    independent units, which may be fractional (Wilson 1927, the closed form).

    For items asked as several variants of fewer rows (KoBBQ's 15 per test row): ``n`` counts
    the rows, each row's variants sharing one unit, while ``share`` stays the share of items.
    At integer ``k / n`` it agrees with ``wilson_interval(k, n)``.

    Parameters
    ----------
    share : float
        The observed proportion, in [0, 1].
    n : float
        Effective number of independent units, >= 0.
    confidence : float, default=0.95
        Nominal coverage in (0, 1).

    Returns
    -------
    low, high : float
        Within [0, 1]; (nan, nan) when n == 0.

    Raises
    ------
    ValueError
        ``share`` outside [0, 1], negative ``n``, or confidence outside (0, 1).

    Examples
    --------
    >>> from bias_metrics.intervals import wilson_interval, wilson_share_interval
    >>> [round(x, 4) for x in wilson_share_interval(0.5, 10)] == [round(x, 4) for x in wilson_interval(5, 10)]
    True
    >>> [round(x, 4) for x in wilson_share_interval(0.5, 2.5)]
    [0.1108, 0.8892]
    """
    if not 0.0 <= share <= 1.0 or n < 0:
        raise ValueError(f"wilson_share_interval needs 0 <= share <= 1 and n >= 0, got {share}, {n}")
    check_confidence(confidence)
    if n == 0:
        return (math.nan, math.nan)
    z = float(norm.ppf(0.5 + confidence / 2.0))
    denom = 1.0 + z * z / n
    centre = (share + z * z / (2.0 * n)) / denom
    half = z * math.sqrt(share * (1.0 - share) / n + z * z / (4.0 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def check_confidence(confidence: float) -> None:
    """The one check of an interval's nominal coverage, shared by every metric of the package.

    Raises
    ------
    ValueError
        ``confidence`` outside (0, 1).

    Examples
    --------
    >>> from bias_metrics.intervals import check_confidence
    >>> check_confidence(1.0)
    Traceback (most recent call last):
    ...
    ValueError: confidence must be in (0, 1), got 1.0
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def wilson_result(
    name: str,
    k: int,
    n: int,
    counts: Mapping[str, int],
    confidence: float,
    source: str,
    *,
    scale: float = 1.0,
    empty: str = "no items",
) -> MetricResult:
    """The proportion k / n as a ``MetricResult`` with its Wilson interval, both times ``scale``
    (100 for a score in percent); ``counts`` and ``source`` are recorded as given. With n == 0 it
    is undefined (NaN) for the reason ``empty``.

    Examples
    --------
    >>> from bias_metrics.intervals import wilson_result
    >>> r = wilson_result("share", 1, 4, {"k": 1, "n": 4}, 0.95, "toy", scale=100.0)
    >>> r.value, r.ci_method, round(r.ci_low, 2), round(r.ci_high, 2)
    (25.0, 'wilson', 4.56, 69.94)
    >>> wilson_result("share", 0, 0, {}, 0.95, "toy").reason
    'no items'
    """
    if n == 0:
        return undefined(name, empty, counts=counts, source=source)
    low, high = wilson_interval(k, n, confidence)
    return MetricResult(
        name=name,
        value=scale * k / n,
        n=n,
        ci_low=scale * low,
        ci_high=scale * high,
        ci_method="wilson",
        confidence=confidence,
        counts=dict(counts),
        source=source,
    )


def cluster_bootstrap(
    cluster_counts: np.ndarray,
    statistic: Statistic,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` resampling whole clusters.

    Parameters
    ----------
    cluster_counts : numpy.ndarray
        Array (n_clusters, n_cells) of non-negative counts, one row per cluster (template group, or
        a single item when items are independent).
    statistic : callable
        Maps a (..., n_cells) array of summed counts to a (...) array of values; it must be
        vectorised over leading axes and give NaN where the metric is undefined.
    n_resamples : int, default=1000
        Number of bootstrap resamples (>= 1).
    confidence : float, default=0.95
        Nominal coverage in (0, 1).
    seed : int, default=0
        Seed of the numpy Generator, so intervals are reproducible.

    Returns
    -------
    low, high : float
        Percentiles over the resamples where the statistic is defined; (nan, nan) when there are
        fewer than 2 clusters (every resample would repeat the sample: a zero-width interval that
        looks like certainty) or no defined resample.

    Raises
    ------
    ValueError
        A non-2-D ``cluster_counts``, n_resamples < 1 or confidence outside (0, 1).

    Examples
    --------
    Four templates of 4 items with 3, 1, 4 and 2 successes (pooled proportion 10/16):

    >>> import numpy as np
    >>> from bias_metrics.intervals import cluster_bootstrap
    >>> cc = np.array([[3, 4], [1, 4], [4, 4], [2, 4]])
    >>> low, high = cluster_bootstrap(cc, lambda s: s[..., 0] / s[..., 1], seed=0)
    >>> low <= 10 / 16 <= high
    True
    >>> cluster_bootstrap(cc[:1], lambda s: s[..., 0] / s[..., 1])
    (nan, nan)
    """
    counts = _as_clusters(cluster_counts)
    _check(n_resamples, confidence)
    n_clusters = counts.shape[0]
    if n_clusters < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    # Each resample draws n_clusters clusters with replacement: multinomial weights per cluster.
    weights = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples)
    return _quantiles(statistic(weights @ counts), confidence)


def _quantiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(v, [alpha, 1.0 - alpha])
    return (float(low), float(high))


def _check(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    check_confidence(confidence)


def _as_clusters(cluster_counts: np.ndarray) -> np.ndarray:
    counts = np.asarray(cluster_counts, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError(f"cluster_counts must be 2-D (clusters, cells), got shape {counts.shape}")
    return counts


def bayesian_bootstrap(
    cluster_counts: np.ndarray,
    statistic: Statistic,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Bayesian bootstrap interval over clusters (Rubin 1981) of a scale-free ``statistic``.

    Each draw weights the clusters with Dirichlet(1, ..., 1) weights, the smooth counterpart of
    resampling whole templates; the interval is equal-tailed.

    Parameters
    ----------
    cluster_counts : numpy.ndarray
        Array (n_clusters, n_cells) of non-negative counts.
    statistic : callable
        Maps (..., n_cells) weighted sums to (...) values (a ratio of cell sums, so that the
        weights' scale does not matter), NaN where undefined.
    n_resamples, confidence, seed
        As ``cluster_bootstrap``.

    Returns
    -------
    low, high : float
        (nan, nan) with fewer than 2 clusters (the draws would all repeat the sample) or no defined
        draw. Zero-width when every cluster has the same proportions: combine it with
        ``dirichlet_posterior`` (``cell_ratio_interval``).

    Raises
    ------
    ValueError
        A non-2-D ``cluster_counts``, n_resamples < 1 or confidence outside (0, 1).

    Examples
    --------
    >>> import numpy as np
    >>> from bias_metrics.intervals import bayesian_bootstrap
    >>> share = lambda s: s[..., 0] / s[..., 1]
    >>> low, high = bayesian_bootstrap(np.array([[3, 4], [1, 4], [4, 4], [2, 4]]), share, seed=0)
    >>> low <= 10 / 16 <= high
    True

    Two templates that answered alike give a zero-width interval:

    >>> low, high = bayesian_bootstrap(np.array([[3, 4], [3, 4]]), share)
    >>> round(high - low, 6)
    0.0
    """
    counts = _as_clusters(cluster_counts)
    _check(n_resamples, confidence)
    if counts.shape[0] < 2:
        return (math.nan, math.nan)
    weights = np.random.default_rng(seed).gamma(np.ones((n_resamples, counts.shape[0])))
    return _quantiles(statistic(weights @ counts), confidence)


def dirichlet_posterior(
    counts: np.ndarray,
    statistic: Statistic,
    blocks: Sequence[Sequence[int]],
    prior: np.ndarray,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    effective: np.ndarray | None = None,
) -> tuple[float, float]:
    """Posterior interval of ``statistic`` under a Dirichlet model of the counts in each block.

    The items of each block of cells (cells sharing one denominator, e.g. ambiguous items: biased /
    counter-biased / unknown / invalid answers) are multinomial with a Dirichlet(counts + prior)
    posterior on the block's cell probabilities; each draw is ``n_block * p`` per block and the
    interval is equal-tailed. With a Jeffreys prior (0.5 per possible cell) an unseen answer stays
    possible, so the interval is never zero-width at finite n. Blocks without items get no prior
    mass (no items of a kind the sample lacks).

    Parameters
    ----------
    counts : numpy.ndarray
        Array (n_cells,) of non-negative counts.
    statistic : callable
        Maps (..., n_cells) counts to (...) values, NaN where undefined.
    blocks : sequence of sequence of int
        Disjoint tuples of cell indices; cells outside every block keep their counts.
    prior : numpy.ndarray
        Array (n_cells,) of pseudo-counts (0 for cells that cannot occur).
    n_resamples, confidence, seed
        As ``cluster_bootstrap``.
    effective : numpy.ndarray, optional
        (n_cells,) independent units behind each cell (a row's variants share one unit): the
        posterior is Dirichlet(effective + prior) scaled to the block's count. Default ``counts``.

    Returns
    -------
    low, high : float
        (nan, nan) when no draw is defined. ValueError on ``counts``/``prior``/``effective`` of
        the wrong shape or negative, overlapping blocks, n_resamples < 1 or confidence outside (0, 1).

    Examples
    --------
    3 right and 1 wrong answer in one block, Jeffreys prior:

    >>> import numpy as np
    >>> from bias_metrics.intervals import dirichlet_posterior
    >>> share = lambda s: s[..., 0] / (s[..., 0] + s[..., 1])
    >>> low, high = dirichlet_posterior(np.array([3, 1]), share, [(0, 1)], np.array([0.5, 0.5]), seed=0)
    >>> low < 0.75 < high
    True
    """
    counts, prior = _check_posterior(counts, blocks, prior)
    _check(n_resamples, confidence)
    units = counts if effective is None else _check_effective(effective, counts)
    draws = _posterior_draws((counts, units), blocks, prior, n_resamples, np.random.default_rng(seed))
    return _quantiles(statistic(draws), confidence)


def _check_effective(effective: np.ndarray, counts: np.ndarray) -> np.ndarray:
    units = np.asarray(effective, dtype=np.float64)
    if units.shape != counts.shape or (units < 0).any() or ((units > 0) != (counts > 0)).any():
        raise ValueError(
            f"effective must be {counts.size} non-negative units, positive exactly where counts are, "
            f"got {units!r}"
        )
    return units


def _posterior_draws(
    cells: tuple[np.ndarray, np.ndarray],
    blocks: Sequence[Sequence[int]],
    prior: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """(n_resamples, n_cells) draws: per block with items, its total of ``counts`` split by
    Dirichlet(units + prior); ``cells`` is (counts, units), units the independent rows behind them."""
    counts, units = cells
    draws: np.ndarray = np.broadcast_to(counts, (n_resamples, counts.size)).copy()
    for block in blocks:
        b = list(block)
        n_b = counts[b].sum()
        if n_b == 0:
            continue
        shape = units[b] + prior[b]
        g = rng.gamma(np.broadcast_to(shape, (n_resamples, len(b))))
        draws[:, b] = n_b * g / g.sum(axis=1, keepdims=True)
    return draws


def _check_posterior(
    counts: np.ndarray, blocks: Sequence[Sequence[int]], prior: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    counts = np.asarray(counts, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    if counts.ndim != 1 or (counts < 0).any():
        raise ValueError(f"counts must be a 1-D array of non-negative counts, got {counts!r}")
    if prior.shape != counts.shape or (prior < 0).any():
        raise ValueError(f"prior must be {counts.size} non-negative pseudo-counts, got {prior!r}")
    flat = [c for b in blocks for c in b]
    if len(flat) != len(set(flat)):
        raise ValueError("blocks must be disjoint")
    return counts, prior


def cell_ratio_interval(
    cluster_counts: np.ndarray,
    statistic: Statistic,
    blocks: Sequence[Sequence[int]],
    prior: np.ndarray,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    effective: np.ndarray | None = None,
) -> tuple[float, float]:
    """The interval the BBQ-family ratio metrics report.

    It is the hull of ``bayesian_bootstrap`` over clusters (templates: items of one template are not
    independent) and ``dirichlet_posterior`` on the pooled counts (sampling noise of the answers
    themselves).

    Why both: with many templates the cluster part dominates and carries the between-template
    spread; with few templates, or templates that all answered alike, it under-covers or is
    zero-width, and the count posterior keeps the interval honest. Measured coverage on simulated
    data with a known bias: ``tests/test_interval_coverage.py`` (README "Intervals").

    Parameters
    ----------
    cluster_counts, statistic
        As ``bayesian_bootstrap``.
    blocks, prior
        As ``dirichlet_posterior``.
    n_resamples, confidence, seed
        As ``bayesian_bootstrap``; the posterior part uses ``seed + 1``.
    effective : numpy.ndarray, optional
        The posterior part's units (``dirichlet_posterior``): a row's variants count once.

    Returns
    -------
    low, high : float
        (nan, nan) when neither part is defined. ValueError as ``bayesian_bootstrap`` and
        ``dirichlet_posterior``.

    Examples
    --------
    Two templates that answered alike (3 right, 1 wrong each): the cluster part alone is
    zero-width, the hull is not.

    >>> import numpy as np
    >>> from bias_metrics.intervals import cell_ratio_interval
    >>> share = lambda s: s[..., 0] / (s[..., 0] + s[..., 1])
    >>> low, high = cell_ratio_interval(np.array([[3, 1], [3, 1]]), share, [(0, 1)], np.array([0.5, 0.5]))
    >>> low < 0.75 < high, high - low > 0.3
    (True, True)
    """
    counts = _as_clusters(cluster_counts)
    draws: Resampling = {"n_resamples": n_resamples, "confidence": confidence}
    parts = [
        bayesian_bootstrap(counts, statistic, **draws, seed=seed),
        dirichlet_posterior(
            counts.sum(axis=0), statistic, blocks, prior, **draws, seed=seed + 1, effective=effective
        ),
    ]
    return _hull(parts)


def _hull(intervals: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The smallest interval holding every defined one; (nan, nan) when none is."""
    lows = [lo for lo, _ in intervals if not math.isnan(lo)]
    highs = [hi for _, hi in intervals if not math.isnan(hi)]
    if not lows:
        return (math.nan, math.nan)
    return (min(lows), max(highs))
