"""Tests of bias_metrics.bbq_family against docs/metrics.md toys B1-B6 (§3.1-3.2), per flavour, plus
the four-cell table, property tests (hypothesis) and the BBQ "(names)" split."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bias_metrics import bbq_family as bf
from bias_metrics.bbq_family import (
    CELL_NAMES,
    FLAVOURS,
    bbq_paper_category,
    cell_counts,
    cell_index,
    compute,
    compute_by,
    metrics_from_counts,
    size_weighted_mean,
)
from bias_metrics.intervals import cluster_bootstrap, wilson_interval
from bias_metrics.records import AnswerClass, BBQFamilyRecord, answer_class, biased_option
from helpers import FROM_COUNTS

B, C, U, X = (AnswerClass.BIASED, AnswerClass.COUNTER_BIASED, AnswerClass.UNKNOWN, AnswerClass.INVALID)


def cls(polarity: str, letter: str) -> AnswerClass:
    """docs/metrics.md §3 letters -> answer class: T = stereotyped group, N = other group, U, X."""
    if letter == "U":
        return U
    if letter == "X":
        return X
    target_is_biased = polarity == "neg"
    return B if (letter == "T") == target_is_biased else C


def toy(rows, category="cat"):
    """Records from docs/metrics.md rows (context, polarity, gold letter, pred letter)."""
    return [
        BBQFamilyRecord(
            f"{category}-{i}",
            category,
            "ambig" if ctx == "amb" else "disambig",
            pol,
            cls(pol, gold),
            cls(pol, pred),
            template_id=str(i),
        )
        for i, (ctx, pol, gold, pred) in enumerate(rows)
    ]


# docs/metrics.md §3.1 toy B1 (items 1-20).
B1_ROWS = [
    ("amb", "neg", "U", "T"),
    ("amb", "neg", "U", "T"),
    ("amb", "neg", "U", "N"),
    ("amb", "neg", "U", "U"),
    ("amb", "neg", "U", "U"),
    ("amb", "nonneg", "U", "N"),
    ("amb", "nonneg", "U", "N"),
    ("amb", "nonneg", "U", "T"),
    ("amb", "nonneg", "U", "U"),
    ("amb", "nonneg", "U", "U"),
    ("dis", "neg", "T", "T"),
    ("dis", "neg", "T", "T"),
    ("dis", "neg", "T", "U"),
    ("dis", "nonneg", "N", "N"),
    ("dis", "nonneg", "N", "N"),
    ("dis", "neg", "N", "N"),
    ("dis", "neg", "N", "T"),
    ("dis", "nonneg", "T", "T"),
    ("dis", "nonneg", "T", "U"),
    ("dis", "nonneg", "T", "N"),
]
# B2: B1 with every prediction := U.
B2_ROWS = [(c, p, g, "U") for c, p, g, _ in B1_ROWS]
# B3: no non-aligned disambiguated item.
B3_ROWS = [
    ("amb", "neg", "U", "T"),
    ("amb", "nonneg", "U", "U"),
    ("dis", "neg", "T", "T"),
    ("dis", "nonneg", "N", "N"),
    ("dis", "neg", "T", "U"),
]
# B4: every non-unknown answer is counter-biased.
B4_ROWS = [
    ("amb", "neg", "U", "N"),
    ("amb", "nonneg", "U", "T"),
    ("dis", "neg", "T", "N"),
    ("dis", "nonneg", "N", "T"),
    ("dis", "neg", "N", "N"),
    ("dis", "nonneg", "T", "T"),
]
# B5: B1 plus two ambiguous neg items with an invalid output (22 items).
B5_ROWS = B1_ROWS + [("amb", "neg", "U", "X"), ("amb", "neg", "U", "X")]

NAN = math.nan
TOYS = {"B1": B1_ROWS, "B2": B2_ROWS, "B3": B3_ROWS, "B4": B4_ROWS, "B5": B5_ROWS}
# Expected values of the tables (BBQ R row as fractions, not x100). NaN = undefined.
EXPECTED = {
    ("B1", "bbq"): dict(
        diff_bias_ambig=0.2,
        acc_ambig=0.4,
        acc_disambig=0.6,
        bias_score_ambig=0.2,
        bias_score_disambig=0.5,
        invalid_rate=0.0,
    ),
    ("B1", "kobbq"): dict(
        acc_ambig=0.4, acc_disambig=0.6, diff_bias_ambig=0.2, diff_bias_disambig=0.4, out_of_choice_rate=0.0
    ),
    ("B1", "esbbq"): dict(
        acc_ambig=0.4,
        acc_disambig=0.6,
        bias_score_ambig=0.2,
        bias_score_disambig=0.4,
        bias_score_ambig_upper_bound=0.6,
        bias_score_disambig_upper_bound=0.8,
        invalid_rate=0.0,
    ),
    ("B2", "bbq"): dict(
        diff_bias_ambig=0.0,
        acc_ambig=1.0,
        acc_disambig=0.0,
        bias_score_ambig=NAN,
        bias_score_disambig=NAN,
        invalid_rate=0.0,
    ),
    ("B2", "kobbq"): dict(
        acc_ambig=1.0, acc_disambig=0.0, diff_bias_ambig=0.0, diff_bias_disambig=0.0, out_of_choice_rate=0.0
    ),
    ("B2", "esbbq"): dict(
        acc_ambig=1.0,
        acc_disambig=0.0,
        bias_score_ambig=0.0,
        bias_score_disambig=0.0,
        bias_score_ambig_upper_bound=0.0,
        bias_score_disambig_upper_bound=0.0,
        invalid_rate=0.0,
    ),
    ("B3", "bbq"): dict(
        diff_bias_ambig=0.5,
        acc_ambig=0.5,
        acc_disambig=2 / 3,
        bias_score_ambig=0.5,
        bias_score_disambig=1.0,
        invalid_rate=0.0,
    ),
    ("B3", "kobbq"): dict(
        acc_ambig=0.5, acc_disambig=2 / 3, diff_bias_ambig=0.5, diff_bias_disambig=NAN, out_of_choice_rate=0.0
    ),
    ("B3", "esbbq"): dict(
        acc_ambig=0.5,
        acc_disambig=2 / 3,
        bias_score_ambig=0.5,
        bias_score_disambig=NAN,
        bias_score_ambig_upper_bound=0.5,
        bias_score_disambig_upper_bound=2 / 3,
        invalid_rate=0.0,
    ),
    ("B4", "bbq"): dict(
        diff_bias_ambig=-1.0,
        acc_ambig=0.0,
        acc_disambig=0.5,
        bias_score_ambig=-1.0,
        bias_score_disambig=-1.0,
        invalid_rate=0.0,
    ),
    ("B4", "kobbq"): dict(
        acc_ambig=0.0, acc_disambig=0.5, diff_bias_ambig=-1.0, diff_bias_disambig=-1.0, out_of_choice_rate=0.0
    ),
    ("B4", "esbbq"): dict(
        acc_ambig=0.0,
        acc_disambig=0.5,
        bias_score_ambig=-1.0,
        bias_score_disambig=-1.0,
        bias_score_ambig_upper_bound=1.0,
        bias_score_disambig_upper_bound=1.0,
        invalid_rate=0.0,
    ),
    # B5: invalid rows dropped from every other metric (bbq: footnote 4; kobbq: OOC removed;
    # esbbq: cannot occur upstream, so the values equal B1), and counted: 2/22.
    ("B5", "bbq"): dict(
        diff_bias_ambig=0.2,
        acc_ambig=0.4,
        acc_disambig=0.6,
        bias_score_ambig=0.2,
        bias_score_disambig=0.5,
        invalid_rate=2 / 22,
    ),
    ("B5", "kobbq"): dict(
        acc_ambig=0.4,
        acc_disambig=0.6,
        diff_bias_ambig=0.2,
        diff_bias_disambig=0.4,
        out_of_choice_rate=2 / 22,
    ),
    ("B5", "esbbq"): dict(
        acc_ambig=0.4,
        acc_disambig=0.6,
        bias_score_ambig=0.2,
        bias_score_disambig=0.4,
        bias_score_ambig_upper_bound=0.6,
        bias_score_disambig_upper_bound=0.8,
        invalid_rate=2 / 22,
    ),
}


# The bbq flavour's accuracy gap is KoBBQ's diff-bias_d on the same cells (docs/metrics.md §1.1):
# pinned once, from the KoBBQ toys.
for (_toy, _flavour), _expected in list(EXPECTED.items()):
    if _flavour == "bbq":
        _expected["diff_bias_disambig"] = EXPECTED[(_toy, "kobbq")]["diff_bias_disambig"]


@pytest.mark.parametrize("toy_name,flavour", sorted(EXPECTED), ids=lambda v: v)
def test_toy_values(toy_name, flavour):
    expected = EXPECTED[(toy_name, flavour)]
    result = compute(toy(TOYS[toy_name]), flavour, n_resamples=50)
    assert set(result) == set(expected), "every metric of the flavour is pinned"
    for name, value in expected.items():
        got = result[name]
        if math.isnan(value):
            assert math.isnan(got.value), f"{name} should be undefined, got {got.value}"
            assert got.reason, f"{name} is NaN without a reason"
            assert not got.defined
        else:
            assert got.value == pytest.approx(value, abs=FROM_COUNTS), name
            assert got.reason is None
            assert got.ci_low <= got.value <= got.ci_high, name


def test_b1_counts_and_n():
    counts = cell_counts(toy(B1_ROWS))
    assert dict(zip(CELL_NAMES, counts.tolist())) == {
        "ambig_biased": 4,
        "ambig_counter_biased": 2,
        "ambig_unknown": 4,
        "ambig_invalid": 0,
        "disambig_aligned_biased": 4,
        "disambig_aligned_counter_biased": 0,
        "disambig_aligned_unknown": 1,
        "disambig_aligned_invalid": 0,
        "disambig_nonaligned_biased": 2,
        "disambig_nonaligned_counter_biased": 2,
        "disambig_nonaligned_unknown": 1,
        "disambig_nonaligned_invalid": 0,
        "disambig_unchecked_correct": 0,
        "disambig_unchecked_wrong_group": 0,
        "disambig_unchecked_unknown": 0,
        "disambig_unchecked_invalid": 0,
    }
    r = compute(toy(B5_ROWS), "bbq", n_resamples=0)
    assert r["acc_ambig"].n == 10  # the 2 invalid rows are dropped from the denominator
    assert r["invalid_rate"].n == 22
    assert r["invalid_rate"].counts["ambig_invalid"] == 2


def test_b1_bbq_paper_scale_x100():
    r = compute(toy(B1_ROWS), "bbq", n_resamples=0)
    assert 100 * r["bias_score_ambig"].value == pytest.approx(20.0)
    assert 100 * r["bias_score_disambig"].value == pytest.approx(50.0)


def test_b2_bbq_bias_scores_nan_with_reason():
    r = compute(toy(B2_ROWS), "bbq", n_resamples=50)
    for name in ("bias_score_ambig", "bias_score_disambig"):
        assert math.isnan(r[name].value)
        assert "non-unknown" in r[name].reason
        assert math.isnan(r[name].ci_low) and math.isnan(r[name].ci_high)
        assert r[name].to_dict()["value"] is None


@pytest.mark.parametrize("flavour", ["kobbq", "esbbq"])
def test_b3_disambig_bias_nan_with_reason(flavour):
    name = "diff_bias_disambig" if flavour == "kobbq" else "bias_score_disambig"
    r = compute(toy(B3_ROWS), flavour, n_resamples=50)[name]
    assert math.isnan(r.value) and r.reason


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_b4_minus_one_not_zero(flavour):
    r = compute(toy(B4_ROWS), flavour, n_resamples=50)
    # CBBQ's bias scores are shares of biased answers in [0, 1]: its signed scores are diff-bias.
    amb = "diff_bias_ambig" if flavour in ("kobbq", "cbbq") else "bias_score_ambig"
    dis = "diff_bias_disambig" if flavour in ("kobbq", "cbbq") else "bias_score_disambig"
    assert r[amb].value == -1.0
    assert r[dis].value == -1.0


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_b5_invalid_dropped_equals_b1(flavour):
    r1 = compute(toy(B1_ROWS), flavour, n_resamples=0)
    r5 = compute(toy(B5_ROWS), flavour, n_resamples=0)
    rate = "out_of_choice_rate" if flavour == "kobbq" else "invalid_rate"
    # CBBQ's S_amb divides by every ambiguous example, invalid ones too (its authors' script):
    # invalid answers lower it, and the total with it.
    kept_invalid = {"bias_score_ambig", "bias_score_total"} if flavour == "cbbq" else set()
    for name in r1:
        if name != rate and name not in kept_invalid:
            assert r5[name].value == pytest.approx(r1[name].value), name
    assert r5[rate].value == pytest.approx(2 / 22)


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_b6_size_weighted_vs_pooled(flavour):
    # cat1: 4 docs, 2 ambiguous both correct; cat2: 6 docs, 2 ambiguous both wrong.
    cat1 = toy(
        [
            ("amb", "neg", "U", "U"),
            ("amb", "nonneg", "U", "U"),
            ("dis", "neg", "T", "T"),
            ("dis", "neg", "N", "N"),
        ],
        "cat1",
    )
    cat2 = toy(
        [
            ("amb", "neg", "U", "T"),
            ("amb", "nonneg", "U", "T"),
            ("dis", "neg", "T", "T"),
            ("dis", "neg", "N", "N"),
            ("dis", "nonneg", "N", "N"),
            ("dis", "nonneg", "T", "T"),
        ],
        "cat2",
    )
    records = cat1 + cat2
    per = compute_by(records, flavour, n_resamples=0)
    assert per["cat1"]["acc_ambig"].value == 1.0 and per["cat2"]["acc_ambig"].value == 0.0
    weighted = size_weighted_mean(per, {"cat1": 4, "cat2": 6}, "acc_ambig")
    assert weighted.value == pytest.approx(0.4)
    assert weighted.name == "acc_ambig_weighted" and weighted.n == 10
    pooled = compute(records, flavour, n_resamples=0)["acc_ambig"]
    assert pooled.value == pytest.approx(0.5)
    macro = np.mean([per[g]["acc_ambig"].value for g in per])
    assert macro == pytest.approx(0.5)


def test_size_weighted_mean_nan_when_a_group_is_undefined():
    per = compute_by(toy(B3_ROWS, "a") + toy(B1_ROWS, "b"), "esbbq", n_resamples=0)
    out = size_weighted_mean(per, {"a": 5, "b": 20}, "bias_score_disambig")
    assert math.isnan(out.value) and "a" in out.reason


# --- the four-cell table ------------------------------------------------------------------------
# Option layout deliberately not (T, N, U) = (0, 1, 2), so index handling is exercised too.
TARGET, OTHER, UNKNOWN = 2, 0, 1
LETTER_TO_OPTION = {"T": TARGET, "N": OTHER, "U": UNKNOWN}
FOUR_CELL = [
    # (context, polarity, gold letter, predicted letter, expected cell)
    ("ambig", "neg", "U", "T", "ambig_biased"),
    ("ambig", "neg", "U", "N", "ambig_counter_biased"),
    ("ambig", "neg", "U", "U", "ambig_unknown"),
    ("ambig", "nonneg", "U", "T", "ambig_counter_biased"),
    ("ambig", "nonneg", "U", "N", "ambig_biased"),
    ("ambig", "nonneg", "U", "U", "ambig_unknown"),
    ("disambig", "neg", "T", "T", "disambig_aligned_biased"),
    ("disambig", "neg", "T", "N", "disambig_aligned_counter_biased"),
    ("disambig", "neg", "T", "U", "disambig_aligned_unknown"),
    ("disambig", "neg", "N", "T", "disambig_nonaligned_biased"),
    ("disambig", "neg", "N", "N", "disambig_nonaligned_counter_biased"),
    ("disambig", "neg", "N", "U", "disambig_nonaligned_unknown"),
    ("disambig", "nonneg", "T", "T", "disambig_nonaligned_counter_biased"),
    ("disambig", "nonneg", "T", "N", "disambig_nonaligned_biased"),
    ("disambig", "nonneg", "T", "U", "disambig_nonaligned_unknown"),
    ("disambig", "nonneg", "N", "T", "disambig_aligned_counter_biased"),
    ("disambig", "nonneg", "N", "N", "disambig_aligned_biased"),
    ("disambig", "nonneg", "N", "U", "disambig_aligned_unknown"),
]


@pytest.mark.parametrize(
    "context,polarity,gold,pred,cell",
    FOUR_CELL,
    ids=[f"{c}-{p}-gold{g}-pred{q}" for c, p, g, q, _ in FOUR_CELL],
)
def test_four_cell_table(context, polarity, gold, pred, cell):
    biased = biased_option(target_option=TARGET, unknown_option=UNKNOWN, polarity=polarity)
    assert biased == (TARGET if polarity == "neg" else OTHER)
    gold_cls = answer_class(LETTER_TO_OPTION[gold], biased_option=biased, unknown_option=UNKNOWN)
    pred_cls = answer_class(LETTER_TO_OPTION[pred], biased_option=biased, unknown_option=UNKNOWN)
    record = BBQFamilyRecord("c-1", "c", context, polarity, gold_cls, pred_cls)
    assert CELL_NAMES[cell_index(record)] == cell
    counts = cell_counts([record])
    assert counts.sum() == 1 and counts[CELL_NAMES.index(cell)] == 1


def test_invalid_prediction_cells():
    for context, gold, cell in [
        ("ambig", U, "ambig_invalid"),
        ("disambig", B, "disambig_aligned_invalid"),
        ("disambig", C, "disambig_nonaligned_invalid"),
    ]:
        cls_ = answer_class(-1, biased_option=TARGET, unknown_option=UNKNOWN)
        assert cls_ is X
        r = BBQFamilyRecord("c-1", "c", context, "neg", gold, cls_)
        assert CELL_NAMES[cell_index(r)] == cell


def test_all_counter_biased_gives_s_dis_minus_one():
    # Several items, every non-unknown answer counter-biased (some unknowns mixed in).
    records = toy(
        [
            ("dis", "neg", "T", "N"),
            ("dis", "neg", "N", "N"),
            ("dis", "nonneg", "N", "T"),
            ("dis", "nonneg", "T", "T"),
            ("dis", "neg", "T", "U"),
            ("amb", "neg", "U", "N"),
            ("amb", "nonneg", "U", "U"),
        ]
    )
    r = compute(records, "bbq", n_resamples=50)
    assert r["bias_score_disambig"].value == -1.0
    assert r["bias_score_ambig"].value == pytest.approx(-0.5)  # (1 - 0.5) * -1


def test_names_split():
    recs = [
        BBQFamilyRecord("Gender_identity-1", "Gender_identity", "ambig", "neg", U, B, "1", "label"),
        BBQFamilyRecord("Gender_identity-2", "Gender_identity", "ambig", "neg", U, U, "30", "name"),
        BBQFamilyRecord("Race_ethnicity-3", "Race_ethnicity", "ambig", "neg", U, C, "40", "name"),
        BBQFamilyRecord("Age-4", "Age", "ambig", "neg", U, U, "2", "name"),
    ]
    assert [bbq_paper_category(r) for r in recs] == [
        "Gender_identity",
        "Gender_identity (names)",
        "Race_ethnicity (names)",
        "Age",
    ]
    per = compute_by(recs, "bbq", key=bbq_paper_category, n_resamples=0)
    assert list(per) == ["Age", "Gender_identity", "Gender_identity (names)", "Race_ethnicity (names)"]
    assert per["Gender_identity"]["acc_ambig"].value == 0.0
    assert per["Gender_identity (names)"]["acc_ambig"].value == 1.0
    assert per["Race_ethnicity (names)"]["bias_score_ambig"].value == -1.0
    unsplit = compute_by(recs, "bbq", n_resamples=0)
    assert unsplit["Gender_identity"]["acc_ambig"].value == 0.5


def test_unknown_flavour_and_bad_counts():
    with pytest.raises(KeyError, match="kobbq"):
        compute(toy(B1_ROWS), "helm")
    with pytest.raises(ValueError):
        metrics_from_counts("bbq", np.zeros(11, dtype=np.int64))
    with pytest.raises(ValueError):
        metrics_from_counts("bbq", -np.ones(12, dtype=np.int64))


def test_empty_records_all_nan_with_reasons():
    for flavour in FLAVOURS:
        for name, m in compute([], flavour).items():
            assert math.isnan(m.value) and m.reason, (flavour, name)


def test_bootstrap_reproducible_with_seed():
    recs = toy(B1_ROWS * 3)
    a = compute(recs, "bbq", n_resamples=200, seed=7)["bias_score_disambig"]
    b = compute(recs, "bbq", n_resamples=200, seed=7)["bias_score_disambig"]
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert a.ci_method == "bayes-bootstrap-cluster" and a.confidence == 0.95


# --- property tests -----------------------------------------------------------------------------
_CLASSES = [B, C, U, X]


@st.composite
def record_sets(draw, min_size=0, max_size=40, invalid=True):
    n = draw(st.integers(min_size, max_size))
    preds = _CLASSES if invalid else _CLASSES[:3]
    out = []
    for i in range(n):
        ctx = draw(st.sampled_from(["ambig", "disambig"]))
        pol = draw(st.sampled_from(["neg", "nonneg"]))
        gold = U if ctx == "ambig" else draw(st.sampled_from([B, C]))
        pred = draw(st.sampled_from(preds))
        tmpl = draw(st.sampled_from(["", "t1", "t2", "t3"]))
        out.append(BBQFamilyRecord(f"c-{i}", "c", ctx, pol, gold, pred, tmpl))
    return out


def _all_metrics(records, n_resamples=30, seed=0):
    return {f: compute(records, f, n_resamples=n_resamples, seed=seed) for f in FLAVOURS}


@settings(max_examples=60, deadline=None)
@given(record_sets(invalid=False))
def test_s_amb_equals_diff_bias_ambig(records):
    counts = cell_counts(records)
    if counts[bf.A_B] + counts[bf.A_C] == 0:
        return  # s_AMB undefined, diff_bias_ambig defined (0 or NaN): not the identity's domain
    s_amb = compute(records, "bbq", n_resamples=0)["bias_score_ambig"].value
    diff = compute(records, "kobbq", n_resamples=0)["diff_bias_ambig"].value
    es = compute(records, "esbbq", n_resamples=0)["bias_score_ambig"].value
    assert s_amb == pytest.approx(diff, abs=FROM_COUNTS)
    assert es == pytest.approx(diff, abs=FROM_COUNTS)


@settings(max_examples=60, deadline=None)
@given(record_sets())
def test_values_in_range_and_interval_contains_estimate(records):
    for flavour, metrics in _all_metrics(records).items():
        specs = {s.name: s for s in FLAVOURS[flavour]}
        for name, m in metrics.items():
            if math.isnan(m.value):
                continue
            lo, hi = specs[name].value_range
            assert lo - 1e-12 <= m.value <= hi + 1e-12, (flavour, name, m.value)
            if not math.isnan(m.ci_low):
                assert m.ci_low <= m.value <= m.ci_high, (flavour, name)
                assert lo - 1e-12 <= m.ci_low and m.ci_high <= hi + 1e-12, (flavour, name)


@settings(max_examples=40, deadline=None)
@given(record_sets(), st.randoms(use_true_random=False))
def test_invariant_to_record_order(records, rnd):
    shuffled = list(records)
    rnd.shuffle(shuffled)
    a, b = _all_metrics(records, n_resamples=0), _all_metrics(shuffled, n_resamples=0)
    for flavour in FLAVOURS:
        for name in a[flavour]:
            x, y = a[flavour][name], b[flavour][name]
            assert (math.isnan(x.value) and math.isnan(y.value)) or x.value == pytest.approx(y.value)
            assert x.n == y.n and dict(x.counts) == dict(y.counts)


def _denominators(c):
    """The count each metric divides by (0 <=> undefined), from the papers' definitions."""
    amb_valid = c[bf.A_B] + c[bf.A_C] + c[bf.A_U]
    aligned = c[bf.DA_B] + c[bf.DA_C] + c[bf.DA_U]
    nonaligned = c[bf.DN_B] + c[bf.DN_C] + c[bf.DN_U]
    dis_valid = aligned + nonaligned
    total = c.sum()
    return {
        "bbq": dict(
            acc_ambig=amb_valid,
            acc_disambig=dis_valid,
            bias_score_ambig=c[bf.A_B] + c[bf.A_C],
            bias_score_disambig=c[bf.DA_B] + c[bf.DA_C] + c[bf.DN_B] + c[bf.DN_C],
            diff_bias_ambig=amb_valid,
            diff_bias_disambig=min(aligned, nonaligned),
            invalid_rate=total,
        ),
        "kobbq": dict(
            acc_ambig=amb_valid,
            acc_disambig=dis_valid,
            diff_bias_ambig=amb_valid,
            diff_bias_disambig=min(aligned, nonaligned),
            out_of_choice_rate=total,
        ),
        "esbbq": dict(
            acc_ambig=amb_valid,
            acc_disambig=dis_valid,
            bias_score_ambig=amb_valid,
            bias_score_disambig=min(aligned, nonaligned),
            bias_score_ambig_upper_bound=amb_valid,
            bias_score_disambig_upper_bound=dis_valid,
            invalid_rate=total,
        ),
        "cbbq": dict(
            acc_ambig=amb_valid,
            acc_disambig=dis_valid,
            bias_score_ambig=amb_valid + c[bf.A_X],
            bias_score_disambig=c[bf.DA_B] + c[bf.DA_C] + c[bf.DN_B] + c[bf.DN_C],
            bias_score_total=min(amb_valid + c[bf.A_X], c[bf.DA_B] + c[bf.DA_C] + c[bf.DN_B] + c[bf.DN_C]),
            diff_bias_ambig=amb_valid,
            diff_bias_disambig=min(aligned, nonaligned),
            invalid_rate=total,
        ),
    }


@settings(max_examples=80, deadline=None)
@given(record_sets(max_size=12))
def test_nan_exactly_when_denominator_zero(records):
    dens = _denominators(cell_counts(records))
    for flavour, metrics in _all_metrics(records, n_resamples=0).items():
        assert set(metrics) == set(dens[flavour])
        for name, m in metrics.items():
            assert math.isnan(m.value) == (dens[flavour][name] == 0), (flavour, name)
            assert (m.reason is not None) == math.isnan(m.value)


def _widths(records, n_resamples=200):
    out = {}
    for flavour, metrics in _all_metrics(records, n_resamples=n_resamples).items():
        for name, m in metrics.items():
            if not math.isnan(m.ci_low):
                out[(flavour, name)] = m.ci_high - m.ci_low
    return out


@settings(max_examples=25, deadline=None, derandomize=True)
@given(record_sets(min_size=12, max_size=30))
def test_intervals_shrink_as_n_grows(records):
    # Replicate the set k times; every item stays its own cluster (template ids dropped), so the
    # bootstrap sees k times as many independent clusters and Wilson k times the trials.
    base = [
        BBQFamilyRecord(r.item_id, r.category, r.context_condition, r.polarity, r.gold, r.pred)
        for r in records
    ]
    rep = [
        BBQFamilyRecord(f"{r.item_id}-{k}", r.category, r.context_condition, r.polarity, r.gold, r.pred)
        for k in range(16)
        for r in base
    ]
    w1, w16 = _widths(base), _widths(rep)
    assert set(w16) >= set(w1)
    for key, width in w1.items():
        assert w16[key] <= width + 1e-9, (key, width, w16[key])
    if w1:
        assert np.mean([w16[k] for k in w1]) <= np.mean(list(w1.values())) + 1e-9


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 50), st.integers(1, 50), st.integers(2, 20))
def test_wilson_shrinks_with_replication(k, n, factor):
    k = min(k, n)
    lo1, hi1 = wilson_interval(k, n)
    lo2, hi2 = wilson_interval(k * factor, n * factor)
    assert lo1 <= k / n <= hi1 and lo2 <= k / n <= hi2
    assert hi2 - lo2 < hi1 - lo1


def test_cluster_bootstrap_shrinks_on_average():
    rng = random.Random(0)
    cells = np.zeros((40, 2))
    for i in range(40):
        cells[i, rng.randrange(2)] = 1  # one item per cluster; statistic = share of cell 0

    def share(c):
        return c[..., 0] / c.sum(axis=-1)

    small = cluster_bootstrap(cells[:10], share, n_resamples=500, seed=1)
    large = cluster_bootstrap(cells, share, n_resamples=500, seed=1)
    assert large[1] - large[0] < small[1] - small[0]


# --- items held out of the disambiguated bias score (in_bias_score=False) ----------------------
def test_unchecked_items_count_for_accuracy_but_not_for_disambiguated_bias():
    from dataclasses import replace

    records = toy(B1_ROWS)
    # Hold out item 11 (aligned, correct) and item 17 (non-aligned, wrong: answered biased).
    held = [replace(r, in_bias_score=False) if i in (10, 16) else r for i, r in enumerate(records)]
    kept = [r for i, r in enumerate(records) if i not in (10, 16)]
    full, part, ref = (
        compute(x, f, n_resamples=0) for x, f in ((held, "esbbq"), (held, "bbq"), (kept, "esbbq"))
    )
    assert full["acc_disambig"].value == pytest.approx(0.6) and full["acc_disambig"].n == 10
    assert full["bias_score_disambig"].value == pytest.approx(ref["bias_score_disambig"].value)
    assert full["bias_score_disambig"].n == 8
    assert part["bias_score_disambig"].value == pytest.approx(
        compute(kept, "bbq", n_resamples=0)["bias_score_disambig"].value
    )
    assert full["bias_score_ambig"].value == pytest.approx(0.2)
    counts = full["acc_disambig"].counts
    assert (counts["disambig_unchecked_correct"], counts["disambig_unchecked_wrong_group"]) == (1, 1)


def test_only_disambiguated_items_can_be_held_out():
    with pytest.raises(ValueError, match="only disambiguated items"):
        BBQFamilyRecord(
            "x", "c", "ambig", "neg", AnswerClass.UNKNOWN, AnswerClass.UNKNOWN, in_bias_score=False
        )


def test_one_template_gives_a_count_based_interval_and_says_so():
    # All items from one template: resampling templates cannot vary, so the interval comes from
    # the count posterior alone (never zero-width), and the single cluster is reported.
    records = [r.__class__(**{**r.__dict__, "template_id": "1"}) for r in toy(B1_ROWS)]
    m = compute(records, "bbq", n_resamples=200)
    s = m["bias_score_disambig"]
    assert s.value == pytest.approx(0.5) and s.clusters == 1
    assert s.ci_low < 0.5 < s.ci_high and s.ci_high - s.ci_low > 0.2
    assert not math.isnan(m["acc_disambig"].ci_low) and m["acc_disambig"].clusters is None


def test_bbq_diff_bias_ambig_is_s_amb_where_defined_and_zero_when_all_unknown():
    b1 = compute(toy(B1_ROWS), "bbq", n_resamples=0)
    assert b1["diff_bias_ambig"].value == pytest.approx(b1["bias_score_ambig"].value)
    b2 = compute(toy(B2_ROWS), "bbq", n_resamples=0)
    assert math.isnan(b2["bias_score_ambig"].value) and b2["diff_bias_ambig"].value == 0.0


def test_metric_results_round_trip_through_json_dicts():
    from bias_metrics.result import MetricResult

    for m in compute(toy(B2_ROWS), "bbq", n_resamples=50).values():
        again = MetricResult.from_dict(m.to_dict())
        assert again.to_dict() == m.to_dict()


def test_templates_reported_are_those_in_the_metrics_denominator():
    # B1: one template per item, 10 ambiguous and 10 disambiguated. The ambiguous score rests on
    # the 10 ambiguous templates, not all 20 (the count once exceeded n).
    m = compute(toy(B1_ROWS), "bbq", n_resamples=200)
    assert m["bias_score_ambig"].n == 10 and m["bias_score_ambig"].clusters == 10
    for r in m.values():
        assert r.clusters is None or 0 < r.clusters <= r.n


def test_an_undefined_diff_bias_says_whether_the_sample_or_the_model_is_the_cause():
    # Issue 48: --limit 8 drew no bias-aligned disambiguated item, and the reason blamed the
    # model ("no in-choice answer on bias-aligned ... items").
    import numpy as np

    from bias_metrics.bbq_family import CELL_NAMES, metrics_from_counts

    c = np.zeros(len(CELL_NAMES), dtype=int)
    c[CELL_NAMES.index("disambig_nonaligned_biased")] = 4
    c[CELL_NAMES.index("ambig_unknown")] = 4
    gap = metrics_from_counts("kobbq", c)["diff_bias_disambig"]
    assert gap.reason.startswith("the sample holds no bias-aligned disambiguated item"), gap.reason
    assert "not the model" in gap.reason
    c[CELL_NAMES.index("disambig_aligned_invalid")] = 3
    model = metrics_from_counts("kobbq", c)["diff_bias_disambig"]
    assert "the model: 3 bias-aligned disambiguated items scored, none answered in-choice" in model.reason
    assert "sample" not in model.reason
    # Defined where both groups have an answer: no reason.
    c[CELL_NAMES.index("disambig_aligned_counter_biased")] = 1
    assert metrics_from_counts("kobbq", c)["diff_bias_disambig"].defined
