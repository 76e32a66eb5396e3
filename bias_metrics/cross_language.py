"""The difference of a metric between two languages over the same items (MBBQ, Neplenbroek et
al. 2024: whether a model's bias in one language differs from its bias in English).

The items are parallel: each cluster (a BBQ question template) holds the same items asked in both
languages, so one bootstrap resamples clusters jointly in both languages (a paired bootstrap), which
keeps the item-level correlation between the two languages out of the interval's width.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .intervals import check_confidence


def paired_difference(
    counts: tuple[np.ndarray, np.ndarray],
    statistic: Callable[[np.ndarray], np.ndarray],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``statistic(a) - statistic(b)`` over paired clusters, with a paired bootstrap interval.

    Parameters
    ----------
    counts : (numpy.ndarray, numpy.ndarray)
        Arrays (n_clusters, n_cells) of counts in language a and in language b; row ``i`` of both
        is the same cluster (the same items).
    statistic : callable
        Maps (..., n_cells) summed counts to (...) values, NaN where undefined (a
        ``bias_metrics.bbq_family`` statistic such as ``diff_bias_ambig``).
    n_resamples, confidence, seed
        Resamples (>= 1), nominal coverage in (0, 1), and the generator's seed.

    Returns
    -------
    difference, low, high : float
        The difference of the statistic over all clusters (NaN when either side is undefined) and
        its percentile interval over resamples drawing the same clusters in both languages; (nan,
        nan) with fewer than 2 clusters or when over half the resamples are undefined.
        ValueError when the arrays differ in shape or are not 2-D.

    Examples
    --------
    Two templates of 4 ambiguous items, cells (biased, counter-biased, unknown):

    >>> import numpy as np
    >>> from bias_metrics.cross_language import paired_difference
    >>> bias = lambda s: (s[..., 0] - s[..., 1]) / s.sum(axis=-1)
    >>> a = np.array([[3, 0, 1], [2, 1, 1]])
    >>> b = np.array([[1, 1, 2], [1, 1, 2]])
    >>> d, low, high = paired_difference((a, b), bias, seed=0)
    >>> round(d, 3), low <= d <= high
    (0.5, True)
    """
    a, b = (np.asarray(c, dtype=np.float64) for c in counts)
    check_confidence(confidence)
    if a.shape != b.shape or a.ndim != 2:
        raise ValueError(f"paired counts must be 2-D arrays of one shape, got {a.shape} and {b.shape}")
    width = a.shape[1]

    def difference(summed: np.ndarray) -> np.ndarray:
        return np.asarray(statistic(summed[..., :width]) - statistic(summed[..., width:]))

    with np.errstate(invalid="ignore", divide="ignore"):
        value = float(difference(np.concatenate([a.sum(axis=0), b.sum(axis=0)])))
        joint = np.concatenate([a, b], axis=1)
        if len(joint) < 2:
            return value, math.nan, math.nan
        rng = np.random.default_rng(seed)
        weights = rng.multinomial(len(joint), np.full(len(joint), 1.0 / len(joint)), size=n_resamples)
        draws = difference(weights @ joint)
    return (value, *_interval(draws, confidence))


def _interval(draws: np.ndarray, confidence: float) -> tuple[float, float]:
    """Percentiles of the defined draws; (nan, nan) when most resamples leave a score undefined
    (few clusters hold the items it needs): the defined ones are then a biased few, and their
    spread a falsely narrow interval."""
    kept = draws[~np.isnan(draws)]
    if kept.size < draws.size / 2:
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(kept, [alpha, 1.0 - alpha])
    return float(low), float(high)
