"""SIGTERM, what a CI runner sends on a timeout or a cancel, ends an audit run as Ctrl-C does:
results.json and junit.xml say interrupted, the terminal ends with the VERDICT line, exit 2
(the default handler would kill the run with 143 and leave only its records). A real run of the
tiny model on real BBQ rows, signalled once its first forward is committed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from helpers import REPO


def _wait_for_a_committed_forward(proc: subprocess.Popen, db: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        try:
            if db.exists() and sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]:
                return
        except sqlite3.Error:
            continue


def test_sigterm_while_scoring_writes_an_interrupted_run_and_exits_2(tmp_path, data_dir):
    cache, results = tmp_path / "cache", tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "audit_harness.cli",
        "run",
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data_dir),
        "--results-dir",
        str(results),
        "--cache-dir",
        str(cache),
        "-k",
        "test_bbq and Race_x_gender",
        "--limit",
        "2000",
        "-p",
        "no:cacheprovider",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for_a_committed_forward(proc, cache / "scores.sqlite", 300)
        assert proc.poll() is None, "the run ended before it could be signalled"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, (stdout + stderr)[-3000:]
    assert "VERDICT: INTERRUPTED:" in stdout
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["run"]["status"] == "interrupted" and doc["run"]["exit_status"] == 2
    assert doc["gates"] and {g["status"] for g in doc["gates"]} == {"not run"}
    suite = ET.parse(run_dir / "junit.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or ()}
    assert props["bias_audit_status"] == "interrupted" and props["bias_audit_exit_code"] == "2"
    assert int(suite.get("errors")) == len(doc["gates"])  # every gate red, none absent
    assert (run_dir / "report.md").exists() and "INTERRUPTED" in (run_dir / "report.md").read_text()
