"""Sequential release gates, the statistics (issue 25): the betting confidence sequence of
``bias_metrics.sequential`` and the PASS / FAIL / CONTINUE rule (docs/metrics.md §5).

The simulation is the contract: items of a finite category (n = 2000) are scored in a random order,
in rounds of 50; after every round the gate is checked and the first PASS or FAIL stops it. Over a
whole run the probability of a wrong verdict (PASS while the true value is outside the band, FAIL
while it is inside) must be at most alpha, up to a Monte-Carlo margin of 3 standard errors of a
rate alpha over the runs. The same rule on the suite's fixed-n Wilson interval must exceed that
margin where it should (a true value on the band's edge): otherwise the simulation could not tell
a valid sequence from an invalid one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bias_metrics.intervals import wilson_interval
from bias_metrics.sequential import (
    CONTINUE,
    FAIL,
    PASS,
    betting_cs,
    betting_cs_path,
    decide,
    diff_bias_cs,
    difference_interval,
    oracle_sprt_n,
    pair_score_cs,
    product_interval,
    regression_band,
    s_amb_cs,
    s_dis_cs,
    sequential_gate,
)

ALPHA = 0.05
N_ITEMS = 2000
ROUND = 50
CHECKS = np.arange(ROUND, N_ITEMS + 1, ROUND)
Z95 = 1.959963984540054


def _margin(runs: int) -> float:
    """alpha plus 3 Monte-Carlo standard errors of a rate alpha estimated from ``runs`` runs."""
    return ALPHA + 3.0 * math.sqrt(ALPHA * (1.0 - ALPHA) / runs)


def _wilson(k: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wilson 95 % interval, vectorised (checked against ``intervals.wilson_interval`` below)."""
    n_safe = np.maximum(n, 1)
    p = k / n_safe
    d = 1.0 + Z95**2 / n_safe
    centre = (p + Z95**2 / (2 * n_safe)) / d
    half = Z95 / d * np.sqrt(p * (1 - p) / n_safe + Z95**2 / (4 * n_safe**2))
    return np.where(n > 0, centre - half, 0.0), np.where(n > 0, centre + half, 1.0)


def _first_verdict(low: np.ndarray, high: np.ndarray, band) -> tuple[np.ndarray, np.ndarray]:
    """Per run: the first PASS / FAIL over the rounds (else the last round's CONTINUE) and when."""
    runs, rounds = low.shape
    verdicts = np.full(runs, CONTINUE, dtype=object)
    used = np.full(runs, N_ITEMS)
    for r in range(runs):
        for j in range(rounds):
            v = decide((low[r, j], high[r, j]), band)
            if v != CONTINUE:
                verdicts[r], used[r] = v, CHECKS[j]
                break
    return verdicts, used


def _simulate(n_pos: int, n_neg: int, n_out: int, band, runs: int, seed: int):
    """Wrong-verdict rates of the sequential and the naive rule on one finite population.

    The population has ``n_pos`` items of value 1, ``n_neg`` of value 0 and ``n_out`` outside the
    metric's denominator (NaN: unknown answers of an s_DIS share), so the true share is
    n_pos / (n_pos + n_neg), computed exactly over the whole category.
    """
    pop = np.concatenate([np.ones(n_pos), np.zeros(n_neg), np.full(n_out, np.nan)])
    assert pop.size == N_ITEMS
    truth = n_pos / (n_pos + n_neg)
    inside = band[0] <= truth <= band[1]
    # Candidate shares: multiples of 1/200 around the band and the truth (the truth is one of them,
    # so the grid costs no coverage; outside the window the CS extends to 0 or 1, conservatively).
    lo = max(0.0, min(band[0], truth) - 0.1)
    hi = min(1.0, max(band[1], truth) + 0.1)
    grid = np.arange(math.floor(lo * 200), math.ceil(hi * 200) + 1) / 200
    assert np.isclose(grid, truth).any()
    rng = np.random.default_rng(seed)
    orders = np.stack([rng.permutation(pop) for _ in range(runs)])

    low, high = betting_cs_path(orders, ALPHA, population_size=N_ITEMS, grid=grid, checkpoints=CHECKS)
    seq, seq_used = _first_verdict(low, high, band)

    k = np.cumsum(orders == 1.0, axis=1)[:, CHECKS - 1]
    n = np.cumsum(~np.isnan(orders), axis=1)[:, CHECKS - 1]
    naive, _ = _first_verdict(*_wilson(k, n), band)

    wrong = FAIL if inside else PASS
    return {
        "truth": truth,
        "seq_wrong": float(np.mean(seq == wrong)),
        "naive_wrong": float(np.mean(naive == wrong)),
        "seq_decided": float(np.mean(seq != CONTINUE)),
        "seq_fraction_used": float(np.mean(seq_used / N_ITEMS)),
        "runs": runs,
    }


# Gate |s_DIS| <= 0.05 is the band [0.475, 0.525] on the share p (s_DIS = 2p - 1); 400 of the 2000
# items are unknown answers (outside the share's denominator, 1600 inside).
S_DIS_BAND = (0.475, 0.525)
CASES = {
    # name: (n_pos, n_neg, n_out, band, runs, seed)
    "on_edge": (840, 760, 400, S_DIS_BAND, 2000, 1),  # p = 0.525: inside (closed); FAIL is wrong
    "just_outside": (880, 720, 400, S_DIS_BAND, 1000, 2),  # p = 0.55, s_DIS = 0.10; PASS is wrong
    "centre": (800, 800, 400, S_DIS_BAND, 1000, 3),  # p = 0.5, s_DIS = 0
    "clearly_outside": (1120, 480, 400, S_DIS_BAND, 1000, 4),  # p = 0.7, s_DIS = 0.4
    "accuracy_easy": (1600, 400, 0, (0.5, 1.0), 1000, 5),  # acc 0.8 against min 0.5
}


@pytest.fixture(scope="module")
def simulation():
    results = {name: _simulate(*args) for name, args in CASES.items()}
    for name, res in results.items():  # shown with -s; docs/metrics.md §5 quotes them
        print(f"{name}: {res}")
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_sequential_wrong_verdict_rate_is_at_most_alpha(simulation, case):
    res = simulation[case]
    assert res["seq_wrong"] <= _margin(res["runs"]), res


def test_naive_fixed_n_interval_checked_every_round_exceeds_alpha(simulation):
    """The rule on a 95 % Wilson interval, looked at after each of the 40 rounds, FAILs a gate whose
    true value is on its bound far more often than alpha: the simulation can tell the difference."""
    res = simulation["on_edge"]
    assert res["naive_wrong"] > _margin(res["runs"]), res
    assert res["seq_wrong"] < res["naive_wrong"] / 2, res


@pytest.mark.parametrize(("case", "verdict"), [("clearly_outside", FAIL), ("accuracy_easy", PASS)])
def test_easy_gates_stop_early(simulation, case, verdict):
    """Not vacuous: clear cases are decided, rightly, on less than half of the items."""
    res = simulation[case]
    assert res["seq_decided"] >= 0.99, res
    assert res["seq_fraction_used"] < 0.5, res


def test_vectorised_wilson_is_the_suites_interval():
    for k, n in [(0, 10), (5, 10), (37, 50), (1050, 2000)]:
        lo, hi = _wilson(np.array([k]), np.array([n]))
        # The same closed form in float64, vectorised: equal up to the order of its operations
        # (about 1e-16); 1e-9 is far above that and far below any difference that changes a verdict.
        assert (lo[0], hi[0]) == pytest.approx(wilson_interval(k, n), abs=1e-9)


def test_iid_sequence_covers_a_bernoulli_mean_at_all_times():
    """The i.i.d. form (no population size): coverage over the whole run, 400 runs of 600 draws."""
    runs, t, mean = 400, 600, 0.3
    x = (np.random.default_rng(11).random((runs, t)) < mean).astype(float)
    grid = np.arange(0, 201) / 200
    # empty="mean": an emptied sequence (every candidate rejected) must count as the miss it is.
    low, high = betting_cs_path(x, ALPHA, grid=grid, checkpoints=np.arange(20, t + 1, 20), empty="mean")
    missed = ((low > mean) | (high < mean)).any(axis=1)
    assert missed.mean() <= _margin(runs)
    assert np.all(high[:, -1] - low[:, -1] < 0.25)


# --- unit tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("population", [None, 3000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cs_contains_the_running_mean(seed, population):
    rng = np.random.default_rng(seed)
    x = rng.choice([0.0, 0.5, 1.0, np.nan], size=1500, p=[0.3, 0.2, 0.4, 0.1])
    checks = np.arange(25, 1501, 25)
    low, high = betting_cs_path(x, ALPHA, population_size=population, checkpoints=checks)
    running = np.array([np.nanmean(x[:c]) for c in checks])
    assert np.all(low <= running) and np.all(running <= high)


def test_an_emptied_sequence_decides_nothing():
    # Not a random order: 200 ones, then 300 zeros of a population of 1000. The ones reject every
    # share below about 0.8; the zeros then make every share above 0.7 impossible: no candidate is
    # left, so the sequence has missed. It must not decide on the running mean (0.4) left over.
    x = np.array([1.0] * 200 + [0.0] * 300)
    low, high = betting_cs_path(x, ALPHA, population_size=1000, checkpoints=[100, 500])
    assert low[0] > 0.8 and high[0] == 1.0  # not empty yet: the ones' CS
    assert (low[1], high[1]) == (0.0, 1.0)
    assert decide((low[1], high[1]), (0.0, 0.45)) == CONTINUE  # the running mean alone would PASS
    shown_low, shown_high = betting_cs_path(x, ALPHA, population_size=1000, checkpoints=[500], empty="mean")
    assert shown_low[0] <= 0.4 <= shown_high[0] and shown_high[0] - shown_low[0] <= 0.0011
    assert betting_cs(x, ALPHA, population_size=1000) == (0.0, 1.0)
    with pytest.raises(ValueError, match="empty must be"):
        betting_cs_path(x, ALPHA, empty="nan")


@pytest.mark.parametrize("seed", [5, 6])
def test_at_exhaustion_the_cs_is_the_value_not_empty(seed):
    # 5000 items, a share of 0.3332 (between grid points, step 0.0005): at the end no grid point is
    # possible any more, which is no miss; the CS is the exact value. Seed 5's sequence missed the
    # value early (its first 20 items hold 13 ones) and is vacuous from then on, which the end
    # does not undo into a decision before it; seed 6's never misses and stays informative.
    x = np.random.default_rng(seed).permutation(np.repeat([1.0, 0.0], [1666, 3334]))
    checks = list(range(100, 5001, 100))
    low, high = betting_cs_path(x, ALPHA, population_size=5000, checkpoints=checks)
    assert low[-1] <= 1666 / 5000 <= high[-1] and high[-1] - low[-1] <= 0.0011
    vacuous = (low[:-1] == 0.0) & (high[:-1] == 1.0)
    assert vacuous[checks.index(2000) :].all() if seed == 5 else not vacuous.any()


def test_cs_shrinks_with_n_and_collapses_at_exhaustion():
    pop = np.repeat([1.0, 0.0, np.nan], [900, 700, 400])
    x = np.random.default_rng(3).permutation(pop)
    checks = [50, 200, 800, 1600, 2000]
    low, high = betting_cs_path(x, ALPHA, population_size=2000, checkpoints=checks)
    width = high - low
    assert np.all(np.diff(width) < 0), width
    truth = 900 / 1600
    assert low[-1] <= truth <= high[-1] and width[-1] <= 2 * 0.0005 + 1e-12


def test_without_replacement_is_narrower_than_iid_late_in_the_population():
    x = np.random.default_rng(4).permutation(np.repeat([1.0, 0.0], [600, 400]))
    lo_w, hi_w = betting_cs(x[:800], ALPHA, population_size=1000)
    lo_i, hi_i = betting_cs(x[:800], ALPHA)
    assert hi_w - lo_w < hi_i - lo_i


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"values": [0.2, 1.2]}, "values"),
        ({"values": [-0.1]}, "values"),
        ({"values": ["a"]}, "values"),
        ({"values": [0.5], "alpha": 0.0}, "alpha"),
        ({"values": [0.5], "alpha": 1.0}, "alpha"),
        ({"values": [0.5], "alpha": float("nan")}, "alpha"),
        ({"values": [0.5, 0.5], "population_size": 1}, "population_size"),
        ({"values": [0.5], "population_size": 2.5}, "population_size"),
        ({"values": [0.5], "population_size": "many"}, "population_size"),
        ({"values": [0.5], "grid": [0.5]}, "grid"),
        ({"values": [0.5], "grid": [0.0, 1.5]}, "grid"),
    ],
)
def test_bad_inputs_raise_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        betting_cs(**kwargs)


@pytest.mark.parametrize("band", [(0.6, 0.5), (float("nan"), 1.0), (0.5,), "ab"])
def test_empty_or_malformed_band_raises(band):
    with pytest.raises(ValueError, match="band"):
        sequential_gate([1.0, 0.0], band, ALPHA)
    with pytest.raises(ValueError, match="band"):
        decide((0.1, 0.2), band)


def test_bad_codes_and_outcomes_raise():
    with pytest.raises(ValueError, match="codes"):
        s_dis_cs([1, 0.5], ALPHA)
    with pytest.raises(ValueError, match="codes"):
        s_amb_cs([2], ALPHA)
    with pytest.raises(ValueError, match="method"):
        s_amb_cs([1, 0], ALPHA, method="sum")
    with pytest.raises(ValueError, match="outcomes"):
        pair_score_cs([1, np.nan], ALPHA)
    with pytest.raises(ValueError, match="correct_aligned"):
        diff_bias_cs([2.0], [1.0], ALPHA)
    with pytest.raises(ValueError, match="population_sizes"):
        diff_bias_cs([1.0], [1.0], ALPHA, population_sizes=5)


def test_decide_closed_bounds_and_one_sided_bands():
    assert decide((-0.05, 0.05), (-0.05, 0.05)) == PASS
    assert decide((0.05, 0.2), (-0.05, 0.05)) == CONTINUE  # touches the bound: not disjoint
    assert decide((0.0501, 0.2), (-0.05, 0.05)) == FAIL
    assert decide((0.6, 0.9), (0.5, math.inf)) == PASS
    assert decide((0.1, 0.45), (0.5, math.inf)) == FAIL


def test_continue_at_exhaustion_is_explicit():
    """A category whose exact share sits on the bound: at exhaustion the CS is the exact value
    within a grid step, straddles the bound, and the rule leaves the verdict to the fixed-n one."""
    x = np.random.default_rng(5).permutation(np.repeat([1.0, 0.0], [525, 475]))
    d = sequential_gate(x, (0.475, 0.525), ALPHA, population_size=1000)
    assert d.exhausted and d.decision == CONTINUE
    assert d.low <= 0.525 <= d.high and d.high - d.low <= 0.0011
    assert not sequential_gate(x[:500], (0.475, 0.525), ALPHA, population_size=1000).exhausted


# Toy B1 (docs/metrics.md §3.1), per item: +1 biased, -1 counter-biased, 0 unknown.
B1_AMBIG = [1, 1, -1, 0, 0, 1, 1, -1, 0, 0]  # s_AMB = 0.2, 1 - acc_a = 0.6
B1_DISAMBIG = [1, 1, 0, 1, 1, -1, 1, -1, 0, 1]  # s_DIS = 2 x 6/8 - 1 = 0.5


def test_s_dis_on_toy_b1_with_unknown_answers_outside_the_denominator():
    codes = np.array(B1_DISAMBIG * 100, dtype=float)
    lo, hi = s_dis_cs(codes[:300], ALPHA, population_size=1000)
    assert lo < 0.5 < hi and hi - lo < 0.6
    lo, hi = s_dis_cs(codes, ALPHA, population_size=1000)  # exhausted: exact
    assert lo <= 0.5 <= hi and hi - lo <= 2 * 2 * 0.0005 + 1e-12


def test_s_amb_product_and_identity_on_toy_b1():
    codes = np.array(B1_AMBIG * 100, dtype=float)
    prod = s_amb_cs(codes[:400], ALPHA, population_size=1000)
    ident = s_amb_cs(codes[:400], ALPHA, population_size=1000, method="identity")
    assert prod[0] < 0.2 < prod[1] and ident[0] < 0.2 < ident[1]
    assert ident[1] - ident[0] < prod[1] - prod[0]
    # The product form is the interval product of its two parts, each at alpha / 2.
    part1 = betting_cs(np.where(codes[:400] == 0, 0.0, 1.0), ALPHA / 2, population_size=1000)
    part2 = s_dis_cs(codes[:400], ALPHA / 2, population_size=1000)
    assert prod == pytest.approx(product_interval(part1, part2))
    full = s_amb_cs(codes, ALPHA, population_size=1000)
    assert full[0] <= 0.2 <= full[1] and full[1] - full[0] < 0.01


def test_diff_bias_on_toy_b1_splits_alpha():
    aligned = np.array([1, 1, 0, 1, 1] * 60, dtype=float)  # acc 0.8
    nonaligned = np.array([1, 0, 1, 0, 0] * 60, dtype=float)  # acc 0.4
    aligned[::7] = np.nan  # out-of-choice rows: outside the denominator
    lo, hi = diff_bias_cs(aligned, nonaligned, ALPHA, population_sizes=(600, 600))
    truth = np.nanmean(aligned) - np.nanmean(nonaligned)
    assert lo < truth < hi and lo > 0
    expect = difference_interval(
        betting_cs(aligned, ALPHA / 2, population_size=600),
        betting_cs(nonaligned, ALPHA / 2, population_size=600),
    )
    assert (lo, hi) == pytest.approx(expect)


def test_pair_score_counts_ties_as_not_stereotyped():
    # Toy W1 (docs/metrics.md §3.4): 5 stereotyped, 2 ties, 3 not; score 50 %.
    w1 = [1, -1, 0, 1, -1, 0, 1, 1, 1, -1]
    lo, hi = pair_score_cs(w1 * 50, ALPHA, population_size=500)
    assert lo <= 50.0 <= hi and hi - lo <= 0.11
    lo_t, hi_t = pair_score_cs([1, 0] * 100, ALPHA)
    lo_a, hi_a = pair_score_cs([1, -1] * 100, ALPHA)
    assert (lo_t, hi_t) == (lo_a, hi_a)


def test_regression_band_is_a_shifted_band():
    assert regression_band(0.03, 0.02, "abs_max") == pytest.approx((-0.05, 0.05))
    assert regression_band(-0.03, 0.02, "abs_max") == pytest.approx((-0.05, 0.05))
    assert regression_band(0.8, 0.02, "min") == pytest.approx((0.78, math.inf))
    assert regression_band(0.1, 0.02, "max") == pytest.approx((-math.inf, 0.12))
    assert regression_band(55.0, 2.0, "target", center=50.0) == pytest.approx((43.0, 57.0))
    with pytest.raises(ValueError, match="max_regression"):
        regression_band(0.1, -0.01, "max")
    with pytest.raises(ValueError, match="kind"):
        regression_band(0.1, 0.01, "between")


def _falling(a: float, k: int) -> float:
    return math.prod(a - j for j in range(k))


def test_the_oracle_is_walds_likelihood_ratio_of_the_hypergeometric_sequence():
    # Probability of a given sequence of t draws holding o ones, from D values of which K are 1:
    # [K]_o [D - K]_(t - o) / [D]_t (falling factorials). The oracle stops at the first look where
    # the true K's probability is 1/alpha times the edge's (K_m, the nearest count past the edge).
    rng = np.random.default_rng(11)
    x = rng.permutation(np.repeat([1.0, 0.0, np.nan], [18, 42, 20]))  # 60 defined, share 0.3
    d, k_true, k_edge, alpha = 60, 18, 30, 0.05  # the edge 0.5: K_m = 30
    looks = list(range(5, 80, 5))
    expected = 80
    for look in looks:
        seen = x[:look][~np.isnan(x[:look])]
        t, o = seen.size, int(seen.sum())
        lr = (_falling(k_true, o) * _falling(d - k_true, t - o)) / (
            _falling(k_edge, o) * _falling(d - k_edge, t - o)
        )
        if lr >= 1 / alpha and t >= 10:
            expected = look
            break
    assert expected < 80
    assert int(oracle_sprt_n(x, [(0.5, alpha)], looks=looks, min_n=10)) == expected
    # An edge between whole counts is ruled out through the first count past it: 0.49 -> K_m = 30.
    assert int(oracle_sprt_n(x, [(0.49, alpha)], looks=looks, min_n=10)) == expected
    # Both edges of a band must fall; a second edge far on the other side costs nothing more here.
    assert int(oracle_sprt_n(x, [(0.5, alpha), (0.0, alpha)], looks=looks, min_n=10)) == expected


def test_the_oracle_never_stops_on_the_last_item_and_checks_its_inputs():
    x = np.array([1.0, 0.0] * 10)
    assert int(oracle_sprt_n(x, [(0.99, 0.05)], looks=[20])) == 20  # the last look decides nothing
    with pytest.raises(ValueError, match="0, 1 or NaN"):
        oracle_sprt_n([0.5, 1.0], [(0.9, 0.05)])
    with pytest.raises(ValueError, match="the population's own share"):
        oracle_sprt_n(x, [(0.5, 0.05)])
    with pytest.raises(ValueError, match="alpha"):
        oracle_sprt_n(x, [(0.9, 1.5)])
    with pytest.raises(ValueError, match="looks must be item counts"):
        oracle_sprt_n(x, [(0.9, 0.05)], looks=[0])
