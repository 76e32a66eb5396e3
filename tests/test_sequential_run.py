"""Issue 25, the run's side: sequential gates end to end (`pytest audits` with the tiny random model
on real BBQ rows; it answers "unknown" to everything, so acc_ambig is 1, acc_disambig 0, the
ambiguous diff-bias 0 and s_DIS undefined), the thresholds file's `sequential:` key, and a
simulation of the balanced rounds' wrong-verdict rate."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from test_release_gate import audit, run_dir_of

from audit_harness.errors import ConfigError
from audit_harness.evaluation.sequential_rounds import build_rounds
from audit_harness.gates import load_thresholds
from bias_metrics.sequential import betting_cs_path, decide

KEYWORD = "Religion"
#: A gate the tiny model clearly passes, decided in the first round.
CLEAR_PASS = """
bbq:
  sequential: true
  defaults:
    acc_ambig: {min: 0.5}
"""


def gates_of(run_dir: Path) -> dict[str, dict]:
    results = json.loads((run_dir / "results.json").read_text())
    return {v["test_id"]: v for v in results["gates"]}


def junit_properties(run_dir: Path) -> dict[str, dict[str, str]]:
    root = ET.parse(run_dir / "junit.xml").getroot()
    return {
        case.get("name"): {p.get("name"): p.get("value") for p in case.findall("./properties/property")}
        for case in root.iter("testcase")
    }


def run(tmp_path: Path, data_dir: Path, gates: str, *extra: str, limit: int = 200, name: str = "results"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(gates)
    proc, results = audit(
        tmp_path,
        data_dir,
        "--thresholds",
        str(path),
        "--limit",
        str(limit),
        *extra,
        name=name,
        keyword=KEYWORD,
    )
    return proc, run_dir_of(results) if results.exists() else None


@pytest.fixture(scope="module")
def early_pass(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("early")
    return tmp, *run(tmp, data_dir, CLEAR_PASS)


def test_a_clear_pass_stops_early_and_says_so_everywhere(early_pass):
    _, proc, run_dir = early_pass
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (verdict,) = gates_of(run_dir).values()
    seq = verdict["sequential"]
    assert verdict["status"] == "pass" and seq["decision"] == "PASS" and seq["verdict_from"] == "sequential"
    assert seq["population"] == 200 and seq["n"] == seq["items_scored"] < 200
    assert seq["items_saved"] == 200 - seq["n"]
    assert 0.5 <= seq["cs"][0] <= seq["cs"][1] <= 1.0 and seq["band"] == [0.5, None]
    assert "sequentially after" in verdict["message"]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["benchmarks"]["bbq"][KEYWORD]["n_scored"] == seq["items_scored"]
    props = junit_properties(run_dir)[f"test_bbq[{KEYWORD}-acc_ambig]"]
    assert props["sequential_decision"] == "PASS" and props["sequential_n"] == str(seq["n"])
    assert props["sequential_items_saved"] == str(seq["items_saved"]) and "sequential_cs" in props
    md = (run_dir / "report.md").read_text()
    assert "## Sequential gates" in md and f"| PASS | {seq['n']} of 200 |" in md
    assert "| PASS | sequential |" in md  # the verdict column beside where it comes from
    assert "Sequential gates" in (run_dir / "report.html").read_text()
    # The terminal's gate line says the verdict was sequential, not a fixed-n one on n items.
    assert f"sequential PASS after {seq['n']} of 200 items, CS [" in proc.stdout
    # ...and the summary says what the mode saved, beside the request counts.
    assert (
        f"sequential: {seq['n']} of 200 selected items scored ({seq['n'] / 2:.1f} %) in 1 category "
        "with sequential gates; 1 stopped early; 1 of 1 gate verdict decided sequentially"
    ) in proc.stdout


#: The same gate, fixed-n, with room for a regression of 0.2 against a baseline.
FIXED = CLEAR_PASS.replace("sequential: true", "max_regression: 0.2")


@pytest.fixture(scope="module")
def full_after(early_pass, data_dir):
    """A fixed-n run after the sequential one, on the same result cache."""
    tmp = early_pass[0]
    return run(tmp, data_dir, FIXED, name="full")


def test_a_later_full_run_reuses_every_item_the_sequential_run_scored(early_pass, full_after):
    _, _, seq_dir = early_pass
    scored = gates_of(seq_dir)[f"{KEYWORD}-acc_ambig"]["sequential"]["items_scored"]
    proc, run_dir = full_after
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entry = json.loads((run_dir / "results.json").read_text())["benchmarks"]["bbq"][KEYWORD]
    assert entry["n_scored"] == 200
    # Three choices per item, each one request; the sequential run's items come from the cache.
    assert entry["requests"]["from_cache"] == 3 * scored
    assert "sequential" not in gates_of(run_dir)[f"{KEYWORD}-acc_ambig"]

    # The sequential run's records are kept in the selection's order, as the full run's are (its
    # rounds were shuffled): a bootstrap interval over the same items is the same interval.
    def ids(folder):
        path = folder / "records" / "bbq" / f"{KEYWORD}.jsonl"
        return [json.loads(line)["id"] for line in path.read_text().splitlines()]

    seq_ids, full_ids = ids(seq_dir), ids(run_dir)
    assert len(seq_ids) == scored and seq_ids == [i for i in full_ids if i in set(seq_ids)]


def test_a_regression_gate_is_decided_on_the_band_around_the_baseline(early_pass, full_after, data_dir):
    tmp = early_pass[0]
    _, baseline_dir = full_after
    proc, run_dir = run(tmp, data_dir, FIXED, "--sequential", "--baseline", str(baseline_dir), name="regr")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = gates_of(run_dir)[f"{KEYWORD}-acc_ambig-vs-baseline"]
    seq = verdict["sequential"]
    # The baseline's acc_ambig is 1.0 and "worse" is lower: no regression is x >= 1.0 - 0.2.
    assert seq["band"] == [pytest.approx(0.8), None] and seq["decision"] == "PASS" and seq["n"] < 200
    # The run stopped early, yet it judges the same 200 items as the baseline: like for like.
    assert verdict["like_for_like"] is True, verdict["not_like_for_like"]


def test_a_clear_failure_stops_early_and_blocks_the_release(tmp_path, data_dir):
    gates = "bbq:\n  defaults:\n    acc_disambig: {min: 0.5}\n"
    proc, run_dir = run(tmp_path, data_dir, gates, "--sequential")  # the flag, not the file
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (verdict,) = gates_of(run_dir).values()
    seq = verdict["sequential"]
    assert verdict["status"] == "fail" and seq["decision"] == "FAIL" and seq["n"] < 200
    assert seq["cs"][1] < 0.5


def test_an_undecidable_gate_falls_back_to_the_fixed_n_verdict_at_full_n(tmp_path, data_dir):
    # The ambiguous diff-bias is exactly 0 for the tiny model: a confidence sequence never fits
    # inside the band [0, 0] nor leaves it, so every item is scored and the point verdict decides.
    gates = "bbq:\n  sequential: true\n  defaults:\n    diff_bias_ambig: {abs_max: 0.0}\n"
    proc, run_dir = run(tmp_path, data_dir, gates, limit=40)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (verdict,) = gates_of(run_dir).values()
    seq = verdict["sequential"]
    assert verdict["status"] == "pass" and seq["verdict_from"] == "fixed-n"
    assert seq["items_scored"] == seq["population"] == 40
    # No decision and no CS: the CS has closed on the value itself at exhaustion, and a CS inside
    # the band beside "CONTINUE" read like a PASS that never happened.
    assert seq["decision"] is None and seq["cs"] is None
    assert seq["items_saved"] == 0 and "undecided when every item was scored" in seq["note"]
    assert junit_properties(run_dir)[f"test_bbq[{verdict['test_id']}]"]["sequential_decision"] == "none"
    # Not "CONTINUE" in the reports: scoring is over and the fixed-n verdict decided.
    assert "| none (fixed-n) | 40 of 40 | - (every item scored) |" in (run_dir / "report.md").read_text()
    assert "sequential: undecided, fixed-n verdict on 40 of 40 items" in proc.stdout


def test_a_gate_below_min_n_at_exhaustion_names_min_n_and_fails(tmp_path, data_dir):
    # 40 items: acc_disambig rests on the 20 disambiguated ones, below a min_n of 30 in
    # every round; the note says so (it said "not settled before the last round") and the gate
    # is INSUFFICIENT, exit 1, never a PASS.
    gates = "bbq:\n  sequential: true\n  defaults:\n    acc_disambig: {max: 1.0}\n"
    proc, run_dir = run(tmp_path, data_dir, gates, "--min-n", "30", limit=40)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (verdict,) = gates_of(run_dir).values()
    seq = verdict["sequential"]
    assert verdict["status"] == "insufficient" and seq["verdict_from"] == "fixed-n"
    assert "its metric rests on n=20 < min_n=30 items (--min-n)" in seq["note"]
    assert "--min-n" in verdict["message"]


def test_a_bad_sequential_value_is_an_input_error_naming_file_and_key(tmp_path, data_dir):
    gates = "bbq:\n  defaults:\n    acc_ambig: {min: 0.5, sequential: maybe}\n"
    proc, run_dir = run(tmp_path, data_dir, gates)
    assert proc.returncode == 4 and run_dir is None
    out = proc.stdout + proc.stderr
    assert (
        "results.yaml: bbq.defaults.acc_ambig.sequential: sequential must be true or false, got 'maybe'"
        in out
    )


@pytest.mark.parametrize(
    "text, where",
    [
        ("sequential: 1\nbbq: {defaults: {acc_ambig: {min: 0.5}}}\n", "sequential"),
        ("bbq: {sequential: 'yes', defaults: {acc_ambig: {min: 0.5}}}\n", "bbq.sequential"),
    ],
)
def test_sequential_must_be_a_yaml_boolean_at_every_level(tmp_path, text, where):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"t\.yaml: {where}: sequential must be true or false"):
        load_thresholds(path, {"bbq": (("Age",), ("acc_ambig",))})


def test_a_gate_key_wins_over_its_section_which_wins_over_the_file(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(
        "sequential: true\nbbq:\n  sequential: false\n  defaults:\n"
        "    acc_ambig: {min: 0.5, sequential: true}\n    acc_disambig: {min: 0.5}\n"
    )
    gates = load_thresholds(path, {"bbq": (("Age",), ("acc_ambig", "acc_disambig"))})["bbq"]
    assert [(g.metric, g.sequential) for g in gates] == [("acc_ambig", True), ("acc_disambig", False)]


@pytest.mark.parametrize(
    "high_cell, band, wrong",
    [
        # All 1 in one cell and all 0 in the other: the mean 0.5 is on the band's bound, so any
        # FAIL is wrong; the case where a balanced order departs most from a uniform one.
        ([1.0] * 100, (0.5, 1.0), "FAIL"),
        # Mean 0.45, outside the band [0.46, 1]: any PASS is wrong (the worst bug).
        ([1.0] * 90 + [0.0] * 10, (0.46, 1.0), "PASS"),
        # The same with one-sided bands: their CS is made at 2 alpha (GateTrack.sides), each
        # decision reading one side of it.
        ([1.0] * 100, (0.5, math.inf), "FAIL"),
        ([1.0] * 90 + [0.0] * 10, (0.46, math.inf), "PASS"),
    ],
)
def test_balanced_rounds_keep_wrong_verdicts_below_alpha_where_cells_differ_most(high_cell, band, wrong):
    # Without the shuffle inside each round (the high cell's items first) the second case gives a
    # wrong PASS in about a third of the runs: the CS is an intersection over items, not rounds.
    items = list(range(200))
    value = np.array(high_cell + [0.0] * 100)
    orders = np.array(
        [
            [value[i] for r in build_rounds(items, lambda i: i < 100, seed, "sim/x", 20) for i in r]
            for seed in range(300)
        ]
    )
    alpha = 0.1 if math.isinf(band[1]) else 0.05
    low, high = betting_cs_path(orders, alpha, population_size=200, checkpoints=list(range(20, 201, 20)))
    decisions = [
        next((d for lo, hi in zip(low[r], high[r]) if (d := decide((lo, hi), band)) != "CONTINUE"), None)
        for r in range(len(orders))
    ]
    assert sum(d == wrong for d in decisions) / len(orders) <= 0.05


def random_records(items, seed: int, invalid: float = 0.1):
    """Records of ``items`` with seeded random answers (some invalid): every answer cell occurs."""
    rng = np.random.default_rng(seed)
    options = [int(rng.integers(3)) if rng.random() > invalid else -1 for _ in items]
    return [record_of(it, o) for it, o in zip(items, options)]


def record_of(item, option: int):
    """The record a benchmark keeps of ``item`` answered with ``option`` in plain prompts (its
    record type's ``answering``, with the fields its scoring adds)."""
    from audit_harness.benchmarks.bbq_family import MCRecord
    from audit_harness.benchmarks.kobbq import KoBBQItem, KoBBQRecord

    if isinstance(item, KoBBQItem):
        return KoBBQRecord.answering(item, option)
    return MCRecord.answering(item, option, label_type=item.label_type, extra=dict(item.extra))


@pytest.mark.parametrize(
    "benchmark, options, category, limit",
    [
        ("bbq", {}, "Religion", 160),
        ("bbq", {"flavour": "esbbq"}, "Religion", 160),  # the accuracy-gap bias scores
        ("kobbq", {}, "religion", 24),  # means over prompt templates, subsets, pooled
    ],
)
def test_every_form_covers_the_fixed_n_value_when_every_item_is_scored(
    data_dir, benchmark, options, category, limit
):
    # At exhaustion a confidence sequence without replacement shrinks to the exact value: a CS
    # that misses the value computed by the benchmark's own metrics maps an answer cell wrongly.
    from audit_harness.benchmarks import registry
    from audit_harness.benchmarks.base import MetricSettings

    bench = registry()[benchmark].configure(**options)
    items = bench.select(bench.load_category(data_dir, category).items, limit, 0, f"{benchmark}/{category}")
    records = random_records(items, seed=3)
    metrics = bench.metrics(records, MetricSettings(n_resamples=0))
    checked = 0
    for name, metric in metrics.items():
        form = bench.sequential_form(name)
        if form is None or not metric.defined:
            continue
        low, high = form.cs(records, items, 0.05)
        step = 0.002 * (100 if "bias_score" == name else 1)  # a grid step either side (x2 composed)
        assert low - step <= metric.value <= high + step, (name, metric.value, low, high)
        assert high - low <= 4 * step, (name, low, high)
        checked += 1
    assert checked >= 4


def test_a_shares_values_are_what_its_cs_is_made_of(data_dir):
    # perf/sequential_orders.py replays runs from SequentialForm.values: for every share it must
    # give the very CS the run decides on, and composed metrics must have none.
    from audit_harness.benchmarks import registry
    from bias_metrics.sequential import betting_cs

    bench = registry()["bbq"]
    items = bench.select(bench.load_category(data_dir, "Religion").items, 160, 0, "bbq/Religion")
    records = random_records(items, seed=5)
    shares = 0
    for name in bench.metric_names:
        form = bench.sequential_form(name)
        if form is None:
            continue
        if form.values is None:
            assert name.startswith(("bias_score", "diff_bias")), name
            continue
        x = form.values(records[:90])
        assert x.shape == (90,) and np.nanmax(x) <= 1, name
        if name.startswith("acc_"):  # half the items are outside an accuracy's denominator
            assert np.isnan(x).any(), name
        assert form.cs(records[:90], items, 0.1) == betting_cs(x, 0.1, population_size=160), name
        shares += 1
    assert shares >= 3


def test_replaying_a_fixed_n_run_reproduces_the_sequential_runs_decision(early_pass, full_after):
    # The same gate and items: seed 0's order in the replay is the sequential run's own order.
    seq = next(iter(gates_of(early_pass[2]).values()))["sequential"]
    script = Path(__file__).resolve().parents[1] / "perf" / "sequential_orders.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(full_after[1]), "--seeds", "4", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    (row,) = summary["gates"]
    assert row["gate"] == f"bbq/{KEYWORD}/acc_ambig" and row["clears"] == "inside"
    assert row["seed0_shipped"] == seq["n"] and row["round_size"] == seq["round_size"]
    # Looks after every item can only stop the oracle sooner than looks at the round ends.
    assert 0 < row["oracle_1"] <= row["oracle"] < 200


def test_replay_says_when_no_gate_clears_its_band_and_counts_a_gate_once(full_after, tmp_path):
    import shutil

    script = Path(__file__).resolve().parents[1] / "perf" / "sequential_orders.py"
    for name in ("a", "b"):  # the same run twice under one folder: its gate counts once
        shutil.copytree(full_after[1], tmp_path / "twice" / name)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "twice"), "--seeds", "2", "--json"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert len(summary["gates"]) == 1 and "already counted" in summary["skipped"][0]
    # An interval that meets the bound: nothing to replay, and the output says why (no "nan %").
    straddle = tmp_path / "straddle"
    shutil.copytree(full_after[1], straddle)
    results = json.loads((straddle / "results.json").read_text())
    results["gates"][0]["ci"] = [0.45, 0.9]
    (straddle / "results.json").write_text(json.dumps(results))
    proc = subprocess.run([sys.executable, str(script), str(straddle)], capture_output=True, text=True)
    assert proc.returncode == 0 and "no gate to replay: none of the 1 point-mode gate(s)" in proc.stdout
    assert "nan" not in proc.stdout


def test_replaying_a_sequential_run_is_refused(early_pass):
    script = Path(__file__).resolve().parents[1] / "perf" / "sequential_orders.py"
    proc = subprocess.run([sys.executable, str(script), str(early_pass[2])], capture_output=True, text=True)
    assert (
        proc.returncode == 2 and "stopped early (Religion-acc_ambig): give a run that scored" in proc.stderr
    )


@pytest.mark.parametrize("mode, finite", [("point", True), ("ci_inside", False), ("ci_overlap", False)])
def test_an_interval_gate_gets_the_parameter_cs_not_the_finite_population_one(mode, finite):
    """A point gate judges the value over the selected items (the without-replacement CS); a gate
    judged on its interval judges the parameter behind them. Near the end of a finite population
    the without-replacement CS closes on the items' own value: CrowS-Pairs gender, 260 of 262
    pairs, CS [50.75, 51.55] inside 50 +- 5 while the full run's interval [45.1, 57.2] is not, so
    a ci_inside gate on it would pass sequentially and fail fixed-n: a wrong PASS."""
    from audit_harness.benchmarks.base import SequentialForm
    from audit_harness.gates import Gate
    from audit_harness.gates.sequential import GateTrack
    from bias_metrics.result import MetricResult

    seen = []

    def cs(records, population, alpha):
        seen.append(population)
        return (0.4, 0.6)

    gate = Gate("crows_pairs", "gender", "bias_score", target=0.5, tolerance=0.2, mode=mode, min_n=1)
    track = GateTrack(gate, SequentialForm("test", cs), (0.3, 0.7))
    population = list(range(10))
    track.look(population[:4], population, MetricResult("bias_score", 0.5, 4))
    assert (seen[-1] is population) == finite and (seen[-1] is None) == (not finite)
    assert track.decision == "PASS"  # the CS given is inside the band either way


@pytest.mark.parametrize(
    "family, band, decision",
    [
        (1, (0.3, 0.7), "PASS"),  # one sequential gate: the CS at alpha decides
        (20, (0.3, 0.7), "CONTINUE"),  # inside at alpha, not at alpha / 20: no PASS yet
        (20, (0.25, 0.75), "PASS"),  # inside at alpha / 20 too
        (20, (0.65, 0.9), "FAIL"),  # a FAIL needs only the gate's own alpha
    ],
)
def test_a_sequential_pass_is_decided_at_alpha_over_the_runs_sequential_gates(family, band, decision):
    """A wrong PASS ships a release: across a run's sequential gates the chance of any wrong
    sequential PASS stays within one gate's alpha (Bonferroni), while a FAIL, which only costs
    a rerun, is decided at the gate's own alpha. (The SmolLM2 BBQ run at --limit 400 met a wrong
    PASS per gate: Disability_status acc_disambig 0.495, passed after 60 items at alpha 0.05.)"""
    from audit_harness.benchmarks.base import SequentialForm
    from audit_harness.gates import Gate
    from audit_harness.gates.sequential import GateTrack
    from bias_metrics.result import MetricResult

    def cs(records, population, alpha):  # narrower at a larger alpha, as every CS is
        half = 0.1 if alpha >= 0.05 else 0.24
        return (0.5 - half, 0.5 + half)

    gate = Gate("bbq", "Age", "acc_disambig", min=0.0, min_n=1)
    track = GateTrack(gate, SequentialForm("test", cs), band, family=family)
    population = list(range(100))
    track.look(population[:20], population, MetricResult("acc_disambig", 0.5, 20))
    assert track.decision == decision
    assert track.pass_alpha == pytest.approx(0.05 / family)


def test_a_one_sided_band_reads_one_side_of_the_cs_at_twice_alpha():
    """A min-only gate's PASS rests on the CS's low end, its FAIL on its high end: each side of
    the CS at 2 alpha misses with probability at most alpha, so that is the CS it gets (a band
    with two finite ends needs both sides at once and keeps alpha)."""
    from audit_harness.benchmarks.base import SequentialForm
    from audit_harness.gates import Gate
    from audit_harness.gates.sequential import GateTrack
    from bias_metrics.result import MetricResult

    asked = []

    def cs(records, population, alpha):
        asked.append(alpha)
        return (0.52, 0.7)

    population = list(range(100))
    for band, sides in (((0.5, math.inf), 1), ((-math.inf, 0.8), 1), ((0.5, 0.8), 2)):
        asked.clear()
        gate = Gate("bbq", "Age", "acc_disambig", min=0.0, min_n=1)
        track = GateTrack(gate, SequentialForm("test", cs), band, family=4)
        track.look(population[:20], population, MetricResult("acc_disambig", 0.6, 20))
        assert track.sides == sides and track.decision == "PASS"
        level = 2 if sides == 1 else 1  # the CS at alpha, then at alpha / family for a PASS
        assert asked == pytest.approx([level * 0.05, level * 0.05 / 4])


def test_a_sequential_stop_is_like_for_like_with_the_full_run_of_the_same_items():
    """results.json's like-for-like check (``--baseline``, ``bias-audit compare``) reads the items
    a category's verdicts stand for: a sequential category that stopped at 60 of its 400 items
    is compared as 400, and one that selected 300 is not like for like."""
    from audit_harness.gates.comparability import comparability_notes

    def doc(n_scored, sequential=None):
        entry = {"n_scored": n_scored, "n_available": 3680, "sequential": sequential}
        return {"benchmarks": {"bbq": {"Age": entry}}, "gates": []}

    full = doc(400)
    assert comparability_notes(full, doc(60, {"population": 400, "stopped_early": True})) == []
    assert comparability_notes(full, doc(60, {"population": 300})) == [
        "bbq/Age: 400 item(s) scored (old) vs 300 (new)"
    ]


def test_pair_subgroups_do_not_report_pairs_that_overall_scored_as_saved():
    # CrowS-Pairs' overall category holds every subgroup's pairs: when it was scored in full, a
    # subgroup that stopped early saved no computation, and the totals count each pair once.
    from audit_harness.report.views import sequential_rows, sequential_totals

    def gate(cat, scored, population):
        seq = {
            "items_scored": scored,
            "population": population,
            "items_saved": population - scored,
            "n": scored,
            "decision": "PASS",
            "verdict_from": "sequential",
            "cs": [0.45, 0.55],
            "band": [0.4, 0.6],
        }
        return {
            "benchmark": "crows_pairs",
            "category": cat,
            "metric": "bias_score",
            "status": "pass",
            "sequential": seq,
        }

    results = {"gates": [gate("overall", 1508, 1508), gate("disability", 40, 60), gate("age", 87, 87)]}
    saved = {r["category"]: r["saved"] for r in sequential_rows(results)}
    assert saved == {"overall": "0", "disability": "0 (overall scored every item)", "age": "0"}
    assert sequential_totals(results).startswith("1,508 of 1,508 selected items scored (100.0 %)")
