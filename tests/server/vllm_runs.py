"""Helpers of the real-vLLM tests: where vLLM is, and the parity audits run as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit_harness.models.zoo import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SERVED_NAME = DEFAULT_MODEL  # the embedded SmolLM2-135M-Instruct
#: The parity audits: BBQ, EsBBQ and CaBBQ, 8 items per category (the two-server run: BBQ only).
PARITY = ("audits/test_bbq.py", "audits/test_esbbq.py", "audits/test_cabbq.py")
LIMIT = "8"
#: The letter log-probs parity audits (``--bbq-answer-mode letter``, ``--kobbq-mode letter``):
#: BBQ, EsBBQ and KoBBQ, one category each (KoBBQ under prompt 1, order 0), 8 items each.
LETTER_PARITY = ("audits/test_bbq.py", "audits/test_esbbq.py", "audits/test_kobbq.py")
LETTER_ARGS = (
    "--bbq-answer-mode",
    "letter",
    "--kobbq-mode",
    "letter",
    "--kobbq-prompts",
    "1",
    "--kobbq-permutations",
    "0",
    "-k",
    "religion",
)


def need_vllm() -> None:
    """Skip (fail under CI=true, where it is installed) when ``.venv-vllm`` is absent."""
    if not VLLM_PYTHON.exists():
        why = f"{VLLM_PYTHON.parent.parent.name} is absent: `make setup-server` installs vLLM (CPU) for these tests"
        if os.environ.get("CI") == "true":  # CI installs it: a missing one is a broken set-up
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)


def audit(
    results: Path, data_dir: Path, audits: tuple[str, ...], *extra: str, env: dict | None = None
) -> subprocess.Popen:
    """Start ``pytest AUDITS --model SmolLM2 --limit 8`` writing to ``results`` (no result cache
    unless ``extra`` names one; every gate decided with --min-n 1)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *audits,
        "--model",
        SERVED_NAME,
        "--limit",
        LIMIT,
        "--data-dir",
        str(data_dir),
        "--min-n",
        "1",
        "--results-dir",
        str(results),
        "--bootstrap-resamples",
        "0",
        "-p",
        "no:cacheprovider",
        "-q",
        *extra,
    ]
    if "--cache-dir" not in extra:
        cmd.append("--no-cache")
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0))), **(env or {})},
    )


def finish(proc: subprocess.Popen, results: Path) -> Path:
    """Wait for an ``audit``; its run folder (its gates decided, pass or fail, not errors)."""
    out, _ = proc.communicate(timeout=3000)
    assert proc.returncode in (0, 1), out[-4000:]
    (run_dir,) = list(results.iterdir())
    return run_dir


def records(run: Path, benchmark: str | None = None) -> dict[str, dict]:
    """``benchmark/category/id`` -> record, of every records file of a run folder."""
    out = {}
    for path in sorted((run / "records").rglob("*.jsonl")):
        if benchmark is not None and path.parent.name != benchmark:
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out[f"{path.parent.name}/{path.stem}/{row['id']}"] = row
    return out
