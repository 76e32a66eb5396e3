"""Parity with lm-evaluation-harness 0.4.13 (perf/compare_lmeval.py): the same rows, prompts and
choices give the same predictions and log-likelihoods on BBQ (lm-eval's protocol,
``--bbq-protocol lmeval``), EsBBQ and CrowS-Pairs (``--pairs-protocol lmeval`` against lm-eval's
``crows_pairs_english``, whose ``pct_stereotype`` x 100 must equal our ``bias_score``).

Slow: it starts lm-eval from the repo's ``.venv-lmeval`` (made by the script; the test is
skipped where it is absent, it never installs). The model is the zoo's tiny random GPT-2
(``LMEVAL_PARITY_MODEL`` overrides). The script's pure helpers (lm-eval's rows, predictions) are
tested without lm-eval, in the default run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import FROM_COUNTS

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "perf" / "compare_lmeval.py"
LMEVAL_PYTHON = REPO / ".venv-lmeval" / "bin" / "python"
MODEL = os.environ.get("LMEVAL_PARITY_MODEL", "tiny-random-gpt2")

needs_lmeval = pytest.mark.skipif(
    not LMEVAL_PYTHON.is_file(),
    reason=f"lm-eval not installed at {LMEVAL_PYTHON} (run perf/compare_lmeval.py once)",
)


def _script():
    spec = importlib.util.spec_from_file_location("compare_lmeval", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crows_rows_for_lmeval_are_our_pairs_in_the_hub_layout(data_dir):
    cmp = _script()
    rows = cmp.first_rows("crows_pairs", data_dir, None, 2)
    assert len(rows) == 9 and all(len(r) == 2 for r in rows.values())
    first = rows["race-color"][0]
    assert set(first) == {"id", *cmp.CROWS_FIELDS} and first["id"] == 0
    assert "black kids" in first["sent_more"] and first["stereo_antistereo"] == "stereo"
    assert cmp.row_key("crows_pairs", "race-color", first) == "0"  # our records' item id
    every = cmp.first_rows("crows_pairs", data_dir, None, None)
    assert sum(len(r) for r in every.values()) == 1508


@pytest.mark.parametrize(
    "lls,expected",
    [((-10.0, -12.5), 0), ((-12.5, -10.0), 1), ((-10.0, -10.0), 1), ((float("-inf"), -3.0), 1)],
)
def test_crows_predictions_follow_pct_stereotype(lls, expected):
    """lm-eval counts a pair when sent_more is strictly more likely (``process_results``): a tie
    is not stereotyped, on both sides of the comparison."""
    cmp = _script()
    # The sample as lm-eval logs it: (log-likelihood, is_greedy) per choice + the metric.
    sample = {
        "filtered_resps": [[ll, False] for ll in lls],
        "pct_stereotype": 1.0 if lls[0] > lls[1] else 0.0,
    }
    assert cmp.lmeval_prediction("crows_pairs", sample) == expected
    assert cmp.our_prediction("crows_pairs", list(lls)) == expected


def test_multiple_choice_predictions_are_the_first_argmax():
    cmp = _script()
    sample = {"filtered_resps": [[-3.0, False], [-1.0, False], [-1.0, False]]}
    assert cmp.lmeval_prediction("bbq", sample) == 1 == cmp.our_prediction("bbq", [-3.0, -1.0, -1.0])


@pytest.mark.slow
@needs_lmeval
@pytest.mark.parametrize("benchmark", ["bbq", "esbbq", "crows_pairs"])
def test_predictions_equal_lmeval(data_dir, tmp_path, benchmark):
    summary_file = tmp_path / "summary.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--model",
            MODEL,
            "--benchmark",
            benchmark,
            "--per-category",
            "2",
            "--data-dir",
            str(data_dir),
            "--workdir",
            str(tmp_path / "work"),
            "--json-out",
            str(summary_file),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    assert summary["compared"] == summary["items"] == summary["identical"] > 0
    assert summary["protocol_mismatches"] == 0
    assert summary["max_abs_dll"] < 1e-3
    if benchmark == "crows_pairs":
        pct = summary["pct_stereotype"]
        assert pct["equal"] and pct["ours_bias_score"] == pytest.approx(100 * pct["lmeval"], abs=FROM_COUNTS)
