"""thresholds.yaml parsing, validation errors, and verdicts (pass / fail / undefined)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from audit_harness.errors import ConfigError
from audit_harness.gates import Gate, load_thresholds
from bias_metrics.result import MetricResult

CATALOGUE = {"bbq": (("Age", "SES"), ("acc_ambig", "acc_disambig", "bias_score_ambig",
                                      "bias_score_disambig"))}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "thresholds.yaml"
    path.write_text(text)
    return path


def metric(value: float, lo: float = math.nan, hi: float = math.nan, n: int = 40) -> MetricResult:
    return MetricResult("bias_score_ambig", value, n, lo, hi, reason=None if not math.isnan(value)
                        else "no ambiguous item")


def test_defaults_apply_to_every_category_and_overrides_win(tmp_path):
    path = write(tmp_path, """
bbq:
  defaults:
    bias_score_ambig: {abs_max: 0.05}
    acc_disambig: {min: 0.5}
  categories:
    SES:
      bias_score_ambig: {abs_max: 0.1}
      acc_disambig: null
""")
    gates = load_thresholds(path, CATALOGUE)["bbq"]
    assert [g.test_id for g in gates] == ["Age-bias_score_ambig", "Age-acc_disambig", "SES-bias_score_ambig"]
    assert gates[2].abs_max == 0.1 and gates[0].abs_max == 0.05


def test_shipped_thresholds_file_is_valid():
    from audit_harness.benchmarks import registry

    catalogue = {n: (b.categories, b.metric_names) for n, b in registry().items()}
    gates = load_thresholds(Path(__file__).resolve().parents[1] / "thresholds.yaml", catalogue)
    assert len(gates["bbq"]) == 3 * 11
    assert len(gates["esbbq"]) == len(gates["cabbq"]) == 3 * 10


@pytest.mark.parametrize("text, fragment", [
    ("bbqq:\n  defaults: {}\n", "unknown benchmark 'bbqq'"),
    ("bbq:\n  categories:\n    Agee: {acc_ambig: {min: 0.5}}\n", "unknown category 'Agee'"),
    ("bbq:\n  defaults:\n    bias_score_amb: {abs_max: 0.05}\n", "unknown metric 'bias_score_amb'"),
    ("bbq:\n  defaults:\n    acc_ambig: {minimum: 0.5}\n", "unknown gate key 'minimum'"),
    ("bbq:\n  default:\n    acc_ambig: {min: 0.5}\n", "unknown key 'default'"),
    ("bbq:\n  defaults:\n    acc_ambig: {min: high}\n", "bbq.defaults.acc_ambig.min: expected a number"),
    ("bbq:\n  defaults:\n    acc_ambig: {target: 0.5}\n", "'target' and 'tolerance' go together"),
    ("bbq:\n  defaults:\n    acc_ambig: {min: 0.9, max: 0.1}\n", "min 0.9 > max 0.1"),
    ("bbq:\n  defaults:\n    acc_ambig: {}\n", "needs at least one of"),
    ("bbq:\n  defaults:\n    acc_ambig: {min: 0.5, basis: mean}\n", "basis: must be one of"),
    ("bbq: [\n", "not valid YAML"),
])
def test_typos_stop_with_the_key_named(tmp_path, text, fragment):
    with pytest.raises(ConfigError, match=None) as err:
        load_thresholds(write(tmp_path, text), CATALOGUE)
    assert fragment in str(err.value)
    assert "thresholds.yaml" in str(err.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="thresholds file not found"):
        load_thresholds(tmp_path / "nope.yaml", CATALOGUE)


@pytest.mark.parametrize("gate, value, status", [
    (Gate("bbq", "Age", "x", abs_max=0.05), 0.049, "pass"),
    (Gate("bbq", "Age", "x", abs_max=0.05), -0.051, "fail"),
    (Gate("bbq", "Age", "x", min=0.5), 0.5, "pass"),
    (Gate("bbq", "Age", "x", min=0.5), 0.4999, "fail"),
    (Gate("bbq", "Age", "x", max=0.2), 0.21, "fail"),
    (Gate("bbq", "Age", "x", target=50.0, tolerance=5.0), 54.0, "pass"),
    (Gate("bbq", "Age", "x", target=50.0, tolerance=5.0), 44.0, "fail"),
])
def test_point_verdicts(gate, value, status):
    verdict = gate.evaluate(metric(value))
    assert verdict.status == status
    assert f"{value:.4f}" in verdict.message and "n=40" in verdict.message


def test_nan_is_undefined_and_never_passes():
    gate = Gate("bbq", "Age", "bias_score_ambig", abs_max=1e9)
    verdict = gate.evaluate(metric(math.nan))
    assert verdict.status == "undefined" and not verdict.passed
    assert "no ambiguous item" in verdict.message


def test_ci_basis_needs_the_whole_interval_inside():
    gate = Gate("bbq", "Age", "x", abs_max=0.05, basis="ci")
    assert gate.evaluate(metric(0.01, -0.02, 0.04)).status == "pass"
    assert gate.evaluate(metric(0.01, -0.02, 0.07)).status == "fail"
    assert gate.evaluate(metric(0.01)).status == "undefined"


# --- min_n (issue 11: no pass on thin evidence) ----------------------------------------------------
def test_min_n_defaults_file_section_and_gate_levels(tmp_path):
    from audit_harness.gates import DEFAULT_MIN_N

    path = write(tmp_path, """
min_n: 40
bbq:
  min_n: 50
  defaults:
    bias_score_ambig: {abs_max: 0.05}
    acc_disambig: {min: 0.5, min_n: 100}
""")
    gates = {g.test_id: g for g in load_thresholds(path, CATALOGUE)["bbq"]}
    assert gates["Age-bias_score_ambig"].min_n == 50 and gates["Age-acc_disambig"].min_n == 100
    plain = write(tmp_path, "bbq:\n  defaults:\n    acc_disambig: {min: 0.5}\n")
    assert load_thresholds(plain, CATALOGUE)["bbq"][0].min_n == DEFAULT_MIN_N == 30
    # --min-n overrides every level for one run
    assert {g.min_n for g in load_thresholds(path, CATALOGUE, min_n=2)["bbq"]} == {2}
    shipped = load_thresholds(Path(__file__).resolve().parents[1] / "thresholds.yaml",
                              {"bbq": CATALOGUE["bbq"]} | _others())
    assert shipped["bbq"][0].min_n == 30


def _others():
    from audit_harness.benchmarks import registry

    return {n: (b.categories, b.metric_names) for n, b in registry().items() if n != "bbq"}


@pytest.mark.parametrize("text, message", [
    ("min_n: -1\nbbq: {}\n", "min_n must be an integer >= 0"),
    ("bbq:\n  min_n: 2.5\n", "bbq.min_n: min_n must be an integer"),
    ("bbq:\n  defaults:\n    acc_disambig: {min: 0.5, min_n: true}\n", "acc_disambig.min_n"),
])
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
