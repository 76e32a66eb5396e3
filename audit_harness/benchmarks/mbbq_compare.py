"""MBBQ's cross-language comparison: for each language run together with English, the
difference of each bias score (the language minus English) over the same items (same
``example_id`` and template), with a paired cluster-bootstrap interval
(``bias_metrics.cross_language.paired_difference``) and whether it excludes 0.

Rows of ``overall``: ``<lang> - en`` (all base categories run in both) and
``<Category>: <lang> - en`` per base category.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from bias_metrics.bbq_family import FLAVOURS, N_CELLS, cell_index
from bias_metrics.cross_language import paired_difference
from bias_metrics.result import MetricResult

from .base import MetricSettings

if TYPE_CHECKING:
    from .mbbq import MBBQRecord

#: The scores compared across languages.
COMPARED = ("diff_bias_ambig", "diff_bias_disambig")
SOURCE = (
    "project (Neplenbroek et al. 2024 compare languages over the same items): the language's "
    "score minus English's over the items both scored; paired bootstrap over question templates"
)


def _cells(
    bench, records: Sequence[MBBQRecord], language: str
) -> dict[tuple[str, int, int], tuple[str, int]]:
    """``{(base category, example_id, template): (cluster, cell)}`` of one language's bias rows."""
    return {
        (r.category.rsplit("_", 1)[0], r.example_id, r.prompt_id): (
            f"{r.category.rsplit('_', 1)[0]}\x1f{r.template_id}",
            cell_index(bench.metric_record(r)),
        )
        for r in records
        if not r.control and r.language == language
    }


def _paired_counts(mine: Mapping, english: Mapping, keep) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Per-cluster cell counts of the shared items in both languages, how many items, and how
    many rows they are templates of (a row's 5 templates are one unit, as in the scores)."""
    shared = [k for k in mine if k in english and keep(k)]
    clusters: dict[str, int] = {}
    for k in shared:
        clusters.setdefault(mine[k][0], len(clusters))
    a = np.zeros((len(clusters), N_CELLS))
    b = np.zeros((len(clusters), N_CELLS))
    for k in shared:
        row = clusters[mine[k][0]]
        a[row, mine[k][1]] += 1
        b[row, english[k][1]] += 1
    return a, b, len(shared), len({k[:2] for k in shared})


def _difference(
    name: str, paired: tuple[np.ndarray, np.ndarray, int, int], settings: MetricSettings, flavour: str
) -> MetricResult:
    a, b, n, rows = paired
    spec = {s.name: s for s in FLAVOURS[flavour]}[name]
    if n == 0:
        return MetricResult(name, math.nan, 0, reason="no item scored in both languages", source=SOURCE)
    value, low, high = paired_difference(
        (a, b),
        spec.statistic,
        n_resamples=max(settings.n_resamples, 1),
        confidence=settings.confidence,
        seed=settings.seed,
    )
    # The bootstrap resamples clusters: with fewer than 2 clusters holding the score's items in
    # both languages it sees no variation, and a zero-width interval would look like certainty.
    cells = list(spec.n_cells)
    support = int(((a[:, cells].sum(axis=1) > 0) & (b[:, cells].sum(axis=1) > 0)).sum())
    if settings.n_resamples == 0 or support < 2:
        low = high = math.nan
    excludes = not (math.isnan(low) or math.isnan(high)) and (low > 0 or high < 0)
    return MetricResult(
        name,
        value,
        rows,
        low,
        high,
        "paired-bootstrap-cluster",
        settings.confidence,
        {"items": n, "interval_excludes_0": int(excludes)},
        None if not math.isnan(value) else f"undefined in one language: {spec.undefined}",
        SOURCE,
        clusters=support,
        n_variants=n,
    )


def cross_language(
    bench, records_by_category: Mapping[str, Sequence[MBBQRecord]], settings: MetricSettings
) -> dict[str, dict[str, MetricResult]]:
    """``{label: {score: difference}}`` for every language run together with English (see the
    module docstring); empty when English was not run."""
    records = [r for rs in records_by_category.values() for r in rs]
    languages = sorted({r.language for r in records})
    if "en" not in languages:
        return {}
    english = _cells(bench, records, "en")
    bases = sorted({k[0] for k in english})
    out: dict[str, dict[str, MetricResult]] = {}
    for lang in (x for x in ("nl", "es", "tr") if x in languages):
        mine = _cells(bench, records, lang)
        scopes: list[tuple[str, Callable[[tuple[str, int, int]], bool]]] = [(f"{lang} - en", lambda k: True)]
        scopes += [(f"{base}: {lang} - en", lambda k, b=base: k[0] == b) for base in bases]
        for label, keep in scopes:
            paired = _paired_counts(mine, english, keep)
            if paired[2] == 0 and label != f"{lang} - en":
                continue
            out[label] = {
                s + bench.suffix: _named(_difference(s, paired, settings, bench.flavour), s + bench.suffix)
                for s in COMPARED
            }
    return out


def _named(m: MetricResult, name: str) -> MetricResult:
    import dataclasses

    return dataclasses.replace(m, name=name)
