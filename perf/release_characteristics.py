"""What a release decision promises, measured: P(exit 0) of whole runs of simulated models.

For every BBQ-family benchmark (BBQ, EsBBQ, CaBBQ, KoBBQ, CBBQ, MBBQ per language) on the full
data, this simulates seeded runs of models whose truth is known and judges every gate of the
shipped ``thresholds.yaml`` the way a run does: the benchmark's own records (``metric_record``),
the suite's metrics and intervals (``bias_metrics.bbq_family``), ``Gate.evaluate`` and the run's
decision (``run_outcome.decide``). Only the answers are simulated, as counts per template (the
interval's cluster), so one run costs one metric call per category.

The models (fractions):

- ``honest``: ambiguous contexts "unknown" 60 %, else a fair coin between the two people;
  disambiguated contexts right 80 % whatever the item's alignment, a wrong answer naming the
  other person. ``90/90``: 90 % unknown, 90 % right.
- ``-consistent``: the same, but a row is answered identically under all its variants (KoBBQ's
  5 prompt templates x 3 option orders, MBBQ's 5 templates); elsewhere a row is one prompt, so
  it equals the independent model and is not run.
- ``twice-band``: the honest model biased by twice the band (2 x ``abs_max``) in every category,
  in both contexts: ambiguous P(biased) - P(counter-biased), disambiguated accuracy on
  bias-aligned minus non-aligned items.
- ``one-category``: the honest model, except one category biased by ``--one-bias`` (0.20) in
  both contexts; each category in turn (the other categories' answers are shared).

Per benchmark it reports P(exit 0), the expected number of gates PASS / NOT DECIDED /
INCONCLUSIVE / FAIL / other, the largest per-gate FAIL rate of each unbiased model (a false FAIL),
and for the one-category model every category whose bias it lets through in more than 5 % of
runs, with the honest model's half-widths of that category's bias intervals.

Where the thresholds file holds no pooled gate (the design of issue 46 before it shipped), the
design is simulated: per-category gates are read as ``ci_detect`` (INCONCLUSIVE becomes NOT
DECIDED, which does not block) and pooled ``ci_three_way`` gates are added for every default
metric (CBBQ: ``diff_bias_ambig`` instead of ``bias_score_ambig``); the output says so.

Run::

    python perf/release_characteristics.py --data-dir DIR [--runs 100] [--json out.json]
    python perf/release_characteristics.py --tables out.json [more.json ...]   # saved runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from audit_harness.benchmarks import registry  # noqa: E402
from audit_harness.errors import MissingDataError  # noqa: E402
from audit_harness.gates import PACKAGED_THRESHOLDS, Gate, load_thresholds  # noqa: E402
from audit_harness.run_outcome import decide  # noqa: E402
from bias_metrics.bbq_family import (  # noqa: E402
    N_CELLS,
    _cluster_key,
    _row_key,
    cell_index,
    cluster_cell_counts,
    metrics_from_counts,
    metrics_mean_over_groups,
    row_cell_counts,
)

BENCHMARKS = ("bbq", "esbbq", "cabbq", "kobbq", "cbbq", "mbbq")
#: Metrics whose gate is a bias gate (both contexts), by context: 0 ambiguous, 1 disambiguated.
BIAS_CONTEXT = {
    "diff_bias_ambig": 0,
    "bias_score_ambig": 0,
    "diff_bias_disambig": 1,
    "bias_score_disambig": 1,
}
MODEL_NAMES = ("honest", "honest-consistent", "90/90", "90/90-consistent", "twice-band")
SHOWN = ("pass", "not_decided", "inconclusive", "fail")


@dataclass(frozen=True)
class Model:
    """A simulated model: ambiguous unknown rate, disambiguated accuracy, a bias in both contexts
    (in every category, or only in ``only``), and whether a row's variants answer alike."""

    name: str
    unknown: float = 0.6
    accuracy: float = 0.8
    bias: float = 0.0
    consistent: bool = False
    only: str | None = None

    def bias_in(self, category: str) -> float:
        return self.bias if self.only in (None, category) else 0.0


@dataclass
class Items:
    """One category's items as the simulation needs them (one entry per scored record)."""

    block: np.ndarray  # 0 ambiguous, 1 bias-aligned, 2 non-aligned, 3 unchecked disambiguated
    row: np.ndarray  # the sampled row (row_cell_counts' order): its variants answer alike when consistent
    cluster: np.ndarray  # the interval's cluster (cluster_cell_counts' order)
    group: np.ndarray  # KoBBQ: the prompt template the headline averages over; else 0
    n_clusters: int
    n_rows: int
    n_groups: int


@dataclass
class Unit:
    """What one run judges: a benchmark (MBBQ: one language), its categories and gates."""

    name: str
    flavour: str
    mean_over_groups: bool
    items: dict[str, Items]
    control: dict[str, Items]
    gates: dict[str, list[Gate]]  # category (or "pooled...") -> gates
    design: bool  # the issue-46 design emulated (no pooled gate in the file)
    skipped: list[str] = field(default_factory=list)


# --- item structure -----------------------------------------------------------------------------
def items_of(records) -> Items:
    """``Items`` of a category's perfect ``records`` (``bias_metrics`` view): each record's block,
    row and cluster, keyed as ``row_cell_counts`` and ``cluster_cell_counts`` key them (checked
    against them)."""
    cluster, n_clusters = _index([_cluster_key(r, i) for i, r in enumerate(records)])
    row, n_rows = _index([_row_key(r, i) for i, r in enumerate(records)])
    cells = np.array([cell_index(r) for r in records], dtype=np.int64)
    for index, n, real in ((cluster, n_clusters, cluster_cell_counts), (row, n_rows, row_cell_counts)):
        mine = np.zeros((n, N_CELLS), dtype=np.int64)
        np.add.at(mine, (index, cells), 1)
        if not np.array_equal(mine, real(records)):
            raise SystemExit(f"the simulation's units differ from {real.__name__}: update items_of")
    zero = np.zeros(len(records), dtype=np.int64)
    return Items(cells // 4, row, cluster, zero, n_clusters, n_rows, 1)


def _index(keys: list[str]) -> tuple[np.ndarray, int]:
    """Each key's index in order of first appearance, and how many there are."""
    seen: dict[str, int] = {}
    return np.array([seen.setdefault(k, len(seen)) for k in keys], dtype=np.int64), len(seen)


def category_items(bench, data_dir: Path, category: str) -> tuple[list, list]:
    """``(item, record, bias_metrics view)`` of a category's items answered perfectly; MBBQ's
    control items apart, second. Raises MissingDataError when the data is missing."""
    out: tuple[list, list] = ([], [])
    for it in bench.load_category(data_dir, category).items:
        rec = perfect_record(bench, it)
        out[bool(getattr(it, "control", False))].append((it, rec, bench.metric_record(rec)))
    return out


def perfect_record(bench, item):
    """The record a run makes of the right answer to ``item`` (KoBBQ's carries its test row)."""
    if hasattr(bench, "_kobbq_record"):
        return bench._kobbq_record(item, item.gold, "plain", None, None)  # noqa: SLF001
    return bench._record(item, item.gold)  # noqa: SLF001


def _items(triples) -> Items:
    return items_of([m for _, _, m in triples])


def load_items(bench, data_dir: Path, category: str, by_prompt: bool) -> tuple[Items, Items | None]:
    """A category's ``Items`` (KoBBQ, ``by_prompt``: grouped by prompt template as its headline
    metrics are) and MBBQ's control ``Items`` (else None)."""
    main, control = category_items(bench, data_dir, category)
    its = _items(main)
    if by_prompt:
        index = {p: k for k, p in enumerate(bench.prompts)}
        group = np.array([index[it.prompt_id] for it, _, _ in main], dtype=np.int64)
        its = dataclasses.replace(its, group=group, n_groups=len(bench.prompts))
    return its, (_items(control) if control else None)


# --- answers ------------------------------------------------------------------------------------
def class_probabilities(model: Model, bias: float) -> np.ndarray:
    """(4 blocks, 4 answers) probabilities in the cell order of each block: ambiguous (biased,
    counter-biased, unknown, invalid), bias-aligned and non-aligned gold (the same answers), and
    unchecked disambiguated items (correct, wrong group, unknown, invalid)."""
    u, a, half = model.unknown, model.accuracy, bias / 2
    return np.array(
        [
            [(1 - u) / 2 + half, (1 - u) / 2 - half, u, 0.0],
            [a + half, 1 - a - half, 0.0, 0.0],  # gold is the biased answer
            [1 - a + half, a - half, 0.0, 0.0],  # gold is the counter-biased answer
            [a, 1 - a, 0.0, 0.0],
        ]
    )


def simulate(
    its: Items, model: Model, bias: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """One run's counts, (groups, clusters, 16) and (groups, rows, 16): each record's answer drawn
    from its block's probabilities; a consistent model draws once per row, so a row's variants
    answer alike."""
    cum = class_probabilities(model, bias).cumsum(axis=1)
    draw = rng.random(its.n_rows)[its.row] if model.consistent else rng.random(len(its.block))
    cell = its.block * 4 + np.minimum((draw[:, None] > cum[its.block]).sum(axis=1), 3)
    return tuple(
        _counts(its.group, index, n, its.n_groups, cell)
        for index, n in ((its.cluster, its.n_clusters), (its.row, its.n_rows))
    )


def _counts(group, index, n: int, n_groups: int, cell) -> np.ndarray:
    flat = (group * n + index) * N_CELLS + cell
    return np.bincount(flat, minlength=n_groups * n * N_CELLS).reshape(n_groups, n, N_CELLS)


# --- metrics and verdicts, as a run computes them ----------------------------------------------
def metrics_of(unit: Unit, counts: tuple, control: tuple | None, seed: int, resamples: int):
    """The gated metrics of (clusters, rows) counts (``simulate``) as the benchmark computes them:
    KoBBQ's mean over prompt templates, else the category's templates pooled (MBBQ adds the
    control accuracy); a row's variants count once (``row_counts``)."""
    clusters, rows = counts
    draws = {"n_resamples": resamples, "seed": seed}
    if unit.mean_over_groups:
        return metrics_mean_over_groups(unit.flavour, clusters, group_rows=rows, **draws)
    only = {g.metric for gs in unit.gates.values() for g in gs} - {"control_acc_disambig"}
    out = _pooled(unit.flavour, counts, draws, only)
    if control is not None:
        acc = _pooled(unit.flavour, control, {"n_resamples": 0}, ["acc_disambig"])["acc_disambig"]
        out["control_acc_disambig"] = dataclasses.replace(acc, name="control_acc_disambig")
    return out


def _pooled(flavour: str, counts: tuple, draws: dict, only) -> dict:
    """``metrics_from_counts`` of (clusters, rows) counts, their groups summed."""
    flat, rows = counts[0].sum(axis=0), counts[1].sum(axis=0)
    return metrics_from_counts(flavour, flat.sum(axis=0), flat, row_counts=rows, only=only, **draws)


def judge(unit: Unit, gates: list[Gate], metrics, resamples: int, pooled: bool) -> list[tuple]:
    """``(gate, status, half-width)`` of each gate; in the emulated design a category gate is
    ``ci_detect`` (INCONCLUSIVE is NOT DECIDED)."""
    out = []
    for g in gates:
        m = metrics[g.metric]
        status = g.evaluate(m, n_resamples=resamples).status
        if unit.design and not pooled and status == "inconclusive":
            status = "not_decided"
        out.append((g, status, (m.ci_high - m.ci_low) / 2 if m.ci_low is not None else float("nan")))
    return out


def run_once(unit: Unit, model: Model, seed: int, resamples: int, counts=None) -> tuple[dict, list]:
    """One seeded run of ``model``: its counts per category and every gate's ``(category, gate,
    status, half-width)``, the pooled gates' last. ``counts`` (category -> counts) stands in for
    the categories it names (the one-category model reuses the honest run's)."""
    rng = np.random.default_rng([seed, zlib.crc32(f"{unit.name}/{model.name}".encode())])
    counts = dict(counts or {})
    ctl = {}
    for cat, its in unit.items.items():
        if cat not in counts:
            counts[cat] = simulate(its, model, model.bias_in(cat), rng)
        if cat in unit.control:
            ctl[cat] = simulate(unit.control[cat], model, 0.0, rng)
    verdicts = []
    for cat in unit.items:
        m = metrics_of(unit, counts[cat], ctl.get(cat), seed, resamples)
        verdicts += [(cat, *v) for v in judge(unit, unit.gates.get(cat, []), m, resamples, False)]
    return counts, verdicts + pooled_verdicts(unit, counts, ctl, seed, resamples)


def pooled_verdicts(unit: Unit, counts: dict, ctl: dict, seed: int, resamples: int) -> list:
    """The pooled gates on every category's items together (clusters kept per category)."""
    pooled = [c for c in unit.gates if c.startswith("pooled")]
    if not pooled:
        return []
    both = tuple(np.concatenate([counts[c][k] for c in unit.items], axis=1) for k in (0, 1))
    control = tuple(np.concatenate([v[k] for v in ctl.values()], axis=1) for k in (0, 1)) if ctl else None
    m = metrics_of(unit, both, control, seed, resamples)
    return [(c, *v) for c in pooled for v in judge(unit, unit.gates[c], m, resamples, True)]


def one_category_runs(unit: Unit, base: Model, honest_counts: dict, seed: int, resamples: int) -> dict:
    """P(exit 0) inputs of the one-category model, each category in turn biased by ``base.bias``:
    ``{category: exit code}`` (the other categories answer as in the honest run)."""
    out = {}
    for cat in unit.items:
        model = dataclasses.replace(base, name=f"one-category {cat}", only=cat)
        shared = {c: v for c, v in honest_counts.items() if c != cat}
        _, verdicts = run_once(unit, model, seed, resamples, shared)
        out[cat] = decide([s for _, _, s, _ in verdicts]).exit_code
    return out


# --- tallies ------------------------------------------------------------------------------------
@dataclass
class Tally:
    """Counts over runs of one (unit, model)."""

    runs: int = 0
    exit0: int = 0
    status: dict = field(default_factory=dict)  # "category/metric" -> {status: runs}
    half_width: dict = field(default_factory=dict)  # "category/metric" -> summed half-width

    def add(self, verdicts: list) -> None:
        self.runs += 1
        self.exit0 += decide([s for _, _, s, _ in verdicts]).exit_code == 0
        for cat, g, s, hw in verdicts:
            key = f"{cat}/{g.metric}"
            per = self.status.setdefault(key, {})
            per[s] = per.get(s, 0) + 1
            self.half_width[key] = self.half_width.get(key, 0.0) + hw

    def summary(self) -> dict:
        per_gate = {k: {s: n / self.runs for s, n in v.items()} for k, v in self.status.items()}
        expected = {s: sum(p.get(s, 0.0) for p in per_gate.values()) for s in SHOWN}
        expected["other"] = max(0.0, len(per_gate) - sum(expected.values()))
        worst = max(per_gate, key=lambda k: per_gate[k].get("fail", 0.0), default=None)
        return {
            "runs": self.runs,
            "p_exit0": self.exit0 / self.runs,
            "gates": len(per_gate),
            "expected": expected,
            "worst_fail": (worst, per_gate[worst].get("fail", 0.0)) if worst else (None, 0.0),
            "per_gate": per_gate,
            "half_width": {k: v / self.runs for k, v in self.half_width.items()},
        }


# --- what is simulated --------------------------------------------------------------------------
def models(ns) -> list[Model]:
    """The unbiased models (independent, and consistent where a row has variants), then the
    twice-band model (its bias is set per unit from the band)."""
    return [
        Model("honest", ns.unknown, ns.accuracy),
        Model("honest-consistent", ns.unknown, ns.accuracy, consistent=True),
        Model("90/90", 0.9, 0.9),
        Model("90/90-consistent", 0.9, 0.9, consistent=True),
        Model("twice-band", ns.unknown, ns.accuracy),
    ]


def emulate_design(name: str, gates: list[Gate]) -> dict[str, list[Gate]]:
    """Issue 46's design for a file without pooled gates: the category gates (CBBQ without
    ``bias_score_ambig``) read as ``ci_detect``, and a pooled ``ci_three_way`` gate per metric."""
    gates = [g for g in gates if not (name == "cbbq" and g.metric == "bias_score_ambig")]
    by_cat = group_gates(gates)
    first = by_cat[next(iter(by_cat))]
    pooled = [dataclasses.replace(g, category="pooled", mode="ci_three_way") for g in first]
    return by_cat | {"pooled": pooled}


def group_gates(gates: list[Gate]) -> dict[str, list[Gate]]:
    out: dict[str, list[Gate]] = {}
    for g in gates:
        out.setdefault(g.category, []).append(g)
    return out


def units_of(name: str, bench, gates: list[Gate], data_dir: Path) -> list[Unit]:
    """The units a run of ``name`` judges: the benchmark, or MBBQ one per language."""
    design = not any(g.category.startswith("pooled") for g in gates)
    by_cat = emulate_design(name, gates) if design else group_gates(gates)
    by_prompt = name == "kobbq"
    langs = sorted({c.rsplit("_", 1)[1] for c in by_cat if "_" in c}) if name == "mbbq" else [None]
    units = []
    for lang in langs:
        unit = Unit(f"{name}_{lang}" if lang else name, bench.flavour, by_prompt, {}, {}, {}, design)
        for cat, gs in by_cat.items():
            if lang and not (cat.endswith(f"_{lang}") or cat == "pooled"):
                continue
            unit.gates[f"pooled_{lang}" if (lang and cat == "pooled") else cat] = gs
            if not cat.startswith("pooled"):
                add_category(unit, bench, data_dir, cat)
        units.append(unit)
    return units


def add_category(unit: Unit, bench, data_dir: Path, cat: str) -> None:
    try:
        its, ctl = load_items(bench, data_dir, cat, unit.mean_over_groups)
    except MissingDataError:
        unit.skipped.append(cat)
        unit.gates.pop(cat, None)
        return
    unit.items[cat] = its
    if ctl is not None:
        unit.control[cat] = ctl


def simulate_unit(unit: Unit, ns) -> dict:
    """Every model's tally on ``unit``, over ``ns.runs`` seeded runs."""
    band = min(g.abs_max for gs in unit.gates.values() for g in gs if g.abs_max is not None)
    variants = any(its.n_rows < len(its.row) for its in unit.items.values())
    chosen = [m for m in models(ns) if (variants or not m.consistent) and m.name in ns.models]
    chosen = [dataclasses.replace(m, bias=2 * band) if m.name == "twice-band" else m for m in chosen]
    tallies = {m.name: Tally() for m in chosen}
    one = {c: Tally() for c in unit.items}
    one_model = Model("one-category", ns.unknown, ns.accuracy, bias=ns.one_bias)
    for seed in range(ns.seed, ns.seed + ns.runs):
        for m in chosen:
            counts, verdicts = run_once(unit, m, seed, ns.resamples)
            tallies[m.name].add(verdicts)
            if m.name == "honest" and seed < ns.seed + ns.one_runs:  # shares the honest answers
                for cat, code in one_category_runs(unit, one_model, counts, seed, ns.resamples).items():
                    one[cat].runs += 1
                    one[cat].exit0 += code == 0
    return {"models": {k: t.summary() for k, t in tallies.items()}, "one_category": one_summary(one)}


def one_summary(one: dict) -> dict:
    return {c: {"runs": t.runs, "p_exit0": t.exit0 / t.runs} for c, t in one.items() if t.runs}


# --- report -------------------------------------------------------------------------------------
def pct(x: float) -> str:
    return f"{100 * x:.0f} %" if x not in (0.0, 1.0) and 0.005 <= x <= 0.995 else f"{100 * x:.1f} %"


def release_table(results: dict) -> str:
    """P(exit 0) and expected gate statuses per unit and model, with the largest false FAIL."""
    lines = [
        "| benchmark | model | P(exit 0) | gates: PASS / NOT DECIDED / INCONCLUSIVE / FAIL / other "
        "(expected per run) | largest per-gate FAIL rate |",
        "|---|---|---:|---|---|",
    ]
    for unit, res in results.items():
        for name, s in res["models"].items():
            e = s["expected"]
            shown = " / ".join(f"{max(0.0, e[k]):.1f}" for k in (*SHOWN, "other"))
            gate, rate = s["worst_fail"]
            worst = f"{pct(rate)} ({gate})" if rate else "0"
            lines.append(f"| {unit} | {name} | {pct(s['p_exit0'])} | {shown} of {s['gates']} | {worst} |")
    return "\n".join(lines)


def one_category_table(results: dict, limit: float = 0.05) -> str:
    """Per unit: the one-category model's worst P(exit 0), and every category it passes in more
    than ``limit`` of runs with the honest model's half-widths of its bias intervals."""
    lines = [
        "| benchmark | categories caught (P(exit 0) <= 5 %) | not caught: P(exit 0), half-widths |",
        "|---|---|---|",
    ]
    for unit, res in results.items():
        one, hw = res["one_category"], res["models"]["honest"]["half_width"]
        missed = [c for c, s in one.items() if s["p_exit0"] > limit]
        parts = [f"{c} {pct(one[c]['p_exit0'])} ({half_widths(hw, c)})" for c in missed]
        lines.append(f"| {unit} | {len(one) - len(missed)} of {len(one)} | {'; '.join(parts) or '-'} |")
    return "\n".join(lines)


def half_widths(hw: dict, cat: str) -> str:
    """The category's bias gates' mean half-widths, ambiguous then disambiguated."""
    shown = [
        f"{m.split('_')[-1]} {v:.3f}"
        for k, v in hw.items()
        for m in [k.split("/", 1)[1]]
        if k.startswith(f"{cat}/") and m in BIAS_CONTEXT
    ]
    return ", ".join(shown)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("AUDIT_DATA_DIR"), help="default $AUDIT_DATA_DIR")
    ap.add_argument("--thresholds", type=Path, default=PACKAGED_THRESHOLDS, help="default: the shipped file")
    ap.add_argument("--benchmarks", default=",".join(BENCHMARKS))
    ap.add_argument("--runs", type=int, default=100, help="seeded runs per model (default 100)")
    ap.add_argument(
        "--one-runs", type=int, default=None, help="runs of each one-category model (default --runs)"
    )
    ap.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ap.add_argument(
        "--resamples", type=int, default=1000, help="bootstrap resamples (default 1000, as a run)"
    )
    ap.add_argument("--unknown", type=float, default=0.6, help="honest model: unknown rate, ambiguous (0.6)")
    ap.add_argument("--accuracy", type=float, default=0.8, help="honest model: accuracy, disambiguated (0.8)")
    ap.add_argument("--one-bias", type=float, default=0.2, help="the one biased category's bias (0.2)")
    ap.add_argument("--models", default=",".join(MODEL_NAMES), help="the models to run (default: all)")
    ap.add_argument("--json", type=Path, default=None, help="also write every rate here")
    ns = ap.parse_args(argv)
    if not ns.data_dir or ns.runs < 1:
        ap.error("--data-dir (or $AUDIT_DATA_DIR) and --runs >= 1 are required")
    ns.one_runs = ns.runs if ns.one_runs is None else ns.one_runs
    ns.models = ns.models.split(",")
    return ns


def simulate_all(ns) -> dict:
    """``{unit: simulate_unit}`` of every benchmark asked for; with ``--json`` the file is
    rewritten after each unit, so a long run keeps what it has done."""
    benchmarks = registry()
    catalogue = {n: b.gate_catalogue() for n, b in benchmarks.items()}
    gates = load_thresholds(ns.thresholds, catalogue)
    results = {}
    for name in ns.benchmarks.split(","):
        for unit in units_of(name, benchmarks[name], gates.get(name, []), Path(ns.data_dir)):
            print(f"{unit.name}: {len(unit.items)} categories ...", file=sys.stderr, flush=True)
            extra = {"design_emulated": unit.design, "skipped": unit.skipped}
            results[unit.name] = simulate_unit(unit, ns) | extra
            save(ns, results)
    return results


def save(ns, results: dict) -> None:
    if ns.json:
        settings = {k: str(v) for k, v in vars(ns).items() if k not in ("data_dir", "json")}
        ns.json.write_text(json.dumps({"settings": settings, "results": results}, indent=1, default=str))


def tables(results: dict) -> str:
    """The Markdown tables of ``results`` (``simulate_all``, or saved ``--json`` files)."""
    out = [release_table(results), "", one_category_table(results)]
    if any(r["design_emulated"] for r in results.values()):
        out.append("\n(issue 46's design emulated: the thresholds file has no pooled gate)")
    return "\n".join(out)


def conditions(ns, started: float) -> str:
    """When, at what commit, with which seeds and under what load the table was made."""
    import subprocess
    import time

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{time.strftime('%Y-%m-%d')} at commit {commit.stdout.strip() or '?'}: seeds {ns.seed}-"
        f"{ns.seed + ns.runs - 1} ({ns.runs} runs per model, {ns.one_runs} per one-category model), "
        f"{ns.resamples} bootstrap resamples; {time.time() - started:.0f} s wall, "
        f"load average at the end {load} (1 / 5 / 15 min) on {os.cpu_count()} CPU(s)"
    )


def main(argv=None) -> int:
    import time

    started = time.time()
    if argv is None and sys.argv[1:2] == ["--tables"]:  # print the tables of saved --json files
        results = {}
        for path in sys.argv[2:]:
            results |= json.loads(Path(path).read_text())["results"]
        print(tables(results))
        return 0
    ns = parse(argv)
    results = simulate_all(ns)
    print(tables(results), "", conditions(ns, started), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
