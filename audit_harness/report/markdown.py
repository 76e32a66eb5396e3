"""A Markdown compliance summary rendered from a results document (results.json), so the report a
reviewer reads and the machine-readable record can never disagree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from ..compliance.mapping import RegulatoryMapping
from .regulatory import (
    clause_summary,
    limitations_view,
    mapping_view,
    meta_rows,
    signature,
    verdict_line,
)
from .results import (
    INVALID_FLAG,
    ResultsDocument,
    coverage_lines,
    items_scored_text,
    metric_names_of,
    overall_labels,
    sensitivity_rows,
)
from .verdict import overall_verdict


def _fmt(metric: Mapping[str, Any] | None) -> str:
    if metric is None:
        return "-"  # not computed for this category (categories may differ in metrics)
    if metric["value"] is None:
        return f"undefined ({metric['reason']})" if metric.get("reason") else "undefined"
    lo, hi = metric["ci"]
    ci = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    clusters = f" ({metric['clusters']} templates)" if metric.get("clusters") is not None else ""
    return f"{metric['value']:.3f}{ci}{clusters}"


def _num(x: Any) -> str:
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


def _inert_doc(value: Any) -> Any:
    if isinstance(value, str):
        return md_text(value)
    if isinstance(value, Mapping):
        return {_inert_doc(k): _inert_doc(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_inert_doc(v) for v in value)
    return value


def inert_results(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """``results`` with every string in it ``md_text``-escaped, rendered from in one place so no
    field of the document (new ones included) reaches report.md active; a ``ResultsDocument``
    keeps its folder (the signature is read from it)."""
    doc = _inert_doc(dict(results))
    if isinstance(results, ResultsDocument):
        inert = ResultsDocument(doc, results.path)
        inert.being_signed = results.being_signed
        return inert
    return doc


def _cell(text: Any) -> str:
    """A value safe inside a Markdown table cell (pipes escaped, newlines shown as \\n)."""
    return str(text).replace("|", "\\|").replace("\n", "\\n")


def modified_files(results: Mapping[str, Any]) -> list[str]:
    """Data files of ``results`` whose sha256 is not the pinned published one."""
    return sorted(
        p for p, d in results.get("data_files", {}).items() if str(d.get("status", "")).startswith("MODIFIED")
    )


def endpoint_lines(model: Mapping[str, Any]) -> list[str]:
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


def audited_system(results: Mapping[str, Any]) -> list[str]:
    """The ``--audit-meta`` table (or a line saying none was given), before the verdict."""
    rows = meta_rows(results)
    if not rows:
        return ["Audited system: not described (no `--audit-meta FILE` given).", ""]
    return ["## Audited system", "", "| | |", "|---|---|", *[f"| {k} | {_cell(v)} |" for k, v in rows], ""]


#: The category of a sentence-pair benchmark that holds every pair of its subgroups.
_OVERALL = "overall"


def _sequential_categories(results: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for v in results["gates"]:
        if v.get("sequential"):
            seen[(v["benchmark"], v["category"])] = v["sequential"]
    return seen


def _scored_by_overall(seen: Mapping[tuple[str, str], Mapping[str, Any]]) -> set[str]:
    """Benchmarks whose ``overall`` category (every pair of the subgroups) was scored in full:
    a subgroup that stopped early there saved no computation, its pairs were scored anyway."""
    return {b for (b, c), s in seen.items() if c == _OVERALL and s["items_scored"] >= s["population"]}


def sequential_rows(results: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row per sequential gate (a verdict with ``sequential``), as both reports show it: the
    decision, the n it was decided at of the category's selected items, the confidence sequence
    there, the band, the items the category saved, and where the verdict comes from."""
    rows = []
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


def sequential_totals(results: Mapping[str, Any]) -> str | None:
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


def sequential_section(results: Mapping[str, Any]) -> list[str]:
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
            f"{r['cs']} | {r['band']} | {r['saved']} | {r['status'].upper()} | {r['verdict_from']} | "
            f"{_cell(r['note'])} |"
        )
    return out


def regulatory_section(view: Mapping[str, Any]) -> list[str]:
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


def limitations_section(results: Mapping[str, Any], bench: str, mapping: RegulatoryMapping) -> list[str]:
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


def render_markdown(results: Mapping[str, Any]) -> str:
    """The report as Markdown text: provenance, gate verdicts, metrics per category with
    intervals, exclusions. Pure function of ``results`` (see ``report.results.build_results``);
    every string of it is made inert first (``md_text``), so nothing the user or the model wrote
    renders as HTML or a link."""
    results = inert_results(results)
    model = results.get("model") or {}
    opts = results["options"]
    summary = ", ".join(f"{n} {s}" for s, n in sorted(results["gate_summary"].items())) or "no gates"
    run = results.get("run", {})
    suite = run.get("suite", {})
    verdict = overall_verdict(results)
    out = [
        f"# Bias audit report: {model.get('name', '?')}",
        "",
        f"**Signature:** {md_text(signature(results)[1])}",  # the signer's name is user text
        "",
        *audited_system(results),
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
    for warning in run.get("thresholds_warnings") or []:
        out += [f"> **Thresholds file:** {warning}", ""]
    covered = coverage_lines(results)
    if covered:
        out += (
            [f"> **Scored from saved predictions** (`{(model.get('source') or '?')}`):", ">"]
            + [f"> - {x}" for x in covered]
            + [""]
        )
    if results.get("errors"):
        out += [
            f"> **{len(results['errors'])} category evaluation(s) failed** (ERROR verdicts "
            "below, with the message): their gates have no value.",
            "",
        ]
    commit = suite.get("git_commit", "?")
    dirty = " (uncommitted changes)" if suite.get("git_dirty") else ""
    out += [
        f"- run: `{results['run_id']}` ({results['created']}); status **{run.get('status', '?')}**; "
        f"duration {run.get('duration_s', '?')} s",
        f"- suite: bias-audit {suite.get('version', '?')}, commit `{commit}`{dirty}",
        f"- model: `{model.get('source', '?')}`; weights `{model.get('fingerprint', '?')}`; "
        f"{model.get('dtype', '?')} on {model.get('device', '?')}; {model.get('n_parameters', '?')} parameters",
        *[f"- server endpoint {line}" for line in endpoint_lines(model)],
        f"- items scored: {items_scored_text(results)} (seed {opts.get('seed')}); intervals: "
        f"{opts.get('confidence')} confidence, {opts.get('n_resamples')} bootstrap resamples",
        f"- gates ({results['thresholds']}, sha256 `{results.get('run', {}).get('thresholds_sha256', '?')[:16]}…`"
        f"{_origin(run.get('thresholds_origin'))}): "
        f"**{summary}**; {len(results['gates'])} evaluated of "
        f"{results.get('run', {}).get('gates_configured', '?')} configured for "
        f"{', '.join(results['benchmarks'])}",
        f"- command line (run from `{run.get('working_directory', '?')}`): "
        f"`{run.get('command_line') or 'pytest ' + ' '.join(run.get('invocation', []))}`",
        "",
        "## Gates",
        "",
        "| benchmark | category | metric | value [CI] | n | templates | bound | mode | min_n | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for v in results["gates"]:
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
            notes.append(f"- {v['status'].upper()}: {v['message']}")
        elif v["status"] in ("insufficient", "inconclusive"):
            notes.append(f"- {v['status'].upper()}: {v['message']}")
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
        out.append(
            f"| {v['benchmark']} | {v['category']} | {metric} | {value} | {n} | "
            f"{clusters} | {bounds} | {v.get('mode', v.get('basis', '?'))} | "
            f"{v.get('min_n', '-')} | **{v['status'].upper()}** |"
        )
    if notes:
        out += ["", *notes]
    from ..gates import MODE_RULES

    modes = sorted({v.get("mode") for v in results["gates"] if v.get("mode")})
    if modes:
        out += ["", "Modes: " + "; ".join(f"`{m}`: {MODE_RULES.get(m, '?')}" for m in modes) + "."]
    baseline = results.get("baseline")
    if baseline:
        out += [
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
    skipped = [v for v in results["gates"] if v["status"] == "skipped"]
    if skipped:
        out += ["", "Skipped gates (their data is missing; a skipped gate is not a pass):", ""]
        out += [f"- {v['benchmark']}/{v['category']}/{v['metric']}: {v['message']}" for v in skipped]
    view = mapping_view(results)
    seq = sequential_section(results)
    if seq:
        out += ["", *seq]
    out += ["", *regulatory_section(view)]
    for bench, all_cats in results["benchmarks"].items():
        from .results import column_groups, table_metrics

        cats = {c: e for c, e in all_cats.items() if e.get("status", "ok") == "ok"}
        names = table_metrics(results, bench)
        every = metric_names_of(cats)
        more = (
            ""
            if len(names) == len(every)
            else (f" ({len(every) - len(names)} further metrics per category in results.json)")
        )
        out += ["", f"## {bench}: metrics per category{more}"]
        overall = results["overall"].get(bench, {})
        for group in column_groups(names):
            out += ["", "| category | items | " + " | ".join(group) + " |", "|---|---|" + "---|" * len(group)]
            for cat, entry in all_cats.items():
                if entry.get("status") == "error":
                    out.append(
                        f"| {cat} | - | **ERROR**: {_cell(entry['error'])} |" + " |" * max(len(group) - 1, 0)
                    )
                    continue
                out.append(
                    f"| {cat} | {entry['n_scored']} | "
                    + " | ".join(_fmt(entry["metrics"].get(n)) for n in group)
                    + " |"
                )
            for label in overall_labels(results, bench):
                out.append(
                    f"| *{label}* | | " + " | ".join(_fmt(overall[label].get(n)) for n in group) + " |"
                )
        excluded = [
            (cat, reason, len(ids)) for cat, e in cats.items() for reason, ids in e["excluded"].items()
        ]
        if excluded:
            out += [
                "",
                "Rows left out, of scoring or of a metric, as each reason says (ids in results.json):",
                "",
            ]
            out += [f"- {cat}: {n} ({reason})" for cat, reason, n in excluded]
        out += ["", *limitations_section(results, bench, view["mapping"])]
    sens = sensitivity_rows(results)
    if sens:
        out += [
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
    for bench, protocol in results.get("protocols", {}).items():
        out += ["", f"## {bench}: protocol", ""]
        for key, value in protocol.items():
            if isinstance(value, (list, tuple)):
                value = "; ".join(f"`{x!r}`" for x in value)
            elif isinstance(value, str) and ("\n" in value or value != value.strip() or not value):
                value = f"`{value!r}`"  # whitespace that matters (a delimiter, a template)
            out.append(f"- {key}: {value}")
    out += ["", "## Data files", "", "| file | rows | sha256 | release |", "|---|---|---|---|"]
    out += [
        f"| {p} | {d['rows']} | `{d['sha256'][:16]}…` | {d.get('status', '?')} |"
        for p, d in sorted(results["data_files"].items())
    ]
    libs = results["environment"]["libraries"]
    out += ["", "Libraries: " + ", ".join(f"{k} {v}" for k, v in libs.items() if v), ""]
    return "\n".join(out)


def write_markdown(path: Path, results: Mapping[str, Any]) -> Path:
    """Write ``render_markdown(results)`` to ``path``; returns the path."""
    path.write_text(render_markdown(results), encoding="utf-8")
    return path
