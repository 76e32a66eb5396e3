"""KGQuiz-style metrics, project implementation (NOT the authors').

KGQuiz (Bai et al. 2023/2024) publishes data but no evaluation code, and its paper leaves the T/F
parse rule, the LCS normalisation, the F1 tokenisation and the similarity threshold unstated
(docs/metrics.md §1.7). Every definition here is the project convention pinned by docs/metrics.md §3.6 (toys
K1-K4); results say so in their ``source`` and record theta / the embedding model there, so a number
is never mistaken for one of the paper's.

Per-item scores are plain floats or arrays; the aggregating functions return ``MetricResult``s with
a Wilson interval for 0/1 outcomes and a seeded item bootstrap for continuous means.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import TYPE_CHECKING, Sequence

import numpy as np
from numpy.typing import ArrayLike

from bias_metrics.intervals import Draws, check_confidence, cluster_bootstrap, wilson_result
from bias_metrics.result import MetricResult, undefined

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "parse_true_false",
    "true_false_accuracy",
    "label_accuracy",
    "normalize_text",
    "lcs_length",
    "char_lcs_ratio",
    "token_lcs_ratio",
    "token_f1",
    "text_match_scores",
    "mean_with_bootstrap",
    "cosine_similarity_matrix",
    "semantic_match",
    "semantic_match_rate",
    "similarity_match_rate",
    "open_ended_precision_recall",
    "open_ended_scores",
]

_PROJECT = "KGQuiz-style, project implementation"
_TF_WORD = re.compile(r"\b(true|false)\b")
_PUNCT_TABLE = str.maketrans("", "", string.punctuation)


# --------------------------------------------------------------------------------------------
# K1: True/False


def parse_true_false(output: str) -> int | None:
    """Label of a free-text True/False answer: 1 = True, 0 = False, None = invalid.

    Rule (K1): lowercase, find the whole words ``true`` / ``false``; the FIRST mention wins; neither
    found -> None. So ``True or False? It is False`` parses as 1 (an echo of the question counts):
    pinning "first" matters, "last mention wins" would flip that row.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K1.

    Parameters
    ----------
    output : str
        The model's generated text.

    Returns
    -------
    int or None
        1, 0, or None.

    Raises
    ------
    TypeError
        ``output`` is not a str.

    Examples
    --------
    >>> from bias_metrics.kgquiz import parse_true_false
    >>> parse_true_false("FALSE."), parse_true_false("True or False? It is False")
    (0, 1)
    >>> print(parse_true_false("It is untrue"))
    None
    """
    if not isinstance(output, str):
        raise TypeError(f"output must be a str, got {type(output).__name__}")
    m = _TF_WORD.search(output.lower())
    if m is None:
        return None
    return 1 if m.group(1) == "true" else 0


def _source(toy: str, *details: str) -> str:
    """A result's ``source``: the project's, the toy of docs/metrics.md §3.6 it is pinned by, details."""
    return "; ".join((_PROJECT, f"docs/metrics.md §3.6 {toy}") + details)


def _check_same_length(a: Sequence[object], b: Sequence[object], name_a: str, name_b: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{name_a} and {name_b} differ in length: {len(a)} vs {len(b)}")


def _gold(gold: object, i: int, *, binary: bool) -> int:
    """``golds[i]`` as an int (bools accepted); with ``binary`` it must be 0 or 1."""
    if isinstance(gold, (bool, np.bool_)):
        gold = int(gold)
    if binary and (not isinstance(gold, (int, np.integer)) or gold not in (0, 1)):
        raise ValueError(f"golds[{i}] must be 0 or 1, got {gold!r}")
    if not isinstance(gold, (int, np.integer)):
        raise ValueError(f"golds[{i}] must be an int, got {gold!r}")
    return int(gold)


def _answer_counts(correct: int, invalid: int, n: int) -> dict[str, int]:
    """K1's counts: an answer is correct, parsed but wrong (incorrect) or invalid."""
    return {"correct": correct, "incorrect": n - correct - invalid, "invalid": invalid, "n": n}


def true_false_accuracy(
    outputs: Sequence[str],
    golds: Sequence[int],
    *,
    confidence: float = 0.95,
) -> MetricResult:
    """True/False accuracy; an unparseable (invalid) output counts as wrong and is reported.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K1 (toy accuracy 0.5).

    Parameters
    ----------
    outputs : sequence of str
        Shape (n,), raw model outputs, parsed with ``parse_true_false``.
    golds : sequence of int
        Shape (n,), gold labels, 1 = True, 0 = False (KGQuiz ``ground_truth``; bools accepted).
    confidence : float, default=0.95
        Wilson interval coverage, in (0, 1).

    Returns
    -------
    MetricResult
        ``tf_accuracy`` in [0, 1], n = n, counts ``correct``, ``incorrect`` (parsed but wrong),
        ``invalid``, ``n``; Wilson interval. NaN with a reason when n == 0.

    Raises
    ------
    ValueError
        Mismatched lengths; a gold that is not 0/1 (names its index).
    TypeError
        An output that is not a str.

    Examples
    --------
    >>> from bias_metrics.kgquiz import true_false_accuracy
    >>> r = true_false_accuracy(["True", "false.", "I don't know", "True or False? It is False"],
    ...                         [1, 0, 0, 0])
    >>> r.value, r.counts
    (0.5, {'correct': 2, 'incorrect': 1, 'invalid': 1, 'n': 4})
    >>> round(r.ci_low, 4), round(r.ci_high, 4)
    (0.15, 0.85)
    """
    _check_same_length(outputs, golds, "outputs", "golds")
    check_confidence(confidence)
    source = f"{_PROJECT}; docs/metrics.md §3.6 K1; parse: lowercase, whole words, first mention wins"
    correct = invalid = 0
    for i, (out, gold) in enumerate(zip(outputs, golds)):
        gold = _gold(gold, i, binary=True)
        try:
            pred = parse_true_false(out)
        except TypeError as exc:
            raise TypeError(f"outputs[{i}]: {exc}") from None
        if pred is None:
            invalid += 1
        elif pred == gold:
            correct += 1
    n = len(outputs)
    return wilson_result("tf_accuracy", correct, n, _answer_counts(correct, invalid, n), confidence, source)


def label_accuracy(
    predicted: Sequence[int | None],
    golds: Sequence[int],
    *,
    name: str = "accuracy",
    source: str = "",
    confidence: float = 0.95,
) -> tuple[MetricResult, MetricResult]:
    """Accuracy and invalid rate of already-parsed answers (true/false labels or option indices).

    An invalid answer (``None``) stays in the denominator and counts as wrong, as in K1: a model
    that answers nothing parseable cannot pass an accuracy floor by abstaining.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K1 (invalid = wrong).

    Parameters
    ----------
    predicted : sequence of int or None
        Shape (n,), parsed labels, or None for an invalid output.
    golds : sequence of int
        Shape (n,), gold labels (bools accepted).
    name : str, default="accuracy"
        The accuracy's metric name.
    source : str, default=""
        Appended to the result's source.
    confidence : float, default=0.95
        Wilson interval coverage, in (0, 1).

    Returns
    -------
    accuracy, invalid_rate : MetricResult
        (``name``, ``invalid_rate``): correct / n and invalid / n in [0, 1], counts ``correct``,
        ``incorrect``, ``invalid``, ``n``, Wilson intervals; both NaN with a reason when n == 0.

    Raises
    ------
    ValueError
        Mismatched lengths; a gold or prediction that is not an int (names its index).

    Examples
    --------
    >>> from bias_metrics.kgquiz import label_accuracy
    >>> acc, invalid = label_accuracy([1, None, 0, 2], [1, 0, 0, 1])
    >>> acc.value, invalid.value, acc.counts
    (0.5, 0.25, {'correct': 2, 'incorrect': 1, 'invalid': 1, 'n': 4})
    >>> label_accuracy([], [])[0].reason
    'no items'
    """
    _check_same_length(predicted, golds, "predicted", "golds")
    check_confidence(confidence)
    correct, invalid = _label_tally(predicted, golds)
    n = len(golds)
    counts = _answer_counts(correct, invalid, n)
    src = f"{_PROJECT}; docs/metrics.md §3.6 K1; invalid counts as wrong" + (f"; {source}" if source else "")
    return (
        wilson_result(name, correct, n, counts, confidence, src),
        wilson_result("invalid_rate", invalid, n, counts, confidence, src),
    )


def _label_tally(predicted: Sequence[int | None], golds: Sequence[int]) -> tuple[int, int]:
    """(correct, invalid) answers among ``predicted``, each checked."""
    correct = invalid = 0
    for i, (pred, gold) in enumerate(zip(predicted, golds)):
        gold = _gold(gold, i, binary=False)
        if pred is None:
            invalid += 1
            continue
        if isinstance(pred, bool) or not isinstance(pred, (int, np.integer)):
            raise ValueError(f"predicted[{i}] must be an int or None, got {pred!r}")
        correct += int(pred == gold)
    return correct, invalid


# --------------------------------------------------------------------------------------------
# K2: string overlap


def normalize_text(text: str) -> str:
    """Project normalisation: lowercase, delete ASCII punctuation, collapse whitespace (and strip).

    Unlike SQuAD's ``normalize_answer`` it keeps articles (a/an/the): K2 pins this choice.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K2.

    Parameters
    ----------
    text : str
        The text to normalise.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        ``text`` is not a str.

    Examples
    --------
    >>> from bias_metrics.kgquiz import normalize_text
    >>> normalize_text("Middlesbrough F.C."), normalize_text("  The   Red Fort! ")
    ('middlesbrough fc', 'the red fort')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return " ".join(text.lower().translate(_PUNCT_TABLE).split())


def lcs_length(a: Sequence[object], b: Sequence[object]) -> int:
    """Length of the longest common subsequence (not substring) of two sequences.

    Plain O(len(a) * len(b)) dynamic programme with one rolling row; no LCS library is installed
    and this is the project's own metric.

    Source: docs/metrics.md §3.6 K2.

    Parameters
    ----------
    a, b : sequence
        Any sequences of hashable, ==-comparable elements (str = characters, list = tokens).

    Returns
    -------
    int
        In [0, min(len(a), len(b))].

    Examples
    --------
    >>> from bias_metrics.kgquiz import lcs_length
    >>> lcs_length("abcbdab", "bdcaba"), lcs_length(["red", "fort"], ["the", "red", "fort"])
    (4, 2)
    """
    if len(a) < len(b):
        a, b = b, a  # the row is over the shorter sequence
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _lcs_ratio(p: Sequence[object], g: Sequence[object]) -> float:
    longest = max(len(p), len(g))
    if longest == 0:
        return 1.0  # two empty answers are identical; matches SQuAD F1's empty == empty rule
    return lcs_length(p, g) / longest


def char_lcs_ratio(pred: str, gold: str, *, normalize: bool = True) -> float:
    """Character LCS ratio |LCS(p, g)| / max(|p|, |g|) on normalised strings.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K2 (e.g. Middlesbrough vs
    Middlesbrough F.C. = 13/16).

    Parameters
    ----------
    pred, gold : str
        Normalised with ``normalize_text`` unless ``normalize=False``.
    normalize : bool, default=True
        Whether to normalise both strings first.

    Returns
    -------
    float
        In [0, 1]; 1.0 for identical strings, including two that normalise to empty.

    Raises
    ------
    TypeError
        A non-str argument.

    Examples
    --------
    >>> from bias_metrics.kgquiz import char_lcs_ratio
    >>> char_lcs_ratio("Middlesbrough", "Middlesbrough F.C.")
    0.8125
    >>> char_lcs_ratio("...", "!")
    1.0
    """
    p, g = _texts(pred, gold, normalize)
    return _lcs_ratio(p, g)


def token_lcs_ratio(pred: str, gold: str, *, normalize: bool = True) -> float:
    """Token LCS ratio: as ``char_lcs_ratio`` over whitespace tokens.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K2.

    Parameters
    ----------
    pred, gold, normalize
        As ``char_lcs_ratio``.

    Returns
    -------
    float
        In [0, 1]; 1.0 for identical token lists (also both empty).

    Raises
    ------
    TypeError
        A non-str argument.

    Examples
    --------
    >>> from bias_metrics.kgquiz import token_lcs_ratio
    >>> round(token_lcs_ratio("The Red Fort", "red fort, Delhi"), 4)
    0.6667
    """
    p, g = _texts(pred, gold, normalize)
    return _lcs_ratio(p.split(), g.split())


def token_f1(pred: str, gold: str, *, normalize: bool = True) -> float:
    """SQuAD token F1 (multiset overlap of whitespace tokens) on normalised strings.

    F1 = 2PR/(P+R) with P = overlap/|pred tokens|, R = overlap/|gold tokens|; 0 without overlap;
    if either side has no tokens, 1 when both are empty, else 0 (SQuAD v2 ``compute_f1``). The
    normalisation is the project's (articles kept), not SQuAD's.

    Source: Rajpurkar et al. 2016 official eval F1; docs/metrics.md §3.6 K2.

    Parameters
    ----------
    pred, gold, normalize
        As ``char_lcs_ratio``.

    Returns
    -------
    float
        In [0, 1].

    Raises
    ------
    TypeError
        A non-str argument.

    Examples
    --------
    P = R = 2/3:

    >>> from bias_metrics.kgquiz import token_f1
    >>> round(token_f1("the red fort", "red fort delhi"), 4), token_f1("", ""), token_f1("a", "")
    (0.6667, 1.0, 0.0)
    """
    p, g = _texts(pred, gold, normalize)
    pt, gt = p.split(), g.split()
    if not pt or not gt:
        return float(pt == gt)
    overlap = sum((Counter(pt) & Counter(gt)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pt), overlap / len(gt)
    return 2 * precision * recall / (precision + recall)


def _str(x: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"expected a str, got {type(x).__name__}")
    return x


def _texts(pred: str, gold: str, normalize: bool) -> tuple[str, str]:
    """Both strings, normalised unless ``normalize`` is False (each checked to be a str)."""
    return (normalize_text(pred), normalize_text(gold)) if normalize else (_str(pred), _str(gold))


def mean_with_bootstrap(
    values: Sequence[float] | np.ndarray,
    *,
    name: str,
    source: str,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> MetricResult:
    """Mean of per-item continuous scores with a seeded percentile bootstrap over items.

    NaN items (undefined per-item scores, e.g. precision of an entity with no generated facts) are
    excluded from the mean and counted in ``counts['undefined']``; they are never read as 0.

    Source: project convention (item bootstrap via ``intervals.cluster_bootstrap``, one cluster per
    item).

    Parameters
    ----------
    values : array_like of float
        Shape (n,), per-item scores.
    name, source : str
        Copied into the result.
    confidence, n_resamples, seed
        As ``intervals.cluster_bootstrap``.

    Returns
    -------
    MetricResult
        value = mean of the defined items, n = their count, ci_method ``"bootstrap"``, counts ``n``
        (defined), ``undefined``; NaN with a reason when no item is defined.

    Raises
    ------
    ValueError
        Values not 1-D, or +-inf among them; confidence or n_resamples out of range.

    Examples
    --------
    >>> from bias_metrics.kgquiz import mean_with_bootstrap
    >>> r = mean_with_bootstrap([0.0, 0.5, 1.0, float("nan")], name="token_f1", source="toy", seed=0)
    >>> r.value, r.n, r.counts
    (0.5, 3, {'n': 3, 'undefined': 1})
    >>> r.ci_low <= r.value <= r.ci_high
    True
    >>> mean_with_bootstrap([float("nan")], name="token_f1", source="toy").reason
    "every item's score is undefined (NaN)"
    """
    check_confidence(confidence)
    arr = _item_scores(values)
    defined = arr[~np.isnan(arr)]
    counts = {"n": int(defined.size), "undefined": int(arr.size - defined.size)}
    if defined.size == 0:
        reason = "no items" if arr.size == 0 else "every item's score is undefined (NaN)"
        return undefined(name, reason, counts=counts, source=source)
    low, high = _item_bootstrap(defined, n_resamples=n_resamples, confidence=confidence, seed=seed)
    mean = float(defined.mean())
    return MetricResult(
        name, mean, int(defined.size), low, high, "bootstrap", confidence, counts, source=source
    )


def _item_bootstrap(scores: np.ndarray, **draws: Unpack[Draws]) -> tuple[float, float]:
    # Per-item (score, 1) rows: the resampled mean is sum(score) / sum(1) over the drawn items.
    cells = np.column_stack([scores, np.ones_like(scores)])
    return cluster_bootstrap(cells, lambda s: s[..., 0] / s[..., 1], **draws)


def _item_scores(values: ArrayLike) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"values must be 1-D (one score per item), got shape {arr.shape}")
    inf_idx = np.flatnonzero(np.isinf(arr))
    if inf_idx.size:
        raise ValueError(f"values[{int(inf_idx[0])}] is infinite")
    return arr


def text_match_scores(
    preds: Sequence[str],
    golds: Sequence[str],
    *,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, MetricResult]:
    """Mean char-LCS ratio, token-LCS ratio and token F1 over items (blank filling, factual editing).

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K2.

    Parameters
    ----------
    preds : sequence of str
        Shape (n,), model answers.
    golds : sequence of str
        Shape (n,), gold answers (KGQuiz ``ground_truth``).
    confidence, n_resamples, seed
        See ``mean_with_bootstrap``.

    Returns
    -------
    dict of str to MetricResult
        {"char_lcs_ratio", "token_lcs_ratio", "token_f1"} -> ``MetricResult`` in [0, 1] with a
        bootstrap interval; NaN with a reason when n == 0.

    Raises
    ------
    ValueError
        Mismatched lengths.
    TypeError
        A non-str element (names its index).

    Examples
    --------
    >>> from bias_metrics.kgquiz import text_match_scores
    >>> s = text_match_scores(["Middlesbrough", "Red Fort"], ["Middlesbrough F.C.", "red fort"])
    >>> {k: round(v.value, 3) for k, v in s.items()}
    {'char_lcs_ratio': 0.906, 'token_lcs_ratio': 0.75, 'token_f1': 0.833}
    """
    _check_same_length(preds, golds, "preds", "golds")
    fns = {"char_lcs_ratio": char_lcs_ratio, "token_lcs_ratio": token_lcs_ratio, "token_f1": token_f1}
    per_item: dict[str, list[float]] = {k: [] for k in fns}
    for i, (p, g) in enumerate(zip(preds, golds)):
        if not isinstance(p, str) or not isinstance(g, str):
            raise TypeError(
                f"item {i}: pred and gold must be str, got {type(p).__name__} and {type(g).__name__}"
            )
        for key, fn in fns.items():
            per_item[key].append(fn(p, g))
    source = f"{_PROJECT}; docs/metrics.md §3.6 K2; normalised: lowercase, no ASCII punctuation"
    return {
        key: mean_with_bootstrap(
            vals, name=key, source=source, confidence=confidence, n_resamples=n_resamples, seed=seed
        )
        for key, vals in per_item.items()
    }


# --------------------------------------------------------------------------------------------
# K3 / K4: embedding similarity


def _check_theta(theta: float) -> float:
    if (
        isinstance(theta, bool)
        or not isinstance(theta, (int, float, np.integer, np.floating))
        or not -1.0 <= float(theta) <= 1.0
    ):
        raise ValueError(f"theta must be a number in [-1, 1], got {theta!r}")
    return float(theta)


def _as_matrix(x: ArrayLike, label: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{label} must be (d,) or (n, d), got shape {arr.shape}")
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{label} has a non-finite value at row {int(bad[0][0])}")
    norms = np.linalg.norm(arr, axis=1)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"{label} row {int(zero[0])} is the zero vector; its cosine is undefined")
    unit: np.ndarray = arr / norms[:, None]
    return unit


def cosine_similarity_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarities between every row of ``a`` and every row of ``b``.

    Source: docs/metrics.md §3.6 K3/K4.

    Parameters
    ----------
    a : numpy.ndarray
        (n, d) or (d,) embeddings from any model (computed by the harness).
    b : numpy.ndarray
        (m, d) or (d,) embeddings.

    Returns
    -------
    numpy.ndarray
        (n, m) float array in [-1, 1] (clipped against rounding).

    Raises
    ------
    ValueError
        Wrong rank, different d, a non-finite value, or a zero row.

    Examples
    --------
    >>> from bias_metrics.kgquiz import cosine_similarity_matrix
    >>> cosine_similarity_matrix([[1.0, 0.0], [0.0, 2.0]], [1.0, 1.0]).round(4).tolist()
    [[0.7071], [0.7071]]
    """
    na, nb = _as_matrix(a, "a"), _as_matrix(b, "b")
    if na.shape[1] != nb.shape[1]:
        raise ValueError(f"embedding sizes differ: {na.shape[1]} vs {nb.shape[1]}")
    cosines: np.ndarray = np.clip(na @ nb.T, -1.0, 1.0)
    return cosines


def semantic_match(pred_emb: np.ndarray, gold_emb: np.ndarray, theta: float) -> np.ndarray:
    """Per-item semantic match 1[cos(e_p, e_g) >= theta] of paired embeddings.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K3.

    Parameters
    ----------
    pred_emb, gold_emb : numpy.ndarray
        (n, d) (row i of each is item i) or (d,) for one item.
    theta : float
        Threshold in [-1, 1] (the paper's is unknown; pin it in the config).

    Returns
    -------
    numpy.ndarray
        int array (n,) of 0/1.

    Raises
    ------
    ValueError
        Shapes differ, a zero or non-finite row, theta outside [-1, 1].

    Examples
    --------
    Item 0 is 45 degrees off its gold (cos 0.71), item 1 points the same way (cos 1):

    >>> from bias_metrics.kgquiz import semantic_match
    >>> semantic_match([[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 2.0]], theta=0.9).tolist()
    [0, 1]
    """
    theta = _check_theta(theta)
    p, g = _as_matrix(pred_emb, "pred_emb"), _as_matrix(gold_emb, "gold_emb")
    if p.shape != g.shape:
        raise ValueError(f"pred_emb and gold_emb shapes differ: {p.shape} vs {g.shape}")
    cos = np.clip(np.einsum("ij,ij->i", p, g), -1.0, 1.0)
    matched: np.ndarray = (cos >= theta).astype(np.int64)
    return matched


def semantic_match_rate(
    pred_emb: np.ndarray,
    gold_emb: np.ndarray,
    theta: float,
    *,
    embedding_model: str | None = None,
    confidence: float = 0.95,
) -> MetricResult:
    """Share of items whose answer embedding is within cosine theta of the gold's.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K3.

    Parameters
    ----------
    pred_emb, gold_emb : numpy.ndarray
        (n, d) paired embeddings; n may be 0 (shape (0, d)).
    theta : float
        Threshold in [-1, 1].
    embedding_model : str, optional
        Name of the model that produced the embeddings, recorded in ``source``.
    confidence : float, default=0.95
        Wilson interval coverage.

    Returns
    -------
    MetricResult
        ``semantic_match_rate`` in [0, 1], counts ``match``, ``n``; Wilson interval; NaN with a
        reason when n == 0.

    Raises
    ------
    ValueError
        See ``semantic_match``.

    Examples
    --------
    >>> import numpy as np
    >>> from bias_metrics.kgquiz import semantic_match_rate
    >>> r = semantic_match_rate(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 1.0], [0.0, 2.0]]),
    ...                         0.9, embedding_model="toy-embedder")
    >>> r.value, r.counts, "theta=0.9" in r.source
    (0.5, {'match': 1, 'n': 2}, True)
    >>> semantic_match_rate(np.empty((0, 2)), np.empty((0, 2)), 0.9).reason
    'no items'
    """
    check_confidence(confidence)
    theta = _check_theta(theta)
    source = _source("K3", f"theta={theta}", f"embedding_model={embedding_model}")
    p, g = np.asarray(pred_emb, dtype=np.float64), np.asarray(gold_emb, dtype=np.float64)
    if p.ndim == 2 and p.shape[0] == 0 and g.shape == p.shape:
        return undefined("semantic_match_rate", "no items", counts={"match": 0, "n": 0}, source=source)
    matches = semantic_match(p, g, theta)
    k, n = int(matches.sum()), int(matches.size)
    return wilson_result("semantic_match_rate", k, n, {"match": k, "n": n}, confidence, source)


def similarity_match_rate(
    similarities: Sequence[float] | np.ndarray,
    theta: float,
    *,
    name: str = "semantic_match_rate",
    embedding_model: str | None = None,
    confidence: float = 0.95,
) -> MetricResult:
    """``semantic_match_rate`` from per-item cosine similarities already computed.

    The harness stores the cosines cos(e_p, e_g) in its records, not the embeddings: this is the
    share of items with cos >= theta.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K3 (same rule as
    ``semantic_match``).

    Parameters
    ----------
    similarities : array_like of float
        Shape (n,), cosines in [-1, 1].
    theta : float
        Threshold in [-1, 1].
    name : str, default="semantic_match_rate"
        The result's name.
    embedding_model : str, optional
        Recorded in ``source``.
    confidence : float, default=0.95
        Wilson interval coverage.

    Returns
    -------
    MetricResult
        In [0, 1], counts ``match``, ``n``; NaN with a reason when n == 0.

    Raises
    ------
    ValueError
        Not 1-D, a non-finite value or one outside [-1, 1] (names its index), theta outside [-1, 1].

    Examples
    --------
    >>> from bias_metrics.kgquiz import similarity_match_rate
    >>> r = similarity_match_rate([0.95, 0.5, 0.8, 0.1], theta=0.8)
    >>> r.value, r.counts
    (0.5, {'match': 2, 'n': 4})
    """
    check_confidence(confidence)
    theta = _check_theta(theta)
    cos = np.asarray(similarities, dtype=np.float64)
    if cos.ndim != 1:
        raise ValueError(f"similarities must be 1-D (one per item), got shape {cos.shape}")
    bad = np.flatnonzero(~np.isfinite(cos) | (cos < -1.0 - 1e-6) | (cos > 1.0 + 1e-6))
    if bad.size:
        raise ValueError(f"similarities[{int(bad[0])}] = {cos[bad[0]]!r} is not a cosine in [-1, 1]")
    source = _source("K3", f"theta={theta}", f"embedding_model={embedding_model}")
    k, n = int((cos >= theta).sum()), int(cos.size)
    return wilson_result(name, k, n, {"match": k, "n": n}, confidence, source)


def _as_similarity(similarity: np.ndarray, label: str = "similarity") -> np.ndarray:
    s = np.asarray(similarity, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(
            f"{label} must be 2-D (generated facts, gold facts), got shape {s.shape}; "
            "pass np.empty((0, n_gold)) when nothing was generated"
        )
    bad = np.argwhere(np.isnan(s))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise ValueError(f"{label} has NaN at row {r}, column {c}")
    return s


def open_ended_precision_recall(
    similarity: np.ndarray,
    theta: float,
    *,
    confidence: float = 0.95,
) -> tuple[MetricResult, MetricResult]:
    """Precision and recall of one entity's generated facts against its gold triples.

    precision = #generated facts whose best gold similarity >= theta / #generated facts;
    recall = #gold triples whose best generated similarity >= theta / #gold triples.
    Edges: no generated facts -> precision NaN (reason given), recall 0; no gold triples -> recall
    NaN, precision 0 (nothing can be matched).

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K4 (toy: 0.75 / 2/3).

    Parameters
    ----------
    similarity : numpy.ndarray
        (n_generated, n_gold) matrix S, e.g. ``cosine_similarity_matrix(gen, gold)``.
    theta : float
        Threshold in [-1, 1].
    confidence : float, default=0.95
        Wilson interval coverage.

    Returns
    -------
    precision, recall : MetricResult
        (``open_ended_precision``, ``open_ended_recall``), each in [0, 1] with counts ``matched``,
        ``n`` and a Wilson interval over facts (facts of one entity are not independent: use
        ``open_ended_scores`` for benchmark-level intervals).

    Raises
    ------
    ValueError
        S not 2-D or containing NaN; theta outside [-1, 1].

    Examples
    --------
    Toy K4: 3 of 4 generated facts match a gold triple, 2 of 3 gold triples are recovered.

    >>> import numpy as np
    >>> from bias_metrics.kgquiz import open_ended_precision_recall
    >>> S = np.array([[0.9, 0.1, 0.1], [0.8, 0.2, 0.1], [0.1, 0.95, 0.2], [0.1, 0.2, 0.3]])
    >>> p, r = open_ended_precision_recall(S, theta=0.7)
    >>> p.value, round(r.value, 4), r.counts
    (0.75, 0.6667, {'matched': 2, 'n': 3})
    >>> p, r = open_ended_precision_recall(np.empty((0, 3)), theta=0.7)
    >>> p.value, p.reason, r.value
    (nan, 'no generated facts', 0.0)
    """
    check_confidence(confidence)
    theta = _check_theta(theta)
    # A fact is matched when its best similarity on the other side reaches theta.
    hits = _as_similarity(similarity) >= theta
    source = _source("K4", f"theta={theta}")
    precision = _matched_share(
        "open_ended_precision", hits.any(axis=1), "no generated facts", confidence, source
    )
    recall = _matched_share("open_ended_recall", hits.any(axis=0), "no gold facts", confidence, source)
    return precision, recall


def _matched_share(name: str, matched: ArrayLike, empty: str, confidence: float, source: str) -> MetricResult:
    hits = np.asarray(matched)
    k, n = int(hits.sum()), int(hits.size)
    return wilson_result(name, k, n, {"matched": k, "n": n}, confidence, source, empty=empty)


def open_ended_scores(
    similarities: Sequence[np.ndarray],
    theta: float,
    *,
    embedding_model: str | None = None,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> dict[str, MetricResult]:
    """Macro-averaged (per entity) open-ended precision and recall over a benchmark.

    Entities whose precision (recall) is undefined are left out of that mean and counted in its
    ``counts['undefined']``.

    Source: KGQuiz-style, project implementation; docs/metrics.md §3.6 K4.

    Parameters
    ----------
    similarities : sequence of numpy.ndarray
        One (n_generated_e, n_gold_e) matrix per entity.
    theta : float
        Threshold in [-1, 1].
    embedding_model : str, optional
        Recorded in ``source``.
    confidence, n_resamples, seed
        See ``mean_with_bootstrap`` (entities are resampled).

    Returns
    -------
    dict of str to MetricResult
        {"open_ended_precision", "open_ended_recall"} -> ``MetricResult`` in [0, 1].

    Raises
    ------
    ValueError
        A bad matrix (the message names the entity index) or theta.

    Examples
    --------
    Entity 0 is toy K4 (precision 0.75, recall 2/3); entity 1 generated nothing (precision
    undefined, recall 0).

    >>> import numpy as np
    >>> from bias_metrics.kgquiz import open_ended_scores
    >>> S = np.array([[0.9, 0.1, 0.1], [0.8, 0.2, 0.1], [0.1, 0.95, 0.2], [0.1, 0.2, 0.3]])
    >>> s = open_ended_scores([S, np.empty((0, 3))], theta=0.7)
    >>> p, r = s["open_ended_precision"], s["open_ended_recall"]
    >>> p.value, p.counts, round(r.value, 4), r.counts
    (0.75, {'n': 1, 'undefined': 1}, 0.3333, {'n': 2, 'undefined': 0})
    """
    theta = _check_theta(theta)
    precisions, recalls = _per_entity(similarities, theta)
    source = _source("K4", "macro over entities", f"theta={theta}", f"embedding_model={embedding_model}")
    draws: Draws = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    return {
        "open_ended_precision": mean_with_bootstrap(
            precisions, name="open_ended_precision", source=source, **draws
        ),
        "open_ended_recall": mean_with_bootstrap(recalls, name="open_ended_recall", source=source, **draws),
    }


def _per_entity(similarities: Sequence[np.ndarray], theta: float) -> tuple[list[float], list[float]]:
    """Each entity's open-ended precision and recall (NaN where undefined)."""
    precisions, recalls = [], []
    for e, s in enumerate(similarities):
        try:
            p, r = open_ended_precision_recall(_as_similarity(s), theta)
        except ValueError as exc:
            raise ValueError(f"entity {e}: {exc}") from None
        precisions.append(p.value)
        recalls.append(r.value)
    return precisions, recalls
