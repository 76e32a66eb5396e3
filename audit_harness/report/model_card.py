"""A Hugging Face model card (README.md) from a run's results.json (``bias-audit model-card``).

The YAML front matter is built by ``huggingface_hub``'s card classes, so its ``model-index`` is
the structure the Hub parses and validates: one result per benchmark and category (the dataset's
``config``; aggregates as ``aggregate: <label>``), one metric per defined metric value: numbers
only, as leaderboards and the Hub's widgets read them. The gates' verdicts and the run's overall
verdict, which the model-index has no field for, are the card's ``bias_audit`` entry; so is the
audited system (``--audit-meta``: every field given, the file's sha256, and each benchmark's
contamination status from the training-data cutoff), which a reviewer filing the card needs.
The Markdown body is the "Bias evaluation" section: per benchmark and category each metric with
its interval, n, gate and verdict; what the benchmark does not show; the data files' hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, TypedDict

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..compliance.meta import FIELDS, LABELS
from ..gates.resolution import status_word
from .markdown import inert_results
from .regulatory import limitations_view, recorded_mapping
from .results import read_text
from .schema import GateEntry, MetricEntry, Results, as_results
from .scope import Scope, scope
from .verdict import overall_verdict
from .views import aggregates

#: The model-index task of a model kind (results.json ``model.kind``); a causal LM, a served
#: model and saved predictions are all text generation.
TASK_TYPES = {"masked": ("fill-mask", "Fill-Mask")}
DEFAULT_TASK = ("text-generation", "Text Generation")
#: The dataset config of a benchmark's aggregate rows (pooled, size-weighted, reporting groups).
AGGREGATE_PREFIX = "aggregate: "


class CardGate(TypedDict):
    """A gate in the card's ``bias_audit`` entry (``gate_entries``)."""

    benchmark: str
    category: str
    metric: str
    kind: str
    rule: str
    verdict: str


class Contamination(TypedDict):
    """A benchmark's contamination status and its sentence."""

    status: str
    note: str


class CardMeta(TypedDict):
    """The audited system in the card's ``bias_audit`` entry (``audit_meta_entry``): every
    ``--audit-meta`` field (``compliance.meta.FIELDS``), the file, its sha256, and each
    benchmark's contamination status."""

    system_name: str | None
    system_version: str | None
    intended_use: str | None
    responsible_person: str | None
    organisation: str | None
    training_data_cutoff: str | None
    notes: str | None
    file: str | None
    sha256: str | None
    contamination: dict[str, Contamination]


def _groups(results: Results, bench: str) -> list[tuple[str, Mapping[str, MetricEntry]]]:
    """(dataset config, {metric: result}) of each scored category of ``bench``, then of each of
    its aggregates; errored categories have no metrics and are left out."""
    out: list[tuple[str, Mapping[str, MetricEntry]]] = [
        (cat, entry.get("metrics") or {})
        for cat, entry in results["benchmarks"][bench].items()
        if entry.get("status", "ok") == "ok"
    ]
    out += [(AGGREGATE_PREFIX + label, metrics) for label, metrics in aggregates(results, bench).items()]
    return out


def _bounds(gate: GateEntry) -> str:
    """A gate's rule in a few words: ``max 0.1 (point)``; a regression gate names its baseline."""
    bounds = ", ".join(f"{k} {b:g}" for k, b in (gate.get("bounds") or {}).items()) or "no bound"
    if gate.get("kind") == "regression":
        return f"max_regression {gate.get('max_regression', 0):g} vs baseline ({bounds})"
    return f"{bounds} ({gate.get('mode', '?')})"


def eval_results(results: Results) -> list[EvalResult]:
    """Every defined metric of the run (categories and aggregates) as ``EvalResult``s. Undefined
    metrics (value null) are left out: the model-index wants a number, and the Markdown section
    says why each is undefined."""
    task = TASK_TYPES.get((results.get("model") or {}).get("kind") or "", DEFAULT_TASK)
    info = results.get("benchmark_info") or {}
    out = []
    for bench in results["benchmarks"]:
        title = (info.get(bench) or {}).get("title") or bench
        for config, metrics in _groups(results, bench):
            out += [
                EvalResult(
                    task_type=task[0],
                    task_name=task[1],
                    dataset_type=bench,
                    dataset_name=title,
                    dataset_config=config,
                    metric_type=name,
                    metric_name=f"{name} ({config})",
                    metric_value=m["value"],
                )
                for name, m in metrics.items()
                if m.get("value") is not None
            ]
    return out


def gate_entries(results: Results) -> list[CardGate]:
    """Each gate of the run: benchmark, category, metric, kind, rule and verdict."""
    return [
        {
            "benchmark": g["benchmark"],
            "category": g["category"],
            "metric": g["metric"],
            "kind": g.get("kind") or "threshold",
            "rule": _bounds(g),
            "verdict": status_word(g["status"]),
        }
        for g in results.get("gates") or []
    ]


def contamination_notes(results: Results) -> dict[str, Contamination]:
    """``{benchmark: {"status", "note"}}``: whether each benchmark's data was published before
    the model's training-data cutoff (``regulatory.limitations_view``, as both reports say)."""
    mapping, _ = recorded_mapping(results)
    out: dict[str, Contamination] = {}
    for bench in results["benchmarks"]:
        lim = limitations_view(results, bench, mapping)
        out[bench] = {"status": lim["contamination"], "note": lim["contamination_text"]}
    return out


def audit_meta_entry(results: Results) -> CardMeta | None:
    """The ``--audit-meta`` fields for the card's metadata (every field, null when not given),
    the file and its sha256, and the contamination note of each benchmark; None without
    ``--audit-meta``."""
    data = results.get("audit_meta")
    if not data:
        return None
    return {
        "system_name": data.get("system_name"),
        "system_version": data.get("system_version"),
        "intended_use": data.get("intended_use"),
        "responsible_person": data.get("responsible_person"),
        "organisation": data.get("organisation"),
        "training_data_cutoff": data.get("training_data_cutoff"),
        "notes": data.get("notes"),
        "file": data.get("file"),
        "sha256": data.get("sha256"),
        "contamination": contamination_notes(results),
    }


def card_data(results: Results) -> ModelCardData:
    """The card's metadata: the model-index of ``eval_results``, the gates, the run's verdict and
    the audited system (``audit_meta_entry``)."""
    verdict = overall_verdict(results)
    run = results.get("run") or {}
    meta = audit_meta_entry(results)
    return ModelCardData(
        model_name=(results.get("model") or {}).get("name") or "unknown model",
        eval_results=eval_results(results),
        tags=["bias-audit", "bias-evaluation"],
        bias_audit={
            "verdict": verdict.label,
            "reason": verdict.reason,
            "exit_code": verdict.exit_code,
            "run_id": results["run_id"],
            "created": results.get("created"),
            "suite_version": (run.get("suite") or {}).get("version"),
            "scope": scope(results),
            "gates": gate_entries(results),
            **({"audit_meta": meta} if meta else {}),
        },
    )


def _value(m: MetricEntry | None) -> tuple[str, str, str]:
    """(value, interval, n) of one metric result as table cells."""
    if m is None:
        return "-", "-", "-"
    n = "-" if m.get("n") is None else str(m["n"])
    if m.get("value") is None:
        return f"undefined ({m['reason']})" if m.get("reason") else "undefined", "-", n
    lo, hi = m.get("ci") or (None, None)
    interval = f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "-"
    return f"{m['value']:.3f}", interval, n


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def bias_section(results: Results) -> str:
    """The card's "Bias evaluation" section (Markdown), rendered from ``inert_results``: what an
    operator or a model wrote (``--audit-meta`` values, names, messages) reaches it as text, never
    as HTML, a link, an image or a table cell of its own (report.md does the same)."""
    results = inert_results(results)
    verdict = overall_verdict(results)
    model = results.get("model") or {}
    suite = (results.get("run") or {}).get("suite") or {}
    code = "?" if verdict.exit_code is None else verdict.exit_code
    out = [
        f"# {model.get('name', 'Model')}",
        "",
        "## Bias evaluation",
        "",
        f"**Verdict: {verdict.shown_label}** ({verdict.reason}; exit code {code}).",
        "",
        *_scope_lines(scope(results)),
        f"Audited by bias-audit {suite.get('version', '?')} (commit `{suite.get('git_commit', '?')}`), "
        f"run `{results['run_id']}` ({results.get('created', '?')}); model `{model.get('source', '?')}`, "
        f"weights `{model.get('fingerprint', '?')}`. Intervals: "
        f"{(results.get('options') or {}).get('confidence', '?')} confidence.",
        *[f"Read: {b} by {read_text(e)}." for b, e in (results.get("reads") or {}).items()],
        *_system_lines(results),
    ]
    for bench in results["benchmarks"]:
        out += _benchmark_lines(results, bench)
    out += ["", "### Data files", "", "| file | rows | sha256 | release |", "|---|---|---|---|"]
    out += [
        f"| {_cell(p)} | {d.get('rows', '?')} | `{d.get('sha256', '?')}` | {_cell(d.get('status', '?'))} |"
        for p, d in sorted((results.get("data_files") or {}).items())
    ]
    out += [
        "",
        f"Generated by bias-audit {suite.get('version', '?')} from the run's results.json; the run "
        "folder holds the records, report.md and report.html.",
        "",
    ]
    return "\n".join(out)


def _benchmark_lines(results: Results, bench: str) -> list[str]:
    """A benchmark's part of the card: its table (failed categories, then every category's and
    aggregate's metrics with their gates) and what it does not show."""
    gates = {(g["benchmark"], g["category"], g["metric"]): g for g in results.get("gates") or []}
    info = (results.get("benchmark_info") or {}).get(bench) or {}
    out = [
        "",
        f"### {info.get('title') or bench}",
        "",
        "| category | metric | value | interval | n | gate | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for cat, entry in results["benchmarks"][bench].items():
        if entry.get("status") == "error":
            out.append(f"| {_cell(cat)} | - | **ERROR**: {_cell(entry.get('error'))} | | | | |")
    for config, metrics in _groups(results, bench):
        label = (
            f"*{config.removeprefix(AGGREGATE_PREFIX)}*" if config.startswith(AGGREGATE_PREFIX) else config
        )
        for name, m in metrics.items():
            gate = gates.get((bench, config, name))
            value, interval, n = _value(m)
            rule, status = (_bounds(gate), f"**{status_word(gate['status'])}**") if gate else ("-", "-")
            out.append(
                f"| {_cell(label)} | {name} | {_cell(value)} | {interval} | {n} | {_cell(rule)} | {status} |"
            )
    # The run's "What this does not show" lines, as results.json carries them.
    out += ["", "What this does not show:", ""]
    return out + (
        [f"- {line}" for line in info.get("limitations") or []]
        or ["- The benchmark declares no limitations; read its paper before drawing conclusions."]
    )


def _system_lines(results: Results) -> list[str]:
    """The "Audited system" section (``--audit-meta``): each field, then each benchmark's
    contamination note; nothing without metadata."""
    meta = audit_meta_entry(results)
    if meta is None:
        return []
    out = ["", "### Audited system", "", "| field | value |", "|---|---|"]
    fields: Mapping[str, object] = meta  # FIELDS names its keys
    for k in FIELDS:
        value = fields[k] if fields[k] else "not given"
        if k == "training_data_cutoff" and not fields[k]:
            value = "not given (contamination status unknown)"
        out.append(f"| {LABELS[k]} | {_cell(value)} |")
    out.append(f"| Metadata file | {_cell(meta['file'])} (sha256 `{meta['sha256']}`) |")
    out += ["", "Contamination (benchmark data published before the training-data cutoff?):", ""]
    # A note that already opens with its status ("before: published ...") is not prefixed twice.
    for bench, c in meta["contamination"].items():
        note, status = str(c["note"]), str(c["status"])
        out.append(f"- {bench}: {note if note.startswith(status) else status + ': ' + note}")
    return out


def _scope_lines(sc: Scope) -> list[str]:
    """The verdict's scope under it, with a warning first when the run was partial."""
    out = []
    if sc["partial"]:
        out += [
            f"**This verdict covers a partial audit** ({'; '.join(sc['partial_reasons'])}): it is not "
            "the verdict of a full audit of these benchmarks.",
            "",
        ]
    out += [
        f"Scope: {', '.join(sc['benchmarks']) or 'no benchmark'}; items scored: {sc['items_scored']}; "
        f"{sc['gates_evaluated']} of {sc['gates_configured'] if sc['gates_configured'] is not None else '?'} "
        "configured gates evaluated.",
        "",
    ]
    return out


def render_model_card(results: Mapping[str, object]) -> ModelCard:
    """The model card: front matter (``card_data``) and the bias section."""
    results = as_results(results)
    return ModelCard(f"---\n{card_data(results).to_yaml()}\n---\n\n{bias_section(results)}")


def write_model_card(path: Path, results: Mapping[str, object]) -> Path:
    """Write the model card to ``path``; returns the path."""
    path = Path(path)
    render_model_card(results).save(path)
    return path
