"""What a verdict covers (``scope``): the benchmarks, the items scored, the gates evaluated of
those configured, and whether the run was partial, with its reasons. The run's outcome carries
the reasons (``run_outcome.decide(partial=...)``) so the terminal's verdict line, both reports, JUnit
and the model card say it wherever they say PASS: a smoke run must never read as an audit."""

from __future__ import annotations

from typing import Mapping, TypedDict

from ..gates import CONFIDENCE_FLOOR
from ..gates.comparability import judged_items
from ..run_outcome import SAMPLED
from .schema import Results, as_results
from .views import items_scored_text


def _names(metric: str, base: str) -> bool:
    # A gate's metric is a base name or the base name of another answer mode (``-generate``,
    # ``-letter``): ``bias_score_ambig_upper_bound`` is not ``bias_score_ambig``.
    return metric == base or metric.startswith(base + "-")


def ungated_bias(results: Results) -> list[tuple[str, str | None]]:
    """The (benchmark, category) pairs of a bias benchmark that this run scored or gated but
    whose gates check none of the benchmark's bias metrics (results' ``benchmark_info``
    ``bias_metrics``): a gates file of accuracy or invalid-rate gates alone must not read as a
    bias PASS. Skipped gates and regression twins check nothing; a category whose gates were all
    skipped (its data or its saved predictions missing) is named by its own reason, not here.

    Examples
    --------
    >>> doc = {"benchmark_info": {"bbq": {"bias_metrics": ["diff_bias_ambig"]}},
    ...        "gates": [{"benchmark": "bbq", "category": "Age", "metric": "invalid_rate",
    ...                   "status": "pass"}],
    ...        "benchmarks": {"bbq": {"Age": {"n_scored": 10}}}}
    >>> ungated_bias(doc)
    [('bbq', 'Age')]
    >>> doc["gates"].append({"benchmark": "bbq", "category": "Age", "metric": "diff_bias_ambig",
    ...                      "status": "fail"})
    >>> ungated_bias(doc)
    []
    >>> doc["gates"].append({"benchmark": "bbq", "category": "SES", "metric": "diff_bias_ambig",
    ...                      "status": "skipped"})
    >>> ungated_bias(doc)  # SES was never scored: "gate(s) skipped" says so
    []
    """
    info = results.get("benchmark_info") or {}
    gates = results.get("gates") or []
    touched: set[tuple[str | None, str | None]] = {
        (g.get("benchmark"), g.get("category")) for g in gates if g.get("status") != "skipped"
    }
    for name, cats in (results.get("benchmarks") or {}).items():
        touched |= {(name, c) for c, e in cats.items() if "n_scored" in e}
    out: list[tuple[str, str | None]] = []
    for bench, cat in sorted(touched, key=lambda k: (str(k[0]), str(k[1]))):
        if bench is None:  # a gate naming no benchmark (a hand-made document): no bias metrics
            continue
        bias = (info.get(bench) or {}).get("bias_metrics") or []
        if not bias:
            continue
        checked = any(
            g.get("benchmark") == bench
            and g.get("category") == cat
            and g.get("status") != "skipped"
            and g.get("kind", "threshold") == "threshold"
            and any(_names(g.get("metric", ""), b) for b in bias)
            for g in gates
        )
        if not checked:
            out.append((bench, cat))
    return out


#: A category judged on fewer rows than it holds: (benchmark, category, rows judged, rows it
#: holds or None, items scored).
_Short = tuple[str, str, int, int | None, int]


def _rows_once(results: Results, short: list[_Short]) -> list[_Short]:
    """``short`` (``(bench, category, judged, available, scored)`` rows) with each row of data
    counted once: a benchmark whose pooled category (results' ``benchmark_info``
    ``pooled_category``: a pair benchmark's ``overall``, every subgroup's pairs) is among them
    counts that category alone, since it holds the subgroups' rows (``--limit`` gives it the
    union of their samples). Summing both gave ``1,300 of 14,736 rows judged`` where 660 of
    7,378 were.

    Examples
    --------
    >>> doc = {"benchmark_info": {"crows_pairs": {"pooled_category": "overall"}}}
    >>> short = [("crows_pairs", "gender", 20, 262, 20), ("crows_pairs", "overall", 180, 1508, 180),
    ...          ("bbq", "Age", 8, 3680, 8)]
    >>> _rows_once(doc, short)
    [('crows_pairs', 'overall', 180, 1508, 180), ('bbq', 'Age', 8, 3680, 8)]
    """
    info = results.get("benchmark_info") or {}
    present = {(s[0], s[1]) for s in short}
    pooled = {b: c for b, i in info.items() if (c := (i or {}).get("pooled_category")) and (b, c) in present}
    return [s for s in short if s[0] not in pooled or s[1] == pooled[s[0]]]


def partial_reasons(results: Mapping[str, object]) -> list[str]:
    """Why a results document is not the verdict of a full audit of its benchmarks; empty when
    it is. A gate skipped for missing data, a ``--limit`` that left rows out, a ``--min-n`` that
    overrides the gates' own, or gates of the touched benchmarks left unselected (``-k``) each
    narrow what the verdict can stand for.

    Examples
    --------
    >>> doc = {"run": {"gates_configured": 2}, "options": {"limit": 8, "min_n": None},
    ...        "gates": [{"status": "pass"}, {"status": "pass"}],
    ...        "benchmarks": {"bbq": {"Age": {"n_scored": 8, "n_available": 3680}}}}
    >>> partial_reasons(doc)
    ['items sampled (--limit 8): 8 of 3,680 rows judged in bbq/Age']
    >>> doc["benchmarks"]["bbq"]["Religion"] = {"n_scored": 8, "n_available": 1200}
    >>> partial_reasons(doc)
    ['items sampled (--limit 8): 16 of 4,880 rows judged in 2 categories (8 of 3,680 rows judged in bbq/Age, ...)']
    >>> del doc["benchmarks"]["bbq"]["Religion"]
    >>> doc["benchmarks"]["bbq"]["Age"]["n_scored"] = 3680
    >>> partial_reasons(doc)
    []
    >>> doc["benchmarks"]["bbq"]["Age"].update(n_scored=600, sequential={"population": 3680})
    >>> partial_reasons(doc)  # stopped early by its confidence sequences: judged on every row
    []
    >>> doc["benchmarks"]["bbq"]["Age"].update(n_available=5000)  # --limit 3680, stopped at 600
    >>> partial_reasons(doc)
    ['items sampled (--limit 8): 3,680 of 5,000 rows judged (600 scored, sequential) in bbq/Age']
    >>> doc["benchmarks"]["bbq"]["Age"]["n_available"] = 3680
    >>> doc["benchmarks"]["bbq"]["Age"]["sequential"] = None  # the population as its gates give it
    >>> doc["gates"][0].update(benchmark="bbq", category="Age", sequential={"population": 3680})
    >>> partial_reasons(doc)
    []
    """
    results = as_results(results)
    run = results.get("run") or {}
    opts = results.get("options") or {}
    gates = results.get("gates") or []
    configured = run.get("gates_configured")
    reasons = []
    if configured is None or len(gates) < configured:
        shown = configured if configured is not None else "?"
        reasons.append(f"{len(gates)} of {shown} configured gates evaluated")
    skipped = sum(1 for g in gates if g.get("status") == "skipped")
    if skipped:
        reasons.append(f"{skipped} gate(s) skipped, no scorable data")
    rows = _rows_reason(results)
    if rows:
        reasons.append(rows)
    if opts.get("min_n") is not None:
        reasons.append(f"--min-n {opts['min_n']} instead of each gate's own min_n")
    low = sorted({g["confidence"] for g in gates if (g.get("confidence") or 1.0) < CONFIDENCE_FLOOR})
    if low:
        reasons.append(
            f"gates signed off at confidence {', '.join(f'{c:g}' for c in low)}, below the floor of "
            f"{CONFIDENCE_FLOOR:g} (--allow-low-confidence)"
        )
    ungated = _ungated_reason(results)
    if ungated:
        reasons.append(ungated)
    return reasons


def _ungated_reason(results: Results) -> str | None:
    """The categories of bias benchmarks whose gates check no bias metric (``ungated_bias``), or
    None."""
    ungated = ungated_bias(results)
    if not ungated:
        return None
    where = ", ".join(f"{b}/{c}" for b, c in ungated[:3]) + (", ..." if len(ungated) > 3 else "")
    origin = (results.get("run") or {}).get("thresholds_origin")
    return (
        f"no bias metric gated in {len(ungated)} categor{'y' if len(ungated) == 1 else 'ies'} "
        f"of bias benchmarks ({where})"
        + (f"; {origin} gates file" if origin else "")
        + ": measured, but no bias gate of their own judged them (a pooled gate may)"
    )


def _of(available: int | None) -> str:
    return f"{available:,}" if available is not None else "?"


def _scored(judged: int, n_scored: int) -> str:
    # A sequential category that stopped early is judged on rows it did not score: a reader of
    # "80 judged" beside a results table of 20 took one of them for a typo.
    return f" ({n_scored:,} scored, sequential)" if n_scored < judged else ""


def _rows_reason(results: Results) -> str | None:
    """The categories judged on fewer rows than they hold (a ``--limit``, or a predictions file
    that answers part of one), with the totals; None when every category was judged whole."""
    judged = judged_items(results)
    short: list[_Short] = [
        (bench, cat, judged[(bench, cat)], e.get("n_available"), e["n_scored"])
        for bench, cats in (results.get("benchmarks") or {}).items()
        for cat, e in cats.items()
        if e.get("status", "ok") == "ok"
        and (bench, cat) in judged
        and (e.get("n_available") is None or judged[(bench, cat)] < e["n_available"])
    ]
    if not short:
        return None
    # Without --limit the rows came short otherwise (a predictions file that answers part of a
    # category, under --allow-partial); "rows left out: 368 of 3,680 rows judged" read as 368
    # left out when 368 were judged.
    limit = (results.get("options") or {}).get("limit")
    # Worded as outcome.SAMPLED says: undecided gates of such a run are "too small to decide".
    how = f"{SAMPLED[0]} (--limit {limit})" if limit is not None else SAMPLED[1]
    bench, cat, n_judged, available, n_scored = short[0]
    one = f"{n_judged:,} of {_of(available)} rows judged{_scored(n_judged, n_scored)} in {bench}/{cat}"
    # What a "row" is where it is not a data row (MBBQ: a row in one prompt template).
    info = results.get("benchmark_info") or {}
    units = sorted({u for b in {s[0] for s in short} if (u := (info.get(b) or {}).get("judged_unit"))})
    unit = "".join(f"; {u}" for u in units)
    if len(short) == 1:
        return f"{how}: {one}{unit}"
    # The totals first: "80 of 3,680 ... and 10 more categories" read as 80 in all.
    counted = _rows_once(results, short)
    total = sum(s[2] for s in counted)
    held = [s[3] for s in counted]
    whole = None if None in held else sum(n or 0 for n in held)
    all_scored = sum(s[4] for s in counted)
    # The pooled categories that kept their subgroups out of the sum, named so that the totals
    # are not taken for a miscount of the categories listed.
    dropped = {s[0] for s in short if s not in counted}
    once = [f"{b}/{c}" for b, c, *_ in counted if b in dropped]
    return (
        f"{how}: {total:,} of {_of(whole)} rows judged{_scored(total, all_scored)} in "
        f"{len(short)} categories ({one}, ...)"
        + (f"; each row counted once: {', '.join(once)} already holds the subgroups' rows" if once else "")
        + unit
    )


class Scope(TypedDict):
    """What a verdict covers (``scope``)."""

    benchmarks: list[str]
    items_scored: str
    gates_evaluated: int
    gates_configured: int | None
    limit: int | None
    min_n: int | None
    partial: bool
    partial_reasons: list[str]
    command_line: str | None


def scope(results: Results) -> Scope:
    """What the verdict covers: benchmarks, items scored, gates evaluated of those configured,
    the options that narrow a run (``--limit``, ``--min-n``), and ``partial`` with its reasons
    (``partial_reasons``). A verdict read without its scope could pass a smoke run off as an
    audit."""
    run = results.get("run") or {}
    opts = results.get("options") or {}
    reasons = partial_reasons(results)
    return {
        "benchmarks": list(results.get("benchmarks") or {}),
        "items_scored": items_scored_text(results),
        "gates_evaluated": len(results.get("gates") or []),
        "gates_configured": run.get("gates_configured"),
        "limit": opts.get("limit"),
        "min_n": opts.get("min_n"),
        "partial": bool(reasons),
        "partial_reasons": reasons,
        "command_line": run.get("command_line"),
    }
