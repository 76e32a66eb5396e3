"""The ``bias audit`` section pytest prints at the end of a run: what the results say, in the
order a reader needs it (why the run is not a plain verdict, the numbers, each gate, the outcome
line and where the files are). It reads the finished run's files only; nothing here decides."""

from __future__ import annotations

from typing import Mapping

from .. import exit_codes
from ..gates.resolution import describe_band, status_word
from .schema import FirstRun, Interval, MetricEntry, Plan, PlanRow, Results, SequentialEntry, as_plan
from .views import (
    aggregates,
    column_groups,
    coverage_lines,
    gate_summary_text,
    modified_files,
    overall_labels,
    resolution_of,
    sensitivity_lines,
    sequential_totals,
    table_metrics,
    truncation_lines,
)


def write_no_selection(tr, keyword: str, known: list[str]) -> None:
    """``-k`` selected no gate: say so, and list every benchmark's categories."""
    tr.section("bias audit")
    tr.write_line(
        f"-k {keyword!r} selects no audit gate. Gate tests are named "
        "test_<benchmark>[<category>-<metric>]; the benchmarks and categories are:"
    )
    for line in known:
        tr.write_line(line)
    from ..run_outcome import decide

    tr.write_line(decide([]).line(), red=True)


def _option(results: Results, key: str):
    return (results.get("options") or {}).get(key)


def write_summary(tr, files, junit_path: str | None) -> None:
    """The run's section from its ``run.finish.RunFiles`` (results document, outcome, paths)."""
    results, outcome = files.results, files.outcome
    tr.section("bias audit")
    for text, colour in notices(results, outcome, moved=bool(files.moved_to)):
        tr.write_line(text, **({colour: True} if colour else {}))
    model = results["model"] or {}
    if model.get("fingerprint"):
        tr.write_line(
            f"model {model.get('name')} ({model['fingerprint'][:19]}…, "
            f"{model.get('dtype')}, {model.get('device')})"
        )
    else:  # stopped before the model loaded
        name = model.get("name") or (results.get("options") or {}).get("model") or "(default)"
        tr.write_line(f"model {name} (not loaded)")
    for line in metric_table(results):
        tr.write_line(line)
    # One compact line per gate; the sentence of a gate that did not pass is printed once, in
    # pytest's FAILURES section (GateFinding), not again here.
    for line in gate_lines(results):
        tr.write_line(line)
    run_errors = results["gate_summary"].get("error", 0)
    if outcome.label == "RUN ERROR" and run_errors:
        tr.write_line(
            f"RUN ERROR: {run_errors} gate(s) have no verdict because a model or data "
            "error stopped their category during the run (messages above); this is not "
            f"a gate failure: exit code {exit_codes.RUN_ERROR}",
            red=True,
        )
    asked = requests_line(results)
    if asked:
        tr.write_line(asked)
    seq = sequential_line(results)
    if seq:
        tr.write_line(seq)
    tr.write_line(f"gates: {gate_summary_text(results) or 'none'}")
    tr.write_line(outcome.line(), green=outcome.passed, red=not outcome.passed, bold=True)
    tr.write_line(f"results: {files.results_path}")
    if files.results_copy:
        tr.write_line(f"         {files.results_copy} (--results-json)")
    tr.write_line(f"report:  {files.report_path}")
    tr.write_line(f"html:    {files.html_path}")
    if junit_path:
        tr.write_line(f"junit:   {junit_path}")


def requests_line(results: Results) -> str | None:
    """What the model was asked, one line: requests after dedupe, answered by the result cache,
    computed; None when no category counted any. A replay of saved outputs computes nothing:
    its backend answers each request from the file, so the line counts the saved outputs it
    replayed instead (``0 distinct, ... 3680 computed`` claimed model work that never happened).

    Examples
    --------
    >>> counts = {"requests": 12, "distinct": 10, "from_cache": 4, "computed": 6}
    >>> doc = {"model": {"kind": "hf"}, "benchmarks": {"bbq": {"Age": {"requests": counts}}}}
    >>> requests_line(doc)
    'requests: 10 distinct, 4 from the result cache, 6 computed'
    >>> doc["model"]["kind"] = "replay"
    >>> requests_line(doc)
    'predictions: 12 saved outputs replayed (no model ran)'
    """
    counts = [c.get("requests") or {} for cats in results["benchmarks"].values() for c in cats.values()]
    if not any(counts):
        return None
    if ((results.get("model") or {}).get("kind")) == "replay":
        replayed = sum(c.get("requests", 0) for c in counts)
        return f"predictions: {replayed:,} saved outputs replayed (no model ran)"
    return (
        f"requests: {sum(c.get('distinct', 0) for c in counts)} distinct, "
        f"{sum(c.get('from_cache', 0) for c in counts)} from the result cache, "
        f"{sum(c.get('computed', 0) for c in counts)} computed"
    )


def sequential_line(results: Results) -> str | None:
    """What sequential mode saved, one line: the items scored over the categories with sequential
    gates, and how many gate verdicts the confidence sequences decided; None without sequential
    gates.

    Examples
    --------
    >>> gate = lambda cat, scored, frm: {"benchmark": "bbq", "category": cat,
    ...     "sequential": {"items_scored": scored, "population": 400, "verdict_from": frm}}
    >>> sequential_line({"gates": [gate("Age", 60, "sequential"), gate("SES", 400, "fixed-n")]})
    'sequential: 460 of 800 selected items scored (57.5 %) in 2 categories with sequential gates; 1 stopped early; 1 of 2 gate verdicts decided sequentially'
    """
    totals = sequential_totals(results)
    return None if totals is None else f"sequential: {totals}"


def notices(results: Results, outcome, moved: bool = False) -> list[tuple[str, str | None]]:
    """``(line, colour)`` of everything that qualifies the verdict, printed before the numbers:
    an interruption, moved files, lenient intervals, modified data, thresholds warnings, partial
    coverage, parse sensitivity and a baseline that is not like for like."""
    out: list[tuple[str, str | None]] = []
    if outcome.label == "INTERRUPTED":
        out.append(
            (
                "INTERRUPTED: this run was stopped before it finished; gates that did not run "
                "are listed as NOT RUN (and as errors in junit.xml)",
                "red",
            )
        )
    if moved:
        out.append((f"RESULTS MOVED: {results['run']['outcome']['reason']}", "red"))
    floors = [v for v in results["gates"] if v.get("cause") == "interval"]
    if floors:
        out.append(
            (
                f"INTERVALS: {len(floors)} gate(s) INSUFFICIENT because the run's intervals "
                f"(--confidence {_option(results, 'confidence')}, --bootstrap-resamples "
                f"{_option(results, 'n_resamples')}) are more lenient than the gates are "
                "signed off at, or rest on too few resamples (messages above)",
                "red",
            )
        )
    modified = modified_files(results)
    if modified:
        out.append(
            (
                f"DATA: {len(modified)} file(s) MODIFIED, not the published release: "
                f"{', '.join(modified)} (--require-published-data makes this an error)",
                "red",
            )
        )
    out += [(f"THRESHOLDS: {w}", "yellow") for w in results["run"].get("thresholds_warnings") or []]
    if results["run"].get("thresholds_origin") == "custom":
        out.append(
            (
                f"THRESHOLDS: custom gates file {results.get('thresholds')} (sha256 "
                f"{results['run'].get('thresholds_sha256', '?')[:12]}…), not the packaged gates",
                "yellow",
            )
        )
    out += [
        (f"COVERAGE: {line}", "red" if "INSUFFICIENT" in line else None) for line in coverage_lines(results)
    ]
    out += [(f"TRUNCATED: {line}", "yellow") for line in truncation_lines(results)]
    out += [(f"PARSING: {line}", "yellow") for line in sensitivity_lines(results)]
    server = (results.get("model") or {}).get("server") or {}
    out += [(f"SERVER: {line}", "yellow") for line in server.get("notices") or []]
    unlike = (results.get("baseline") or {}).get("not_like_for_like") or []
    if unlike:
        out.append((f"BASELINE not like for like: {'; '.join(unlike)}", "yellow"))
    return out


def _duration(seconds: float) -> str:
    """``3 h 05 min``, ``12 min 40 s`` or ``7.2 s``."""
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600 - 30:
        hours, minutes = divmod(round(seconds / 60), 60)
        return f"{hours} h {minutes:02d} min"
    if seconds >= 60 - 0.5:
        minutes, secs = divmod(round(seconds), 60)
        return f"{minutes} min {secs:02d} s"
    return f"{seconds:.1f} s"


def plan_table(plan: Plan) -> list[str]:
    """The plan's rows: per benchmark each category and the benchmark's total, then the total of
    the run (``planning.build_plan``)."""
    head = (
        "items",
        "requests",
        "distinct",
        "fwd tokens",
        "whole fwd",
        "whole/ours",
        "max gen tok",
        "est. time",
        "FLOPs",
    )
    names = [c for b in plan["benchmarks"].values() for c in b["categories"]] + ["total"]
    width = max(12, *(len(n) + 2 for n in names))
    cols = (8, 10, 10, 13, 13, 11, 13, 15, 10)

    def line(label: str, row: PlanRow) -> str:
        est = row["estimate"]
        ours, whole = row["forward_tokens"], row["whole"]["forward_tokens"]
        cells = (
            f"{row['items']:,}",
            f"{row['requests']:,}",
            f"{row['distinct']:,}",
            f"{ours:,}",
            f"{whole:,}",
            f"{whole / ours:.2f}x" if ours else "-",
            f"{row['tokens_to_generate']:,}",
            _duration(est["seconds"]),
            f"{est['flops']:.2e}",
        )
        return f"{label:<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cells, cols))

    out = [f"{'':<{width}}" + "".join(f"{h:>{w}}" for h, w in zip(head, cols))]
    for name, section in plan["benchmarks"].items():
        out.append(name)
        for category, row in section["categories"].items():
            out.append(line(f"  {category}", row))
        if len(section["categories"]) > 1:
            out.append(line("  total", section["total"]))
    if len(plan["benchmarks"]) > 1:
        out.append(line("all benchmarks", plan["total"]))
    return out


def write_plan(tr, plan: Mapping[str, object], path) -> None:
    """The section of a ``--plan`` run: what a run would compute, and no verdict."""
    plan = as_plan(plan)
    tr.section("bias audit plan")
    tr.write_line(
        f"{plan['plan']} (a dry run: requests built and counted with the model's tokenizer, "
        "no weights loaded, no gate judged)",
        bold=True,
    )
    model = plan.get("model") or {}
    if model:
        tr.write_line(
            f"model {model.get('name')}: {model.get('n_parameters', 0):,} parameters (its config; "
            f"weights not loaded), {model.get('dtype')} on {model.get('device')}"
        )
    if plan.get("parameters_source") == "--plan-params":
        tr.write_line(
            f"estimated for {plan['parameters']:,} parameters (--plan-params); token counts "
            f"are {model.get('name')}'s tokenizer's"
        )
    if plan["benchmarks"]:
        for text in plan_totals(plan):
            tr.write_line(text)
    for s in plan.get("skipped") or []:
        tr.write_line(f"not planned: {s['reason']}", yellow=True)
    for e in plan.get("errors") or []:
        tr.write_line(f"ERROR: {e['benchmark']}/{e['category']}: {e['message']}", red=True)
    if plan.get("model_error"):
        tr.write_line(f"ERROR: the model could not be opened: {plan['model_error']}", red=True)
    if plan["benchmarks"]:
        _plan_notes(tr, plan)
    tr.write_line(f"plan:    {path}")
    _plan_outcome(tr, plan)


def _plan_notes(tr, plan: Plan) -> None:
    """What the plan's numbers mean, its own time, and a first real run's estimate."""
    for note in plan["notes"][1:]:
        tr.write_line(note)
    tr.write_line(
        f"this plan took {_duration(plan['seconds_planning'])} of tokenizing and prefix trees "
        f"({_duration(plan['duration_s'])} in all); a run spends about as long on them"
    )
    first = plan.get("first_run")
    if first:
        tr.write_line(first_run_line(first), bold=True)


def first_run_line(first: FirstRun) -> str:
    """The plan's estimate of a first real run here, first-use costs named one by one
    (``planning.first_run``)."""
    parts = "; ".join(f"{name} {'?' if s is None else _duration(s)}" for name, s in first["parts"])
    return (
        f"a first run here: about {_duration(first['seconds'])} in all, at load average "
        f"{first['load']:.1f} on {first['cores']} cores (CPU-bound work takes about "
        f"{first['factor']:.1f}x as long as on idle cores; rerun --plan on a quieter machine for "
        f"less): {parts}"
    )


def _skip_kind(reason: str) -> str:
    """What kept a category out of a plan, in a few words (its full reason is listed above)."""
    if "scorable" in reason:
        return "no scorable row"
    if ": missing " in f": {reason}":
        return "data files missing"
    return "see above"


def _plan_outcome(tr, plan: Plan) -> None:
    """The plan's last line: what it is and its exit code, with the categories it left out."""
    code = plan["exit_status"]
    # Last, so that a plan which left categories out (their data files are absent) does not end
    # on a bare "exit code 0": the count and the categories are on the line a reader sees last.
    skipped = plan.get("skipped") or []
    left_out = ""
    if skipped:
        kinds: dict[str, list[str]] = {}
        for s in skipped:
            kinds.setdefault(_skip_kind(s.get("reason") or ""), []).append(
                f"{s['benchmark']}/{s['category']}"
            )
        n = len(skipped)
        why = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in kinds.items())
        left_out = f"; {n} {'category' if n == 1 else 'categories'} skipped: {why}"
    tr.write_line(
        f"{plan['plan']}; exit code {code}{left_out}",
        bold=True,
        green=code == exit_codes.OK and not skipped,
        yellow=code == exit_codes.OK and bool(skipped),
        red=code != exit_codes.OK,
    )


def plan_totals(plan: Plan) -> list[str]:
    """The plan's table and its totals: generations, tokens fed, time and FLOPs, texts to
    embed."""
    out = plan_table(plan)
    total = plan["total"]
    whole = total["whole"]
    if whole["generation_requests"]:
        out.append(
            f"generations: {total['generations']:,} distinct of {whole['generation_requests']:,} "
            f"requests, at most {total['tokens_to_generate']:,} tokens to generate "
            f"({whole['tokens_to_generate']:,} with every request generated on its own)"
        )
    est = total["estimate"]
    out.append(
        f"every request whole: {whole['forward_tokens']:,} tokens fed, about "
        f"{_duration(est['whole_seconds'])}, {est['whole_flops']:.2e} FLOPs"
    )
    if total.get("texts_to_embed"):
        out.append(
            f"kgquiz also embeds {total['texts_to_embed']:,} texts with its sentence-embedding "
            "model (not counted above)"
        )
    return out


def _interval(ci: Interval | None) -> str:
    lo, hi = ci or (None, None)
    return f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""


def gate_lines(results: Results) -> list[str]:
    """One terminal line per gate verdict: status, test id, value [interval], the interval's
    half-width, n, bound, the band this run could have certified, and mode (a regression gate:
    the baseline value and max_regression); a gate the data left undecided (INCONCLUSIVE, NOT
    DECIDED) gets a second line saying what would decide it. The verdict's sentence is left to
    pytest's FAILURES section, so it is printed once.

    Examples
    --------
    >>> v = {"benchmark": "bbq", "category": "Age", "metric": "diff_bias_ambig", "kind": "threshold",
    ...      "status": "not_decided", "value": 0.02, "ci": [-0.02, 0.06], "n": 300,
    ...      "bounds": {"abs_max": 0.05}, "mode": "ci_detect"}
    >>> for line in gate_lines({"gates": [v]}): print(line)
      NOT DECIDED  test_bbq[Age-diff_bias_ambig]  0.020 [-0.020, 0.060] hw 0.040 n=300  abs_max 0.05  certifiable |x| <= 0.06  mode ci_detect
                   to decide: this run could certify |x| <= 0.06; about 1.8x the items (n ~ 534) would certify the band if the value held
    """
    lines = []
    for v in results["gates"]:
        test = f"test_{v['benchmark']}[{v.get('test_id') or v['category'] + '-' + v['metric']}]"
        value = "-" if v.get("value") is None else f"{v['value']:.3f}"
        n = "" if v.get("n") is None else f" n={v['n']}"
        res = resolution_of(v)
        hw = "" if res["half_width"] is None else f" hw {res['half_width']:.3f}"
        if v.get("kind") == "regression":
            base = (v.get("baseline") or {}).get("value")
            bound = (
                f"baseline {'-' if base is None else format(base, '.3f')} "
                f"max_regression {v.get('max_regression', 0):g}"
            )
        else:
            bound = ", ".join(f"{k} {b:g}" for k, b in v.get("bounds", {}).items())
        if res["certifiable_band"]:
            bound += f"  certifiable {describe_band(res['certifiable_band'])}"
        unlike = "  (not like for like)" if v.get("not_like_for_like") else ""
        lines.append(
            f"  {status_word(v['status']):<12} {test}  {value} {_interval(v.get('ci'))}{hw}{n}  "
            f"{bound}  mode {v.get('mode', 'point')}{_sequential_tag(v.get('sequential'))}{unlike}"
        )
        if res["to_decide"]:
            lines.append(f"  {'':<12} to decide: {res['to_decide']['text']}")
    return lines


def _sequential_tag(s: SequentialEntry | None) -> str:
    """Where a sequential gate's verdict comes from, for its terminal line: a run stopped early
    must not read like a fixed-n one (its value and n are those of the items scored).

    Examples
    --------
    >>> _sequential_tag({"verdict_from": "sequential", "decision": "PASS", "n": 60, "population": 400,
    ...                  "cs": [0.91, 0.99]})
    '  sequential PASS after 60 of 400 items, CS [0.910, 0.990]'
    >>> _sequential_tag({"verdict_from": "fixed-n", "n": 400, "population": 400, "items_scored": 400})
    '  sequential: undecided, fixed-n verdict on 400 of 400 items'
    >>> _sequential_tag(None)
    ''
    """
    if not s:
        return ""
    if s.get("verdict_from") == "sequential":
        cs = s.get("cs")
        where = f", CS [{cs[0]:.3f}, {cs[1]:.3f}]" if cs else ""
        return f"  sequential {s.get('decision')} after {s['n']} of {s['population']} items{where}"
    scored = s.get("items_scored", s.get("n"))
    return f"  sequential: undecided, fixed-n verdict on {scored} of {s['population']} items"


def metric_table(results: Results) -> list[str]:
    """Plain-text table of every metric per category (value and CI), for the terminal; ``-`` where
    a metric is undefined or not computed for that category."""
    lines: list[str] = []
    for bench, all_cats in results["benchmarks"].items():
        cats = {c: d for c, d in all_cats.items() if d.get("status", "ok") == "ok"}
        labels = overall_labels(results, bench)
        width = max([len(c) for c in all_cats] + [len(x) for x in labels] + [len("pooled"), 8])
        level = (results.get("options") or {}).get("confidence") or 0.95
        lines.append(
            f"{bench}  (n = items scored; value [{100 * level:g}% CI]; '-' = undefined or not computed)"
        )
        legend = ((results.get("benchmark_info") or {}).get(bench) or {}).get("table_legend") or []
        lines += [f"  {text}" for text in legend]
        lines += [
            f"  {c:<{width}} ERROR  {d['error']}" for c, d in all_cats.items() if d.get("status") == "error"
        ]
        rows: list[tuple[str, int, Mapping[str, MetricEntry]]] = [
            (c, d["n_scored"], d["metrics"]) for c, d in cats.items()
        ]
        pooled = aggregates(results, bench).get("pooled")
        if pooled:
            rows.append(("pooled", sum(d["n_scored"] for d in cats.values()), pooled))
        # The other aggregates, as report.md lists them (MBBQ's languages and their differences
        # from English; BBQ's name groups): n is the largest of their metrics' n.
        for label, group in aggregates(results, bench).items():
            if label != "pooled":
                rows.append((label, max((m.get("n") or 0 for m in group.values()), default=0), group))
        for names in column_groups(table_metrics(results, bench)):
            lines.append(f"  {'category':<{width}} {'n':>5}  " + "  ".join(f"{n:>24}" for n in names))
            for cat, n, metrics in rows:
                cells = []
                for name in names:
                    m = metrics.get(name)
                    if m is None or m["value"] is None:
                        cells.append(f"{'-':>24}")
                    else:
                        lo, hi = m["ci"]
                        ci = f"[{lo:+.2f},{hi:+.2f}]" if lo is not None else ""
                        cells.append(f"{m['value']:>+8.3f} {ci:>15}")
                lines.append(f"  {cat:<{width}} {n:>5}  " + "  ".join(cells))
    return lines
