"""The release decision's operating characteristics (docs/gates.md, "What a release decision
promises"), held at small run counts on the real BBQ data: an honest, unbiased model gets exit 0
and a model biased by twice the band does not, both by the simulation
(``perf/release_characteristics.py``, through the suite's metrics, ``Gate.evaluate`` and
``run_outcome.decide``) and end to end through ``bias-audit score`` on seeded simulated answers.

The counts asserted are far from what the table measures (honest P(exit 0) about 1, twice-band
about 0), so they hold on any machine and any seed; nothing is timed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from audit_harness.benchmarks import registry
from helpers import REPO, bias_audit_score

#: A large BBQ category: its intervals are narrow enough for an honest model to be certified.
CATEGORY = "Race_x_SES"


@pytest.fixture(scope="module")
def oc():
    """perf/release_characteristics.py as a module."""
    spec = importlib.util.spec_from_file_location(
        "release_characteristics", REPO / "perf" / "release_characteristics.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bbq_unit(oc, data_dir):
    """The BBQ run the shipped gates judge, every category on the full data."""
    gates = oc.load_thresholds(oc.PACKAGED_THRESHOLDS, _catalogue())
    (unit,) = oc.units_of("bbq", registry()["bbq"], gates["bbq"], Path(data_dir))
    return unit


def _catalogue():
    return {n: b.gate_catalogue() for n, b in registry().items()}


def test_the_simulated_honest_model_is_released_and_the_twice_band_one_is_not(oc, bbq_unit, data_dir):
    ns = oc.parse(
        ["--data-dir", str(data_dir), "--runs", "10", "--one-runs", "0", "--models", "honest,twice-band"]
    )
    res = oc.simulate_unit(bbq_unit, ns)["models"]
    honest, biased = res["honest"], res["twice-band"]
    assert honest["runs"] == biased["runs"] == 10
    assert honest["p_exit0"] >= 0.9, honest["expected"]
    assert biased["p_exit0"] <= 0.05, biased["expected"]
    # No gate FAILs the unbiased model in more than 2 of 10 runs (nominal: 2.5 % of runs).
    assert max(p.get("fail", 0.0) for p in honest["per_gate"].values()) <= 0.2
    # The pooled gates certify the honest run and stop the biased one.
    pooled = {k: p for k, p in honest["per_gate"].items() if k.startswith("pooled/")}
    assert pooled and all(p.get("pass", 0.0) >= 0.9 for p in pooled.values())
    assert biased["per_gate"]["pooled/diff_bias_ambig"].get("fail", 0.0) >= 0.9


def test_a_category_biased_by_020_is_caught_where_its_items_allow(oc, bbq_unit, data_dir):
    ns = oc.parse(["--data-dir", str(data_dir), "--runs", "2", "--one-runs", "2", "--models", "honest"])
    one = oc.simulate_unit(bbq_unit, ns)["one_category"]
    assert set(one) == set(bbq_unit.items)
    assert one[CATEGORY]["p_exit0"] == 0.0


# --- end to end: bias-audit score on seeded simulated answers ---------------------------------------
def _answers(oc, data_dir: Path, path: Path, model, seed: int) -> None:
    """Saved answers of ``model`` (the simulation's answer probabilities) for every row of
    ``CATEGORY``, one letter per row."""
    bench = registry()["bbq"]
    rng = np.random.default_rng(seed)
    probs = oc.class_probabilities(model, model.bias)
    rows = []
    for it in bench.load_category(data_dir, CATEGORY).items:
        other = ({0, 1, 2} - {it.biased_option, it.unknown_option}).pop()
        block = 0 if it.context_condition == "ambig" else (1 if it.gold == it.biased_option else 2)
        cls = rng.choice(4, p=probs[block])
        option = (it.biased_option, other, it.unknown_option)[cls]
        rows.append({"id": it.item_id, "answer": "ABC"[option]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.mark.parametrize("case", [("honest", 0.0, 0), ("twice-band", 0.10, 1)], ids=["honest", "twice-band"])
def test_bias_audit_score_releases_an_honest_model_and_blocks_a_biased_one(oc, tmp_path, data_dir, case):
    name, bias, code = case  # the model, its bias in both contexts, the exit code expected
    preds = tmp_path / "answers.jsonl"
    _answers(oc, Path(data_dir), preds, oc.Model(name, bias=bias), seed=46)
    proc, results, _ = bias_audit_score(
        tmp_path,
        "bbq",
        "--predictions",
        preds,
        "--prediction-field",
        "answer",
        "--data-dir",
        data_dir,
        "--",
        "-k",
        f"{CATEGORY} or pooled",
    )
    assert proc.returncode == code, proc.stdout[-3000:] + proc.stderr[-2000:]
    # The pooled gates (here on the one category answered) are what must PASS for exit 0.
    pooled = {
        g["metric"].removesuffix("-generate"): g["status"]
        for g in results["gates"]
        if g["category"] == "pooled"
    }
    assert set(pooled) >= {"diff_bias_ambig", "diff_bias_disambig", "acc_disambig"}
    if code == 0:
        assert set(pooled.values()) == {"pass"}
    else:
        assert pooled["diff_bias_ambig"] == pooled["diff_bias_disambig"] == "fail"
