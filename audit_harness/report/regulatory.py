"""What both reports say for a compliance reviewer, computed once from a results document: the
signature block (``signer.json`` in the run folder), the audited system (``audit_meta``), the
regulatory mapping with the verdicts of the gates each clause rests on, and each benchmark's
limitations (what it does not show, its data licence, its contamination status).

Markdown and HTML only lay these out, so the two cannot disagree.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Mapping, TypedDict

from ..compliance.mapping import RegulatoryMapping, contamination, load_mapping
from ..compliance.meta import FIELDS, LABELS, AuditMeta
from ..compliance.signer import read_signer
from ..compliance.signing import SIGNATURE_FILE
from ..errors import ConfigError
from ..gates.resolution import status_word
from .schema import GateEntry, Results

#: How ``bias-audit verify`` is called, as the signature block shows it.
VERIFY_HINT = "check with `bias-audit verify RUN_DIR --public-key PUB`"
#: The order verdicts are listed in: what needs a reviewer's eye first.
_STATUS_ORDER = (
    "fail",
    "undefined",
    "insufficient",
    "inconclusive",
    "error",
    "not run",
    "not_decided",
    "skipped",
    "pass",
)


def signature(results: Results) -> tuple[bool, str]:
    """The signature block: (signed, its sentence). A report cannot prove its own signature (it is
    one of the files signed), so the sentence names who signed, when and with which key, and says
    that only ``bias-audit verify`` shows the folder is as signed. A folder with ``signer.json``
    but no ``manifest.sig`` (a signer record copied in, or a signing that did not finish) is not
    signed and says so; a results document with no folder (rendered from memory) is unsigned.

    Raises:
        ConfigError: the folder's ``signer.json`` is not a signer record (names file and field).
    """
    folder: Path | None = getattr(results, "folder", None)  # a ResultsDocument's run folder
    try:
        signer = read_signer(Path(folder)) if folder is not None else None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if signer is None:
        return False, "Unsigned (no signer.json in the run folder; `bias-audit sign` signs a run)"
    if not getattr(results, "being_signed", False) and not (Path(str(folder)) / SIGNATURE_FILE).is_file():
        return False, (
            f"NOT SIGNED: signer.json names {signer.name} ({signer.date}), but the run folder has no "
            f"{SIGNATURE_FILE}: no signature covers these files"
        )
    return True, (
        f"Signed by {signer.name} on {signer.date}, Ed25519 key sha256:{signer.key_fingerprint}. "
        f"This line is part of what was signed, not a proof of it: {VERIFY_HINT} before relying on it"
    )


def meta_rows(results: Results) -> list[tuple[str, str]]:
    """``(label, value)`` of every ``--audit-meta`` field given, then the file and its sha256;
    empty when the run had no metadata."""
    data = results.get("audit_meta")
    if not data:
        return []
    given: Mapping[str, object] = data  # FIELDS names its keys
    rows = [(LABELS[k], str(given[k])) for k in FIELDS if given.get(k)]
    if not data.get("training_data_cutoff"):
        rows.append((LABELS["training_data_cutoff"], "not given (contamination status unknown)"))
    rows.append(("Metadata file", f"{data.get('file', '?')} (sha256 {data.get('sha256', '?')})"))
    return rows


def _cutoff(results: Results) -> date | None:
    data = results.get("audit_meta")
    return AuditMeta.from_dict(data).training_data_cutoff if data else None


def recorded_mapping(results: Results) -> tuple[RegulatoryMapping, str]:
    """The mapping the run recorded (validated again) and a sentence saying which it is; the
    packaged one, saying so, for a results file written before runs recorded one."""
    data = results.get("regulatory_mapping")
    if data:
        mapping = RegulatoryMapping.from_dict(data, "results.json regulatory_mapping")
        name = "the packaged mapping" if mapping.file == "packaged" else f"`{mapping.file}`"
        return mapping, f"Mapping: {name} (sha256 `{mapping.sha256[:16]}…`), as recorded by the run."
    mapping = load_mapping()
    return mapping, (
        "Mapping: this results file records none (it predates them); the packaged mapping "
        f"(sha256 `{mapping.sha256[:16]}…`) is shown."
    )


def _scope(names: tuple[str, ...] | str | None, what: str) -> str:
    """``all <what>``, a keyword such as ``bias`` (each benchmark's own bias metrics) as its
    words, or the names listed.

    Examples
    --------
    >>> _scope("bias", "metrics"), _scope(("bbq", "kobbq"), "benchmarks"), _scope(None, "metrics")
    ("each benchmark's bias metrics", 'bbq, kobbq', 'all metrics')
    """
    if names is None:
        return f"all {what}"
    if isinstance(names, str):
        return f"each benchmark's {names} {what}"
    return ", ".join(names)


#: Passing gates beyond this many are counted, not named, under a clause: a full audit has about
#: 170 gates, and a reviewer reads a clause for what did not pass (every gate is listed under
#: "Gates" with its test id).
NAMED_PASSES = 6


def _tests_label(status: str, tests: list[str]) -> str:
    if status == "pass" and len(tests) > NAMED_PASSES:
        return f"{len(tests)} gates"
    return ", ".join(tests)


class VerdictTests(TypedDict):
    """The gates of a benchmark with one verdict: their test ids and how they are shown."""

    status: str
    tests: list[str]
    label: str


class GateGroup(TypedDict):
    """A benchmark's gates under a clause row, by verdict (``_gate_groups``)."""

    benchmark: str
    count: int
    verdicts: list[VerdictTests]


class RowView(TypedDict):
    """A clause row as the reports show it: what it covers and the run's gates it covers."""

    kind: str
    scope: str
    evidence: str
    not_covered: str
    n_gates: int
    groups: list[GateGroup]


class ClauseView(TypedDict):
    """A clause as the reports show it (``mapping_view``)."""

    id: str
    heading: str
    title: str
    rows: list[RowView]
    evidence_gates: int
    context_gates: int


class MappingView(TypedDict):
    """The regulatory mapping section (``mapping_view``)."""

    note: str
    clauses: list[ClauseView]
    mapping: RegulatoryMapping


class LimitationsView(TypedDict):
    """A benchmark's Limitations (``limitations_view``)."""

    does_not_show: list[str]
    licences: list[str]
    licence_note: str | None
    contamination: str
    contamination_text: str
    published_source: str | None


def _gate_groups(gates: list[GateEntry]) -> list[GateGroup]:
    """Per benchmark: its gates' verdicts, each verdict with the test ids that have it and the
    label they are shown with (passes beyond ``NAMED_PASSES`` counted, everything else named)."""
    out: list[GateGroup] = []
    for bench in dict.fromkeys(g["benchmark"] for g in gates):
        mine = [g for g in gates if g["benchmark"] == bench]
        statuses = sorted(
            {g["status"] for g in mine},
            key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else len(_STATUS_ORDER),
        )
        out.append(
            {
                "benchmark": bench,
                "count": len(mine),
                "verdicts": [
                    {"status": s, "tests": tests, "label": _tests_label(s, tests)}
                    for s in statuses
                    for tests in [
                        [
                            g.get("test_id") or f"{g['category']}-{g['metric']}"
                            for g in mine
                            if g["status"] == s
                        ]
                    ]
                ],
            }
        )
    return out


def mapping_view(results: Results) -> MappingView:
    """Every clause of the recorded mapping with, per row, the run's gates it covers grouped by
    benchmark and verdict; ``evidence_gates`` counts a clause's gates on evidence rows (0: no
    gate of this run gives evidence for it); ``mapping`` the mapping itself."""
    mapping, note = recorded_mapping(results)
    gates = list(results.get("gates") or [])
    info = results.get("benchmark_info") or {}
    clauses: list[ClauseView] = []
    for clause in mapping.clauses:
        rows: list[RowView] = []
        for row in clause.rows:
            covered = [g for g in gates if row.covers(g, info.get(g.get("benchmark", "")))]
            rows.append(
                {
                    "kind": row.kind,
                    "scope": f"{_scope(row.benchmarks, 'benchmarks')}; {_scope(row.metrics, 'metrics')}",
                    "evidence": row.evidence,
                    "not_covered": row.not_covered,
                    "n_gates": len(covered),
                    "groups": _gate_groups(covered),
                }
            )
        clauses.append(
            {
                "id": clause.id,
                "heading": f"{clause.framework}: {clause.reference}",
                "title": clause.title,
                "rows": rows,
                "evidence_gates": sum(r["n_gates"] for r in rows if r["kind"] == "evidence"),
                "context_gates": sum(r["n_gates"] for r in rows if r["kind"] == "context"),
            }
        )
    return {"note": note, "clauses": clauses, "mapping": mapping}


def clause_summary(clause: ClauseView) -> str:
    """One sentence: how many of the run's gates give evidence for the clause, or that none does."""
    if clause["evidence_gates"]:
        return f"{clause['evidence_gates']} gate(s) of this run give evidence for this clause."
    if clause["context_gates"]:
        return (
            f"No gate of this run gives evidence for this clause; {clause['context_gates']} "
            "gate(s) give context only."
        )
    return "No gate of this run gives evidence for this clause."


def verdict_line(group: GateGroup) -> str:
    """``bbq (6 gates): FAIL Age-acc_disambig, Religion-acc_disambig; UNDEFINED ...``, plain."""
    parts = [f"{status_word(v['status'])} {v['label']}" for v in group["verdicts"]]
    return f"{group['benchmark']} ({group['count']} gates): " + "; ".join(parts)


def _licence_lines(results: Results, bench: str) -> tuple[list[str], list[str]]:
    """(one line per licence of the files ``bench`` read, those files' paths)."""
    files = {
        p: d for p, d in (results.get("data_files") or {}).items() if bench in (d.get("benchmarks") or ())
    }
    by_licence: dict[tuple[str, str], int] = {}
    for d in files.values():
        if "license" not in d:
            key = ("not in the pinned source table: licence unknown", "")
        else:
            licence = d["license"] or "none: the authors grant no licence"
            key = (licence, str(d.get("source", "")).split(":", 1)[0].replace("@", " at "))
        by_licence[key] = by_licence.get(key, 0) + 1
    lines = [
        f"{licence}" + (f" ({origin}; {n} file(s) read)" if origin else f" ({n} file(s) read)")
        for (licence, origin), n in by_licence.items()
    ]
    if not files:
        lines = ["not recorded (no data file of this benchmark in the results)"]
    return lines, list(files)


def limitations_view(results: Results, bench: str, mapping: RegulatoryMapping) -> LimitationsView:
    """A benchmark's Limitations: what it does not show (from its paper), its data licence per the
    pinned source table (and the mapping's licence note), and its contamination status."""
    info = (results.get("benchmark_info") or {}).get(bench) or {}
    licences, paths = _licence_lines(results, bench)
    data = mapping.benchmarks.get(bench)
    release = None
    if data is not None:
        release = data.release_for(paths) or (data.releases[0] if len(data.releases) == 1 else None)
    status = contamination(release.published if release else None, _cutoff(results))
    return {
        "does_not_show": list(info.get("limitations") or []),
        "licences": licences,
        "licence_note": data.licence_note if data else None,
        "contamination": status.status,
        "contamination_text": status.text,
        "published_source": release.source if release else None,
    }
