"""Issue 12 end to end with the tiny random model on real BBQ rows: exit codes, JUnit properties of
a serial and a parallel run, regression gates against a baseline run, `bias-audit compare`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from audit_harness import cli
from audit_harness.gates.resolution import status_word  # NOT DECIDED, as every display prints it

REPO = Path(__file__).resolve().parents[1]
CATEGORIES = ("Religion", "Sexual_orientation")
#: Gates the tiny model (it answers "unknown" to everything) passes, each with a direction of
#: worse: acc_disambig is 0 for it, so a baseline better than that is a regression.
PASSING = """
bbq:
  max_regression: 0.05
  defaults:
    acc_ambig: {min: 0.5}
    acc_disambig: {min: 0.0}
    diff_bias_ambig: {abs_max: 0.5, mode: ci_overlap}
"""
#: The properties every evaluated gate test carries in JUnit XML.
PROPERTIES = {
    "benchmark",
    "category",
    "metric",
    "kind",
    "value",
    "n",
    "ci",
    "bounds",
    "mode",
    "min_n",
    "status",
    "items_scored",
}


def audit(
    tmp_path: Path,
    data_dir: Path,
    *extra: str,
    name: str = "results",
    model: str = "tiny-random-gpt2",
    target: str = "audits/test_bbq.py",
    keyword: str = " or ".join(CATEGORIES),
) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        target,
        "--model",
        model,
        "--data-dir",
        str(data_dir),
        "--limit",
        "12",
        "--results-dir",
        str(results),
        "--bootstrap-resamples",
        "1000",
        "--min-n",
        "1",
        "-p",
        "no:cacheprovider",
        "--cache-dir",
        str(tmp_path / "cache"),
        *extra,
    ]
    if keyword:
        cmd += ["-k", keyword]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env), results


def run_dir_of(results: Path) -> Path:
    (run_dir,) = list(results.iterdir())
    return run_dir


def junit_cases(run_dir: Path) -> dict[str, dict[str, str]]:
    root = ET.parse(run_dir / "junit.xml").getroot()
    return {
        case.get("name"): {p.get("name"): p.get("value") for p in case.findall("./properties/property")}
        for case in root.iter("testcase")
    }


@pytest.fixture(scope="module")
def thresholds(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gates") / "thresholds.yaml"
    path.write_text(PASSING)
    return path


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, data_dir, thresholds):
    tmp = tmp_path_factory.mktemp("base")
    proc, results = audit(tmp, data_dir, "--thresholds", str(thresholds))
    return proc, run_dir_of(results) if results.exists() else None


def test_every_gate_passed_exits_0(base_run):
    proc, run_dir = base_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["gate_summary"] == {"pass": 3 * len(CATEGORIES)}
    assert results["run"]["exit_status"] == 0
    assert "VERDICT: PASS ON A PARTIAL SCOPE: " in proc.stdout  # --limit: sampled rows
    assert {v["mode"] for v in results["gates"]} == {"point", "ci_overlap"}
    assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()


def test_a_gate_line_is_printed_once(tmp_path, data_dir):
    proc, _ = audit(tmp_path, data_dir, keyword="test_bbq and Religion")  # shipped gates: failures
    assert proc.returncode == 1, proc.stdout[-3000:]
    message = "bbq/Religion/acc_disambig = 0.0000"
    assert proc.stdout.count(message) == 1, proc.stdout
    assert "FAILED audits/test_bbq.py::test_bbq[Religion-acc_disambig]\n" in proc.stdout
    assert "FAIL         test_bbq[Religion-acc_disambig]  0.000 [0.000, " in proc.stdout
    # The terminal ends with the run's verdict, as the reports begin with it.
    # A failed gate is evidence, and the verdict says so apart from the undecided ones.
    assert (
        "VERDICT: FAIL ON A PARTIAL SCOPE: BLOCKED, evidence of bias: " in proc.stdout
        and " block the release (" in proc.stdout
        and "; partial scope (" in proc.stdout
    )


def test_junit_of_a_serial_and_a_parallel_run_carry_every_property(base_run, tmp_path, data_dir, thresholds):
    _, serial_dir = base_run
    proc, results = audit(tmp_path, data_dir, "--thresholds", str(thresholds), "-n", "2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    serial, parallel = junit_cases(serial_dir), junit_cases(run_dir_of(results))
    assert set(serial) == set(parallel) and len(serial) == 3 * len(CATEGORIES)
    modes = {"acc_ambig": "point", "acc_disambig": "point", "diff_bias_ambig": "ci_overlap"}
    for cases in (serial, parallel):
        for name, props in cases.items():
            assert PROPERTIES <= set(props), (name, PROPERTIES - set(props))
            assert props["mode"] == modes[props["metric"]] and props["kind"] == "threshold"
            assert props["status"] == "pass" and props["min_n"] == "1"
    for name in serial:  # the same numbers, whichever process evaluated the gate
        assert {k: v for k, v in serial[name].items()} == parallel[name]


def test_a_regression_fails_exactly_its_gate(base_run, tmp_path, data_dir, thresholds):
    _, base_dir = base_run
    base = json.loads((base_dir / "results.json").read_text())
    # Against itself nothing regressed: every threshold gate gets a -vs-baseline twin that passes.
    proc, results = audit(
        tmp_path, data_dir, "--thresholds", str(thresholds), "--baseline", str(base_dir), name="same"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    same = json.loads((run_dir_of(results) / "results.json").read_text())
    regressions = [v for v in same["gates"] if v["kind"] == "regression"]
    assert len(regressions) == 3 * len(CATEGORIES) and {v["status"] for v in regressions} == {"pass"}
    assert same["baseline"]["run_id"] == base["run_id"]
    import hashlib

    assert same["baseline"]["sha256"] == hashlib.sha256((base_dir / "results.json").read_bytes()).hexdigest()
    assert same["baseline"]["not_like_for_like"] == [] and "BASELINE not like" not in proc.stdout
    # A baseline that was better on one metric: this run is worse there by more than 0.05.
    better = json.loads(json.dumps(base))
    better["benchmarks"]["bbq"]["Religion"]["metrics"]["acc_disambig"].update(value=0.9, ci=[0.8, 0.95])
    better["options"]["seed"] += 1  # and run with another seed: the run says it is not like for like
    (tmp_path / "better.json").write_text(json.dumps(better))
    proc, results = audit(
        tmp_path,
        data_dir,
        "--thresholds",
        str(thresholds),
        "--baseline",
        str(tmp_path / "better.json"),
        name="worse",
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = run_dir_of(results)
    worse = json.loads((run_dir / "results.json").read_text())
    failed = [v["test_id"] for v in worse["gates"] if v["status"] != "pass"]
    assert failed == ["Religion-acc_disambig-vs-baseline"]
    assert "FAILED audits/test_bbq.py::test_bbq[Religion-acc_disambig-vs-baseline]" in proc.stdout
    assert proc.stdout.count("FAILED ") == 1
    props = junit_cases(run_dir)["test_bbq[Religion-acc_disambig-vs-baseline]"]
    assert props["kind"] == "regression" and props["mode"] == "ci_overlap"
    assert props["baseline_value"] == "0.900000" and props["max_regression"] == "0.05"
    assert props["baseline_run"] == base["run_id"]
    html = (run_dir / "report.html").read_text()
    assert "Compared with the baseline" in html and base["run_id"] in html
    seed = base["options"]["seed"]
    note = f"seed differs: {seed + 1!r} (old) vs {seed!r} (new)"
    assert worse["baseline"]["not_like_for_like"] == [note]
    assert f"BASELINE not like for like: {note}" in proc.stdout
    assert "The baseline is not like for like" in (run_dir / "report.md").read_text()
    assert "The baseline is not like for like" in html


def test_bias_audit_compare_reports_moved_gates(base_run, tmp_path, data_dir, capsys):
    """Two runs of different gates files on one model move every gate they share whose verdict
    differs; compare lists exactly those (checked against the two results files)."""
    _, base_dir = base_run
    proc, results = audit(tmp_path, data_dir, name="shipped")  # the shipped gates fail here
    assert proc.returncode == 1
    new_dir = run_dir_of(results)
    assert cli.main(["compare", str(base_dir), str(new_dir)]) == 0
    out = capsys.readouterr().out
    old, new = (json.loads((d / "results.json").read_text()) for d in (base_dir, new_dir))
    status = [{v["test_id"]: v["status"] for v in r["gates"]} for r in (old, new)]
    moved = sorted(t for t in set(status[0]) & set(status[1]) if status[0][t] != status[1][t])
    assert moved, status  # the two gates files disagree on some gate of this model
    # Written beside the run folders, never into one (a signed run would stop verifying).
    stem = new_dir.parent / f"compare-{old['run_id']}-vs-{new['run_id']}"
    assert not list(new_dir.glob("compare-*"))
    comparison = json.loads(stem.with_suffix(".json").read_text())
    assert sorted(g["test_id"] for g in comparison["gates"] if g["changed"]) == moved
    assert f"{len(moved)} of " in out
    for t in moved:
        assert f"| bbq | {t} | {status_word(status[0][t])} | {status_word(status[1][t])} |" in out
    assert stem.with_suffix(".md").read_text().startswith("# Bias audit comparison")
    assert "option" not in "".join(comparison["notes"])  # same limit, seed, ...
    assert any("thresholds files differ" in n for n in comparison["notes"])


def test_compare_says_when_a_run_is_incomplete(base_run):
    from audit_harness.report.compare import compare_results, render_comparison

    _, base_dir = base_run
    complete = json.loads((base_dir / "results.json").read_text())
    partial = json.loads(json.dumps(complete))
    # Documents without a recorded outcome (older runs) are decided from their gates and status.
    del partial["run"]["outcome"]
    partial["run"]["status"] = "interrupted"
    partial["gates"] = partial["gates"][:2]
    errored = json.loads(json.dumps(complete))
    del errored["run"]["outcome"]
    errored["gates"][0]["status"] = "error"
    assert not any("incomplete" in n for n in compare_results(complete, complete)["notes"])
    notes = compare_results(partial, errored)["notes"]
    assert notes[0].startswith("the old run is incomplete (INTERRUPTED)")
    assert notes[1].startswith("the new run is incomplete (RUN ERROR): 1 gate(s) have no verdict")
    assert "- the old run is incomplete (INTERRUPTED)" in render_comparison(compare_results(partial, errored))


# --- exit codes ----------------------------------------------------------------------------------
def test_a_bound_on_the_wrong_scale_is_an_input_error(tmp_path, data_dir):
    bad = tmp_path / "thresholds.yaml"
    bad.write_text("bbq:\n  defaults:\n    bias_score_ambig: {abs_max: 5}\n")
    proc, results = audit(tmp_path, data_dir, "--thresholds", str(bad))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    assert "bbq.defaults.bias_score_ambig: abs_max 5 exceeds every |value| in [-1, 1]" in out
    assert not results.exists()


def test_a_deprecated_basis_still_runs_and_says_so(tmp_path, data_dir):
    old = tmp_path / "thresholds.yaml"
    old.write_text("bbq:\n  defaults:\n    acc_ambig: {min: 0.5, basis: ci}\n")
    proc, results = audit(tmp_path, data_dir, "--thresholds", str(old), keyword="Religion")
    assert proc.returncode == 0, proc.stdout[-3000:]
    message = "bbq.defaults.acc_ambig.basis is deprecated: write `mode: ci_inside`"
    # Once in pytest's warnings summary and once in the audit's section: no repeat per worker.
    assert proc.stdout.count(message) == 2 and f"THRESHOLDS: {old}: {message}" in proc.stdout
    run_dir = run_dir_of(results)
    res = json.loads((run_dir / "results.json").read_text())
    (verdict,) = res["gates"]
    assert verdict["mode"] == "ci_inside" and "mode ci_inside" in verdict["message"]
    # The reports a reviewer reads outlive the terminal: the deprecation is in both.
    (warning,) = res["run"]["thresholds_warnings"]
    assert warning.startswith(f"{old}: {message}")
    assert f"> **Thresholds file:** {old}: {message}" in (run_dir / "report.md").read_text()
    assert f"<strong>Thresholds file:</strong> {old}: {message}" in (run_dir / "report.html").read_text()


def test_nothing_selected_exits_5_and_leaves_no_run_folder(tmp_path, data_dir):
    proc, results = audit(tmp_path, data_dir, keyword="test_bbq and Nope")
    assert proc.returncode == 5, proc.stdout[-2000:]
    assert not results.exists() or not any(results.iterdir()), list(results.rglob("*"))


def test_unknown_baseline_file_is_an_input_error(tmp_path, data_dir):
    proc, _ = audit(tmp_path, data_dir, "--baseline", str(tmp_path / "none"))
    assert proc.returncode == 4 and "--baseline:" in proc.stdout + proc.stderr


def test_report_and_compare_input_errors_exit_4(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 4
    assert "results.json: not found" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("{}")
    assert cli.main(["compare", str(tmp_path), str(tmp_path)]) == 4
    assert "not a bias-audit results.json" in capsys.readouterr().err
