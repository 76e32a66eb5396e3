"""The rows the reports share, computed once from a results document: report.md, report.html
and the terminal render them, each in its own form (``markdown``, ``html``, ``terminal``), so
the three cannot disagree on what a run scored, which rows a table holds or which category is
flagged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, TypedDict

from ..gates.resolution import describe_band, of_entry, status_word
from .schema import Band, CategoryEntry, GateEntry, MetricEntry, ModelInfo, Results, SequentialEntry, ToDecide


def items_scored_text(results: Results) -> str:
    """How many items the run actually scored per category, for the reports: the count, not the
    ``--limit`` asked for (``--limit 100000`` on an 864-row category scored 864, every row).

    Examples
    --------
    >>> doc = {"options": {"limit": 100000},
    ...        "benchmarks": {"bbq": {"Age": {"n_scored": 864, "n_available": 864}}}}
    >>> items_scored_text(doc)
    'every row (864 per category; --limit 100000 is above every category size)'
    """
    limit = (results.get("options") or {}).get("limit")
    entries = [
        e
        for cats in (results.get("benchmarks") or {}).values()
        for e in cats.values()
        if e.get("status", "ok") == "ok" and "n_scored" in e
    ]
    if not entries:
        return "no category scored"

    def span(values: list[int]) -> str:
        lo, hi = min(values), max(values)
        return f"{lo:,}" if lo == hi else f"{lo:,} to {hi:,}"

    scored = [e["n_scored"] for e in entries]
    available = [e.get("n_available", e["n_scored"]) for e in entries]
    if all(s == a for s, a in zip(scored, available)):
        note = f"; --limit {limit} is above every category size" if limit else ""
        return f"every row ({span(scored)} per category{note})"
    return f"{span(scored)} per category (--limit {limit}; the categories hold {span(available)} rows)"


class Resolution(TypedDict):
    """What a gate can resolve (``gates.resolution.of_entry``)."""

    half_width: float | None
    certifiable_band: Band | None
    to_decide: ToDecide | None


def resolution_of(verdict: GateEntry) -> Resolution:
    """A results verdict entry's ``half_width``, ``certifiable_band`` and ``to_decide``: as
    recorded, or computed from its numbers for a results file written before they were
    (``gates.resolution.of_entry``)."""
    if "half_width" in verdict:
        return {
            "half_width": verdict.get("half_width"),
            "certifiable_band": verdict.get("certifiable_band"),
            "to_decide": verdict.get("to_decide"),
        }
    resolved = of_entry(verdict)
    return {
        "half_width": resolved["half_width"],
        "certifiable_band": resolved["certifiable_band"],
        "to_decide": resolved["to_decide"],
    }


def resolution_text(verdict: GateEntry) -> str:
    """A verdict's half-width and certifiable band, for a report's gate cell; ``-`` without an
    interval.

    Examples
    --------
    >>> resolution_text({"kind": "threshold", "status": "pass", "bounds": {"abs_max": 0.05},
    ...                  "value": 0.01, "ci": [-0.02, 0.04]})
    'hw 0.030; certifiable |x| <= 0.04'
    >>> resolution_text({"status": "error", "value": None, "ci": [None, None]})
    '-'
    """
    res = resolution_of(verdict)
    parts = []
    if res["half_width"] is not None:
        parts.append(f"hw {res['half_width']:.3f}")
    if res["certifiable_band"]:
        parts.append(f"certifiable {describe_band(res['certifiable_band'])}")
    return "; ".join(parts) or "-"


def gate_summary_text(results: Results) -> str:
    """The count of each verdict status, as the terminal and report.md print it.

    Examples
    --------
    >>> gate_summary_text({"gate_summary": {"pass": 3, "not_decided": 2}})
    '2 not decided, 3 pass'
    """
    counts = sorted((results.get("gate_summary") or {}).items())
    return ", ".join(f"{n} {status_word(s).lower()}" for s, n in counts)


def overall_labels(results: Results, bench: str) -> list[str]:
    """The aggregate labels of ``bench`` in results' ``overall`` (``pooled``, ``size_weighted``,
    and any reporting groups such as BBQ's ``"<category> (names)"``), pooled first."""
    overall = (results.get("overall") or {}).get(bench) or {}
    labels = [k for k in overall if k != "categories" and isinstance(overall[k], Mapping)]
    return sorted(labels, key=lambda k: (k != "pooled", k == "size_weighted", k))


def aggregates(results: Results, bench: str) -> dict[str, dict[str, MetricEntry]]:
    """``bench``'s aggregates in results' ``overall``, each label's metrics, in
    ``overall_labels``' order."""
    overall = (results.get("overall") or {}).get(bench) or {}
    return {
        label: metrics
        for label in overall_labels(results, bench)
        if isinstance(metrics := overall[label], dict)  # overall_labels keeps these only
    }


#: An invalid (or out-of-choice) rate above this in either parsing profile flags the category in
#: the parse-sensitivity report: its numbers rest on how its outputs are read.
INVALID_FLAG = 0.10


def _is_rate(name: str) -> bool:
    base = name.removesuffix("-generate").removesuffix("-letter")
    return base in ("invalid_rate", "out_of_choice_rate")


class SensitivityRow(TypedDict):
    """A category of ``sensitivity_rows``: its gates whose verdict differs under the other
    parsing profile (``(test_id, status, other status)``) and its invalid rates under both."""

    benchmark: str
    category: str
    answer_parsing: str
    other: str
    differs: list[tuple[str, str, str]]
    rates: dict[str, tuple[float | None, float | None]]
    flagged: bool


def sensitivity_rows(results: Results) -> list[SensitivityRow]:
    """Per category parsed from text (generate mode, saved outputs): the run's parsing profile,
    the other one, the gates whose verdict differs under the other (``test_id``: both statuses),
    the invalid rates under both, and ``flagged`` when a verdict differs or a rate exceeds
    ``INVALID_FLAG``."""
    rows: list[SensitivityRow] = []
    for bench, cats in (results.get("benchmarks") or {}).items():
        active = ((results.get("protocols") or {}).get(bench) or {}).get("answer_parsing", "?")
        for cat, entry in cats.items():
            sens = entry.get("sensitivity")
            if not sens:
                continue
            gates = [
                v
                for v in results.get("gates") or ()
                if v["benchmark"] == bench and v["category"] == cat and v.get("other_parse")
            ]
            differs = [
                (v["test_id"], v["status"], v["other_parse"]["status"])
                for v in gates
                if v["other_parse"].get("verdict_differs")
            ]
            rates = {
                n: (
                    (entry.get("metrics") or {}).get(n, {}).get("value"),
                    sens["metrics"].get(n, {}).get("value"),
                )
                for n in (entry.get("metrics") or {})
                if _is_rate(n)
            }
            high = any(x is not None and x > INVALID_FLAG for pair in rates.values() for x in pair)
            rows.append(
                {
                    "benchmark": bench,
                    "category": cat,
                    "answer_parsing": active,
                    "other": sens["answer_parsing"],
                    "differs": differs,
                    "rates": rates,
                    "flagged": bool(differs) or high,
                }
            )
    return rows


def sensitivity_lines(results: Results) -> list[str]:
    """One sentence per flagged category of ``sensitivity_rows``."""
    out = []
    for r in sensitivity_rows(results):
        if not r["flagged"]:
            continue
        parts = []
        if r["differs"]:
            parts.append(
                f"{len(r['differs'])} gate(s) change verdict under {r['other']} ("
                + ", ".join(f"{t}: {a} -> {b}" for t, a, b in r["differs"])
                + ")"
            )
        for name, (a, b) in r["rates"].items():
            fa = "-" if a is None else f"{a:.3f}"
            fb = "-" if b is None else f"{b:.3f}"
            parts.append(f"{name} {fa} ({r['answer_parsing']}) / {fb} ({r['other']})")
        out.append(f"{r['benchmark']}/{r['category']}: " + "; ".join(parts))
    return out


def coverage_lines(results: Results) -> list[str]:
    """One sentence per category scored from saved predictions (``--backend replay``): how many
    of its rows the file answers, and what that means for its gates."""
    allow = (results.get("options") or {}).get("allow_partial")
    lines = []
    for bench, cats in (results.get("benchmarks") or {}).items():
        for cat, entry in cats.items():
            cov = entry.get("coverage")
            if not cov:
                continue
            k, n = cov["predicted"], cov["available"]
            share = 100.0 * k / n if n else 0.0
            tail = (
                ""
                if k >= n
                else "; --allow-partial: judged on these rows"
                if allow
                else "; its gates are INSUFFICIENT (--allow-partial judges the rows given)"
            )
            lines.append(f"{bench}/{cat}: scored {k:,} of {n:,} rows ({share:.1f} %){tail}")
    return lines


def truncation_lines(results: Results) -> list[str]:
    """One sentence per category in which prompts longer than the model's window were read with
    the left of their context cut off (``requests.truncated``, counted by the engine).

    Examples
    --------
    >>> doc = {"benchmarks": {"cbbq": {"disease": {"requests": {"truncated": 3}, "n_scored": 8}}}}
    >>> truncation_lines(doc)
    ["cbbq/disease: 3 prompt(s) of 8 items longer than the model's context window, read with the left of their context cut off to fit"]
    """
    lines = []
    for bench, cats in (results.get("benchmarks") or {}).items():
        for cat, entry in cats.items():
            cut = (entry.get("requests") or {}).get("truncated")
            if cut:
                lines.append(
                    f"{bench}/{cat}: {cut:,} prompt(s) of {entry.get('n_scored', 0):,} items longer "
                    "than the model's context window, read with the left of their context cut off to fit"
                )
    return lines


def metric_names_of(categories: Mapping[str, CategoryEntry]) -> list[str]:
    """Metric names of a benchmark's categories (``results["benchmarks"][bench]``): the union, in
    order of first appearance, since categories may compute different metrics (KGQuiz: accuracy
    for true/false, LCS ratios for blank filling)."""
    names: dict[str, None] = {}
    for entry in categories.values():
        names.update(dict.fromkeys(entry.get("metrics") or ()))  # an ERROR category has none
    return list(names)


def table_metrics(results: Results, bench: str) -> list[str]:
    """The metric names the terminal and Markdown tables show for ``bench``: its protocol's
    ``table_metrics`` when it names them (KoBBQ keeps its per-prompt breakdowns to results.json),
    else every metric of its categories (``metric_names_of``)."""
    names = metric_names_of(results["benchmarks"].get(bench) or {})
    chosen = (results.get("protocols") or {}).get(bench, {}).get("table_metrics")
    return [n for n in chosen if n in names] if chosen else names


#: Most metric columns in one terminal or Markdown table; a benchmark with more (KoBBQ in both
#: answer modes has 19) gets one table per group, each with every category row.
TABLE_COLUMNS = 6


def column_groups(names: list[str], size: int = TABLE_COLUMNS) -> list[list[str]]:
    """``names`` cut into tables of at most ``size`` columns: first by answer mode (a ``-letter``
    suffix starts a new group), then into chunks, so each table reads on one screen.

    Examples
    --------
    >>> column_groups(["a", "b", "a-letter"], size=6)
    [['a', 'b'], ['a-letter']]
    >>> column_groups(list("abcdefgh"), size=3)
    [['a', 'b', 'c'], ['d', 'e', 'f'], ['g', 'h']]
    """
    by_mode: dict[str, list[str]] = {}
    for name in names:
        by_mode.setdefault(name.rpartition("-")[2] if "-" in name else "", []).append(name)
    return [group[i : i + size] for group in by_mode.values() for i in range(0, len(group), size)] or [[]]


def modified_files(results: Results) -> list[str]:
    """Data files of ``results`` whose sha256 is not the pinned published one."""
    return sorted(
        p for p, d in results.get("data_files", {}).items() if str(d.get("status", "")).startswith("MODIFIED")
    )


def endpoint_lines(model: ModelInfo) -> list[str]:
    """One line per inference-server endpoint the run used (``model.server.endpoints``): its URL,
    state and what it computed; none for an in-process model."""
    server = model.get("server") or {}
    out = []
    for e in server.get("endpoints") or []:
        state = e.get("state", "?") + (f" ({e['reason']})" if e.get("reason") else "")
        out.append(
            f"{e.get('base_url')}: {state}; {e.get('requests', 0)} requests, {e.get('scored', 0)} "
            f"sequences scored, {e.get('generated', 0)} generations, {e.get('tokens', 0)} tokens, "
            f"{e.get('retries', 0)} retries, {e.get('failures', 0)} failed requests (sent to "
            f"another endpoint), {e.get('seconds', 0)} s, {e.get('groups', 0)} prefix groups"
        )
    return out


#: The category of a sentence-pair benchmark that holds every pair of its subgroups.
_OVERALL = "overall"


def _sequential_categories(results: Results) -> dict[tuple[str, str], SequentialEntry]:
    seen: dict[tuple[str, str], SequentialEntry] = {}
    for v in results["gates"]:
        if v.get("sequential"):
            seen[(v["benchmark"], v["category"])] = v["sequential"]
    return seen


def _scored_by_overall(seen: Mapping[tuple[str, str], SequentialEntry]) -> set[str]:
    """Benchmarks whose ``overall`` category (every pair of the subgroups) was scored in full:
    a subgroup that stopped early there saved no computation, its pairs were scored anyway."""
    return {b for (b, c), s in seen.items() if c == _OVERALL and s["items_scored"] >= s["population"]}


class SequentialRow(TypedDict):
    """A sequential gate as both reports show it (``sequential_rows``)."""

    benchmark: str
    category: str
    metric: str
    decision: str | None
    n: str
    cs: str
    band: str
    saved: str
    verdict_from: str
    status: str
    note: str


def sequential_rows(results: Results) -> list[SequentialRow]:
    """One row per sequential gate (a verdict with ``sequential``), as both reports show it: the
    decision, the n it was decided at of the category's selected items, the confidence sequence
    there, the band, the items the category saved, and where the verdict comes from."""
    rows: list[SequentialRow] = []
    full = _scored_by_overall(_sequential_categories(results))
    for v in results["gates"]:
        s = v.get("sequential")
        if not s:
            continue
        saved = str(s["items_saved"])
        if v["benchmark"] in full and v["category"] != _OVERALL and s["items_saved"]:
            saved = f"0 ({_OVERALL} scored every item)"
        lo, hi = s.get("band") or [None, None]
        cs = s.get("cs")
        # Once every item is scored, the without-replacement CS has closed on the value itself and
        # decides nothing (the fixed-n verdict does): shown beside "none", a CS inside the band read
        # as a contradiction.
        exhausted = s.get("verdict_from") != "sequential" and s["items_scored"] >= s["population"]
        rows.append(
            {
                "benchmark": v["benchmark"],
                "category": v["category"],
                "metric": v["metric"] + (" (vs baseline)" if v.get("kind") == "regression" else ""),
                # An undecided gate at exhaustion is judged fixed-n: "CONTINUE" beside a CS outside
                # its band read as a run still going.
                "decision": s["decision"] if s.get("verdict_from") == "sequential" else "none (fixed-n)",
                "n": f"{s['n']} of {s['population']}",
                "cs": "- (every item scored)" if exhausted else f"[{cs[0]:.3f}, {cs[1]:.3f}]" if cs else "-",
                "band": f"[{'-inf' if lo is None else format(lo, '.3f')}, {'inf' if hi is None else format(hi, '.3f')}]",
                "saved": saved,
                "verdict_from": s["verdict_from"],
                "status": v["status"],
                "note": s.get("note") or "",
            }
        )
    return rows


def sequential_totals(results: Results) -> str | None:
    """Items scored of those selected over the categories with sequential gates, and the gate
    verdicts their confidence sequences decided, one sentence; None when no gate was sequential. A sentence-pair benchmark's ``overall`` category holds its
    subgroups' pairs: it counts them once (summing the subgroups too counted every pair twice and
    called pairs that ``overall`` scored saved); when ``overall`` stopped early too, the pairs its
    subgroups' own rounds scored may differ from its own, so the count is an upper bound.

    Examples
    --------
    >>> def gate(cat, scored, population):
    ...     return {"benchmark": "crows_pairs", "category": cat,
    ...             "sequential": {"items_scored": scored, "population": population}}
    >>> sequential_totals({"gates": [gate("overall", 100, 100), gate("age", 20, 40)]})
    '100 of 100 selected items scored (100.0 %) in 2 categories with sequential gates; 1 stopped early; 0 of 2 gate verdicts decided sequentially'
    >>> sequential_totals({"gates": [gate("overall", 60, 100), gate("age", 20, 40)]})
    'at most 80 of 100 selected items scored (80.0 %) in 2 categories with sequential gates; 2 stopped early; 0 of 2 gate verdicts decided sequentially'
    """
    seen = _sequential_categories(results)
    if not seen:
        return None
    scored = population = 0
    bound = False
    full = _scored_by_overall(seen)
    for bench in sorted({b for b, _ in seen}):
        cats = {c: s for (b, c), s in seen.items() if b == bench}
        if _OVERALL not in cats:
            scored += sum(s["items_scored"] for s in cats.values())
            population += sum(s["population"] for s in cats.values())
            continue
        whole = cats.pop(_OVERALL)
        population += whole["population"]
        if bench in full or not cats:
            scored += whole["items_scored"]
        else:
            bound = True
            scored += min(
                whole["population"], whole["items_scored"] + sum(s["items_scored"] for s in cats.values())
            )
    early = sum(s["items_scored"] < s["population"] for s in seen.values())
    infos = [v["sequential"] for v in results["gates"] if v.get("sequential")]
    decided = sum(1 for s in infos if s.get("verdict_from") == "sequential")
    return (
        f"{'at most ' if bound else ''}{scored:,} of {population:,} selected items scored "
        f"({100.0 * scored / max(population, 1):.1f} %) in {len(seen)} "
        f"{'category' if len(seen) == 1 else 'categories'} with sequential "
        f"gates; {early} stopped early; {decided} of {len(infos)} "
        f"{'gate verdict' if len(infos) == 1 else 'gate verdicts'} decided sequentially"
    )


def ok_categories(results: Results, bench: str) -> dict[str, CategoryEntry]:
    """``bench``'s categories that were scored (not those whose evaluation failed)."""
    entries = (results.get("benchmarks") or {}).get(bench) or {}
    return {c: e for c, e in entries.items() if e.get("status", "ok") == "ok"}


@dataclass(frozen=True)
class MetricRow:
    """One row of a benchmark's metrics table: a category (its items scored and metrics, or the
    error its evaluation failed with) or one of its aggregates (``pool``: pooled,
    size-weighted, a reporting group)."""

    label: str
    metrics: Mapping[str, MetricEntry]
    n_scored: int | None = None
    error: str | None = None
    pool: bool = False


def metric_rows(results: Results, bench: str) -> list[MetricRow]:
    """``bench``'s metrics table, every category in the document's order, then its aggregates
    (``overall_labels``)."""
    rows = [
        MetricRow(cat, {}, error=e["error"])
        if e.get("status") == "error"
        else MetricRow(cat, e["metrics"], n_scored=e["n_scored"])
        for cat, e in ((results.get("benchmarks") or {}).get(bench) or {}).items()
    ]
    return rows + [
        MetricRow(label, pooled, pool=True) for label, pooled in aggregates(results, bench).items()
    ]


class ExcludedRow(TypedDict):
    """Rows a category left out for one reason: how many, and the first ten ids."""

    category: str
    reason: str
    count: int
    ids: list[str]


def excluded_rows(results: Results, bench: str) -> list[ExcludedRow]:
    """The rows ``bench``'s scored categories left out, one per (category, reason): how many, and
    the first ten ids (results.json holds them all)."""
    return [
        {"category": c, "reason": reason, "count": len(ids), "ids": ids[:10]}
        for c, e in ok_categories(results, bench).items()
        for reason, ids in (e.get("excluded") or {}).items()
    ]


def parameters_text(n: int | None) -> str:
    """A parameter count for a reader: ``134,515,008``, or ``unknown`` where the run could not
    count them (a served model reports none: 0 is recorded).

    Examples
    --------
    >>> parameters_text(134515008), parameters_text(0), parameters_text(None)
    ('134,515,008', 'unknown', 'unknown')
    """
    return f"{n:,}" if n else "unknown"


def rows_text(path: str, rows: int) -> str:
    """A data file's row count for the reports; a script read for its prompt templates and
    answer phrases (MBBQ's ``answer_detection.py``, hashed like the data) has no rows: it says
    so instead of ``0``.

    Examples
    --------
    >>> rows_text("mbbq/data/Age_en.jsonl", 220), rows_text("mbbq/answer_detection.py", 0)
    ('220', "no rows: code (the authors' templates)")
    """
    if str(path).endswith(".py"):
        return "no rows: code (the authors' templates)"
    return str(rows)
