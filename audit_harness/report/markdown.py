"""A Markdown compliance summary rendered from a results document (results.json), so the report a
reviewer reads and the machine-readable record can never disagree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from ..compliance.mapping import RegulatoryMapping
from ..gates.resolution import status_word
from ..redact import map_strings
from .regulatory import (
    MappingView,
    clause_summary,
    limitations_view,
    mapping_view,
    meta_rows,
    signature,
    verdict_line,
)
from .results import ResultsDocument, read_text
from .schema import BaselineSummary, GateEntry, MetricEntry, Results, as_results
from .verdict import overall_verdict
from .views import (
    INVALID_FLAG,
    column_groups,
    coverage_lines,
    endpoint_lines,
    excluded_rows,
    gate_summary_text,
    items_scored_text,
    metric_names_of,
    metric_rows,
    modified_files,
    ok_categories,
    parameters_text,
    resolution_of,
    resolution_text,
    rows_text,
    sensitivity_rows,
    sequential_rows,
    sequential_totals,
    table_metrics,
    truncation_lines,
)


def _fmt(metric: MetricEntry | None) -> str:
    if metric is None:
        return "-"  # not computed for this category (categories may differ in metrics)
    if metric["value"] is None:
        return f"undefined ({metric['reason']})" if metric.get("reason") else "undefined"
    lo, hi = metric["ci"]
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    clusters = f" ({metric['clusters']} templates)" if metric.get("clusters") is not None else ""
    return f"{metric['value']:.3f}{ci}{clusters}"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


#: What makes text from the user or the model active in Markdown, and its inert form: raw HTML
#: (``<script>``, ``<img onerror=...>``, autolinks ``<javascript:...>``) as ``&lt;``; link and image
#: syntax (``[x](javascript:...)``, ``[x]: url``) with escaped brackets; a backslash doubled so
#: the text cannot escape the escapes; a ``javascript:`` scheme with an entity colon.
_ACTIVE = re.compile(r"[\\<\[\]]|(?i:javascript|vbscript):")


def _inert(match: re.Match) -> str:
    s = match.group(0)
    return {"\\": "\\\\", "<": "&lt;", "[": "\\[", "]": "\\]"}.get(s) or s[:-1] + "&#58;"


def md_text(text: str) -> str:
    """``text`` (from the user or the model: audit-meta values, model and category names,
    messages, generated text) inert in Markdown: no raw HTML, no link, no image survives, and it
    reads the same once rendered.

    Examples
    --------
    >>> md_text("<script>alert(1)</script> [x](javascript:alert(1))")
    '&lt;script>alert(1)&lt;/script> \\\\[x\\\\](javascript&#58;alert(1))'
    """
    return _ACTIVE.sub(_inert, text)


def inert_results(results: Mapping[str, object]) -> Results:
    """``results`` with every string in it ``md_text``-escaped, rendered from in one place so no
    field of the document (new ones included) reaches report.md active; a ``ResultsDocument``
    keeps its folder (the signature is read from it)."""
    doc = map_strings(dict(results), md_text)
    if isinstance(results, ResultsDocument):
        inert = ResultsDocument(doc, results.path)
        inert.being_signed = results.being_signed
        return as_results(inert)
    return as_results(doc)


def _cell(text: object) -> str:
    """A value safe inside a Markdown table cell (pipes escaped, newlines shown as \\n)."""
    return str(text).replace("|", "\\|").replace("\n", "\\n")


def audited_system(results: Results) -> list[str]:
    """The ``--audit-meta`` table (or a line saying none was given), before the verdict."""
    rows = meta_rows(results)
    if not rows:
        return ["Audited system: not described (no `--audit-meta FILE` given).", ""]
    return ["## Audited system", "", "| | |", "|---|---|", *[f"| {k} | {_cell(v)} |" for k, v in rows], ""]


def sequential_section(results: Results) -> list[str]:
    """The "Sequential gates" section (empty when no gate was sequential)."""
    rows = sequential_rows(results)
    if not rows:
        return []
    out = [
        "## Sequential gates",
        "",
        f"{sequential_totals(results)}. A gate is decided PASS when its anytime-valid confidence "
        "sequence (CS) lies inside its band, FAIL when outside; a category stops once all its gates "
        "are decided, else every item is scored and the fixed-n verdict applies (docs/gates.md).",
        "",
        "| benchmark | category | metric | sequential decision | items scored then | CS there | band | "
        "items saved | verdict | verdict from | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['benchmark']} | {r['category']} | {r['metric']} | {r['decision']} | {r['n']} | "
            f"{r['cs']} | {r['band']} | {r['saved']} | {status_word(r['status'])} | {r['verdict_from']} | "
            f"{_cell(r['note'])} |"
        )
    return out


def regulatory_section(view: MappingView) -> list[str]:
    """The "Regulatory mapping" section: per clause its rows, each with the gates it covers and
    their verdicts (``regulatory.mapping_view``)."""
    out = [
        "## Regulatory mapping",
        "",
        f"{view['note']} A row marked *evidence* gives records the clause asks for; *context* "
        "informs it without meeting it. The titles paraphrase the texts: read the texts themselves.",
    ]
    for clause in view["clauses"]:
        out += ["", f"### {clause['heading']}", "", clause["title"], "", f"**{clause_summary(clause)}**", ""]
        for row in clause["rows"]:
            out.append(f"- *{row['kind']}* ({row['scope']}): {row['evidence']}")
            out.append(f"  - does not cover: {row['not_covered']}")
            if not row["groups"]:
                out.append("  - gates: none in this run")
            for group in row["groups"]:
                out.append(f"  - gates: {_cell(verdict_line(group))}")
    return out


def limitations_section(results: Results, bench: str, mapping: RegulatoryMapping) -> list[str]:
    """A benchmark's "Limitations": what it does not show, its data licence, its contamination
    status (``regulatory.limitations_view``)."""
    lim = limitations_view(results, bench, mapping)
    out = [f"### {bench}: limitations", ""]
    if lim["does_not_show"]:
        out += ["What this does not show:", ""] + [f"- {x}" for x in lim["does_not_show"]] + [""]
    out += [f"- data licence: {x}" for x in lim["licences"]]
    if lim["licence_note"]:
        out.append(f"- licence note: {lim['licence_note']}")
    source = lim["published_source"]
    out.append(
        f"- contamination: {lim['contamination_text']}" + (f" (publication date: {source})" if source else "")
    )
    return out


def _origin(origin: str | None) -> str:
    """How a run's gates file compares with the packaged one (results' ``run.thresholds_origin``)."""
    if origin == "custom":
        return ", **custom: not the packaged gates**"
    return ", the packaged gates" if origin == "packaged" else ""


def render_markdown(results: Mapping[str, object]) -> str:
    """The report as Markdown text: provenance, gate verdicts, metrics per category with
    intervals, exclusions. Pure function of ``results`` (see ``report.results.build_results``);
    every string of it is made inert first (``md_text``), so nothing the user or the model wrote
    renders as HTML or a link."""
    results = inert_results(results)
    model = results.get("model") or {}
    out = [
        f"# Bias audit report: {model.get('name', '?')}",
        "",
        f"**Signature:** {md_text(signature(results)[1])}",  # the signer's name is user text
        "",
        *audited_system(results),
        *verdict_section(results),
        *run_section(results),
        "",
        *gates_section(results),
    ]
    view = mapping_view(results)
    seq = sequential_section(results)
    if seq:
        out += ["", *seq]
    out += ["", *regulatory_section(view)]
    for bench in results["benchmarks"]:
        out += metrics_section(results, bench)
        out += ["", *limitations_section(results, bench, view["mapping"])]
    out += sensitivity_section(results)
    out += protocol_section(results)
    out += data_section(results)
    return "\n".join(out)


def verdict_section(results: Results) -> list[str]:
    """The verdict line and what keeps the run from a plain verdict: an interruption, data that
    is not the published release, thresholds-file warnings, saved predictions, failed
    categories."""
    verdict = overall_verdict(results)
    model = results.get("model") or {}
    out = [
        f"**Verdict: {verdict.shown_label}** ({verdict.reason}; exit code "
        f"{'?' if verdict.exit_code is None else verdict.exit_code})",
        "",
    ]
    if verdict.label == "INTERRUPTED":
        out += [
            "> **INTERRUPTED RUN.** The run was stopped (Ctrl-C) before every selected gate "
            "ran: the numbers below are partial, and the gates that did not run are listed "
            "as NOT RUN. Not a release decision.",
            "",
        ]
    modified = modified_files(results)
    if modified:
        out += [
            f"> **DATA: {len(modified)} file(s) are not the published release** "
            f"({', '.join(modified)}): these numbers are not comparable with the papers'. "
            "See Data files below.",
            "",
        ]
    for warning in results.get("run", {}).get("thresholds_warnings") or []:
        out += [f"> **Thresholds file:** {warning}", ""]
    covered = coverage_lines(results)
    if covered:
        out += (
            [f"> **Scored from saved predictions** (`{(model.get('source') or '?')}`):", ">"]
            + [f"> - {x}" for x in covered]
            + [""]
        )
    cut = truncation_lines(results)
    if cut:
        out += (
            ["> **Prompts truncated to the model's context window** (as lm-evaluation-harness does):", ">"]
            + [f"> - {md_text(x)}" for x in cut]
            + [""]
        )
    if results.get("errors"):
        out += [
            f"> **{len(results['errors'])} category evaluation(s) failed** (ERROR verdicts "
            "below, with the message): their gates have no value.",
            "",
        ]
    return out


def run_section(results: Results) -> list[str]:
    """The run's provenance, one bullet each: run, suite, model (and server endpoints), items
    scored, gates file and the command line."""
    model = results.get("model") or {}
    opts = results["options"]
    summary = gate_summary_text(results) or "no gates"
    run = results.get("run", {})
    suite = run.get("suite", {})
    commit = suite.get("git_commit", "?")
    dirty = " (uncommitted changes)" if suite.get("git_dirty") else ""
    return [
        f"- run: `{results['run_id']}` ({results['created']}); status **{run.get('status', '?')}**; "
        f"duration {run.get('duration_s', '?')} s",
        f"- suite: bias-audit {suite.get('version', '?')}, commit `{commit}`{dirty}",
        f"- model: `{model.get('source', '?')}`; weights `{model.get('fingerprint', '?')}`; "
        f"{model.get('dtype', '?')} on {model.get('device', '?')}; {parameters_text(model.get('n_parameters'))} parameters",
        *[f"- server endpoint {line}" for line in endpoint_lines(model)],
        *[f"- {b} read by {read_text(e)}" for b, e in (results.get("reads") or {}).items()],
        f"- items scored: {items_scored_text(results)} (seed {opts.get('seed')}); intervals: "
        f"{opts.get('confidence')} confidence, {opts.get('n_resamples')} bootstrap resamples",
        f"- gates ({results['thresholds']}, sha256 `{results.get('run', {}).get('thresholds_sha256', '?')[:16]}…`"
        f"{_origin(run.get('thresholds_origin'))}): "
        f"**{summary}**; {len(results['gates'])} evaluated of "
        f"{results.get('run', {}).get('gates_configured', '?')} configured for "
        f"{', '.join(results['benchmarks'])}",
        f"- command line (run from `{run.get('working_directory', '?')}`): "
        f"`{run.get('command_line') or 'pytest ' + ' '.join(run.get('invocation', []))}`",
    ]


def gates_section(results: Results) -> list[str]:
    """The "Gates" section: one row per verdict, the messages of those with no verdict, the
    modes' rules, the baseline of regression gates and the skipped gates."""
    out = [
        "## Gates",
        "",
        "| benchmark | category | metric | value [CI] | n | templates | bound | resolution | mode | "
        "min_n | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for v in results["gates"]:
        if v["status"] in ("error", "not run", "insufficient", "inconclusive", "not_decided"):
            todo = (resolution_of(v)["to_decide"] or {}).get("text")
            notes.append(
                f"- {status_word(v['status'])}: {v['message']}"
                + (f". **To decide it:** {todo}." if todo else "")
            )
        out.append(_gate_row(v))
    if notes:
        out += ["", *notes]
    from ..gates import MODE_RULES

    modes = sorted({mode for v in results["gates"] if (mode := v.get("mode"))})
    if modes:
        out += ["", "Modes: " + "; ".join(f"`{m}`: {MODE_RULES.get(m, '?')}" for m in modes) + "."]
    out += [
        "",
        "Resolution: `hw` is the interval's half-width, (high - low) / 2; `certifiable` the smallest "
        "band of the gate's kind that this run's interval lies inside, i.e. the tightest band it could "
        'have certified (docs/gates.md, "What a gate can resolve").',
    ]
    out += _baseline_lines(results.get("baseline"))
    skipped = [v for v in results["gates"] if v["status"] == "skipped"]
    if skipped:
        out += [
            "",
            "Skipped gates (their data is missing or has no scorable row; a skipped gate is not a pass):",
            "",
        ]
        out += [f"- {v['benchmark']}/{v['category']}/{v['metric']}: {v['message']}" for v in skipped]
    return out


def _gate_row(v: GateEntry) -> str:
    """A verdict's row of the gates table."""
    value = (
        "not evaluated"
        if v["status"] == "skipped"
        else "undefined"
        if v["value"] is None
        else f"{v['value']:.3f}"
    )
    if v["value"] is not None and v["ci"][0] is not None:
        value += f" [{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]"
    if v["status"] in ("error", "not run"):
        value = "-"
    bounds = ", ".join(f"{k} {b:g}" for k, b in v["bounds"].items())
    if v.get("kind") == "regression":
        base = (v.get("baseline") or {}).get("value")
        bounds = (
            f"vs baseline {'undefined' if base is None else format(base, '.3f')}: "
            f"max_regression {v.get('max_regression', 0):g} ({bounds})"
        )
    clusters = v.get("clusters") if v.get("clusters") is not None else "-"
    n = v["n"] if v["n"] is not None else "-"
    metric = v["metric"] + (" (vs baseline)" if v.get("kind") == "regression" else "")
    if v.get("not_like_for_like"):
        metric += " (**not like for like**)"
    return (
        f"| {v['benchmark']} | {v['category']} | {metric} | {value} | {n} | "
        f"{clusters} | {bounds} | {_cell(resolution_text(v))} | {v.get('mode', v.get('basis', '?'))} | "
        f"{v.get('min_n', '-')} | **{status_word(v['status'])}** |"
    )


def _baseline_lines(baseline: BaselineSummary | None) -> list[str]:
    """What regression gates compare with, and why the baseline is not like for like."""
    if not baseline:
        return []
    out = [
        "",
        f"Regression gates compare with baseline run `{baseline.get('run_id')}` (model "
        f"{baseline.get('model')}, `{baseline.get('path')}`, sha256 "
        f"`{baseline.get('sha256')}`): each fails when the whole new "
        "interval is worse than the baseline value by more than its max_regression.",
    ]
    unlike = baseline.get("not_like_for_like") or []
    if unlike:
        out += [
            "",
            "**The baseline is not like for like**, so a regression gate may reflect the "
            "set-up rather than the model:",
            "",
        ] + [f"- {x}" for x in unlike]
    return out


def metrics_section(results: Results, bench: str) -> list[str]:
    """A benchmark's "metrics per category": its tables (at most ``TABLE_COLUMNS`` metrics
    each, every category and aggregate a row) and the rows left out."""
    names = table_metrics(results, bench)
    every = metric_names_of(ok_categories(results, bench))
    more = (
        ""
        if len(names) == len(every)
        else f" ({len(every) - len(names)} further metrics per category in results.json)"
    )
    title = ((results.get("benchmark_info") or {}).get(bench) or {}).get("title") or bench
    # As report.html heads it: the title (a declared dataset's from its declaration), then the name.
    named = f"{title} (`{bench}`)" if title != bench else bench
    out = ["", f"## {named}: metrics per category{more}"]
    rows = metric_rows(results, bench)
    for group in column_groups(names):
        out += ["", "| category | items | " + " | ".join(group) + " |", "|---|---|" + "---|" * len(group)]
        for row in rows:
            if row.error is not None:
                out.append(
                    f"| {row.label} | - | **ERROR**: {_cell(row.error)} |" + " |" * max(len(group) - 1, 0)
                )
            elif row.pool:
                out.append(
                    f"| *{row.label}* | | " + " | ".join(_fmt(row.metrics.get(n)) for n in group) + " |"
                )
            else:
                out.append(
                    f"| {row.label} | {row.n_scored} | "
                    + " | ".join(_fmt(row.metrics.get(n)) for n in group)
                    + " |"
                )
    excluded = excluded_rows(results, bench)
    if excluded:
        out += [
            "",
            "Rows left out, of scoring or of a metric, as each reason says (ids in results.json):",
            "",
        ]
        out += [f"- {x['category']}: {x['count']} ({x['reason']})" for x in excluded]
    return out


def sensitivity_section(results: Results) -> list[str]:
    """The "Parse sensitivity" section (empty where nothing was parsed from text)."""
    sens = sensitivity_rows(results)
    if not sens:
        return []
    out = [
        "",
        "## Parse sensitivity",
        "",
        "Generated answers are read under one parsing profile and every metric again under "
        "the other; a category is flagged (**!**) when a gate's verdict differs between "
        f"them or an invalid rate exceeds {INVALID_FLAG:.0%}.",
        "",
        "| benchmark | category | profile / other | gates that change verdict | invalid rate "
        "(profile / other) | flag |",
        "|---|---|---|---|---|---|",
    ]
    for r in sens:
        changed = "; ".join(f"{t}: {a.upper()} -> {b.upper()}" for t, a, b in r["differs"]) or "none"
        rates = "; ".join(f"{n} {_num(a)} / {_num(b)}" for n, (a, b) in r["rates"].items()) or "-"
        out.append(
            f"| {r['benchmark']} | {r['category']} | {r['answer_parsing']} / {r['other']} | "
            f"{_cell(changed)} | {rates} | {'**!**' if r['flagged'] else ''} |"
        )
    return out


def protocol_section(results: Results) -> list[str]:
    """Each benchmark's protocol, one bullet per key (whitespace that matters shown quoted)."""
    out = []
    for bench, protocol in results.get("protocols", {}).items():
        out += ["", f"## {bench}: protocol", ""]
        for key, value in protocol.items():
            if isinstance(value, (list, tuple)):
                value = "; ".join(f"`{x!r}`" for x in value)
            elif isinstance(value, str) and ("\n" in value or value != value.strip() or not value):
                value = f"`{value!r}`"  # whitespace that matters (a delimiter, a template)
            out.append(f"- {key}: {value}")
    return out


def data_section(results: Results) -> list[str]:
    """The data files (rows, sha256, release status) and the library versions."""
    out = ["", "## Data files", "", "| file | rows | sha256 | release |", "|---|---|---|---|"]
    out += [
        f"| {p} | {rows_text(p, d['rows'])} | `{d['sha256'][:16]}…` | {d.get('status', '?')} |"
        for p, d in sorted(results["data_files"].items())
    ]
    libs = results["environment"]["libraries"]
    out += ["", "Libraries: " + ", ".join(f"{k} {v}" for k, v in libs.items() if v), ""]
    return out


def write_markdown(path: Path, results: Mapping[str, object]) -> Path:
    """Write ``render_markdown(results)`` to ``path``; returns the path."""
    path.write_text(render_markdown(results), encoding="utf-8")
    return path
