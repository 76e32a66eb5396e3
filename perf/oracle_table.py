"""The oracle table: every (benchmark, oracle kind) run through ``bias-audit oracle`` on every row
of the data, with the shipped gates, and the verdict of each (docs/oracles.md).

Usage::

    AUDIT_DATA_DIR=DATA python perf/oracle_table.py [--benchmarks bbq,kobbq] [--kinds perfect,random]
        [--json oracle_table.json] [--results-dir DIR] [-- extra options for every run]

Each run is one process, one after the other (``python -m audit_harness.cli oracle BENCH
--model-kind KIND --output results.json``); the script reads its exit code and results.json and
prints a Markdown table: exit code, gate counts (pass / fail / other: INSUFFICIENT, undefined,
INCONCLUSIVE, error), in how many categories a bias gate failed, and which bias gates failed.
``--json`` writes the same rows (plus each run's wall and CPU seconds) as JSON. A (benchmark, kind) that does
not apply (a sentence pair has no gold answer) is listed with the reason.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit_harness.oracles import KINDS  # noqa: E402

BENCHMARKS = ("bbq", "kobbq", "esbbq", "cabbq", "crows_pairs", "winoqueer", "kgquiz")
#: Kinds that need what a benchmark's items lack: not run, listed with the reason.
NOT_APPLICABLE = {
    ("crows_pairs", "perfect"): "a sentence pair has no gold answer",
    ("winoqueer", "perfect"): "a sentence pair has no gold answer",
    ("crows_pairs", "always_unknown"): "a sentence pair has no unknown answer",
    ("winoqueer", "always_unknown"): "a sentence pair has no unknown answer",
    ("kgquiz", "stereotyped"): "knowledge items have no bias-aligned answer",
    ("kgquiz", "anti_stereotyped"): "knowledge items have no bias-aligned answer",
    ("kgquiz", "always_unknown"): "knowledge items have no unknown answer",
}
PAIRS = ("crows_pairs", "winoqueer")


def is_bias_metric(metric: str) -> bool:
    """A gate on a bias score (not accuracy, validity or knowledge)."""
    return "bias" in metric


def run_one(bench: str, kind: str, results_dir: Path, extra: list[str], seed: int) -> dict:
    """One oracle run; its row of the table."""
    out = results_dir / f"{bench}-{kind}.json"
    cmd = [sys.executable, "-m", "audit_harness.cli", "oracle", bench, "--model-kind", kind]
    cmd += ["--seed", str(seed), "--results-dir", str(results_dir / "runs"), "--output", str(out)]
    cmd += ["--predictions-out", str(results_dir / "predictions" / f"{bench}-{kind}.jsonl")]
    if extra:
        cmd += ["--", *extra]
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds of the run (user + system, its children included): on a shared machine the
    # wall time measures the neighbours as much as the run.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"benchmark": bench, "kind": kind, "exit": proc.returncode, "wall_s": round(wall, 1)}
    row["cpu_s"] = round(cpu, 1)
    if not out.is_file():
        row["error"] = (proc.stderr.strip() or proc.stdout.strip())[-400:]
        return row
    doc = json.loads(out.read_text(encoding="utf-8"))
    gates = [g for g in doc.get("gates", []) if g.get("kind", "threshold") == "threshold"]
    status = Counter(g["status"] for g in gates)
    failing = [g for g in gates if g["status"] == "fail" and is_bias_metric(g["metric"])]
    bias_cats = {g["category"] for g in gates if is_bias_metric(g["metric"])}
    row.update(
        {
            "gates": len(gates),
            "pass": status.get("pass", 0),
            "fail": status.get("fail", 0),
            "other": {k: v for k, v in status.items() if k not in ("pass", "fail")},
            "bias_fail_categories": sorted({g["category"] for g in failing}),
            "bias_categories": sorted(bias_cats),
            "bias_fail_metrics": dict(Counter(g["metric"] for g in failing)),
            "rows": sum(1 for _ in open(results_dir / "predictions" / f"{bench}-{kind}.jsonl")),
        }
    )
    return row


def markdown(rows: list[dict]) -> str:
    """The table, one line per (benchmark, kind)."""
    lines = [
        "| benchmark | oracle | rows | exit | gates pass / fail / other | categories with a failing bias gate | failing bias gates |",
        "|---|---|---:|---:|---|---|---|",
    ]
    for r in rows:
        if "skip" in r:
            lines.append(f"| {r['benchmark']} | {r['kind']} | - | - | not applicable: {r['skip']} | | |")
            continue
        if "error" in r:
            lines.append(
                f"| {r['benchmark']} | {r['kind']} | - | {r['exit']} | no results: {r['error'][:120]} | | |"
            )
            continue
        other = ", ".join(f"{v} {k}" for k, v in sorted(r["other"].items())) or "0"
        cats = (
            f"{len(r['bias_fail_categories'])} of {len(r['bias_categories'])}"
            if r["bias_categories"]
            else "-"
        )
        metrics = ", ".join(f"{m} x{n}" for m, n in sorted(r["bias_fail_metrics"].items())) or "-"
        lines.append(
            f"| {r['benchmark']} | {r['kind']} | {r['rows']:,} | {r['exit']} | "
            f"{r['pass']} / {r['fail']} / {other} | {cats} | {metrics} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--seed", type=int, default=0, help="the random oracle's seed")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    p.add_argument(
        "--results-dir", type=Path, default=None, help="keep the runs here (default: a temp folder)"
    )
    ns = p.parse_args(args)
    results_dir = ns.results_dir or Path(tempfile.mkdtemp(prefix="oracle-table-"))
    rows = []
    for bench in ns.benchmarks.split(","):
        for kind in ns.kinds.split(","):
            if kind == "tie" and bench not in PAIRS:
                continue  # a tie is a sentence pair's oracle only
            if (bench, kind) in NOT_APPLICABLE:
                rows.append({"benchmark": bench, "kind": kind, "skip": NOT_APPLICABLE[(bench, kind)]})
                continue
            row = run_one(bench, kind, results_dir, extra, ns.seed)
            rows.append(row)
            print(
                f"{bench} {kind}: exit {row['exit']} in {row['wall_s']} s ({row['cpu_s']} CPU s)",
                file=sys.stderr,
                flush=True,
            )
            if ns.json:  # written after each run, so a long table can be read while it runs
                ns.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(markdown(rows))
    if ns.json:
        ns.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
