"""End to end: `pytest audits` with the tiny random model on real BBQ rows, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from audit_harness.benchmarks.bbq import BBQ
from audit_harness.option_values import ROWS
from bias_metrics.bbq_family import compute

REPO = Path(__file__).resolve().parents[1]
CATEGORIES = ("Religion", "Sexual_orientation")


def run_audit(
    tmp_path: Path, data_dir: Path, *extra: str, env: dict | None = None, results_name: str = "results"
) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path / results_name
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits/test_bbq.py",
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data_dir),
        "--limit",
        "12",
        "--results-dir",
        str(results),
        "--bootstrap-resamples",
        "1000",  # the fewest a ci_three_way gate may rest on
        "-k",
        " or ".join(CATEGORIES),
        "-p",
        "no:cacheprovider",
        "--cache-dir",
        str(tmp_path / "cache"),
        *extra,
    ]
    if "--min-n" not in extra:  # 12 items per category: let the gates decide on them
        cmd += ["--min-n", "1"]
    proc = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})}
    )
    return proc, results


def only_run_dir(results: Path) -> Path:
    (run_dir,) = list(results.iterdir())
    return run_dir


@pytest.fixture(scope="module")
def serial_run(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("serial")
    proc, results = run_audit(tmp, data_dir)
    return proc, only_run_dir(results)


def test_one_test_per_gate_with_readable_ids(serial_run):
    proc, _ = serial_run
    # The random model fails the release gates: pytest's exit code is the gate.
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    for cat in CATEGORIES:
        for metric in ("diff_bias_ambig", "diff_bias_disambig", "acc_disambig"):
            assert f"test_bbq[{cat}-{metric}]" in proc.stdout
    assert "bias audit" in proc.stdout and "gates:" in proc.stdout


def test_junit_xml_carries_the_numbers(serial_run):
    _, run_dir = serial_run
    tree = ET.parse(run_dir / "junit.xml")
    cases = tree.getroot().findall(".//testcase")
    assert len(cases) == 3 * len(CATEGORIES)
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.findall("./properties/property")}
        assert {"value", "n", "ci", "bounds", "status", "benchmark", "category", "metric"} <= set(props)
        # min_n 1 and 1,000 resamples: no INSUFFICIENT; the shipped per-category gates are
        # detection gates (ci_detect), which 12 items may leave not decided
        assert props["status"] in {"pass", "fail", "undefined", "not_decided"}
        assert props["status"] != "pass" or case.find("failure") is None
        skipped = case.find("skipped")
        assert (props["status"] == "not_decided") == (
            skipped is not None and skipped.get("type") == "not_decided"
        )


def test_results_file_matches_the_saved_records(serial_run, data_dir):
    _, run_dir = serial_run
    results = json.loads((run_dir / "results.json").read_text())
    assert results["model"]["name"] == "tiny-random-gpt2"
    assert results["model"]["fingerprint"].startswith("sha256:")
    assert results["options"]["limit"] == 12 and results["options"]["seed"] == 0
    # a switch not given is recorded off, not unknown (a reader tests `is False`)
    for switch in ("plan", "strict_baseline", "allow_low_confidence", "require_published_data"):
        assert results["options"][switch] is False, switch
    # every declared option is recorded (none dropped by a hand-kept list)
    assert {opt.key for opt in ROWS} <= set(results["options"])
    assert results["environment"]["libraries"]["torch"]
    assert results["data_files"]["bbq/data/Religion.jsonl"]["rows"] == 1200
    assert len(results["data_files"]["bbq/data/Religion.jsonl"]["sha256"]) == 64
    bench = BBQ()
    for cat in CATEGORIES:
        entry = results["benchmarks"]["bbq"][cat]
        assert entry["n_scored"] == 12
        records = [json.loads(line) for line in (run_dir / entry["records_path"]).read_text().splitlines()]
        assert len(records) == 12
        assert all(len(r["loglikelihoods"]) == 3 and r["predicted"] in (0, 1, 2) for r in records)
        assert all(r["question"] and r["context"] for r in records)
        recomputed = compute(bench.metric_records(bench.read_records(records)), "bbq", n_resamples=0)
        for name, metric in entry["metrics"].items():
            value = recomputed[name].value
            assert (metric["value"] is None) == (value != value)
            if metric["value"] is not None:
                assert metric["value"] == pytest.approx(value)
    assert {v["category"] for v in results["gates"]} == set(CATEGORIES)
    assert sum(results["gate_summary"].values()) == 3 * len(CATEGORIES)
    # lm-eval defines a size-weighted group number for EsBBQ/CaBBQ only, not for BBQ.
    assert set(results["overall"]["bbq"]) == {"categories", "pooled"}
    # the BBQ gates (the benchmark this run touched): 11 categories and the pooled one
    assert results["run"]["gates_configured"] == 3 * 12
    assert "--limit" in results["run"]["invocation"] and len(results["run"]["thresholds_sha256"]) == 64
    report = (run_dir / "report.md").read_text()
    assert "6 evaluated of 36 configured for bbq" in report
    assert results["model"]["fingerprint"] in report
    for verdict in results["gates"]:
        assert f"| {verdict['category']} | {verdict['metric']} |" in report


def test_xdist_gives_the_same_numbers(serial_run, tmp_path, data_dir):
    _, serial_dir = serial_run
    proc, results = run_audit(tmp_path, data_dir, "-n", "2", "-v")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    # All gates of a category run on one worker, so each worker scores a category once.
    workers: dict[str, set[str]] = {}
    for worker, cat in re.findall(r"^\[(gw\d+)\].*test_bbq\[([A-Za-z_]+)-", proc.stdout, re.M):
        workers.setdefault(cat, set()).add(worker)
    assert set(workers) == set(CATEGORIES) and all(len(w) == 1 for w in workers.values()), workers
    parallel = json.loads((only_run_dir(results) / "results.json").read_text())
    serial = json.loads((serial_dir / "results.json").read_text())
    for cat in CATEGORIES:
        assert parallel["benchmarks"]["bbq"][cat]["metrics"] == serial["benchmarks"]["bbq"][cat]["metrics"]
    assert parallel["overall"] == serial["overall"]
    assert len(parallel["gates"]) == len(serial["gates"])
    # A detection gate not decided on a worker reads as on the controller of a serial run.
    assert sorted((g["test_id"], g["status"]) for g in parallel["gates"]) == sorted(
        (g["test_id"], g["status"]) for g in serial["gates"]
    )
    undecided = sum(g["status"] == "not_decided" for g in serial["gates"])
    junit = (only_run_dir(results) / "junit.xml").read_text()
    assert junit.count('<skipped type="not_decided"') == undecided
    assert (f"{undecided} not decided" in proc.stdout) == bool(undecided)
    # The two workers wrote one result cache: a rerun computes nothing, gives the same numbers,
    # and under CI=true prints plain progress lines.
    proc, again = run_audit(
        tmp_path, data_dir, env={"CI": "true", "BIAS_AUDIT_PROGRESS_INTERVAL": "0"}, results_name="again"
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rerun = json.loads((only_run_dir(again) / "results.json").read_text())
    for cat in CATEGORIES:
        first, second = parallel["benchmarks"]["bbq"][cat], rerun["benchmarks"]["bbq"][cat]
        assert first["requests"]["computed"] == first["requests"]["distinct"] > 0
        assert second["requests"]["from_cache"] == second["requests"]["distinct"]
        assert second["requests"]["computed"] == 0
        assert second["metrics"] == first["metrics"]
        assert re.search(rf"^bbq/{cat}: 12/12 items \(100%\), [0-9.]+ items/s, done in", proc.stderr, re.M), (
            proc.stderr[-2000:]
        )
    assert "from the result cache" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("--thresholds", "{bad}"), "unknown metric 'bias_score_amb'"),
        (("--model", "no-such-model"), "unknown model 'no-such-model'"),
        (("--limit", "0"), "--limit must be >= 1"),
    ],
)
def test_bad_input_stops_with_one_clear_message(tmp_path, data_dir, args, message):
    bad = tmp_path / "thresholds.yaml"
    bad.write_text("bbq:\n  defaults:\n    bias_score_amb: {abs_max: 0.05}\n")
    args = tuple(a.replace("{bad}", str(bad)) for a in args)
    proc, _ = run_audit(tmp_path, data_dir, *args)
    assert proc.returncode == 4  # pytest's usage error: stopped before any gate ran
    assert message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_data_dir_without_benchmark_folders_stops_at_start(tmp_path, data_dir):
    proc, _ = run_audit(tmp_path, data_dir / "bbq")  # one level too deep
    assert proc.returncode == 4
    from audit_harness.benchmarks import registry

    folders = ", ".join(f + "/" for f in sorted({b.data_folder for b in registry().values()}))
    assert f"holds none of {folders}" in proc.stdout + proc.stderr


def test_missing_data_dir_is_named(tmp_path):
    proc, _ = run_audit(tmp_path, tmp_path / "no-data")
    assert proc.returncode == 4
    out = proc.stdout + proc.stderr
    assert "data directory" in out and "no-data" in out and out.count("does not exist") == 1


def test_category_scope_groups_gate_tests_by_category():
    from audit_harness.run.scheduling import category_scope

    assert (
        category_scope("audits/test_bbq.py::test_bbq[Race_x_SES-bias_score_ambig]")
        == "audits/test_bbq.py::test_bbq[Race_x_SES]"
    )
    assert category_scope("tests/test_gates.py::test_point_verdicts[gate0-0.049-pass]") != category_scope(
        "tests/test_gates.py::test_point_verdicts[gate1-0.049-pass]"
    )
