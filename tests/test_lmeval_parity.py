"""Parity with lm-evaluation-harness 0.4.13 (perf/compare_lmeval.py): the same rows, prompts and
choices give the same predictions and log-likelihoods on BBQ (lm-eval's protocol,
``--bbq-protocol lmeval``) and EsBBQ.

Slow: it starts lm-eval from the repo's ``.venv-lmeval`` (made by the script; the test is
skipped where it is absent, it never installs). The model is the zoo's tiny random GPT-2
(``LMEVAL_PARITY_MODEL`` overrides).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "perf" / "compare_lmeval.py"
LMEVAL_PYTHON = REPO / ".venv-lmeval" / "bin" / "python"
MODEL = os.environ.get("LMEVAL_PARITY_MODEL", "tiny-random-gpt2")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not LMEVAL_PYTHON.is_file(),
        reason=f"lm-eval not installed at {LMEVAL_PYTHON} (run perf/compare_lmeval.py once)",
    ),
]


@pytest.mark.parametrize("benchmark", ["bbq", "esbbq"])
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
