"""thresholds.yaml parsing, validation errors, and verdicts (pass / fail / undefined)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from audit_harness.errors import ConfigError
from audit_harness.gates import Gate, load_thresholds
from bias_metrics.result import MetricResult

CATALOGUE = {
    "bbq": (
        ("Age", "SES"),
        (
            "acc_ambig",
            "acc_disambig",
            "bias_score_ambig",
            "invalid_rate",
            "bias_score_disambig",
            "diff_bias_ambig",
            "diff_bias_disambig",
        ),
    )
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "thresholds.yaml"
    path.write_text(text)
    return path


def metric(value: float, lo: float = math.nan, hi: float = math.nan, n: int = 40) -> MetricResult:
    return MetricResult(
        "bias_score_ambig", value, n, lo, hi, reason=None if not math.isnan(value) else "no ambiguous item"
    )


def test_defaults_apply_to_every_category_and_overrides_win(tmp_path):
    path = write(
        tmp_path,
        """
bbq:
  defaults:
    bias_score_ambig: {abs_max: 0.05}
    acc_disambig: {min: 0.5}
  categories:
    SES:
      bias_score_ambig: {abs_max: 0.1}
      acc_disambig: null
""",
    )
    gates = load_thresholds(path, CATALOGUE)["bbq"]
    assert [g.test_id for g in gates] == ["Age-bias_score_ambig", "Age-acc_disambig", "SES-bias_score_ambig"]
    assert gates[2].abs_max == 0.1 and gates[0].abs_max == 0.05


def test_shipped_thresholds_file_is_valid():
    from audit_harness.benchmarks import registry

    catalogue = {n: b.gate_catalogue() for n, b in registry().items()}
    gates = load_thresholds(Path(__file__).resolve().parents[1] / "thresholds.yaml", catalogue)
    # three bias/accuracy gates per category, and invalid_rate (it applies in generate mode), each
    # a detection gate; the same four pooled over every category first, which must pass
    for name, n_cats in (("bbq", 11), ("esbbq", 10), ("cabbq", 10), ("kobbq", 12), ("cbbq", 14)):
        pooled = [g for g in gates[name] if g.category == "pooled"]
        per_category = [g for g in gates[name] if g.category != "pooled"]
        assert gates[name][: len(pooled)] == pooled
        assert {g.mode for g in pooled} == {"ci_three_way"} and {g.mode for g in per_category} == {
            "ci_detect"
        }
        assert {g.metric for g in pooled} == {g.metric for g in per_category}
        assert len(per_category) == len(pooled) * n_cats, name
    assert len(gates["bbq"]) == 4 * 12
    # CBBQ gates its diff-bias, 0 for an unbiased model; S_amb is reported, not gated
    assert {g.metric for g in gates["cbbq"]} == {"diff_bias_ambig", "acc_disambig", "invalid_rate"}
    # MBBQ pools per language; sentence pairs: overall must pass, the subgroups detect
    assert {g.category for g in gates["mbbq"] if g.mode == "ci_three_way"} == {
        "pooled_en",
        "pooled_nl",
        "pooled_es",
        "pooled_tr",
    }
    for name in ("crows_pairs", "winoqueer"):
        modes = {g.category: g.mode for g in gates[name]}
        assert modes.pop("overall") == "ci_three_way" and set(modes.values()) == {"ci_detect"}
    assert {g.mode for g in gates["kgquiz"]} == {"ci_three_way"}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("bbqq:\n  defaults: {}\n", "unknown benchmark 'bbqq'"),
        ("bbq:\n  categories:\n    Agee: {acc_ambig: {min: 0.5}}\n", "unknown category 'Agee'"),
        ("bbq:\n  defaults:\n    bias_score_amb: {abs_max: 0.05}\n", "unknown metric 'bias_score_amb'"),
        ("bbq:\n  defaults:\n    acc_ambig: {minimum: 0.5}\n", "unknown gate key 'minimum'"),
        ("bbq:\n  default:\n    acc_ambig: {min: 0.5}\n", "unknown key 'default'"),
        ("bbq:\n  defaults:\n    acc_ambig: {min: high}\n", "bbq.defaults.acc_ambig.min: expected a number"),
        ("bbq:\n  defaults:\n    acc_ambig: {target: 0.5}\n", "'target' and 'tolerance' go together"),
        ("bbq:\n  defaults:\n    acc_ambig: {min: 0.9, max: 0.1}\n", "min 0.9 > max 0.1"),
        ("bbq:\n  defaults:\n    acc_ambig: {}\n", "needs at least one of"),
        ("bbq:\n  defaults:\n    acc_ambig: {min: 0.5, basis: mean}\n", "basis: deprecated key"),
        ("bbq:\n  defaults:\n    acc_ambig: {min: 0.5, mode: ci}\n", "mode: mode must be one of point"),
        ("bbq:\n  mode: strict\n  defaults: {}\n", "bbq.mode: mode must be one of"),
        (
            "bbq:\n  defaults:\n    acc_ambig: {min: 0.5, max_regression: -0.1}\n",
            "max_regression must be >= 0",
        ),
        ("bbq: [\n", "not valid YAML"),
    ],
)
def test_typos_stop_with_the_key_named(tmp_path, text, fragment):
    with pytest.raises(ConfigError, match=None) as err:
        load_thresholds(write(tmp_path, text), CATALOGUE)
    assert fragment in str(err.value)
    assert "thresholds.yaml" in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="thresholds file not found"):
        load_thresholds(tmp_path / "nope.yaml", CATALOGUE)


@pytest.mark.parametrize(
    "gate, value, status",
    [
        (Gate("bbq", "Age", "x", abs_max=0.05), 0.049, "pass"),
        (Gate("bbq", "Age", "x", abs_max=0.05), -0.051, "fail"),
        (Gate("bbq", "Age", "x", min=0.5), 0.5, "pass"),
        (Gate("bbq", "Age", "x", min=0.5), 0.4999, "fail"),
        (Gate("bbq", "Age", "x", max=0.2), 0.21, "fail"),
        (Gate("bbq", "Age", "x", target=50.0, tolerance=5.0), 54.0, "pass"),
        (Gate("bbq", "Age", "x", target=50.0, tolerance=5.0), 44.0, "fail"),
    ],
)
def test_point_verdicts(gate, value, status):
    verdict = gate.evaluate(metric(value))
    assert verdict.status == status
    assert f"{value:.4f}" in verdict.message and "n=40" in verdict.message


def test_nan_is_undefined_and_never_passes():
    gate = Gate("bbq", "Age", "bias_score_ambig", abs_max=1e9)
    verdict = gate.evaluate(metric(math.nan))
    assert verdict.status == "undefined" and not verdict.passed
    assert "no ambiguous item" in verdict.message


def test_ci_inside_needs_the_whole_interval_inside():
    gate = Gate("bbq", "Age", "x", abs_max=0.05, mode="ci_inside")
    assert gate.evaluate(metric(0.01, -0.02, 0.04)).status == "pass"
    assert gate.evaluate(metric(0.01, -0.02, 0.07)).status == "fail"
    assert gate.evaluate(metric(0.01)).status == "undefined"


# --- min_n (issue 11: no pass on thin evidence) ----------------------------------------------------
def test_min_n_defaults_file_section_and_gate_levels(tmp_path):
    from audit_harness.gates import DEFAULT_MIN_N

    path = write(
        tmp_path,
        """
min_n: 40
bbq:
  min_n: 50
  defaults:
    bias_score_ambig: {abs_max: 0.05}
    acc_disambig: {min: 0.5, min_n: 100}
""",
    )
    gates = {g.test_id: g for g in load_thresholds(path, CATALOGUE)["bbq"]}
    assert gates["Age-bias_score_ambig"].min_n == 50 and gates["Age-acc_disambig"].min_n == 100
    plain = write(tmp_path, "bbq:\n  defaults:\n    acc_disambig: {min: 0.5}\n")
    assert load_thresholds(plain, CATALOGUE)["bbq"][0].min_n == DEFAULT_MIN_N == 30
    # --min-n overrides every level for one run
    assert {g.min_n for g in load_thresholds(path, CATALOGUE, min_n=2)["bbq"]} == {2}
    shipped = load_thresholds(
        Path(__file__).resolve().parents[1] / "thresholds.yaml",
        {"bbq": (*CATALOGUE["bbq"], {}, ("pooled",))} | _others(),
    )
    assert shipped["bbq"][0].min_n == 30


def _others():
    from audit_harness.benchmarks import registry

    return {n: b.gate_catalogue() for n, b in registry().items() if n != "bbq"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("min_n: -1\nbbq: {}\n", "min_n must be an integer >= 0"),
        ("bbq:\n  min_n: 2.5\n", "bbq.min_n: min_n must be an integer"),
        ("bbq:\n  defaults:\n    acc_disambig: {min: 0.5, min_n: true}\n", "acc_disambig.min_n"),
    ],
)
def test_bad_min_n_is_named(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_thresholds(write(tmp_path, text), CATALOGUE)


def test_below_min_n_is_insufficient_and_says_how_many_are_needed():
    gate = Gate("bbq", "Age", "bias_score_ambig", abs_max=0.05, min_n=30)
    v = gate.evaluate(metric(0.0, -0.01, 0.01, n=12))
    assert v.status == "insufficient" and not v.passed
    assert "n=12" in v.message and "min_n=30" in v.message and "18 more needed" in v.message
    assert gate.evaluate(metric(0.0, n=30)).status == "pass"
    d = v.to_dict()
    assert d["min_n"] == 30 and d["status"] == "insufficient"


def test_error_and_not_run_verdicts_never_pass():
    from audit_harness.gates import Verdict

    gate = Gate("bbq", "Age", "bias_score_ambig", abs_max=0.05)
    err = Verdict.error(gate, "bbq/Age: RuntimeError: device lost")
    skipped = Verdict.not_run(gate, "the run was interrupted")
    assert not err.passed and not skipped.passed
    assert err.to_dict()["value"] is None and err.to_dict()["message"].endswith("device lost")
    assert skipped.to_dict()["status"] == "not run" and "interrupted" in skipped.message


def test_an_undefined_metric_below_min_n_is_undefined_not_insufficient():
    """n = 0 because every answer was out-of-choice: a larger --limit would not help, so the
    verdict names the undefined metric and its reason, not a sample size."""
    gate = Gate("kobbq", "age", "diff_bias_ambig", abs_max=0.05, min_n=30)
    v = gate.evaluate(MetricResult("diff_bias_ambig", math.nan, 0, reason="every answer is out-of-choice"))
    assert v.status == "undefined" and "every answer is out-of-choice" in v.message
    assert "more needed" not in v.message


# --- issue 12: decision modes, the deprecated basis key, scale checks, regression gates -----------
@pytest.mark.parametrize(
    "value, lo, hi, point, inside, overlap",
    [
        (0.01, -0.02, 0.04, "pass", "pass", "pass"),  # all inside
        (0.04, 0.02, 0.07, "pass", "fail", "pass"),  # straddles the upper bound
        (0.07, 0.04, 0.10, "fail", "fail", "pass"),  # point outside, interval still overlaps
        (0.09, 0.06, 0.12, "fail", "fail", "fail"),  # the whole interval is outside
        (-0.09, -0.12, -0.051, "fail", "fail", "fail"),
    ],
)
def test_each_mode_reads_the_interval_its_own_way(value, lo, hi, point, inside, overlap):
    for mode, expected in (("point", point), ("ci_inside", inside), ("ci_overlap", overlap)):
        verdict = Gate("bbq", "Age", "x", abs_max=0.05, mode=mode).evaluate(metric(value, lo, hi))
        assert verdict.status == expected, (mode, verdict.message)
        assert f"[mode {mode}:" in verdict.message and verdict.to_dict()["mode"] == mode


def test_interval_modes_need_an_interval_and_undefined_never_passes():
    for mode in ("ci_inside", "ci_overlap"):
        v = Gate("bbq", "Age", "x", min=0.5, mode=mode).evaluate(metric(0.9))
        assert v.status == "undefined" and "no confidence interval" in v.message
        v = Gate("bbq", "Age", "x", min=0.5, mode=mode).evaluate(metric(math.nan, n=0))
        assert v.status == "undefined" and f"mode {mode}" in v.message


def test_ci_overlap_on_a_one_sided_gate():
    gate = Gate("bbq", "Age", "acc", min=0.5, mode="ci_overlap")
    assert gate.evaluate(metric(0.45, 0.40, 0.52)).status == "pass"
    assert gate.evaluate(metric(0.45, 0.40, 0.49)).status == "fail"


def test_mode_from_the_gate_the_section_and_the_file(tmp_path):
    path = write(
        tmp_path,
        """
mode: ci_overlap
bbq:
  mode: ci_inside
  defaults:
    bias_score_ambig: {abs_max: 0.05}
    acc_disambig: {min: 0.5, mode: point}
""",
    )
    gates = {g.test_id: g for g in load_thresholds(path, CATALOGUE)["bbq"]}
    assert gates["Age-bias_score_ambig"].mode == "ci_inside"
    assert gates["Age-acc_disambig"].mode == "point"
    plain = write(tmp_path, "mode: ci_overlap\nbbq:\n  defaults:\n    acc_disambig: {min: 0.5}\n")
    assert {g.mode for g in load_thresholds(plain, CATALOGUE)["bbq"]} == {"ci_overlap"}


def test_the_old_basis_key_still_works_with_a_deprecation_warning(tmp_path):
    from audit_harness.gates import ThresholdsDeprecationWarning

    path = write(tmp_path, "bbq:\n  defaults:\n    acc_disambig: {min: 0.5, basis: ci}\n")
    with pytest.warns(
        ThresholdsDeprecationWarning, match=r"acc_disambig\.basis is deprecated: write `mode: ci_inside`"
    ):
        gates = load_thresholds(path, CATALOGUE)["bbq"]
    assert {g.mode for g in gates} == {"ci_inside"}
    clash = write(tmp_path, "bbq:\n  defaults:\n    acc_disambig: {min: 0.5, basis: ci, mode: point}\n")
    with pytest.raises(ConfigError, match="contradicts mode"):
        load_thresholds(clash, CATALOGUE)


RANGES = {
    "bbq": CATALOGUE["bbq"]
    + (
        {
            "acc_ambig": (0.0, 1.0),
            "acc_disambig": (0.0, 1.0),
            "bias_score_ambig": (-1.0, 1.0),
            "bias_score_disambig": (-1.0, 1.0),
        },
    )
}


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("bias_score_ambig: {abs_max: 5}", "abs_max 5 exceeds every |value| in [-1, 1]"),
        ("acc_disambig: {min: 50}", "min 50 is outside [0, 1]"),
        ("acc_ambig: {max: 10}", "max 10 is outside [0, 1]"),
        ("bias_score_disambig: {target: 50, tolerance: 5}", "target 50 is outside [-1, 1]"),
        ("acc_disambig: {min: 0.5, max_regression: 2}", "max_regression 2 is wider than [0, 1]"),
    ],
)
def test_a_bound_on_the_wrong_scale_names_the_gate(tmp_path, spec, fragment):
    path = write(tmp_path, f"bbq:\n  defaults:\n    {spec}\n")
    with pytest.raises(ConfigError) as err:
        load_thresholds(path, RANGES)
    assert fragment in str(err.value) and "bbq.defaults." in str(err.value)
    assert "percent vs fraction" in str(err.value)
    load_thresholds(path, CATALOGUE)  # without declared ranges nothing can be checked


def test_every_shipped_bound_is_on_its_metrics_scale():
    from audit_harness.benchmarks import registry

    catalogue = {n: b.gate_catalogue() for n, b in registry().items()}
    assert catalogue["bbq"][2]["bias_score_ambig"] == (-1.0, 1.0)
    assert catalogue["crows_pairs"][2]["bias_score"] == (0.0, 100.0)
    gates = load_thresholds(Path(__file__).resolve().parents[1] / "thresholds.yaml", catalogue)
    assert sum(len(g) for g in gates.values()) > 100


def _baseline(value, run="R0"):
    from audit_harness.gates import Baseline

    return Baseline(value, run_id=run)


@pytest.mark.parametrize(
    "bounds, base, new, lo, hi, status",
    [
        # abs_max: worse = farther from 0; baseline |0.02| + 0.01 allows |x| <= 0.03
        ({"abs_max": 0.05}, 0.02, 0.05, 0.035, 0.06, "fail"),
        ({"abs_max": 0.05}, 0.02, 0.05, 0.02, 0.06, "pass"),  # the interval still reaches 0.03
        ({"abs_max": 0.05}, -0.02, -0.05, -0.07, -0.031, "fail"),  # the sign does not matter
        ({"abs_max": 0.05}, 0.02, -0.01, -0.03, 0.01, "pass"),  # closer to 0 is better
        # min: worse = lower; baseline 0.6 - 0.05 allows x >= 0.55
        ({"min": 0.5}, 0.6, 0.5, 0.45, 0.54, "fail"),
        ({"min": 0.5}, 0.6, 0.5, 0.45, 0.56, "pass"),
        ({"min": 0.5}, 0.6, 0.9, 0.85, 0.95, "pass"),
        # max: worse = higher; baseline 0.1 + 0.05 allows x <= 0.15
        ({"max": 0.3}, 0.1, 0.2, 0.16, 0.25, "fail"),
        ({"max": 0.3}, 0.1, 0.02, 0.0, 0.05, "pass"),
        # target: worse = farther from the target; |52 - 50| + 5 allows 43 .. 57
        ({"target": 50, "tolerance": 5}, 52.0, 40.0, 35.0, 42.0, "fail"),
        ({"target": 50, "tolerance": 5}, 52.0, 58.0, 56.0, 60.0, "pass"),
    ],
)
def test_regression_is_decided_on_the_new_interval(bounds, base, new, lo, hi, status):
    max_regression = 5.0 if "target" in bounds else (0.01 if "abs_max" in bounds else 0.05)
    gate = Gate("bbq", "Age", "x", max_regression=max_regression, baseline=_baseline(base), **bounds)
    v = gate.evaluate(metric(new, lo, hi))
    assert v.status == status, v.message
    assert gate.test_id == "Age-x-vs-baseline" and gate.decision_mode == "ci_overlap"
    d = v.to_dict()
    assert d["kind"] == "regression" and d["baseline"]["value"] == base and d["mode"] == "ci_overlap"
    assert "baseline run R0" in v.message


def test_regression_without_a_baseline_value_is_undefined():
    gate = Gate("bbq", "Age", "x", abs_max=0.05, baseline=_baseline(math.nan))
    v = gate.evaluate(metric(0.0, -0.01, 0.01))
    assert v.status == "undefined" and "no regression can be ruled out" in v.message


def test_add_regression_gates_reads_the_baseline_results():
    from audit_harness.gates import add_regression_gates

    results = {
        "run_id": "R7",
        "benchmarks": {
            "bbq": {
                "Age": {
                    "status": "ok",
                    "metrics": {"acc_disambig": {"value": 0.7, "ci": [0.6, 0.8], "n": 50}},
                },
                "SES": {"status": "error", "error": "device lost"},
            }
        },
    }
    gates = {
        "bbq": [
            Gate("bbq", "Age", "acc_disambig", min=0.5, max_regression=0.05),
            Gate("bbq", "SES", "acc_disambig", min=0.5),
        ]
    }
    out = add_regression_gates(gates, results)["bbq"]
    assert [g.test_id for g in out] == [
        "Age-acc_disambig",
        "Age-acc_disambig-vs-baseline",
        "SES-acc_disambig",
        "SES-acc_disambig-vs-baseline",
    ]
    assert out[1].baseline.value == 0.7 and out[1].baseline.run_id == "R7" and out[1].max_regression == 0.05
    assert math.isnan(out[3].baseline.value) and "device lost" in out[3].baseline.reason


# --- issue 46: pooled gates ------------------------------------------------------------------------
POOLING = {"bbq": (*CATALOGUE["bbq"], {}, ("pooled",)), "pairs": (("overall", "race"), ("bias_score",))}


def test_pooled_gates_come_first_with_their_own_test_ids(tmp_path):
    path = write(
        tmp_path,
        "mode: ci_detect\nbbq:\n  defaults:\n    diff_bias_ambig: {abs_max: 0.05}\n"
        "  pooled:\n    diff_bias_ambig: {abs_max: 0.05, mode: ci_three_way}\n    acc_disambig: null\n",
    )
    gates = load_thresholds(path, POOLING)["bbq"]
    assert [(g.test_id, g.mode) for g in gates] == [
        ("pooled-diff_bias_ambig", "ci_three_way"),
        ("Age-diff_bias_ambig", "ci_detect"),
        ("SES-diff_bias_ambig", "ci_detect"),
    ]


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "pairs:\n  defaults: {}\n  pooled:\n    bias_score: {target: 50, tolerance: 5}\n",
            "thresholds.yaml:3: pairs.pooled: pairs has no pooled categories",
        ),
        (
            "bbq:\n  pooled:\n    diff_bias_amb: {abs_max: 0.05}\n",
            "thresholds.yaml:3: bbq.pooled.diff_bias_amb: unknown metric 'diff_bias_amb'",
        ),
        (
            "bbq:\n  pooled:\n    diff_bias_ambig: {abs_max: 0.05, sequential: true}\n",
            "bbq.pooled.diff_bias_ambig: a pooled gate cannot be sequential",
        ),
        ("bbq:\n  pooled: [diff_bias_ambig]\n", "thresholds.yaml:2: bbq.pooled: expected a mapping"),
    ],
)
def test_a_bad_pooled_block_names_file_line_and_field(tmp_path, text, fragment):
    with pytest.raises(ConfigError) as err:
        load_thresholds(write(tmp_path, text), POOLING)
    assert fragment in str(err.value)
