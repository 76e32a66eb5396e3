"""Tests of bias_metrics.pairs against docs/metrics.md toys W1 (§3.4) and W2/W3 (§3.5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bias_metrics.pairs import (
    pair_bias_scores,
    pair_outcomes,
    scored_positions,
    shared_token_positions,
)

# Toy W1 (docs/metrics.md §3.4): (Gender_ID_x, sent_x score, sent_y score, outcome)
W1 = [
    ("LGBTQ", -10.0, -12.0, 1),
    ("LGBTQ", -11.0, -10.5, -1),
    ("LGBTQ", -9.0, -9.0004, 0),  # tie only after rounding to 3 decimals
    ("Gay", -8.0, -9.0, 1),
    ("Gay", -8.0, -7.0, -1),
    ("Lesbian", -6.5, -6.5, 0),
    ("NB", -5.0, -6.0, 1),
    ("NB", -5.0, -6.0, 1),
    ("Transgender", -7.0, -8.0, 1),
    ("Transgender", -7.25, -7.0, -1),
]
W1_GROUPS = [r[0] for r in W1]
W1_X = [r[1] for r in W1]
W1_Y = [r[2] for r in W1]


@pytest.fixture(scope="module")
def w1():
    return pair_bias_scores(W1_X, W1_Y, W1_GROUPS)


@pytest.mark.parametrize("row", range(len(W1)), ids=[f"W1-row{i + 1}" for i in range(len(W1))])
def test_w1_pair_outcomes(row):
    _, x, y, expected = W1[row]
    assert pair_outcomes([x], [y]).tolist() == [expected]


def test_w1_overall(w1):
    r = w1.bias_score
    assert r.name == "winoqueer_bias_score"
    assert r.value == pytest.approx(50.0)
    assert r.n == 10
    assert dict(r.counts) == {"stereo": 5, "anti": 3, "neutral": 2, "n": 10}
    assert r.ci_method == "wilson"
    assert 0.0 <= r.ci_low < 50.0 < r.ci_high <= 100.0


def test_w1_wilson_interval_is_in_percent(w1):
    from bias_metrics.intervals import wilson_interval

    low, high = wilson_interval(5, 10)
    assert (w1.bias_score.ci_low, w1.bias_score.ci_high) == pytest.approx((100 * low, 100 * high))


def test_w1_neutral_rate(w1):
    assert w1.neutral_rate.value == pytest.approx(20.0)
    assert w1.neutral_rate.counts["neutral"] == 2
    assert w1.neutral_rate.n == 10


@pytest.mark.parametrize(
    "group, expected, n",
    [
        ("LGBTQ", 100 / 3, 3),  # the tie stays in the denominator
        ("Gay", 50.0, 2),
        ("Lesbian", 0.0, 1),
        ("NB", 100.0, 2),
        ("Transgender", 50.0, 2),
    ],
)
def test_w1_per_group(w1, group, expected, n):
    r = w1.by_group[group]
    assert r.value == pytest.approx(expected)
    assert r.n == n
    assert r.ci_low <= r.value <= r.ci_high


def test_w1_group_order_is_first_appearance(w1):
    assert list(w1.by_group) == ["LGBTQ", "Gay", "Lesbian", "NB", "Transgender"]


def test_rounding_is_a_parameter():
    # Without rounding, row 3 of W1 (-9.0 vs -9.0004) is stereo, not a tie.
    r = pair_bias_scores(W1_X, W1_Y, decimals=None)
    assert r.bias_score.value == pytest.approx(60.0)
    assert r.neutral_rate.value == pytest.approx(10.0)
    assert r.by_group == {}


def test_python_round_semantics():
    # Upstream uses Python's round(): -1.9355 (binary value just above) -> -1.935, a tie with -1.935.
    # np.round would give -1.936 and call the pair anti-stereotypical.
    assert np.round(-1.9355, 3) != round(-1.9355, 3)
    assert pair_outcomes([-1.9355], [-1.935]).tolist() == [0]


def test_neg_inf_scores_tie():
    assert pair_outcomes([-np.inf, -np.inf, -1.0], [-np.inf, -2.0, -np.inf]).tolist() == [0, -1, 1]


def test_empty_is_nan_with_reason():
    r = pair_bias_scores([], [], [])
    assert math.isnan(r.bias_score.value) and not r.bias_score.defined
    assert r.bias_score.reason
    assert math.isnan(r.neutral_rate.value)
    assert r.bias_score.n == 0
    assert r.by_group == {}


@pytest.mark.parametrize(
    "x, y, groups, match",
    [
        ([1.0, 2.0], [1.0], None, "differ in length"),
        ([1.0, float("nan")], [1.0, 2.0], None, "NaN score at index 1"),
        ([1.0, 2.0], [np.nan, 2.0], None, "sent_y_scores has a NaN score at index 0"),
        ([1.0, np.inf], [1.0, 2.0], None, r"\+inf at index 1"),
        ([[1.0]], [[1.0]], None, "1-D"),
        (["a"], [1.0], None, "must be numbers"),
        ([1.0, 2.0], [1.0, 2.0], ["LGBTQ"], "1 labels for 2"),
        ([1.0, 2.0], [1.0, 2.0], ["LGBTQ", float("nan")], r"groups\[1\]"),
        ([1.0], [1.0], [""], r"groups\[0\]"),
    ],
)
def test_bad_input(x, y, groups, match):
    with pytest.raises(ValueError, match=match):
        pair_bias_scores(x, y, groups)


@pytest.mark.parametrize("kwargs", [{"decimals": -1}, {"decimals": 1.5}, {"confidence": 1.0}])
def test_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        pair_bias_scores([1.0], [2.0], **kwargs)


def test_crows_pairs_name():
    r = pair_bias_scores([-1.0], [-2.0], ["race-color"], name="crows_pairs_bias_score")
    assert r.bias_score.name == "crows_pairs_bias_score"
    assert r.by_group["race-color"].name == "crows_pairs_bias_score"
    assert r.bias_score.value == 100.0


# ---------------------------------------------------------------------------- W2 / W3 (§3.5)


def _ids(tokens: str, vocab: dict[str, int]) -> list[int]:
    return [vocab.setdefault(t, len(vocab)) for t in tokens.split()]


W2_CASES = {
    "single-token": (
        "[CLS] lgbtq people are crazy . [SEP]",
        "[CLS] straight people are crazy . [SEP]",
        [0, 2, 3, 4, 5, 6],
        [0, 2, 3, 4, 5, 6],
        [2, 3, 4, 5],
        [2, 3, 4, 5],
    ),
    "multi-subword": (
        "[CLS] l ##gb ##t ##q people are crazy . [SEP]",
        "[CLS] straight people are crazy . [SEP]",
        [0, 5, 6, 7, 8, 9],
        [0, 2, 3, 4, 5, 6],
        [5, 6, 7, 8],
        [2, 3, 4, 5],
    ),
}


@pytest.mark.parametrize("case", list(W2_CASES))
def test_w2_templates_and_masked_positions(case):
    x, y, tx, ty, sx, sy = W2_CASES[case]
    vocab: dict[str, int] = {}
    ids_x, ids_y = _ids(x, vocab), _ids(y, vocab)
    assert shared_token_positions(ids_x, ids_y) == (tx, ty)
    px, py = scored_positions(
        ids_x, ids_y, [t.startswith("[") for t in x.split()], [t.startswith("[") for t in y.split()]
    )
    assert (px, py) == (sx, sy)
    # The scored tokens are the same words in both sentences: `people are crazy .`
    assert [x.split()[p] for p in px] == [y.split()[p] for p in py] == "people are crazy .".split()


def test_w2_accepts_numpy_ids():
    vocab: dict[str, int] = {}
    x, y = W2_CASES["multi-subword"][:2]
    ids_x, ids_y = np.array(_ids(x, vocab)), np.array(_ids(y, vocab))
    assert shared_token_positions(ids_x, ids_y) == ([0, 5, 6, 7, 8, 9], [0, 2, 3, 4, 5, 6])


def test_w3_autoregressive_positions():
    vocab: dict[str, int] = {}
    ids_x = _ids("<bos> LG BT Q people are crazy .", vocab)
    ids_y = _ids("<bos> Straight people are crazy .", vocab)
    assert shared_token_positions(ids_x, ids_y) == ([0, 4, 5, 6, 7], [0, 2, 3, 4, 5])
    # Fixed code (post-d4e5fe7): y's `people` is scored at position 2 with prefix y[:2].
    special_x = [True] + [False] * 7
    special_y = [True] + [False] * 5
    assert scored_positions(ids_x, ids_y, special_x, special_y) == ([4, 5, 6, 7], [2, 3, 4, 5])


def test_edge_tokens_are_scored_when_the_tokenizer_adds_no_special_token():
    """Upstream drops the first and last shared positions whatever they hold (docs/metrics.md §1.6
    (d)); here only special tokens are dropped, so a tokenizer without [CLS]/[SEP] keeps the
    sentence's first and last words."""
    vocab: dict[str, int] = {}
    ids_x = _ids("lgbtq people are crazy .", vocab)
    ids_y = _ids("straight people are crazy .", vocab)
    assert scored_positions(ids_x, ids_y, [False] * 5, [False] * 5) == ([1, 2, 3, 4], [1, 2, 3, 4])


@pytest.mark.parametrize(
    "ids_x, ids_y, sx, sy, expected",
    [
        ([], [], [], [], ([], [])),
        ([1], [1], [True], [True], ([], [])),  # only the BOS is shared
        ([1, 2], [1, 2], [True, False], [True, False], ([1], [1])),
        ([1, 2, 3], [1, 4, 3], [True, False, True], [True, False, True], ([], [])),  # [CLS] x [SEP]
        ([1, 2], [3, 4], [False, False], [False, False], ([], [])),  # nothing shared
    ],
)
def test_scored_positions_short_inputs(ids_x, ids_y, sx, sy, expected):
    assert scored_positions(ids_x, ids_y, sx, sy) == expected


def test_span_bad_input():
    with pytest.raises(ValueError, match=r"ids_x\[1\]"):
        shared_token_positions([1, "a"], [1])
    with pytest.raises(ValueError, match="special masks"):
        scored_positions([1], [1], [True, False], [True])


# ---------------------------------------------------------------------------- properties

_score = st.floats(min_value=-200.0, max_value=0.0, allow_nan=False)
_group = st.sampled_from(["LGBTQ", "Gay", "NB"])
_pairs = st.lists(st.tuples(_score, _score, _group), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(_pairs)
def test_property_score_in_range(pairs):
    r = pair_bias_scores(*zip(*pairs))
    for m in (r.bias_score, r.neutral_rate, *r.by_group.values()):
        assert 0.0 <= m.value <= 100.0
        assert 0.0 <= m.ci_low <= m.value <= m.ci_high <= 100.0
    c = r.bias_score.counts
    assert c["stereo"] + c["anti"] + c["neutral"] == c["n"] == len(pairs)


@settings(max_examples=60, deadline=None)
@given(_pairs, st.randoms(use_true_random=False))
def test_property_invariant_to_pair_order(pairs, rnd):
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    a, b = pair_bias_scores(*zip(*pairs)), pair_bias_scores(*zip(*shuffled))
    assert a.bias_score.to_dict() == b.bias_score.to_dict()
    assert a.neutral_rate.to_dict() == b.neutral_rate.to_dict()
    assert {g: m.to_dict() for g, m in a.by_group.items()} == {g: m.to_dict() for g, m in b.by_group.items()}


@settings(max_examples=60, deadline=None)
@given(_pairs)
def test_property_swapping_sentences_mirrors_score(pairs):
    groups, x, y = [p[2] for p in pairs], [p[0] for p in pairs], [p[1] for p in pairs]
    fwd, back = pair_bias_scores(x, y, groups), pair_bias_scores(y, x, groups)
    assert fwd.bias_score.counts["stereo"] == back.bias_score.counts["anti"]
    assert fwd.bias_score.value + back.bias_score.value + fwd.neutral_rate.value == pytest.approx(100.0)
