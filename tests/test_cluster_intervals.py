"""Issue 46 item 3: a KoBBQ test row's 15 variants and an MBBQ row's 5 templates are one unit.

An unbiased (or band-edge) model that answers each row the same way under all its variants is
simulated on the real rows of every KoBBQ category and MBBQ English category, and each bias gate
(``|x| <= 0.05``, three-way: FAIL when the whole interval is outside the band) is decided on the
suite's own metric and interval. Counting variants as independent items FAILs such a model more
often than the interval's nominal one-sided 2.5 %; counting each row once brings it back.

``python tests/test_cluster_intervals.py [sims]`` prints the per-gate table quoted in
docs/gates.md ("Intervals").
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bias_metrics import bbq_family as bf

BAND = 0.05
GATES = ("diff_bias_ambig", "diff_bias_disambig")
#: The honest model of issue 46: ambiguous "unknown" 60 %, else a fair coin between the two
#: people; disambiguated right 80 % whatever the alignment, a wrong answer naming the other person.
UNKNOWN, ACCURACY = 0.6, 0.8


@dataclass(frozen=True)
class Layout:
    """The real items of one category: each item's row, template cluster and prompt group, and
    each row's block (0 ambiguous, 1 bias-aligned, 2 non-aligned disambiguated)."""

    item_row: np.ndarray
    item_cluster: np.ndarray
    item_group: np.ndarray
    row_block: np.ndarray
    n_groups: int


def _layout(items, row_of, group_of) -> Layout:
    rows: dict = {}
    clusters: dict = {}
    groups: dict = {}
    item_row, item_cluster, item_group, blocks = [], [], [], {}
    for it in items:
        r = rows.setdefault(row_of(it), len(rows))
        item_row.append(r)
        item_cluster.append(clusters.setdefault(it.template_id, len(clusters)))
        item_group.append(groups.setdefault(group_of(it), len(groups)))
        blocks[r] = 0 if it.context_condition == "ambig" else (1 if it.gold == it.biased_option else 2)
    return Layout(
        *(np.asarray(x, dtype=np.int64) for x in (item_row, item_cluster, item_group)),
        np.asarray([blocks[r] for r in range(len(rows))], dtype=np.int64),
        len(groups),
    )


@functools.lru_cache(maxsize=None)
def kobbq_layout(data_dir: str, category: str) -> Layout:
    from audit_harness.benchmarks.kobbq import KoBBQ

    items = KoBBQ().load_category(Path(data_dir), category).items
    return _layout(items, lambda it: it.sample_id, lambda it: it.prompt_id)


@functools.lru_cache(maxsize=None)
def mbbq_layout(data_dir: str, category: str) -> Layout:
    from audit_harness.benchmarks.mbbq import MBBQ

    items = [it for it in MBBQ().load_category(Path(data_dir), category).items if not it.control]
    return _layout(items, lambda it: it.example_id, lambda it: 0)


def _row_cells(layout: Layout, bias: float, rng) -> np.ndarray:
    """One answer cell per row: the row's answer under every variant (consistent answers)."""
    p_amb = [(1 - UNKNOWN) / 2 + bias / 2, (1 - UNKNOWN) / 2 - bias / 2, UNKNOWN]
    u = rng.random(layout.row_block.size)
    amb = np.where(u < p_amb[0], bf.A_B, np.where(u < p_amb[0] + p_amb[1], bf.A_C, bf.A_U))
    aligned = np.where(u < ACCURACY + bias / 2, bf.DA_B, bf.DA_C)
    nonaligned = np.where(u < ACCURACY - bias / 2, bf.DN_C, bf.DN_B)
    return np.choose(layout.row_block, [amb, aligned, nonaligned])


def _counts(layout: Layout, cells: np.ndarray, index: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((layout.n_groups, size, bf.N_CELLS), dtype=np.int64)
    np.add.at(out, (layout.item_group, index, cells), 1)
    return out


def fail_rates(layout: Layout, model: tuple[float, bool], sims: int, resamples: int, seed: int) -> dict:
    """{gate: share of ``sims`` seeded runs in which the three-way gate |x| <= BAND FAILs}, the
    metric being the one the benchmark gates (KoBBQ: the mean over prompt templates; MBBQ: all
    templates pooled). ``model`` is (bias, rows): rows False reproduces counting every variant
    as an item."""
    bias, rows = model
    rng = np.random.default_rng(seed)
    fails = dict.fromkeys(GATES, 0)
    n_clusters, n_rows = layout.item_cluster.max() + 1, layout.row_block.size
    for s in range(sims):
        cells = _row_cells(layout, bias, rng)[layout.item_row]
        clusters = _counts(layout, cells, layout.item_cluster, n_clusters)
        row_counts = _counts(layout, cells, layout.item_row, n_rows) if rows else None
        settings = {"n_resamples": resamples, "seed": s}
        if layout.n_groups > 1:
            m = bf.metrics_mean_over_groups("kobbq", clusters, group_rows=row_counts, **settings)
        else:
            rc = None if row_counts is None else row_counts[0]
            c = clusters[0]
            m = bf.metrics_from_counts("kobbq", c.sum(axis=0), c, row_counts=rc, only=GATES, **settings)
        for g in GATES:
            fails[g] += m[g].ci_low > BAND or m[g].ci_high < -BAND
    return {g: k / sims for g, k in fails.items()}


KOBBQ = ("age", "sexual_orientation", "political_orientation")
MBBQ_EN = ("Sexual_orientation_en", "Gender_identity_en", "Physical_appearance_en")


def _pooled_rate(layouts, model, **kw) -> float:
    rates = [r for lay in layouts for r in fail_rates(lay, model, **kw).values()]
    return float(np.mean(rates))


@pytest.fixture(scope="module")
def layouts(data_dir):
    return {
        "kobbq": [kobbq_layout(str(data_dir), c) for c in KOBBQ],
        "mbbq": [mbbq_layout(str(data_dir), c) for c in MBBQ_EN],
    }


def test_n_counts_rows_and_the_variants_are_reported_beside(layouts):
    lay = layouts["kobbq"][0]  # KoBBQ age: 84 ambiguous test rows, 15 variants each
    cells = _row_cells(lay, 0.0, np.random.default_rng(0))[lay.item_row]
    clusters = _counts(lay, cells, lay.item_cluster, lay.item_cluster.max() + 1)
    rows = _counts(lay, cells, lay.item_row, lay.row_block.size)
    before = bf.metrics_mean_over_groups("kobbq", clusters, n_resamples=200)
    after = bf.metrics_mean_over_groups("kobbq", clusters, group_rows=rows, n_resamples=200)
    assert (before["diff_bias_ambig"].n, after["diff_bias_ambig"].n) == (1260, 84)
    assert after["diff_bias_ambig"].n_variants == 1260 and before["diff_bias_ambig"].n_variants is None
    for name in before:  # point values never move
        assert after[name].value == before[name].value
        assert after[name].ci_high - after[name].ci_low >= before[name].ci_high - before[name].ci_low


@pytest.mark.parametrize("bench", ["kobbq", "mbbq"])
def test_row_consistent_answers_fail_a_band_edge_model_at_the_nominal_rate(layouts, bench):
    # A model exactly on the band's edge (bias 0.05 in both contexts), answering each row alike
    # under all its variants: a 95 % three-way gate FAILs it when the interval misses the truth
    # from above, nominally 2.5 % of runs. 100-150 runs x gates x categories: s.e. about 0.4 points.
    kw = {"sims": 100 if bench == "kobbq" else 150, "resamples": 400, "seed": 46}
    after = _pooled_rate(layouts[bench], (BAND, True), **kw)
    before = _pooled_rate(layouts[bench], (BAND, False), **kw)
    print(f"\n{bench}: band-edge FAIL rate, variants as items {before:.3f}, rows as units {after:.3f}")
    assert after <= 0.035, after
    assert before > after  # the test sees the problem it guards against


def test_an_unbiased_model_answering_rows_alike_is_not_failed_beyond_nominal(layouts):
    kw = {"sims": 100, "resamples": 400, "seed": 7}
    for lay in layouts["kobbq"] + layouts["mbbq"]:
        rates = fail_rates(lay, (0.0, True), **kw)
        assert max(rates.values()) <= 0.035, rates


def _table(data_dir: str, sims: int) -> None:  # pragma: no cover - the docs' measurement
    from audit_harness.benchmarks.kobbq import CATEGORIES
    from audit_harness.benchmarks.mbbq import BASE_CATEGORIES

    cats = [("kobbq", c, kobbq_layout(data_dir, c)) for c in CATEGORIES]
    cats += [("mbbq", f"{b}_en", mbbq_layout(data_dir, f"{b}_en")) for b in BASE_CATEGORIES]
    print("| benchmark | category | gate | before: unbiased / edge | after: unbiased / edge |")
    print("|---|---|---|---:|---:|")
    for bench, cat, lay in cats:
        r = {
            (rows, bias): fail_rates(lay, (bias, rows), sims=sims, resamples=1000, seed=46)
            for rows in (False, True)
            for bias in (0.0, BAND)
        }
        for g in GATES:
            cell = [
                f"{100 * r[rows, 0.0][g]:.1f} % / {100 * r[rows, BAND][g]:.1f} %" for rows in (False, True)
            ]
            print(f"| {bench} | {cat} | {g} | {cell[0]} | {cell[1]} |", flush=True)


if __name__ == "__main__":  # pragma: no cover
    import os

    _table(os.environ["AUDIT_DATA_DIR"], int(sys.argv[1]) if len(sys.argv) > 1 else 400)
