"""A gates file that configures no gate for the benchmark a run audits (empty, a mode alone,
empty defaults, another benchmark's section only) is NOTHING CHECKED, exit 5, with a run folder
saying so; never exit 0 (pytest alone skips the test for an empty parameter set and passes).
Through `bias-audit oracle`, `bias-audit score`, `bias-audit run` and `pytest audits`, on real
BBQ rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import REPO, bias_audit_score

#: Gates files that hold no gate for BBQ.
UNGATED = {
    "empty": "",
    "mode_only": "mode: ci_three_way\n",
    "empty_defaults": "bbq:\n  defaults: {}\n",
    "other_benchmark": "kobbq:\n  defaults:\n    acc_ambig: {min: 0.5}\n",
}


def _assert_nothing_checked(
    proc: subprocess.CompletedProcess, doc: dict | None, run_dir: Path | None
) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out[-3000:]
    assert "VERDICT: NOTHING CHECKED: the gates file" in out and "configures no gate for bbq" in out
    assert doc is not None and run_dir is not None, "the run folder says what was (not) checked"
    assert doc["run"]["status"] == "nothing checked" and doc["run"]["exit_status"] == 5
    assert doc["gates"] == []
    assert "NOTHING CHECKED" in (run_dir / "report.md").read_text(encoding="utf-8")
    suite = ET.parse(run_dir / "junit.xml").getroot().iter("testsuite")
    props = {p.get("name"): p.get("value") for s in suite for p in s.iter("property")}
    assert props["bias_audit_exit_code"] == "5" and props["bias_audit_verdict"] == "NOTHING CHECKED"


@pytest.mark.parametrize("name", sorted(UNGATED))
def test_oracle_with_no_gate_for_its_benchmark_is_nothing_checked(tmp_path, data_dir, name):
    gates = tmp_path / "thresholds.yaml"
    gates.write_text(UNGATED[name], encoding="utf-8")
    proc, doc, run_dir = bias_audit_score(
        tmp_path,
        "bbq",
        "--model-kind",
        "stereotyped",
        "--thresholds",
        gates,
        "--data-dir",
        data_dir,
        command="oracle",
    )
    _assert_nothing_checked(proc, doc, run_dir)


def test_score_with_no_gate_is_nothing_checked(tmp_path, data_dir):
    gates = tmp_path / "thresholds.yaml"
    gates.write_text(UNGATED["empty_defaults"], encoding="utf-8")
    with open(data_dir / "bbq" / "data" / "Age.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(30), f)]
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({**r, "pred": "ABC"[r["label"]]}) + "\n" for r in rows))
    proc, doc, run_dir = bias_audit_score(
        tmp_path,
        "bbq",
        "--predictions",
        preds,
        "--prediction-field",
        "pred",
        "--thresholds",
        gates,
        "--data-dir",
        data_dir,
    )
    _assert_nothing_checked(proc, doc, run_dir)


def _audit(tmp_path: Path, data_dir: Path, gates: Path, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            *command,
            "--model",
            "tiny-random-gpt2",
            "--thresholds",
            str(gates),
            "--data-dir",
            str(data_dir),
            "--results-dir",
            str(tmp_path / "results"),
            "--limit",
            "8",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )


def _only_run(tmp_path: Path) -> tuple[dict, Path]:
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    return json.loads((run_dir / "results.json").read_text()), run_dir


@pytest.mark.parametrize(
    "command", [("-m", "audit_harness.cli", "run", "-k", "test_bbq"), ("-m", "pytest", "audits/test_bbq.py")]
)
def test_run_and_pytest_with_an_empty_gates_file_are_nothing_checked(tmp_path, data_dir, command):
    gates = tmp_path / "thresholds.yaml"
    gates.write_text("", encoding="utf-8")
    proc = _audit(tmp_path, data_dir, gates, *command)
    _assert_nothing_checked(proc, *_only_run(tmp_path))


def test_every_audit_with_no_gate_at_all_is_nothing_checked(tmp_path, data_dir):
    gates = tmp_path / "thresholds.yaml"
    gates.write_text(UNGATED["mode_only"], encoding="utf-8")
    proc = _audit(tmp_path, data_dir, gates, "-m", "pytest", "audits")
    assert proc.returncode == 5, (proc.stdout + proc.stderr)[-3000:]
    doc, _ = _only_run(tmp_path)
    assert doc["run"]["status"] == "nothing checked"
    assert "configures no gate for bbq, cabbq, cbbq" in proc.stdout
