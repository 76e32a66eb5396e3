"""Did a change move a number? Compares two run folders record by record.

For refactors: run the same audit before and after (``--no-cache``, same model, data, ``--limit``
and seed) and compare the two folders::

    python tools/compare_runs.py BEFORE_RUN_DIR AFTER_RUN_DIR

- records (``records/<benchmark>/<category>.jsonl``): the same files, the same items in the same
  order; log-likelihoods and log-probabilities (any float field, or list of floats) equal within
  ``--nats`` (default 1e-4, the engine's contract across batch shapes and CPUs); every other
  field (predictions, raw generations, parsed answers, parse rules) identical;
- results.json: equal but for the fields that belong to one run (its id, times, durations,
  command line, folders, environment); numbers there within ``--rel`` (default 1e-9) relative.

Prints one summary line per part and every difference; exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: results.json fields that differ between two runs of the same audit by design.
RUN_SPECIFIC = {
    "run_id",
    "created",
    "started",
    "finished",
    "duration_s",
    "seconds",
    "elapsed_s",
    "command_line",
    "invocation",
    "working_directory",
    "environment",
    "folder",
    "path",
    "results_dir",
    "report",
    # Which checkout ran it: the commit, and the gates file's path (its content is compared
    # through run.thresholds_sha256).
    "git_commit",
    "git_dirty",
    "thresholds",
    # How requests were batched: the engine sizes forwards by a time budget, so the count of
    # forwards (and the padding they carried) varies between two runs of the same audit.
    "forwards",
    "tokens_forwarded",
    "oom_retries",
}


def _floats(value):
    if isinstance(value, float):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) for v in value):
        return [float(v) for v in value]
    return None


def _close(a: float, b: float, tol: float, relative: bool) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    scale = max(abs(a), abs(b), 1.0) if relative else 1.0
    return abs(a - b) <= tol * scale


def compare_records(before: Path, after: Path, nats: float) -> tuple[list[str], dict]:
    """Differences between the two runs' record files, and counts for the summary."""
    diffs: list[str] = []
    stats = {"files": 0, "records": 0, "floats": 0, "max_nats": 0.0}
    names_b = {p.relative_to(before).as_posix() for p in before.rglob("*.jsonl")}
    names_a = {p.relative_to(after).as_posix() for p in after.rglob("*.jsonl")}
    for missing in sorted(names_b ^ names_a):
        diffs.append(f"records/{missing}: only in {'before' if missing in names_b else 'after'}")
    for name in sorted(names_b & names_a):
        stats["files"] += 1
        rows_b = [
            json.loads(x) for x in (before / name).read_text(encoding="utf-8").splitlines() if x.strip()
        ]
        rows_a = [json.loads(x) for x in (after / name).read_text(encoding="utf-8").splitlines() if x.strip()]
        if len(rows_b) != len(rows_a):
            diffs.append(f"records/{name}: {len(rows_b)} records before, {len(rows_a)} after")
        for i, (rb, ra) in enumerate(zip(rows_b, rows_a)):
            stats["records"] += 1
            where = f"records/{name}:{i + 1} ({rb.get('id')})"
            for key in sorted(set(rb) | set(ra)):
                vb, va = rb.get(key), ra.get(key)
                fb, fa = _floats(vb), _floats(va)
                if fb is not None and fa is not None and len(fb) == len(fa):
                    stats["floats"] += len(fb)
                    for x, y in zip(fb, fa):
                        if not (math.isnan(x) or math.isnan(y)):
                            stats["max_nats"] = max(stats["max_nats"], abs(x - y))
                    if not all(_close(x, y, nats, relative=False) for x, y in zip(fb, fa)):
                        diffs.append(f"{where} {key}: {vb} -> {va}")
                elif vb != va:
                    diffs.append(f"{where} {key}: {vb!r} -> {va!r}")
    return diffs, stats


def compare_json(before, after, rel: float, where: str = "results.json") -> list[str]:
    """Differences between two JSON documents, run-specific fields left out."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(set(before) | set(after)):
            if key in RUN_SPECIFIC:
                continue
            if key not in before or key not in after:
                out.append(f"{where}.{key}: only in {'before' if key in before else 'after'}")
            else:
                out += compare_json(before[key], after[key], rel, f"{where}.{key}")
        return out
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return [f"{where}: {len(before)} entries before, {len(after)} after"]
        return [
            d for i, (b, a) in enumerate(zip(before, after)) for d in compare_json(b, a, rel, f"{where}[{i}]")
        ]
    if isinstance(before, float) or isinstance(after, float):
        if isinstance(before, (int, float)) and isinstance(after, (int, float)):
            return (
                []
                if _close(float(before), float(after), rel, relative=True)
                else [f"{where}: {before} -> {after}"]
            )
    if before != after:
        return [f"{where}: {before!r} -> {after!r}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="run folder before the change")
    parser.add_argument("after", type=Path, help="run folder after the change")
    parser.add_argument(
        "--nats", type=float, default=1e-4, help="tolerance on log-likelihoods (default 1e-4)"
    )
    parser.add_argument("--rel", type=float, default=1e-9, help="relative tolerance on results.json numbers")
    args = parser.parse_args(argv)
    record_diffs, stats = compare_records(args.before / "records", args.after / "records", args.nats)
    print(
        f"records: {stats['files']} files, {stats['records']} records, {stats['floats']} log-likelihoods "
        f"(largest difference {stats['max_nats']:.2g} nats, tolerance {args.nats:g}); "
        f"{len(record_diffs)} difference(s)"
    )
    results = [
        json.loads((d / "results.json").read_text(encoding="utf-8")) for d in (args.before, args.after)
    ]
    json_diffs = compare_json(*results, args.rel)
    print(f"results.json: {len(json_diffs)} difference(s) outside run-specific fields")
    for line in record_diffs + json_diffs:
        print(f"  {line}")
    return 1 if record_diffs or json_diffs else 0


if __name__ == "__main__":
    sys.exit(main())
