"""How many items sequential gates need, over many seeded orders, against an oracle's floor.

A sequential run stops where its seed's order happens to settle a gate; one run is one draw.
This script takes a finished **fixed-n** run (its ``results.json`` and records), and for every
gate whose fixed-n interval clears its band (wholly inside or wholly outside, the gates sequential
mode can save items on) and whose metric is a share (``SequentialForm.values``: the BBQ-family
accuracies and rates, the pair bias score), rebuilds the order ``--seeds`` seeds would score the
category's items in (``evaluation.sequential_rounds.build_rounds``, the run's round size) and gives the item count
at which the gate is decided:

- ``shipped``: the suite's rule, the betting CS of ``bias_metrics.sequential`` at the run's round
  ends with the gate's alpha, sides, min_n and PASS split (``gates.sequential.GateTrack``);
- ``oracle`` at the same round ends and ``oracle/1`` after every item: Wald's SPRT that knows the
  category's value (``bias_metrics.sequential.oracle_sprt_n``), at the same error probability per
  edge. No level-alpha rule that has to estimate the value stops much sooner on average.

Prints one line per gate (means over the seeds) and the share of these gates' items, as JSON with
``--json``. Gates whose fixed-n interval meets a bound are counted, not replayed (a sequential run
may still settle one on the items' own value, which that sampling interval does not show). A gate
found in two runs (a folder above both) counts once. The first seed is what ``--seed`` would do,
so seed 0's ``shipped`` count is the one a ``--sequential`` run with the default seed reports for
that gate.

usage: python perf/sequential_orders.py RESULTS_DIR [RESULTS_DIR ...] [--seeds 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def gates_to_replay(results: dict) -> tuple[list[dict], int]:
    """Fixed-n gates of ``results`` whose interval clears the band, in point mode, and the names
    of the other point-mode threshold gates (their interval meets a bound: outside the set this
    replay measures, though a sequential run may still settle one on the items' own value)."""
    picked, others = [], []
    for g in results["gates"]:
        lo, hi = g.get("allowed") or (None, None)
        ci = g.get("ci")
        if g.get("mode") != "point" or ci is None or None in ci or g.get("kind") != "threshold":
            continue
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
        inside = lo <= ci[0] and ci[1] <= hi
        outside = ci[1] < lo or ci[0] > hi
        if inside or outside:
            picked.append({**g, "clears": "inside" if inside else "outside", "band": (lo, hi)})
        else:
            others.append(f"{g['benchmark']}/{g['category']}/{g['metric']}")
    return picked, others


def replay(gate: dict, bench, records, seeds: int, family: int) -> dict:
    """Decision counts of one gate over ``seeds`` orders: shipped rule, oracle at the run's looks
    and after every item."""
    from audit_harness.evaluation.sequential_rounds import build_rounds, round_size
    from audit_harness.gates.sequential import GateTrack
    from bias_metrics.sequential import betting_cs_path, oracle_sprt_n

    form = bench.sequential_form(gate["metric"])
    n_pop = len(records)
    size = round_size(n_pop)
    salt = f"{gate['benchmark']}/{gate['category']}"
    orders = []
    for seed in range(seeds):
        rounds = build_rounds(list(range(n_pop)), lambda i: bench.balance_key(records[i]), seed, salt, size)
        orders.append([i for r in rounds for i in r])
    values = form.values(records)[np.array(orders)]  # (seeds, N), in scored order
    lo, hi = (b / form.scale for b in gate["band"])
    looks = list(range(size, n_pop, size))
    # The rule's own alpha, sides and PASS split (GateTrack.look): a one-sided band reads one
    # side of a CS made at 2 alpha; a PASS needs the CS at alpha / family. Per edge the error is
    # then alpha (one side) or alpha / 2.
    track = GateTrack(SimpleNamespace(confidence=gate["confidence"]), form, (lo, hi), family=family)
    a = track.pass_alpha if gate["clears"] == "inside" else track.alpha
    cs_alpha = min(0.5, (2 if track.sides == 1 else 1) * a)
    defined = np.cumsum(~np.isnan(values), axis=1)
    low, high = betting_cs_path(values, cs_alpha, population_size=n_pop, checkpoints=looks)
    if gate["clears"] == "inside":
        settled = (low >= lo) & (high <= hi)
    else:
        settled = (high < lo) | (low > hi)
    settled &= defined[:, np.array(looks) - 1] >= gate["min_n"]
    shipped = np.where(settled.any(axis=1), np.array(looks)[settled.argmax(axis=1)], n_pop)
    share = float(np.nanmean(values[0]))
    if gate["clears"] == "inside":
        edges = [(e, cs_alpha / 2) for e in (lo, hi) if not math.isinf(e)]
    else:
        edges = [((lo if share < lo else hi), cs_alpha / 2)]
    oracle = oracle_sprt_n(values, edges, looks=looks, min_n=gate["min_n"])
    oracle_1 = oracle_sprt_n(values, edges, min_n=gate["min_n"])
    return {
        "gate": f"{gate['benchmark']}/{gate['category']}/{gate['metric']}",
        "value": gate["value"],
        "ci": gate["ci"],
        "band": gate["band"],
        "clears": gate["clears"],
        "population": n_pop,
        "round_size": size,
        "seed0_shipped": int(shipped[0]),
        "shipped": float(shipped.mean()),
        "oracle": float(oracle.mean()),
        "oracle_1": float(oracle_1.mean()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "results_dirs", type=Path, nargs="+", help="fixed-n runs' results folders (or folders above them)"
    )
    ap.add_argument(
        "--seeds", type=int, default=300, help="seeded orders per gate, seeds 0..N-1 (default 300)"
    )
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    found = sorted(p for d in args.results_dirs for p in d.rglob("results.json"))
    if not found:
        print(f"no results.json under {', '.join(map(str, args.results_dirs))}", file=sys.stderr)
        return 2
    from audit_harness.benchmarks import registry

    benches = registry()
    rows, skipped, seen = [], [], {}
    others: set[str] = set()
    for path in found:
        results = json.loads(path.read_text(encoding="utf-8"))
        early = [g["test_id"] for g in results["gates"] if (g.get("sequential") or {}).get("items_saved")]
        if early:
            print(
                f"{path}: a sequential run that stopped early ({early[0]}): give a run that scored "
                "every selected item (fixed-n)",
                file=sys.stderr,
            )
            return 2
        # As the session counts it under --sequential: every gate the run selected.
        family = len(results["gates"])
        picked, more = gates_to_replay(results)
        others.update(more)  # a gate found in several runs counts once
        for gate in picked:
            name = f"{gate['benchmark']}/{gate['category']}/{gate['metric']}"
            if name in seen:  # a folder above several runs of the same gates: count each once
                skipped.append(f"{name} in {path.parent} (already counted from {seen[name]})")
                continue
            seen[name] = path.parent
            bench = benches[gate["benchmark"]]
            form = bench.sequential_form(gate["metric"])
            if form is None or form.values is None:
                skipped.append(f"{gate['benchmark']}/{gate['category']}/{gate['metric']} (not a share)")
                continue
            file = path.parent / "records" / gate["benchmark"] / f"{gate['category']}.jsonl"
            lines = file.read_text(encoding="utf-8").splitlines()
            records = bench.read_records([json.loads(line) for line in lines if line.strip()])
            rows.append(replay(gate, bench, records, args.seeds, family))
    total = sum(r["population"] for r in rows)
    summary = {
        "seeds": args.seeds,
        "gates": rows,
        "skipped": skipped,
        "items": total,
        "gates_not_clearing": len(others),
        "note": None
        if rows
        else "no gate's fixed-n interval clears its band (wholly inside or outside): nothing to replay",
        **{
            f"{k}_share": (sum(r[k] for r in rows) / total if total else None)
            for k in ("seed0_shipped", "shipped", "oracle", "oracle_1")
        },
    }
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    for r in rows:
        print(
            f"{r['gate']}: {r['value']:.4g} [{r['ci'][0]:.4g}, {r['ci'][1]:.4g}] {r['clears']} "
            f"{r['band']}, {r['population']} items, rounds of {r['round_size']}: shipped "
            f"{r['shipped']:.1f} (seed 0: {r['seed0_shipped']}), oracle {r['oracle']:.1f}, "
            f"oracle after every item {r['oracle_1']:.1f}"
        )
    for s in skipped:
        print(f"skipped: {s}")
    if not rows:
        print(
            f"no gate to replay: none of the {len(others)} point-mode gate(s) in these runs has a "
            "fixed-n interval that clears its band (wholly inside or outside), the gates this replay "
            "measures. A sequential run may still settle such a gate on the items' own value, "
            "which the interval, a sampling interval, does not show"
        )
        return 0
    print(f"({len(others)} other point-mode gate(s): their fixed-n interval meets a bound, not replayed)")
    print(
        f"{len(rows)} gates, {total} items, mean over {args.seeds} orders: shipped "
        f"{summary['shipped_share']:.1%} (seed 0: {summary['seed0_shipped_share']:.1%}), oracle "
        f"{summary['oracle_share']:.1%}, oracle after every item {summary['oracle_1_share']:.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
