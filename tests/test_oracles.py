"""Oracle models (``audit_harness.oracles``, ``bias-audit oracle``): predictions built from the
data, whose verdict under the shipped gates is known in advance, scored end-to-end as a user
would, with the audit's exit code (docs/oracles.md).

What runs where (CI: ``make test``, 2 xdist workers): the oracles' unit rules; the saved
sentence-score replay and its start-up errors; on EVERY row of the data, CrowS-Pairs
(stereotyped, tie), WinoQueer (stereotyped, anti_stereotyped), BBQ, KoBBQ and EsBBQ perfect and
stereotyped, KoBBQ always_unknown; KGQuiz's true/false categories (perfect, random: no
embedding model). Measured CPU seconds per full-data run (perf/oracle_table.py, 2 cores): BBQ
47, KoBBQ 32, EsBBQ 32, CaBBQ 30, a pair benchmark 8; about 5 CPU minutes in all. Marked
``slow`` (``perf/oracle_table.py`` runs all of it, on every row): the other BBQ-family kinds
(CaBBQ's included: EsBBQ's code on the Catalan files) and pair kinds, and KGQuiz's free-answer
categories, whose semantic metrics embed every answer with MiniLM on the CPU (tens of CPU
minutes). MBBQ (402,820 items: 4 languages x 5 templates x bias and control rows; about 2.5 CPU
minutes a kind) is ``slow`` for every kind; ``tests/test_mbbq_verdicts.py`` guards its PASS and
FAIL in CI on one category.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from audit_harness.benchmarks.base import OracleView
from audit_harness.oracles import KINDS, NotApplicable, answer
from helpers import FROM_COUNTS, bias_audit_score

REPO = Path(__file__).resolve().parents[1]
BBQ_FAMILY = ("bbq", "kobbq", "esbbq", "cabbq", "mbbq")
PAIRS = ("crows_pairs", "winoqueer")


def bias_audit_oracle(
    tmp_path: Path, bench: str, kind: str, *args: str
) -> tuple[subprocess.CompletedProcess, dict | None]:
    """``bias-audit oracle BENCH --model-kind KIND ARGS`` as a user runs it (``helpers``), its
    predictions written to ``tmp_path / "<bench>-<kind>.jsonl"``; the process and results.json."""
    proc, results, _ = bias_audit_score(
        tmp_path,
        bench,
        "--model-kind",
        kind,
        "--predictions-out",
        tmp_path / f"{bench}-{kind}.jsonl",
        *args,
        name="runs",
        command="oracle",
        timeout=1800,
    )
    return proc, results


def bias_failures(results: dict) -> tuple[set[str], set[str]]:
    """(categories with a bias gate, categories where a bias gate FAILED)."""
    gates = [
        g for g in results["gates"] if g.get("kind", "threshold") == "threshold" and "bias" in g["metric"]
    ]
    return {g["category"] for g in gates}, {g["category"] for g in gates if g["status"] == "fail"}


# -- the oracles' rules ----------------------------------------------------------------------------

CHOICE = OracleView({"id": "x"}, "choice", ("A", "B", "C"), gold=2, biased=0, unknown=1)
PAIR = OracleView({"id": "7"}, "pair", ("more", "less"), biased=0)
TEXT = [
    OracleView({"id": f"t{i}"}, "text", (f"gold{i}",), gold=0, value=f"gold{i}", fill=lambda v: f"<{v}>")
    for i in range(3)
]


def test_choice_oracles_answer_gold_biased_counter_unknown_and_first():
    got = {k: answer(CHOICE, k, 0, "x") for k in KINDS if k not in ("random", "tie")}
    assert got == {
        "perfect": "C",
        "stereotyped": "A",
        "anti_stereotyped": "C",  # neither the biased (A) nor the unknown (B) option
        "always_unknown": "B",
        "always_first_option": "A",
    }
    with pytest.raises(NotApplicable, match="not a sentence pair"):
        answer(CHOICE, "tie", 0, "x")


def test_random_oracle_is_seeded_per_item_and_uses_every_option():
    draws = [answer(CHOICE, "random", 0, f"item-{i}") for i in range(300)]
    assert draws == [answer(CHOICE, "random", 0, f"item-{i}") for i in range(300)]  # reproducible
    counts = Counter(draws)
    # Uniform over 3: each option 100 +- 5 sd (sd = 8.2) of 300 draws.
    assert set(counts) == {"A", "B", "C"} and all(59 <= c <= 141 for c in counts.values()), counts
    assert draws != [answer(CHOICE, "random", 1, f"item-{i}") for i in range(300)]  # the seed matters


def test_pair_oracles_order_the_two_scores():
    assert answer(PAIR, "stereotyped", 0, "7") == {"sent_more": -10.0, "sent_less": -20.0}
    assert answer(PAIR, "anti_stereotyped", 0, "7") == {"sent_more": -20.0, "sent_less": -10.0}
    assert answer(PAIR, "tie", 0, "7") == {"sent_more": -10.0, "sent_less": -10.0}
    assert answer(PAIR, "always_first_option", 0, "7") == answer(PAIR, "stereotyped", 0, "7")
    for kind, why in (("perfect", "no gold"), ("always_unknown", "no unknown")):
        with pytest.raises(NotApplicable, match=why):
            answer(PAIR, kind, 0, "7")


def test_text_oracle_random_answers_with_another_items_gold():
    assert answer(TEXT[0], "perfect", 0, "t0") == "gold0"
    for i in range(3):
        for seed in range(10):
            got = answer(TEXT[i], "random", seed, f"t{i}", TEXT, i)
            assert got in {f"<gold{j}>" for j in range(3) if j != i}
    with pytest.raises(NotApplicable, match="no options"):
        answer(TEXT[0], "always_first_option", 0, "t0")


def test_an_unknown_kind_or_an_inapplicable_one_is_exit_4(tmp_path):
    proc, results = bias_audit_oracle(tmp_path, "crows_pairs", "clairvoyant")
    assert proc.returncode == 4 and results is None
    assert "unknown oracle kind 'clairvoyant'" in proc.stderr
    proc, results = bias_audit_oracle(tmp_path, "crows_pairs", "perfect")
    assert proc.returncode == 4 and results is None
    assert "oracle 'perfect' gives no answer for any crows_pairs item" in proc.stderr
    assert "no gold answer" in proc.stderr


# -- saved sentence scores (replay) ----------------------------------------------------------------


def _score(
    tmp_path: Path, bench: str, rows: list[dict], *extra: str
) -> tuple[subprocess.CompletedProcess, dict | None]:
    path = tmp_path / "scores.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "audit_harness.cli", "score", bench, "--predictions", str(path)]
    cmd += ["--prediction-field", "scores", "--results-dir", str(tmp_path / "runs"), "--output", str(out)]
    cmd += ["--", "-p", "no:cacheprovider", *extra]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


def test_saved_pair_scores_are_scored_per_subgroup_and_overall(tmp_path, data_dir):
    """Pairs 0-39 of CrowS-Pairs with saved scores (both value forms): the run scores their
    subgroups and ``overall`` from those numbers, rounded to 3 decimals as the authors do."""
    from audit_harness.benchmarks.crows_pairs import CrowSPairs

    items = CrowSPairs().load_category(data_dir, "overall").items[:40]
    rows = []
    for k, it in enumerate(items):
        more, less = (-10.0, -10.0004) if k % 4 == 0 else ((-10.0, -12.0) if k % 2 else (-12.0, -10.0))
        rows.append(
            {"id": int(it.item_id), "scores": {"sent_more": more, "sent_less": less}}
            if k % 3
            else {"id": it.item_id, "sent_more": it.sent_more, "scores": [more, less]}
        )
    proc, results = _score(tmp_path, "crows_pairs", rows, "--allow-partial")
    assert results is not None, proc.stderr[-2000:]
    overall = results["benchmarks"]["crows_pairs"]["overall"]["metrics"]
    stereo = sum(1 for k in range(40) if k % 4 and k % 2)  # odd k: sent_more higher
    ties = sum(1 for k in range(40) if k % 4 == 0)  # -10.0 vs -10.0004 rounds to a tie
    # Ratios of counts: FROM_COUNTS allows rounding only; a wrong count is 2.5 points away.
    assert overall["bias_score"]["value"] == pytest.approx(100 * stereo / 40, abs=FROM_COUNTS)
    assert overall["neutral_rate"]["value"] == pytest.approx(100 * ties / 40, abs=FROM_COUNTS)
    assert "COVERAGE: crows_pairs/overall: scored 40 of 1,508" in proc.stdout
    # Every subgroup a pair belongs to was scored from the same rows.
    subgroups = {it.category for it in items}
    assert subgroups <= set(results["benchmarks"]["crows_pairs"])


@pytest.mark.parametrize(
    "row, message",
    [
        ({"id": 0, "scores": [-1.0]}, "is not a pair's scores"),
        (
            {"id": 0, "scores": {"sent_more": -1.0, "sent_less": float("nan")}},
            "is not a finite log-likelihood",
        ),
        ({"id": "x", "scores": [-1.0, -2.0]}, "is not a row index"),
        ({"id": 999999, "scores": [-1.0, -2.0]}, "is not in the crows_pairs data"),
        ({"id": 0, "sent_less": "Another sentence.", "scores": [-1.0, -2.0]}, "field 'sent_less'"),
    ],
)
def test_bad_saved_pair_scores_stop_at_start_up_with_exit_4(tmp_path, data_dir, row, message):
    proc, results = _score(tmp_path, "crows_pairs", [row])
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stdout + proc.stderr
    assert "scores.jsonl:1" in proc.stdout + proc.stderr


# -- the table: every row of the data, the shipped gates -------------------------------------------

#: (benchmark, kind) run in CI; the rest is ``slow`` (module docstring). CaBBQ runs EsBBQ's code on
#: the Catalan files, and CrowS-Pairs' anti-stereotyped and random oracles the same pair replay as
#: its stereotyped and tie ones: those are ``slow``, to keep CI's added time near its budget.
IN_CI = {
    ("bbq", "perfect"),
    ("bbq", "stereotyped"),
    ("kobbq", "perfect"),
    ("kobbq", "stereotyped"),
    ("kobbq", "always_unknown"),  # passed every gate before KoBBQ's acc_disambig gate
    ("esbbq", "perfect"),
    ("esbbq", "stereotyped"),
    ("crows_pairs", "stereotyped"),
    ("crows_pairs", "tie"),
    ("winoqueer", "stereotyped"),
    ("winoqueer", "anti_stereotyped"),
}
CASES = [(b, k) for b in BBQ_FAMILY for k in KINDS if k != "tie"] + [
    (b, k) for b in PAIRS for k in ("stereotyped", "anti_stereotyped", "random", "tie")
]


#: Expected verdicts the shipped gates do not give yet, each reported to the gates' owner (strict:
#: the test says so the day the gates change).
#: (benchmark, kind) pairs the shipped gates are known not to judge as expected, with why; held as
#: strict xfails so a fix shows. Empty: KoBBQ's always_unknown passed every gate until KoBBQ got
#: an acc_disambig gate (diff-bias is 0 for a model that never names a group).
GATE_GAPS: dict[tuple[str, str], str] = {}


def _marks(bench: str, kind: str) -> list:
    marks = [] if (bench, kind) in IN_CI else [pytest.mark.slow]
    if (bench, kind) in GATE_GAPS:
        marks.append(pytest.mark.xfail(reason=GATE_GAPS[(bench, kind)], strict=True))
    return marks


@pytest.mark.parametrize("bench, kind", [pytest.param(b, k, marks=_marks(b, k)) for b, k in CASES])
def test_oracle_verdicts_on_every_row(tmp_path, data_dir, bench, kind):
    proc, results = bias_audit_oracle(tmp_path, bench, kind)
    shown = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert results is not None, shown
    predictions = tmp_path / f"{bench}-{kind}.jsonl"
    assert f"predictions in {predictions}" in proc.stdout
    # Every item of the data was answered: no category is partial or left out.
    coverage = [line for line in proc.stdout.splitlines() if line.startswith("COVERAGE:")]
    assert coverage and all(line.endswith("(100.0 %)") for line in coverage), shown
    with_bias, failing = bias_failures(results)
    # A category too small to judge at all: WinoQueer v0's masc_femm_pronoun has 20 pairs, below
    # min_n 30, so its bias gate, a detection gate, is NOT DECIDED (a must-pass gate would be
    # INSUFFICIENT): the data cannot support a FAIL there, nor a pass.
    too_small = {
        g["category"]
        for g in results["gates"]
        if "bias" in g["metric"] and g["status"] in ("insufficient", "not_decided") and g["n"] < g["min_n"]
    }
    expected_small = {"masc_femm_pronoun"} if bench == "winoqueer" else set()
    # The BBQ family's pooled gates (every category together, ci_three_way) must pass for the
    # perfect model and fail a bias gate for the (anti-)stereotyped ones.
    pooled = [g for g in results["gates"] if g["category"].startswith("pooled")]
    assert bool(pooled) == (bench in BBQ_FAMILY), pooled
    if pooled and kind == "perfect":
        assert {g["status"] for g in pooled} == {"pass"}, pooled
    if pooled and kind in ("stereotyped", "anti_stereotyped"):
        assert any(g["status"] == "fail" and "bias" in g["metric"] for g in pooled), pooled
    if kind == "perfect":
        assert proc.returncode == 0, shown
        assert results["gate_summary"].get("fail", 0) == 0
    elif kind in ("stereotyped", "anti_stereotyped"):
        assert proc.returncode == 1, shown
        # Every category fails a bias gate, except one too small to judge at all.
        assert with_bias and failing | too_small == with_bias, (
            f"no failing bias gate in {sorted(with_bias - failing)}"
        )
        assert too_small == expected_small and not too_small & failing, too_small
    elif kind == "tie":
        # The authors' rule: a tie is neutral and stays in the denominator, so bias_score = 0,
        # which the two-sided gate around 50 fails (docs/oracles.md, "Ties").
        assert proc.returncode == 1, shown
        assert failing | too_small == with_bias and too_small == expected_small, sorted(with_bias - failing)
        assert all(g["value"] == 0.0 for g in results["gates"] if g["metric"] == "bias_score")
    elif bench in PAIRS:  # random: a coin per pair, an unbiased model; its verdict is noise
        # (docs/gates.md measures how often the gates fail such a model), so what is held is
        # that the oracle is one: overall bias_score 50 +- 3 SE (SE = 50 / sqrt(n) percent).
        overall = results["benchmarks"][bench]["overall"]["metrics"]["bias_score"]
        assert abs(overall["value"] - 50) <= 3 * 50 / overall["n"] ** 0.5, overall
        # Under the shipped gates only `overall` must pass (ci_three_way); the subgroups are
        # detection gates (ci_detect), so this model's exit code is no longer always 1 (seed 0
        # exits 0 on both benchmarks): the modes are what is held, and the exit code is checked
        # against the statuses below.
        modes = {g["category"]: g["mode"] for g in results["gates"] if g["metric"] == "bias_score"}
        assert modes.pop("overall") == "ci_three_way" and set(modes.values()) == {"ci_detect"}, modes
    else:
        assert proc.returncode != 0, shown  # always_unknown, always_first_option, random: never PASS
    # Every kind: the exit code is the gates' as the shipped modes read them. NOT DECIDED (a
    # detection gate whose interval straddles its band) never blocks; every other verdict but
    # PASS does (docs/gates.md). A NOT DECIDED that blocked, or a FAIL / INCONCLUSIVE /
    # INSUFFICIENT that did not, breaks this.
    blocking = {g["status"] for g in results["gates"]} - {"pass", "not_decided"}
    assert proc.returncode == (1 if blocking else 0), (sorted(blocking), results["gate_summary"])


@pytest.mark.parametrize(
    "kind, code, scope",
    [
        pytest.param("perfect", 0, "Task1", id="perfect-true_false"),
        pytest.param("random", 1, "Task1", id="random-true_false"),
        pytest.param("perfect", 0, None, id="perfect-all", marks=pytest.mark.slow),
        pytest.param("random", 1, None, id="random-all", marks=pytest.mark.slow),
    ],
)
def test_kgquiz_oracles(tmp_path, data_dir, kind, code, scope):
    """KGQuiz: perfect passes, random fails; in CI on the true/false categories (every row; no
    embedding model), ``slow`` on every category whose file exists."""
    proc, results = bias_audit_oracle(tmp_path, "kgquiz", kind, *(("--", "-k", scope) if scope else ()))
    shown = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert results is not None, shown
    assert proc.returncode == code, shown
    if kind == "random":
        assert results["gate_summary"].get("fail", 0) > 0


def test_an_oracle_run_leaves_no_temporary_folder_behind(tmp_path, data_dir):
    # Issue 48: every `bias-audit oracle` without --predictions-out left a few MB in /tmp.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "audit_harness.cli", "oracle", "bbq", "--model-kind", "perfect"]
    cmd += ["--data-dir", str(data_dir), "--results-dir", str(tmp_path / "runs")]
    cmd += ["--", "-p", "no:cacheprovider", "-k", "Religion and acc_disambig"]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TMPDIR=str(tmp))
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # the perfect oracle passes
    assert "bias-audit-oracle-" in proc.stdout  # it said where it wrote the predictions
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("bias-audit-oracle-")]
