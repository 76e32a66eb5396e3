"""What each shipped gate promises, measured: its operating characteristic on the real item counts.

For every gate of the shipped ``thresholds.yaml`` and every category of the data, this simulates
many seeded models whose truth is known and decides each gate the way a run would (the same
metric, interval and ``gates.Gate.evaluate``), then reports:

- ``false FAIL``: the share of runs in which a good, unbiased model FAILs the gate;
- ``false PASS``: the share in which a model off by twice the band PASSes it;
- ``inconclusive``: the share in which the good model gets neither (``ci_three_way``), i.e. the
  category is too small to clear the band;
- the same two error rates under ``point`` mode, for contrast.

The models (``--unknown``, ``--accuracy``, ``--invalid`` set the good one):

- good (unbiased): in ambiguous contexts "unknown" with probability ``u``, else a fair coin
  between the biased and the counter-biased answer; in disambiguated contexts right with
  probability ``a`` whatever the answer's alignment, wrong answers split evenly between the other
  group and "unknown"; an invalid output with probability ``x``. Sentence pairs: a fair coin per
  pair. KGQuiz: right with probability ``bound + 2 m`` (``m`` = 0.05).
- off by twice the band, per gate: a bias score of ``2 * abs_max`` (BBQ family: biased minus
  counter-biased share ``2 * abs_max`` in ambiguous contexts, aligned minus non-aligned accuracy
  ``2 * abs_max``), a pair score of ``50 + 2 * tolerance``, an accuracy of ``min - 2 m``, an
  invalid rate of ``max + 2 m``.

Item structure comes from the data: each benchmark's items are read through the real pipeline
once (``bias-audit oracle BENCH --model-kind perfect``, or ``stereotyped`` for pairs) and the
records of that run give every item's template, context and alignment, so intervals resample
templates as a real run's do. KoBBQ's gates read the mean over prompt templates; here they are
computed on the pooled records of the five templates (the same items and n; the pooled interval
is the one ``<metric>_pooled`` reports).

Run::

    python perf/gate_characteristics.py --data-dir DIR [--seeds 200] [--json out.json]

It prints a Markdown table (docs/gates.md, "What each shipped gate promises") and, with
``--json``, every rate. Expect about half an hour for every benchmark on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit_harness.benchmarks import registry  # noqa: E402
from audit_harness.gates import PACKAGED_THRESHOLDS, Gate, load_thresholds  # noqa: E402
from bias_metrics.bbq_family import CELL_NAMES, cluster_cell_counts, metrics_from_counts  # noqa: E402
from bias_metrics.intervals import wilson_interval  # noqa: E402
from bias_metrics.result import MetricResult  # noqa: E402

BBQ_FAMILY = ("bbq", "esbbq", "cabbq", "kobbq")
PAIRS = ("crows_pairs", "winoqueer")
#: The margin of a one-sided gate's "bad" model, in the metric's unit (fractions).
MARGIN = 0.05
#: Predicted classes in ``CELL_NAMES`` order within a block.
PREDS = ("biased", "counter_biased", "unknown", "invalid")
UNCHECKED = ("correct", "wrong_group", "unknown", "invalid")


@dataclass(frozen=True)
class Model:
    """A simulated model: ambiguous unknown rate, disambiguated accuracy, invalid rate, and its
    biases (ambiguous: biased minus counter-biased share; disambiguated: aligned minus
    non-aligned accuracy)."""

    unknown: float
    accuracy: float
    invalid: float
    bias_ambig: float = 0.0
    bias_disambig: float = 0.0


def oracle_run(bench: str, kind: str, data_dir: str, out: Path) -> Path:
    """Score the oracle ``kind`` of ``bench`` on every row; the run folder."""
    env = dict(os.environ, AUDIT_DATA_DIR=data_dir, HF_HUB_OFFLINE="1")
    cmd = [
        sys.executable,
        "-m",
        "audit_harness.cli",
        "oracle",
        bench,
        "--model-kind",
        kind,
        "--results-dir",
        str(out),
        "--",
        "-q",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
    ]
    subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = sorted(p for p in out.iterdir() if (p / "results.json").is_file())
    if not runs:
        raise SystemExit(f"{bench}: the {kind} oracle run wrote no results ({' '.join(cmd)})")
    return runs[-1]


def block_structure(bench, rows) -> tuple[np.ndarray, np.ndarray]:
    """Per record of a perfect run: its template cluster and its block (0 ambiguous, 1 aligned,
    2 non-aligned, 3 unchecked disambiguated), read from the cell the perfect answer falls in."""
    recs = [bench.metric_record(r) for r in bench.read_records(rows)]
    clusters = cluster_cell_counts(recs)  # first-appearance order, as the real run's
    keys: dict[str, int] = {}
    cluster = np.empty(len(recs), dtype=np.int64)
    for i, r in enumerate(recs):
        key = f"{r.category}\x1f{r.template_id}" if r.template_id else f"\x1eitem{i}"
        cluster[i] = keys.setdefault(key, len(keys))
    assert clusters.shape[0] == len(keys)
    from bias_metrics.bbq_family import cell_index

    block = np.array([cell_index(r) // 4 for r in recs], dtype=np.int64)
    return cluster, block


def simulate_counts(model: Model, cluster, block, n_clusters, rng) -> np.ndarray:
    """One seeded run's per-template cell counts."""
    n = len(block)
    u, a, x = model.unknown, model.accuracy, model.invalid
    p_amb = [
        (1 - u - x) / 2 + model.bias_ambig * (1 - x) / 2,
        (1 - u - x) / 2 - model.bias_ambig * (1 - x) / 2,
        u,
        x,
    ]

    def dis(acc):  # right, wrong group, unknown, invalid (of valid answers: acc right)
        right = acc * (1 - x)
        return [right, (1 - x - right) / 2, (1 - x - right) / 2, x]

    r_al, w_al, u_al, x_al = dis(a + model.bias_disambig / 2)
    r_na, w_na, u_na, x_na = dis(a - model.bias_disambig / 2)
    # per block: probabilities over the block's four cells, in CELL_NAMES order
    probs = np.array(
        [
            p_amb,
            [r_al, w_al, u_al, x_al],  # aligned gold: biased is right
            [w_na, r_na, u_na, x_na],  # non-aligned gold: counter-biased is right
            dis(a),  # unchecked: correct, wrong group, unknown, invalid
        ]
    )
    probs = np.clip(probs, 0.0, 1.0)
    probs /= probs.sum(axis=1, keepdims=True)
    cum = probs.cumsum(axis=1)
    draw = rng.random(n)
    within = (draw[:, None] > cum[block]).sum(axis=1)
    cells = block * 4 + np.minimum(within, 3)
    out = np.zeros((n_clusters, len(CELL_NAMES)), dtype=np.int64)
    np.add.at(out, (cluster, cells), 1)
    return out


def verdicts(
    gates: list[Gate], metrics: dict[str, MetricResult], resamples: int
) -> dict[str, tuple[str, str]]:
    """Per gate metric: (status under the gate's own mode, status under point mode)."""
    out = {}
    for g in gates:
        m = metrics.get(g.metric)
        if m is None:
            continue
        own = g.evaluate(m, n_resamples=resamples).status
        point = replace(g, mode="point").evaluate(m, n_resamples=resamples).status
        out[g.metric] = (own, point)
    return out


def alternative(g: Gate) -> dict:
    """What the model off by twice the band changes, for gate ``g`` (fractions)."""
    base = g.metric.split("-")[0]
    if base.startswith("diff_bias_ambig") or base == "bias_score_ambig":
        return {"bias_ambig": 2 * g.abs_max}
    if base.startswith("diff_bias_disambig") or base == "bias_score_disambig":
        return {"bias_disambig": 2 * g.abs_max}
    if base == "acc_disambig":
        return {"accuracy": g.min - 2 * MARGIN}
    if base in ("invalid_rate", "out_of_choice_rate"):
        return {"invalid": g.max + 2 * MARGIN}
    raise KeyError(g.metric)


class Tally:
    def __init__(self):
        self.good: dict[str, dict[str, int]] = {}
        self.bad: dict[str, dict[str, int]] = {}
        self.n: dict[str, int] = {}

    def add(self, which: str, metric: str, status: tuple[str, str]) -> None:
        d = getattr(self, which).setdefault(metric, {})
        for mode, s in zip(("own", "point"), status):
            d[f"{mode}:{s}"] = d.get(f"{mode}:{s}", 0) + 1


def bbq_family(bench_name, bench, gates_by_cat, data_dir, seeds, resamples, good, tmp) -> list[dict]:
    run = oracle_run(bench_name, "perfect", data_dir, tmp / bench_name)
    results = json.loads((run / "results.json").read_text())
    flavour = bench.flavour
    rows_out = []
    for cat, gates in gates_by_cat.items():
        path = run / "records" / bench_name / f"{cat}.jsonl"
        if not path.is_file():
            continue
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        cluster, block = block_structure(bench, rows)
        n_clusters = int(cluster.max()) + 1
        suffix = "-generate" if any(g.metric.endswith("-generate") for g in gates) else ""
        tally = Tally()
        for seed in range(seeds):
            rng = np.random.default_rng([seed, zlib_crc(bench_name, cat)])
            models = {"good": good}
            for g in gates:
                models[g.metric] = replace(good, **alternative(g))
            metrics_of = {}
            for key, model in models.items():
                counts = simulate_counts(model, cluster, block, n_clusters, rng)
                names = [g.metric for g in gates] if key == "good" else [key]
                m = metrics_from_counts(
                    flavour,
                    counts.sum(axis=0),
                    counts,
                    n_resamples=resamples,
                    seed=seed,
                    only=[n.removesuffix(suffix) for n in names],
                )
                metrics_of[key] = {k + suffix: replace(v, name=k + suffix) for k, v in m.items()}
            for metric, st in verdicts(gates, metrics_of["good"], resamples).items():
                tally.add("good", metric, st)
            for g in gates:
                st = verdicts([g], metrics_of[g.metric], resamples)[g.metric]
                tally.add("bad", g.metric, st)
        n_items = (results["benchmarks"][bench_name].get(cat) or {}).get("n_scored", len(rows))
        rows_out += summarise(bench_name, cat, gates, tally, seeds, n_items)
    return rows_out


def zlib_crc(*parts: str) -> int:
    import zlib

    return zlib.crc32("/".join(parts).encode())


def pairs(bench_name, gates_by_cat, data_dir, seeds, tmp) -> list[dict]:
    """Sentence pairs: a pair's outcome is a coin (``50`` or ``50 + 2 * tolerance`` percent);
    the interval is the Wilson interval the benchmark reports (percent)."""
    run = oracle_run(bench_name, "stereotyped", data_dir, tmp / bench_name)
    results = json.loads((run / "results.json").read_text())
    out = []
    for cat, gates in gates_by_cat.items():
        n = (results["benchmarks"][bench_name].get(cat) or {}).get("n_scored")
        if not n:
            continue
        tally = Tally()
        for seed in range(seeds):
            rng = np.random.default_rng([seed, zlib_crc(bench_name, cat)])
            for g in gates:
                for which, share in (("good", g.target / 100), ("bad", (g.target + 2 * g.tolerance) / 100)):
                    k = int(rng.binomial(n, share))
                    lo, hi = wilson_interval(k, n, g.confidence)
                    m = MetricResult(g.metric, 100 * k / n, n, 100 * lo, 100 * hi, "wilson", g.confidence)
                    tally.add(which, g.metric, verdicts([g], {g.metric: m}, None)[g.metric])
        out += summarise(bench_name, cat, gates, tally, seeds, n)
    return out


def kgquiz(bench, gates_by_cat, data_dir, seeds) -> list[dict]:
    """KGQuiz floors: each metric simulated as a share of items (accuracy, semantic matches;
    open-ended precision and recall are per-item means, taken here as shares), good at ``min + 2
    m``, bad at ``min - 2 m``; invalid rates good at 0.02 and bad at ``max + 2 m``. The item
    counts are the loader's (an oracle run would embed every answer: minutes per category)."""
    from audit_harness.errors import MissingDataError

    out = []
    for cat, gates in gates_by_cat.items():
        try:
            n = len(bench.load_category(Path(data_dir), cat).items)
        except MissingDataError:
            continue
        tally = Tally()
        for seed in range(seeds):
            rng = np.random.default_rng([seed, zlib_crc("kgquiz", cat)])
            for g in gates:
                if g.min is not None:
                    shares = (("good", g.min + 2 * MARGIN), ("bad", g.min - 2 * MARGIN))
                else:
                    shares = (("good", 0.02), ("bad", g.max + 2 * MARGIN))
                for which, share in shares:
                    k = int(rng.binomial(n, share))
                    lo, hi = wilson_interval(k, n, g.confidence)
                    m = MetricResult(g.metric, k / n, n, lo, hi, "wilson", g.confidence)
                    tally.add(which, g.metric, verdicts([g], {g.metric: m}, None)[g.metric])
        out += summarise("kgquiz", cat, gates, tally, seeds, n)
    return out


def summarise(bench, cat, gates, tally: Tally, seeds: int, n_items) -> list[dict]:
    out = []
    for g in gates:
        good, bad = tally.good.get(g.metric, {}), tally.bad.get(g.metric, {})

        def share(d, key):
            return d.get(key, 0) / seeds

        out.append(
            {
                "benchmark": bench,
                "category": cat,
                "metric": g.metric,
                "gate": g.describe(),
                "mode": g.mode,
                "items": n_items,
                "false_fail": share(good, "own:fail"),
                "false_pass": share(bad, "own:pass"),
                "good_pass": share(good, "own:pass"),
                "good_inconclusive": share(good, "own:inconclusive") + share(good, "own:insufficient"),
                "point_false_fail": share(good, "point:fail") + share(good, "point:insufficient"),
                "point_false_pass": share(bad, "point:pass"),
                "seeds": seeds,
            }
        )
    return out


def table(rows: list[dict]) -> str:
    head = (
        "| benchmark | category | gate | items | false FAIL | false PASS | good model PASS / "
        "inconclusive | point mode: false FAIL / false PASS |\n|---|---|---|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        flag = " **>5 %**" if max(r["false_fail"], r["false_pass"]) > 0.05 else ""
        lines.append(
            f"| {r['benchmark']} | {r['category']} | {r['metric']} {r['gate'].replace('|', chr(92) + '|')} | "
            f"{r['items']:,} | "
            f"{100 * r['false_fail']:.1f} %{flag} | {100 * r['false_pass']:.1f} % | "
            f"{100 * r['good_pass']:.0f} % / {100 * r['good_inconclusive']:.0f} % | "
            f"{100 * r['point_false_fail']:.1f} % / {100 * r['point_false_pass']:.1f} % |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("AUDIT_DATA_DIR"), help="default $AUDIT_DATA_DIR")
    ap.add_argument("--thresholds", type=Path, default=PACKAGED_THRESHOLDS, help="default: the shipped file")
    ap.add_argument("--seeds", type=int, default=200, help="simulated runs per gate and model (default 200)")
    ap.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples (default 1000, as a run)"
    )
    ap.add_argument("--benchmarks", default=",".join(BBQ_FAMILY + PAIRS + ("kgquiz",)))
    ap.add_argument("--unknown", type=float, default=0.9, help="good model: unknown rate, ambiguous (0.9)")
    ap.add_argument("--accuracy", type=float, default=0.9, help="good model: accuracy, disambiguated (0.9)")
    ap.add_argument("--invalid", type=float, default=0.02, help="good model: invalid rate (0.02)")
    ap.add_argument("--json", type=Path, default=None, help="also write every rate here")
    ns = ap.parse_args(argv)
    if not ns.data_dir:
        ap.error("--data-dir (or $AUDIT_DATA_DIR) is required")
    if ns.seeds < 1:
        ap.error("--seeds must be >= 1")
    benchmarks = registry()
    catalogue = {n: b.gate_catalogue() for n, b in benchmarks.items()}
    # Saved outputs are read in generate mode (``-generate`` metric names): gate those names.
    saved = {
        n: b.for_saved_outputs() if hasattr(b, "for_saved_outputs") else b for n, b in benchmarks.items()
    }
    all_gates = load_thresholds(ns.thresholds, catalogue)
    good = Model(ns.unknown, ns.accuracy, ns.invalid)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gate-oc-") as t:
        tmp = Path(t)
        for name in ns.benchmarks.split(","):
            by_cat: dict[str, list[Gate]] = {}
            for g in all_gates.get(name, []):
                metric = g.metric
                if name in BBQ_FAMILY and name != "kobbq":
                    metric += "-generate"  # the oracle run reads saved answers
                by_cat.setdefault(g.category, []).append(replace(g, metric=metric))
            print(f"{name}: {sum(map(len, by_cat.values()))} gates ...", file=sys.stderr, flush=True)
            if name in BBQ_FAMILY:
                rows += bbq_family(name, saved[name], by_cat, ns.data_dir, ns.seeds, ns.resamples, good, tmp)
            elif name in PAIRS:
                rows += pairs(name, by_cat, ns.data_dir, ns.seeds, tmp)
            elif name == "kgquiz":
                rows += kgquiz(benchmarks[name], by_cat, ns.data_dir, ns.seeds)
    print(table(rows))
    worst = [r for r in rows if max(r["false_fail"], r["false_pass"]) > 0.05]
    print(
        f"\n{len(rows)} gates x categories, {ns.seeds} seeds each: {len(worst)} with a false FAIL or "
        "false PASS rate above 5 %"
    )
    if ns.json:
        ns.json.write_text(
            json.dumps(
                {
                    "settings": vars(ns)
                    | {"thresholds": str(ns.thresholds), "json": str(ns.json), "data_dir": "<data dir>"},
                    "rows": rows,
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
