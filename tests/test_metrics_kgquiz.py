"""Tests of bias_metrics.kgquiz against docs/metrics.md toys K1-K4 (§3.6, project conventions)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bias_metrics.kgquiz import (
    char_lcs_ratio,
    cosine_similarity_matrix,
    lcs_length,
    mean_with_bootstrap,
    normalize_text,
    open_ended_precision_recall,
    open_ended_scores,
    parse_true_false,
    semantic_match,
    semantic_match_rate,
    text_match_scores,
    token_f1,
    token_lcs_ratio,
    true_false_accuracy,
)

# ---------------------------------------------------------------------------- K1

K1 = [  # (output, gold, parsed)
    ("True", 1, 1),
    ("False.", 0, 0),
    ("The statement is true.", 0, 1),
    ("false", 0, 0),
    ("I am not sure", 1, None),
    ("True or False? It is False", 0, 1),  # echo of the question: first mention wins
    ("TRUE", 1, 1),
    ("Yes", 1, None),
]


@pytest.mark.parametrize("output, gold, parsed", K1, ids=[f"K1-row{i + 1}" for i in range(8)])
def test_k1_parse(output, gold, parsed):
    assert parse_true_false(output) == parsed


def test_k1_accuracy():
    r = true_false_accuracy([o for o, _, _ in K1], [g for _, g, _ in K1])
    assert r.name == "tf_accuracy"
    assert r.value == pytest.approx(0.5)
    assert r.n == 8
    assert dict(r.counts) == {"correct": 4, "incorrect": 2, "invalid": 2, "n": 8}
    assert r.ci_method == "wilson" and r.ci_low < 0.5 < r.ci_high
    assert "KGQuiz-style, project implementation" in r.source


@pytest.mark.parametrize(
    "output, parsed",
    [
        ("untrue", None),  # whole words only
        ("It's FALSE, not true", 0),
        ("true_value", None),
        ("", None),
    ],
)
def test_parse_whole_words(output, parsed):
    assert parse_true_false(output) == parsed


def test_tf_accuracy_bools_and_empty():
    assert true_false_accuracy(["True", "no"], [True, False]).value == pytest.approx(0.5)
    r = true_false_accuracy([], [])
    assert math.isnan(r.value) and r.reason and r.n == 0


@pytest.mark.parametrize(
    "outputs, golds, exc, match",
    [
        (["True"], [1, 0], ValueError, "differ in length"),
        (["True"], [2], ValueError, r"golds\[0\] must be 0 or 1"),
        (["True", "x"], [1, "1"], ValueError, r"golds\[1\]"),
        (["True", None], [1, 1], TypeError, r"outputs\[1\]"),
    ],
)
def test_tf_bad_input(outputs, golds, exc, match):
    with pytest.raises(exc, match=match):
        true_false_accuracy(outputs, golds)


# ---------------------------------------------------------------------------- K2

K2 = [  # (pred, gold, char-LCS, tok-LCS, F1)
    ("University of Oxford", "University of Oxford", 1.0, 1.0, 1.0),
    ("Oxford University", "University of Oxford", 10 / 20, 1 / 3, 0.8),
    ("Middlesbrough", "Middlesbrough F.C.", 13 / 16, 0.5, 2 / 3),
    ("Chelsea F.C.", "Middlesbrough F.C.", 5 / 16, 0.5, 0.5),
    ("", "ostentatious", 0.0, 0.0, 0.0),
]
K2_IDS = [f"K2-row{i + 1}" for i in range(len(K2))]


@pytest.mark.parametrize("pred, gold, char, tok, f1", K2, ids=K2_IDS)
def test_k2_char_lcs(pred, gold, char, tok, f1):
    assert char_lcs_ratio(pred, gold) == pytest.approx(char)


@pytest.mark.parametrize("pred, gold, char, tok, f1", K2, ids=K2_IDS)
def test_k2_token_lcs(pred, gold, char, tok, f1):
    assert token_lcs_ratio(pred, gold) == pytest.approx(tok)


@pytest.mark.parametrize("pred, gold, char, tok, f1", K2, ids=K2_IDS)
def test_k2_f1(pred, gold, char, tok, f1):
    assert token_f1(pred, gold) == pytest.approx(f1)


def test_k2_aggregate():
    preds, golds = [r[0] for r in K2], [r[1] for r in K2]
    out = text_match_scores(preds, golds, seed=1)
    for key, col in (("char_lcs_ratio", 2), ("token_lcs_ratio", 3), ("token_f1", 4)):
        m = out[key]
        assert m.name == key
        assert m.value == pytest.approx(np.mean([r[col] for r in K2]))
        assert m.n == 5 and m.ci_method == "bootstrap"
        assert 0.0 <= m.ci_low <= m.value <= m.ci_high <= 1.0
    # Seeded: the same call gives the same interval.
    again = text_match_scores(preds, golds, seed=1)
    assert again["token_f1"].to_dict() == out["token_f1"].to_dict()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Middlesbrough F.C.", "middlesbrough fc"),
        ("  The   Big\tApple! ", "the big apple"),
        ("...", ""),
    ],
)
def test_normalize_text(text, expected):
    assert normalize_text(text) == expected


def test_empty_edges():
    assert char_lcs_ratio("", "") == 1.0
    assert char_lcs_ratio("!!", "?") == 1.0  # both normalise to empty
    assert token_f1("", "") == 1.0
    assert token_f1("a", "") == 0.0
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    r = text_match_scores([], [])["char_lcs_ratio"]
    assert math.isnan(r.value) and r.reason


def test_text_bad_input():
    with pytest.raises(ValueError, match="differ in length"):
        text_match_scores(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="item 1"):
        text_match_scores(["a", None], ["a", "b"])
    with pytest.raises(TypeError):
        char_lcs_ratio(1, "a")


def test_mean_with_bootstrap_nan_excluded():
    r = mean_with_bootstrap([1.0, float("nan"), 0.0], name="m", source="s")
    assert r.value == pytest.approx(0.5)
    assert r.n == 2 and r.counts["undefined"] == 1
    r = mean_with_bootstrap([float("nan")], name="m", source="s")
    assert math.isnan(r.value) and r.reason
    with pytest.raises(ValueError, match=r"values\[0\] is infinite"):
        mean_with_bootstrap([np.inf], name="m", source="s")


# ---------------------------------------------------------------------------- K3

K3 = [  # (e_p, e_g, cos, match at 0.7)
    ([1.0, 0.0], [0.8, 0.6], 0.8, 1),
    ([1.0, 0.0], [0.6, 0.8], 0.6, 0),
    ([1.0, 0.0], [0.0, 1.0], 0.0, 0),
]


@pytest.mark.parametrize("e_p, e_g, cos, match", K3, ids=["K3-row1", "K3-row2", "K3-row3"])
def test_k3_semantic_match(e_p, e_g, cos, match):
    assert cosine_similarity_matrix(e_p, e_g)[0, 0] == pytest.approx(cos)
    assert semantic_match(e_p, e_g, 0.7).tolist() == [match]


def test_k3_rate():
    p = np.array([r[0] for r in K3])
    g = np.array([r[1] for r in K3])
    r = semantic_match_rate(p, g, 0.7, embedding_model="fake-2d")
    assert r.value == pytest.approx(1 / 3)
    assert dict(r.counts) == {"match": 1, "n": 3}
    assert "theta=0.7" in r.source and "fake-2d" in r.source
    empty = semantic_match_rate(np.empty((0, 2)), np.empty((0, 2)), 0.7)
    assert math.isnan(empty.value) and empty.reason


@pytest.mark.parametrize(
    "p, g, theta, match",
    [
        ([[1.0, 0.0]], [[0.0, 0.0]], 0.7, "zero vector"),
        ([[1.0, 0.0]], [[1.0, 0.0, 0.0]], 0.7, "shapes differ"),
        ([[1.0, np.nan]], [[1.0, 0.0]], 0.7, "non-finite"),
        ([[1.0, 0.0]], [[1.0, 0.0]], 1.5, "theta"),
    ],
)
def test_k3_bad_input(p, g, theta, match):
    with pytest.raises(ValueError, match=match):
        semantic_match(p, g, theta)


# ---------------------------------------------------------------------------- K4

K4_S = np.array(
    [
        [0.95, 0.20, 0.10],
        [0.30, 0.91, 0.89],
        [0.10, 0.20, 0.50],
        [0.92, 0.10, 0.10],
    ]
)


def test_k4_precision_recall():
    p, r = open_ended_precision_recall(K4_S, 0.9)
    assert p.value == pytest.approx(0.75) and dict(p.counts) == {"matched": 3, "n": 4}
    assert r.value == pytest.approx(2 / 3) and dict(r.counts) == {"matched": 2, "n": 3}
    assert "theta=0.9" in p.source


def test_k4_no_generated_facts():
    p, r = open_ended_precision_recall(np.empty((0, 3)), 0.9)
    assert math.isnan(p.value) and p.reason == "no generated facts"
    assert r.value == 0.0 and r.n == 3


def test_k4_no_gold_facts():
    p, r = open_ended_precision_recall(np.empty((2, 0)), 0.9)
    assert p.value == 0.0
    assert math.isnan(r.value) and r.reason


def test_k4_macro_over_entities():
    out = open_ended_scores([K4_S, np.empty((0, 3))], 0.9)
    prec, rec = out["open_ended_precision"], out["open_ended_recall"]
    assert prec.value == pytest.approx(0.75)
    assert prec.n == 1 and prec.counts["undefined"] == 1
    assert rec.value == pytest.approx((2 / 3 + 0.0) / 2) and rec.n == 2


def test_k4_bad_input():
    with pytest.raises(ValueError, match="2-D"):
        open_ended_precision_recall(np.array([0.9, 0.1]), 0.9)
    with pytest.raises(ValueError, match="row 1, column 0"):
        open_ended_precision_recall(np.array([[0.9], [np.nan]]), 0.9)
    with pytest.raises(ValueError, match="entity 1"):
        open_ended_scores([K4_S, np.array([1.0])], 0.9)


def test_k4_similarity_from_embeddings():
    gen = np.array([[1.0, 0.0], [0.0, 1.0]])
    gold = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, -1.0]])
    s = cosine_similarity_matrix(gen, gold)
    assert s.shape == (2, 3)
    assert s[0, 1] == pytest.approx(1 / math.sqrt(2))
    p, r = open_ended_precision_recall(s, 0.9)
    assert (p.value, r.value) == pytest.approx((0.5, 1 / 3))


# ---------------------------------------------------------------------------- properties

_text = st.text(alphabet=st.sampled_from("ab c.D"), max_size=25)


@settings(max_examples=150, deadline=None)
@given(_text, _text)
def test_property_lcs_ratios_in_unit_interval_and_symmetric(a, b):
    for fn in (char_lcs_ratio, token_lcs_ratio, token_f1):
        v = fn(a, b)
        assert 0.0 <= v <= 1.0
        assert v == pytest.approx(fn(b, a))


@settings(max_examples=100, deadline=None)
@given(_text)
def test_property_identical_strings_score_one(a):
    assert char_lcs_ratio(a, a) == 1.0
    assert token_lcs_ratio(a, a) == 1.0
    assert token_f1(a, a) == 1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_property_lcs_length_bounds(a, b):
    n = lcs_length(a, b)
    assert 0 <= n <= min(len(a), len(b))
    assert lcs_length(a, a) == len(a)
