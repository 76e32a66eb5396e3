"""``bias-audit compare OLD NEW``: every metric's change between two runs, with both intervals, the
changes whose intervals do not overlap, and the gates whose verdict changed.

Pure functions of two results documents (``report.results``); the CLI reads and writes files.
Non-overlapping 95% intervals are a conservative sign of a real change (two estimates can differ
significantly while their intervals still overlap), so an unmarked change is not evidence of
"no change".
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping, TypedDict

from ..gates.comparability import comparability_notes, model_notes
from ..gates.resolution import status_word
from .schema import GateEntry, Interval, MetricEntry, Results, as_results
from .verdict import overall_verdict
from .views import aggregates, overall_labels


class RunSide(TypedDict):
    """A run compared: its id, model name and fingerprint, and when it was made."""

    run_id: str | None
    model: str | None
    fingerprint: str | None
    created: str | None


class MetricSide(TypedDict):
    """A metric's value, interval and n in one run."""

    value: float | None
    ci: Interval | None
    n: int | None


class MetricChange(TypedDict):
    """One (benchmark, category, metric) of either run (``compare_results``)."""

    benchmark: str
    category: str
    metric: str
    old: MetricSide | None
    new: MetricSide | None
    change: float | None
    intervals_disjoint: bool | None
    not_comparable: str | None


class GateChange(TypedDict):
    """One gate test of either run with both statuses (``compare_results``)."""

    benchmark: str
    test_id: str
    old: str | None
    new: str | None
    mode: str | None
    changed: bool


class Summary(TypedDict):
    """The comparison's counts."""

    metrics: int
    intervals_disjoint: int
    not_comparable: int
    gates: int
    gates_changed: int
    gates_in_one_run: int


class Comparison(TypedDict):
    """``bias-audit compare``'s document (``compare_results`` says what each part holds)."""

    old: RunSide
    new: RunSide
    notes: list[str]
    models: list[str]
    metrics: list[MetricChange]
    gates: list[GateChange]
    summary: Summary


def _metrics(results: Results) -> dict[tuple[str, str, str], MetricEntry]:
    out: dict[tuple[str, str, str], MetricEntry] = {}
    for bench, cats in results["benchmarks"].items():
        for cat, entry in cats.items():
            for name, m in (entry.get("metrics") or {}).items():
                out[(bench, cat, name)] = m
        for label, metrics in aggregates(results, bench).items():
            for name, m in (metrics or {}).items():
                out[(bench, label, name)] = m
    return out


def pooled_categories(results: Results, bench: str) -> list[str]:
    """The categories ``bench``'s aggregates (``pooled``, ``size_weighted``, reporting groups) pool
    in ``results``: ``overall.<bench>.categories``, or for a file without that list the
    categories that were scored."""
    listed = ((results.get("overall") or {}).get(bench) or {}).get("categories")
    if isinstance(listed, list):  # the aggregates are objects; ``categories`` is their list
        return sorted(listed)
    cats = (results.get("benchmarks") or {}).get(bench) or {}
    return sorted(c for c, e in cats.items() if e.get("status", "ok") == "ok")


def pool_differences(old: Results, new: Results) -> dict[str, str]:
    """Per benchmark both runs aggregated, why their aggregate rows are not like for like: the
    categories one run pooled and the other did not (a pooled number over 11 categories and one
    over Age alone estimate different things, whatever their intervals say). Empty when every
    shared benchmark pooled the same categories.

    Examples
    --------
    >>> run = lambda *cats: {"overall": {"bbq": {"categories": list(cats), "pooled": {}}}}
    >>> pool_differences(run("Age", "Religion", "SES"), run("Age"))
    {'bbq': 'pooled over different categories: old only Religion, SES'}
    >>> pool_differences(run("Age"), run("Age"))
    {}
    """
    out = {}
    for bench in sorted(set(old.get("overall") or {}) & set(new.get("overall") or {})):
        a, b = set(pooled_categories(old, bench)), set(pooled_categories(new, bench))
        if a != b:
            parts = [f"old only {', '.join(sorted(a - b))}" if a - b else ""]
            parts.append(f"new only {', '.join(sorted(b - a))}" if b - a else "")
            out[bench] = "pooled over different categories: " + "; ".join(p for p in parts if p)
    return out


def _gate_key(v: GateEntry) -> tuple[str, str]:
    return v["benchmark"], v.get("test_id") or f"{v['category']}-{v['metric']}"


def _disjoint(a: Interval | None, b: Interval | None) -> bool | None:
    """True when intervals ``a`` and ``b`` ([low, high]) do not overlap; None when either is
    missing."""
    if a is None or b is None:
        return None
    (a_low, a_high), (b_low, b_high) = a, b
    if a_low is None or a_high is None or b_low is None or b_high is None:
        return None
    return a_high < b_low or b_high < a_low


def incomplete_notes(runs: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One sentence per run (``{"old": results, ...}``) whose overall verdict says it is not
    complete (RUN ERROR, INTERRUPTED, NOTHING CHECKED): its missing gates would otherwise read as
    absent and its numbers as final."""
    notes = []
    for side, r in runs.items():
        verdict = overall_verdict(r)
        if verdict.label in ("RUN ERROR", "INTERRUPTED", "NOTHING CHECKED"):
            notes.append(f"the {side} run is incomplete ({verdict.label}): {verdict.reason}")
    return notes


def bias_scope_notes(runs: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One sentence per run whose verdict is no bias verdict in some category (its gates file
    gates none of the benchmark's bias metrics there): beside a run that does gate them, its
    missing gates would read as "in one run only" and its PASS as comparable."""
    notes = []
    for side, r in runs.items():
        for reason in overall_verdict(r).partial:
            if reason.startswith("no bias metric gated"):
                notes.append(f"the {side} run gives no bias verdict there: {reason}")
    return notes


def compare_results(old: Mapping[str, object], new: Mapping[str, object]) -> Comparison:
    """The comparison of two runs.

    Returns
    -------
    dict
        ``old``/``new`` (run id, model name and fingerprint); ``notes``: why the numbers may not
        be comparable (a run that is incomplete: an error, an interruption or nothing checked;
        options, thresholds or data files that differ); ``metrics``: one row per
        (benchmark, category, metric) of either run: both values, intervals and n, ``change``
        (new - old, None when either is undefined or absent, or the row is not comparable),
        ``intervals_disjoint`` (True, False, or None when an interval is missing or the row is
        not comparable) and ``not_comparable`` (why, or None): an aggregate row (``pooled``,
        ``size_weighted``, a reporting group) is compared only when both runs pooled the same
        categories (``pool_differences``); ``gates``: one row per gate test of either
        run with both statuses and ``changed`` (both runs have it and the statuses differ).
    """
    old, new = as_results(old), as_results(new)
    runs = {"old": old, "new": new}
    notes = incomplete_notes(runs) + bias_scope_notes(runs) + comparability_notes(old, new)
    pools_differ = pool_differences(old, new)
    notes += [
        f"{bench} aggregate rows (pooled, ...): {why}; they are shown, not compared"
        for bench, why in pools_differ.items()
    ]
    rows = _metric_rows(old, new, pools_differ)
    gates = _gate_rows(old, new)
    return {
        "old": _who(old),
        "new": _who(new),
        "notes": notes,
        "models": model_notes(old, new),
        "metrics": rows,
        "gates": gates,
        "summary": {
            "metrics": len(rows),
            "intervals_disjoint": sum(1 for r in rows if r["intervals_disjoint"]),
            "not_comparable": sum(1 for r in rows if r["not_comparable"]),
            "gates": len(gates),
            "gates_changed": sum(1 for g in gates if g["changed"]),
            "gates_in_one_run": sum(1 for g in gates if None in (g["old"], g["new"])),
        },
    }


def _who(r: Results) -> RunSide:
    m = r.get("model") or {}
    return {
        "run_id": r.get("run_id"),
        "model": m.get("name"),
        "fingerprint": m.get("fingerprint"),
        "created": r.get("created"),
    }


def _metric_rows(old: Results, new: Results, pools_differ: Mapping[str, str]) -> list[MetricChange]:
    """One row per (benchmark, category, metric) of either run, each benchmark's aggregates
    after its categories (``compare_results`` says what a row holds)."""
    m_old, m_new = _metrics(old), _metrics(new)
    rows: list[MetricChange] = []
    pools = {
        (b, label) for r in (old, new) for b in (r.get("overall") or {}) for label in overall_labels(r, b)
    }
    for key in sorted(set(m_old) | set(m_new), key=lambda k: (k[0], (k[0], k[1]) in pools, k[1], k[2])):
        a, b = m_old.get(key), m_new.get(key)
        va, vb = (a or {}).get("value"), (b or {}).get("value")
        ca, cb = (a or {}).get("ci"), (b or {}).get("ci")
        # An aggregate over other categories is another quantity: no change, no overlap flag.
        unlike = pools_differ.get(key[0]) if (key[0], key[1]) in pools and a and b else None
        rows.append(
            {
                "benchmark": key[0],
                "category": key[1],
                "metric": key[2],
                "old": None if a is None else {"value": va, "ci": ca, "n": a.get("n")},
                "new": None if b is None else {"value": vb, "ci": cb, "n": b.get("n")},
                "change": None if va is None or vb is None or unlike else vb - va,
                "intervals_disjoint": None if unlike else _disjoint(ca, cb),
                "not_comparable": unlike,
            }
        )
    return rows


def _gate_rows(old: Results, new: Results) -> list[GateChange]:
    """One row per gate test of either run, with both statuses."""
    g_old = {_gate_key(v): v for v in old.get("gates") or ()}
    g_new = {_gate_key(v): v for v in new.get("gates") or ()}
    gates: list[GateChange] = []
    for key in sorted(set(g_old) | set(g_new)):
        a, b = g_old.get(key), g_new.get(key)
        sa, sb = (a or {}).get("status"), (b or {}).get("status")
        either = b or a or {}  # one of the two has the gate
        # A gate only one run has (another thresholds file, a -k, --baseline) did not change
        # verdict: it is listed as absent on the other side.
        gates.append(
            {
                "benchmark": key[0],
                "test_id": key[1],
                "old": sa,
                "new": sb,
                "mode": either.get("mode"),
                "changed": None not in (sa, sb) and sa != sb,
            }
        )
    return gates


def _value(side: MetricSide | None) -> str:
    if side is None:
        return "absent"
    if side["value"] is None:
        return "undefined"
    lo, hi = side.get("ci") or (None, None)
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{side['value']:.3f}{ci}"


def _status(s: str | None) -> str:
    return "absent" if s is None else status_word(s)


def render_comparison(c: Comparison) -> str:
    """The comparison as Markdown: runs, caveats, gates that changed verdict, changes whose
    intervals do not overlap, then every metric (``**`` marks a disjoint pair of intervals)."""
    out = _comparison_head(c)
    changed = [g for g in c["gates"] if g["changed"]]
    out += ["## Gates that changed verdict", ""]
    if changed:
        out += ["| benchmark | gate | old | new | mode |", "|---|---|---|---|---|"]
        out += [
            f"| {g['benchmark']} | {g['test_id']} | {_status(g['old'])} | {_status(g['new'])} | "
            f"{g['mode'] or '-'} |"
            for g in changed
        ]
    else:
        out.append("None.")
    header = [
        "| benchmark | category | metric | old [CI] | new [CI] | change | intervals |",
        "|---|---|---|---|---|---|---|",
    ]
    disjoint = [r for r in c["metrics"] if r["intervals_disjoint"]]
    out += ["", "## Changes whose intervals do not overlap", ""]
    out += header + [_metric_line(r) for r in disjoint] if disjoint else ["None."]
    out += ["", "## Every metric", "", *header, *(_metric_line(r) for r in c["metrics"]), ""]
    return "\n".join(out)


def _comparison_head(c: Comparison) -> list[str]:
    """The runs compared, the counts, the models and why the numbers may not be like for like."""
    o, n, s = c["old"], c["new"], c["summary"]
    out = [
        "# Bias audit comparison",
        "",
        f"- old: `{o['run_id']}` ({o['model']}, `{o['fingerprint']}`)",
        f"- new: `{n['run_id']}` ({n['model']}, `{n['fingerprint']}`)",
        f"- {s['gates_changed']} of {s['gates']} gate(s) changed verdict"
        + (f" ({s['gates_in_one_run']} in one run only)" if s["gates_in_one_run"] else "")
        + f"; {s['intervals_disjoint']} of {s['metrics']} metric(s) moved so far that their "
        "intervals do not overlap"
        + (
            f"; {s['not_comparable']} aggregate row(s) not comparable (other categories pooled)"
            if s.get("not_comparable")
            else ""
        ),
        "",
    ]
    for line in c.get("models") or ():
        out += [f"Compared: {line}", ""]
    if c["notes"]:
        return out + ["Not like for like:", ""] + [f"- {x}" for x in c["notes"]] + [""]
    return out + [
        "Like for like: seed, intervals, dtype, device type, engine, thresholds, protocols "
        "(prompts, answer parsing, chat template), items scored and data files agree.",
        "",
    ]


def _metric_line(r: MetricChange) -> str:
    """A metric's row of the comparison's tables."""
    change = "-" if r["change"] is None else f"{r['change']:+.3f}"
    flag = {True: "**do not overlap**", False: "overlap", None: "-"}[r["intervals_disjoint"]]
    if r.get("not_comparable"):
        flag = f"not comparable ({r['not_comparable']})"
    return (
        f"| {r['benchmark']} | {r['category']} | {r['metric']} | {_value(r['old'])} | "
        f"{_value(r['new'])} | {change} | {flag} |"
    )


def _signed_run(folder: Path) -> Path | None:
    """The signed run folder ``folder`` is in (itself or a parent holding ``manifest.json`` or
    ``manifest.sig``), or None."""
    from ..compliance.signing import MANIFEST_FILE, SIGNATURE_FILE

    folder = folder.resolve()
    for f in (folder, *folder.parents):
        if (f / MANIFEST_FILE).is_file() or (f / SIGNATURE_FILE).is_file():
            return f
    return None


def output_folder(new_folder: Path | None, explicit: Path | None) -> Path:
    """Where ``bias-audit compare`` writes: ``explicit`` (``--output-dir``), else the folder that
    holds NEW's run folder (the results dir, next to the runs), never a run folder itself: a file
    added to a signed run makes ``bias-audit verify`` fail.

    Raises
    ------
    ConfigError
        The folder is, or is inside, a signed run folder.
    """
    from ..errors import ConfigError

    folder = explicit if explicit is not None else (new_folder or Path(".")).resolve().parent
    signed = _signed_run(Path(folder))
    if signed is not None:
        raise ConfigError(
            f"bias-audit compare: {folder} is inside the signed run folder {signed}: a file written "
            "there makes `bias-audit verify` fail; give --output-dir outside it"
        )
    return Path(folder)


def write_comparison(c: Comparison, folder: Path) -> tuple[Path, Path]:
    """Write ``compare-<old run id>-vs-<new run id>.md`` and ``.json`` into ``folder``; returns
    both paths."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"compare-{c['old']['run_id'] or 'old'}-vs-{c['new']['run_id'] or 'new'}"
    md, js = folder / f"{stem}.md", folder / f"{stem}.json"
    md.write_text(render_comparison(c), encoding="utf-8")

    def clean(x: object) -> object:
        return None if isinstance(x, float) and math.isnan(x) else x

    js.write_text(json.dumps(c, indent=2, ensure_ascii=False, default=clean) + "\n", encoding="utf-8")
    return md, js
