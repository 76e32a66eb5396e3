"""Confidence intervals: Wilson score intervals for proportions and a cluster bootstrap for ratios.

The bootstrap works on *count vectors*: every BBQ-family metric is a function of a handful of
per-item cell counts, so resampling clusters (templates) means summing their count vectors with
multinomial weights. That makes 10,000 resamples of a 58k-item benchmark a matrix product rather
than 10,000 Python loops, and it resamples whole template groups as the items within a template are
not independent (they share wording and names).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy.stats import binomtest


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (Wilson 1927), via ``scipy.stats``.

    Args:
        k: successes, 0 <= k <= n.
        n: trials, >= 0.
        confidence: nominal coverage in (0, 1).
    Returns:
        (low, high) within [0, 1]; (nan, nan) when n == 0.
    Raises:
        ValueError: k or n negative, k > n, or confidence outside (0, 1).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n, got k={k}, n={n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return (math.nan, math.nan)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def cluster_bootstrap(
    cluster_counts: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` resampling whole clusters.

    Args:
        cluster_counts: array (n_clusters, n_cells) of non-negative counts, one row per cluster
            (template group, or a single item when items are independent).
        statistic: maps a (..., n_cells) array of summed counts to a (...) array of values; it must
            be vectorised over leading axes and give NaN where the metric is undefined.
        n_resamples: number of bootstrap resamples (>= 1).
        confidence: nominal coverage in (0, 1).
        seed: seed of the numpy Generator, so intervals are reproducible.
    Returns:
        (low, high) percentiles over the resamples where the statistic is defined; (nan, nan) when
        there are fewer than 2 clusters (every resample would repeat the sample: a zero-width
        interval that looks like certainty) or no defined resample.
    Raises:
        ValueError: on a non-2-D ``cluster_counts``, n_resamples < 1 or confidence outside (0, 1).
    """
    counts = np.asarray(cluster_counts, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError(f"cluster_counts must be 2-D (clusters, cells), got shape {counts.shape}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n_clusters = counts.shape[0]
    if n_clusters < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    # Each resample draws n_clusters clusters with replacement: multinomial weights per cluster.
    weights = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=n_resamples)
    values = np.asarray(statistic(weights @ counts), dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return (math.nan, math.nan)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return (float(low), float(high))
