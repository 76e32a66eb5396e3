"""Parity of our EsBBQ/CaBBQ audit with lm-evaluation-harness 0.4.13 (perf/compare_lmeval_esbbq.py).

Slow: it starts lm-eval in its own virtual environment (``/work/lmeval-venv`` or ``$LMEVAL_BIN``,
never installed into the suite's environment) and scores a small balanced subset with both. The
model defaults to the zoo's tiny random GPT-2 (seconds); ``LMEVAL_PARITY_MODEL=gemma-3-270m`` runs
the real multilingual model (minutes on CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "perf" / "compare_lmeval_esbbq.py"
LMEVAL_BIN = Path(os.environ.get("LMEVAL_BIN", "/work/lmeval-venv/bin/lm_eval"))
MODEL = os.environ.get("LMEVAL_PARITY_MODEL", "tiny-random-gpt2")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LMEVAL_BIN.is_file(),
                       reason=f"lm-eval not installed at {LMEVAL_BIN} (set LMEVAL_BIN)"),
]


@pytest.mark.parametrize("benchmark", ["esbbq", "cabbq"])
def test_predictions_and_metrics_equal_lmeval(data_dir, tmp_path, benchmark):
    summary_file = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", MODEL, "--benchmark", benchmark,
         "--categories", "Religion", "SpanishRegion", "--per-category", "8",
         "--data-dir", str(data_dir), "--lmeval-bin", str(LMEVAL_BIN),
         "--workdir", str(tmp_path / "work"), "--json-out", str(summary_file)],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    assert summary["items"] == 16
    assert summary["prediction_mismatches"] == summary["metric_mismatches"] == 0
    assert summary["prompt_mismatches"] == 0
    assert summary["max_loglik_diff"] < 1e-3
    assert len(summary["metrics"]) == 3 * 4  # 2 categories + the size-weighted group, 4 metrics
