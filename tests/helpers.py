"""Helpers several test modules share: running `bias-audit score` as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The tolerance for metrics that are ratios of integer counts (accuracies, bias scores from the
#: answer cells). They involve a handful of IEEE-754 operations, which every x86-64 CPU rounds
#: the same way; 1e-12 allows thousands of ulps of rounding and nothing else, so a wrong count
#: (at least 1/n away) always fails. Log-likelihood sums use the engine's 1e-4 nats instead.
FROM_COUNTS = 1e-12


def bias_audit_score(
    tmp_path: Path, *args, name: str = "results", command: str = "score", timeout: int = 300
) -> tuple[subprocess.CompletedProcess, dict | None, Path | None]:
    """``bias-audit score ARGS`` (or another ``command`` that runs the audit: ``oracle``) in a
    subprocess (it replaces its process by the audit run, so it cannot run inside a test
    process), writing into ``tmp_path / name``.

    Returns:
        The completed process, the run's results.json (None when it stopped at start-up) and
        its run folder (None likewise). Options after a ``--`` in ``args`` go to the run.
    """
    args = [str(a) for a in args]
    cut = args.index("--") if "--" in args else len(args)
    results = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "audit_harness.cli",
        command,
        *args[:cut],
        "--results-dir",
        str(results),
        "--",
        "-p",
        "no:cacheprovider",
        *args[cut + 1 :],
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    runs = [p for p in results.iterdir() if p.is_dir()] if results.exists() else []
    if not runs:
        return proc, None, None
    (run_dir,) = runs
    return proc, json.loads((run_dir / "results.json").read_text()), run_dir
