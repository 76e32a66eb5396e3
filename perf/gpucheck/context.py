"""What every part needs (``Context``), what each returns (``PartResult``), and the audit
subprocesses the exactness and xdist parts start."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import BF16_PER_CATEGORY, REPO, THROUGHPUT_FRACTION


@dataclass
class Context:
    """What every part needs: where things are and at which scale it runs."""

    dry_run: bool
    workdir: Path
    data_dir: Path
    tokenizer_dir: Path
    reference: dict | None
    device: str  # "cuda" on the GPU machine, "cpu" in the dry run
    exact_limit: int = 8
    bf16_per_category: int = BF16_PER_CATEGORY
    fraction: float = THROUGHPUT_FRACTION
    python: str = sys.executable

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of an audit subprocess: the repository importable, the suite's caches in
        the work folder (a fresh tiny model, no result cache shared with anything), offline."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "BIAS_AUDIT_CACHE": str(self.workdir / "cache"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(extra)
        return env


@dataclass
class PartResult:
    name: str
    passed: bool
    lines: list[str]
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def audit_command(ctx: Context, *args: str) -> list[str]:
    return [ctx.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]


def run_audits(ctx: Context, runs: dict[str, list[str]], env: dict[str, str] | None = None, timeout=300):
    """Run several audit commands at once (the GPU machine has cores to spare); ``{name:
    (exit code, output)}``."""
    procs = {}
    logs = {}
    for name, cmd in runs.items():
        logs[name] = open(ctx.workdir / f"{name}.log", "w+")
        procs[name] = subprocess.Popen(
            cmd, cwd=REPO, stdout=logs[name], stderr=subprocess.STDOUT, env=env or ctx.env()
        )
    out = {}
    for name, proc in procs.items():
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = -9
        logs[name].seek(0)
        out[name] = (rc, logs[name].read())
        logs[name].close()
    return out


def run_folder(results_dir: Path) -> Path:
    """The one run folder an audit wrote under ``results_dir``."""
    found = sorted(p.parent for p in results_dir.glob("*/results.json"))
    if len(found) != 1:
        raise RuntimeError(f"expected one run under {results_dir}, found {len(found)}")
    return found[0]
