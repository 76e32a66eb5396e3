"""The ``exact`` part, scoring parity: tiny-random-gpt2's records of a small audit selection in
fp32 on CUDA equal the CPU's within the engine's tolerance."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from .common import EXACT_ARGS, EXACT_FILES, EXACT_K, REPO, TOLERANCE_NATS
from .context import Context, PartResult, audit_command, run_audits, run_folder


def _floats(record: dict) -> list[float]:
    out = []
    for v in record.values():
        if isinstance(v, float):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if isinstance(x, float))
    return out


def compare_records(a_dir: Path, b_dir: Path, tol: float = TOLERANCE_NATS) -> dict[str, Any]:
    """Records of two runs (``records/<benchmark>/<category>.jsonl``), item by item: each float
    (a score in nats) within ``tol``, every other field identical. A record whose other fields
    differ counts as a tie, not a mismatch, when two of its scores in ``a`` lie within ``2 tol``
    (the prediction then turns on a difference the tolerance allows).

    Returns:
        ``files``, ``records``, ``max_abs_diff``, ``over_tol`` (field differences above ``tol``),
        ``ties`` and ``mismatches`` (descriptions), ``missing`` (files or ids in one run only).
    """
    out: dict[str, Any] = {"files": 0, "records": 0, "max_abs_diff": 0.0, "over_tol": []}
    out.update(ties=[], mismatches=[], missing=[])
    a_dir, b_dir = a_dir / "records", b_dir / "records"
    a_files = {p.relative_to(a_dir) for p in a_dir.glob("*/*.jsonl")}
    b_files = {p.relative_to(b_dir) for p in b_dir.glob("*/*.jsonl")}
    out["missing"] += [f"{f} only in one run" for f in sorted(a_files ^ b_files, key=str)]
    for rel in sorted(a_files & b_files, key=str):
        out["files"] += 1
        rows_a = {r["id"]: r for r in map(json.loads, (a_dir / rel).read_text().splitlines())}
        rows_b = {r["id"]: r for r in map(json.loads, (b_dir / rel).read_text().splitlines())}
        out["missing"] += [f"{rel}: {i} in one run only" for i in sorted(set(rows_a) ^ set(rows_b))]
        for item_id in sorted(set(rows_a) & set(rows_b)):
            ra, rb = rows_a[item_id], rows_b[item_id]
            out["records"] += 1
            other = _field_diffs(ra, rb, tol, f"{rel}:{item_id}", out)
            if other:
                scores = sorted(_floats(ra))
                gap = min((b - a for a, b in zip(scores, scores[1:])), default=math.inf)
                what = f"{rel}:{item_id}: {', '.join(dict.fromkeys(other))} differ"
                if gap <= 2 * tol:
                    out["ties"].append(f"{what} (scores {gap:.1e} apart)")
                else:
                    out["mismatches"].append(what)
    return out


def _field_diffs(ra: dict, rb: dict, tol: float, where: str, out: dict[str, Any]) -> list[str]:
    """The fields of two records that differ other than by a float within ``tol``; each float's
    difference goes into ``out`` (``max_abs_diff``, and ``over_tol`` above ``tol``)."""
    other = []
    for key in sorted(set(ra) | set(rb)):
        va, vb = ra.get(key), rb.get(key)
        pairs = list(zip(va, vb)) if isinstance(va, list) and isinstance(vb, list) else [(va, vb)]
        if isinstance(va, list) and isinstance(vb, list) and len(va) != len(vb):
            other.append(key)
            continue
        for x, y in pairs:
            if isinstance(x, float) and isinstance(y, float):
                d = abs(x - y)
                if not math.isfinite(d):
                    other.append(key)
                    continue
                out["max_abs_diff"] = max(out["max_abs_diff"], d)
                if d > tol:
                    out["over_tol"].append(f"{where}:{key} {x!r} vs {y!r}")
            elif x != y:
                other.append(key)
    return other


def part_exact(ctx: Context) -> PartResult:
    """tiny-random-gpt2 in fp32, the same audit selection on the CPU and on CUDA: equal records."""
    other = "cpu" if ctx.dry_run else "cuda"
    common = [*EXACT_FILES, "-k", EXACT_K, "--model", "tiny-random-gpt2", "--dtype", "float32"]
    common += ["--limit", str(ctx.exact_limit), *EXACT_ARGS, "--data-dir", str(ctx.data_dir)]
    common += ["--no-cache", "--bootstrap-resamples", "0"]
    dirs = {"cpu": ctx.workdir / "exact-1-cpu", "other": ctx.workdir / f"exact-2-{other}"}
    # The tiny model is built once (a file lock would make the two runs wait on each other anyway).
    build = subprocess.run(
        [
            ctx.python,
            "-c",
            "from audit_harness.models.zoo import materialize; materialize('tiny-random-gpt2')",
        ],
        cwd=REPO,
        env=ctx.env(),
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        return PartResult("exact", False, [f"building tiny-random-gpt2 failed: {build.stderr[-800:]}"])
    runs = {
        name: audit_command(ctx, *common, "--device", dev, "--results-dir", str(dirs[name]))
        for name, dev in (("cpu", "cpu"), ("other", other))
    }
    done = run_audits(ctx, runs)
    lines: list[str] = []
    for name, (rc, log) in done.items():
        if rc not in (0, 1):  # 1: a random model fails gates, as it should; anything else broke
            tail = "\n".join(log.splitlines()[-15:])
            return PartResult("exact", False, [f"audit on {name} exited {rc}:", tail])
    runs_dirs = {name: run_folder(d) for name, d in dirs.items()}
    devices = {
        name: json.loads((d / "results.json").read_text())["model"]["device"] for name, d in runs_dirs.items()
    }
    cmp = compare_records(runs_dirs["cpu"], runs_dirs["other"])
    on_device = devices["other"].startswith(other)
    passed = (
        on_device
        and cmp["records"] > 0
        and not cmp["over_tol"]
        and not cmp["mismatches"]
        and not cmp["missing"]
    )
    lines.append(
        f"tiny-random-gpt2 fp32, {', '.join(EXACT_FILES)} -k {EXACT_K!r} --limit {ctx.exact_limit}: "
        f"{cmp['records']} records in {cmp['files']} files, cpu vs {devices['other']}"
    )
    lines.append(
        f"max |d score| {cmp['max_abs_diff']:.2e} nats (tolerance {TOLERANCE_NATS:g}); "
        f"{len(cmp['over_tol'])} over, {len(cmp['mismatches'])} other fields differ, "
        f"{len(cmp['ties'])} ties, {len(cmp['missing'])} missing"
    )
    if not on_device:
        lines.append(f"the second run's model was on {devices['other']}, not {other}")
    lines += [f"  {x}" for x in (cmp["over_tol"] + cmp["mismatches"] + cmp["missing"] + cmp["ties"])[:10]]
    return PartResult("exact", passed, lines, {**cmp, "devices": devices})
