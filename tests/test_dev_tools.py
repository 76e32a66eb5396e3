"""The developers' tools of tools/: the refactor checks must be able to fail.

tools/compare_runs.py says whether a change moved a number between two run folders;
tools/check_architecture.py holds the architecture's ceilings. Both are run as a developer
runs them (a subprocess, the exit code read), on run folders and sources made here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMPARE = REPO / "tools" / "compare_runs.py"


def _run_folder(root: Path, lls: list[float], predicted: int, metric: float, started: str) -> Path:
    folder = root
    (folder / "records" / "bbq").mkdir(parents=True)
    record = {"id": "Age-1", "predicted": predicted, "raw_prediction": None, "loglikelihoods": lls}
    (folder / "records" / "bbq" / "Age.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    results = {
        "run_id": started,
        "run": {"started": started, "duration_s": 1.5},
        "benchmarks": {"bbq": {"Age": {"metrics": {"acc": metric}, "requests": {"forwards": 3}}}},
    }
    (folder / "results.json").write_text(json.dumps(results), encoding="utf-8")
    return folder


def _compare(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(COMPARE), str(before), str(after)], capture_output=True, text=True
    )


BASE = {"lls": [-10.0, -12.5, -11.25], "predicted": 0, "metric": 0.5}


@pytest.mark.parametrize(
    ("change", "rc", "said"),
    [
        ({}, 0, "0 difference(s)"),
        ({"lls": [-10.0 + 5e-5, -12.5, -11.25]}, 0, "5e-05 nats"),  # inside the 1e-4 nats contract
        ({"lls": [-10.0 + 2e-4, -12.5, -11.25]}, 1, "loglikelihoods"),
        ({"predicted": 1}, 1, "predicted: 0 -> 1"),
        ({"metric": 0.5 + 1e-6}, 1, "metrics.acc: 0.5 -> 0.500001"),
    ],
)
def test_compare_runs_fails_when_a_number_moves(tmp_path, change, rc, said):
    before = _run_folder(tmp_path / "before", **BASE, started="t0")
    after = _run_folder(tmp_path / "after", **{**BASE, **change}, started="t1")
    done = _compare(before, after)
    assert done.returncode == rc, done.stdout + done.stderr
    assert said in done.stdout


def test_compare_runs_names_a_record_file_only_one_run_has(tmp_path):
    before = _run_folder(tmp_path / "before", **BASE, started="t0")
    after = _run_folder(tmp_path / "after", **BASE, started="t0")
    (after / "records" / "bbq" / "SES.jsonl").write_text("{}\n", encoding="utf-8")
    done = _compare(before, after)
    assert done.returncode == 1
    assert "records/bbq/SES.jsonl: only in after" in done.stdout


def test_check_architecture_fails_over_a_ceiling(monkeypatch, capsys):
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import check_architecture
    finally:
        sys.path.remove(str(REPO / "tools"))
    monkeypatch.setattr(
        check_architecture, "counts", lambda: {"functions over 100 lines": ["a.py:1 f (101 lines)"]}
    )
    monkeypatch.setattr(check_architecture, "CEILINGS", {"functions over 100 lines": 0})
    assert check_architecture.main([]) == 1
    assert "a.py:1 f (101 lines)" in capsys.readouterr().out
    monkeypatch.setattr(check_architecture, "CEILINGS", {"functions over 100 lines": 1})
    assert check_architecture.main([]) == 0
