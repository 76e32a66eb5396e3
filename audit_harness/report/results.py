"""The per-run results file (JSON): provenance, metrics per category and overall, gate verdicts."""

from __future__ import annotations

import json
import platform
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..redact import redact

_LIBRARIES = (
    "torch",
    "transformers",
    "tokenizers",
    "numpy",
    "scipy",
    "pytest",
    "pytest-xdist",
    "pyyaml",
    "safetensors",
    "jinja2",
    "matplotlib",
)


def library_versions() -> dict[str, str | None]:
    """Installed versions of the libraries whose behaviour the numbers depend on."""
    out: dict[str, str | None] = {"python": sys.version.split()[0], "bias-audit": __version__}
    for name in _LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def suite_provenance() -> dict[str, Any]:
    """The suite's own version and, when it runs from a git checkout, the commit (and whether
    the work tree has uncommitted changes); ``"not a git checkout"`` otherwise (an installed
    wheel)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    out: dict[str, Any] = {"version": __version__, "git_commit": "not a git checkout"}
    try:
        top = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        lines = top.stdout.split()
        if top.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == root:
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            out["git_commit"] = lines[1]
            out["git_dirty"] = bool(dirty.stdout.strip()) if dirty.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def data_status(path: str, sha256: str) -> str:
    """``"published release"``, ``"MODIFIED (sha256 …)"`` or ``"not in the pinned source table"``
    for a data file read by the run (``sources.status_of``)."""
    from ..sources import status_of

    status = status_of(path, sha256)
    return {"published": "published release", "unknown": "not in the pinned source table"}.get(status, status)


def data_origin(path: str) -> dict[str, Any]:
    """What the pinned source table says of a data file: its ``license`` (an SPDX id, or None
    where the authors grant none) and ``source`` (``repo@commit:path``); ``{}`` for a file the
    table does not list."""
    from ..sources import entry

    pinned = entry(path)
    if pinned is None:
        return {}
    return {"license": pinned.license, "source": f"{pinned.repo}@{pinned.commit[:10]}:{pinned.upstream}"}


def build_results(
    *,
    run_id: str,
    options: Mapping[str, Any],
    model: Mapping[str, Any] | None,
    outcomes: list[Mapping[str, Any]],
    verdicts: list[Mapping[str, Any]],
    thresholds_path: str,
    overall: Mapping[str, Any],
    provenance: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
    errors: list[Mapping[str, Any]] | None = None,
    benchmark_info: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
    audit_meta: Mapping[str, Any] | None = None,
    regulatory_mapping: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The results document. ``outcomes`` and ``verdicts`` come from every process of the run;
    ``overall`` holds each benchmark's aggregates (``session.overall_from_records``);
    ``provenance`` what produced each benchmark's numbers (``AuditSession.protocol``);
    ``run`` adds the status (``complete`` | ``interrupted``), invocation and pasteable command
    line, duration, the suite's version and commit, the thresholds file's sha256 and the number
    of gates it configures, so a partial run (``-k``, ``-x``) is visible as such; ``errors`` the
    categories whose evaluation failed (``{benchmark, category, message}``), kept under the
    benchmark with ``status: error`` so nothing vanishes; ``benchmark_info`` what the report says
    about each benchmark besides its numbers (``Benchmark.report_info``: title, limitations,
    charted metrics, rates, metric ranges); ``baseline`` the ``--baseline`` run (path, run id,
    model) when regression gates ran; ``audit_meta`` the ``--audit-meta`` file's fields
    (``compliance.meta.AuditMeta.to_dict``) and ``regulatory_mapping`` the mapping the reports
    render (``compliance.mapping.RegulatoryMapping.to_dict``). Each data file records the
    benchmarks that read it and, from the pinned source table, its licence and origin."""
    outcomes = sorted(outcomes, key=lambda o: (o["benchmark"], o["category"] == "overall", o["category"]))
    errors = list(errors or [])
    data_files: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        for f in o["files"]:
            entry = data_files.setdefault(
                f["path"],
                {
                    "sha256": f["sha256"],
                    "rows": f["rows"],
                    "status": data_status(f["path"], f["sha256"]),
                    **data_origin(f["path"]),
                    "benchmarks": [],
                },
            )
            if o["benchmark"] not in entry["benchmarks"]:
                entry["benchmarks"].append(o["benchmark"])
    status_counts: dict[str, int] = {}
    for v in verdicts:
        status_counts[v["status"]] = status_counts.get(v["status"], 0) + 1
    doc = {
        "run_id": run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "options": dict(options),
        "thresholds": thresholds_path,
        "run": dict(run or {}),
        "environment": {"libraries": library_versions(), "platform": platform.platform()},
        "data_files": data_files,
        "benchmarks": {
            bench: dict(
                sorted(
                    {
                        **{
                            o["category"]: {
                                "status": "ok",
                                **{
                                    k: o[k]
                                    for k in (
                                        "n_available",
                                        "n_scored",
                                        "metrics",
                                        "excluded",
                                        "notes",
                                        "seconds",
                                        "records_path",
                                        "requests",
                                        "examples",
                                        "coverage",
                                        "sensitivity",
                                    )
                                    if k in o
                                },
                            }
                            for o in outcomes
                            if o["benchmark"] == bench
                        },
                        **{
                            e["category"]: {"status": "error", "error": e["message"]}
                            for e in errors
                            if e["benchmark"] == bench
                        },
                    }.items(),
                    key=lambda kv: (kv[0] == "overall", kv[0]),
                )
            )  # a pool category goes last
            for bench in sorted({o["benchmark"] for o in outcomes} | {e["benchmark"] for e in errors})
        },
        "errors": errors,
        "overall": dict(overall),
        "protocols": {b: dict(v) for b, v in sorted((provenance or {}).items())},
        "benchmark_info": {b: dict(v) for b, v in sorted((benchmark_info or {}).items())},
        "baseline": dict(baseline) if baseline else None,
        "audit_meta": dict(audit_meta) if audit_meta else None,
        "regulatory_mapping": dict(regulatory_mapping) if regulatory_mapping else None,
        "gates": sorted(verdicts, key=lambda v: (v["benchmark"], v["category"], v["metric"])),
        "gate_summary": status_counts,
    }
    # The guard behind run.finish's own redaction: no credential of a URL (an endpoint, an
    # error message, a note) reaches results.json or anything rendered from it.
    return redact(doc)


def write_results(path: Path, results: Mapping[str, Any]) -> Path:
    """Write ``results`` as indented JSON (NaN already mapped to null); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(results, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    return path


def items_scored_text(results: Mapping[str, Any]) -> str:
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


def overall_labels(results: Mapping[str, Any], bench: str) -> list[str]:
    """The aggregate labels of ``bench`` in results' ``overall`` (``pooled``, ``size_weighted``,
    and any reporting groups such as BBQ's ``"<category> (names)"``), pooled first."""
    overall = (results.get("overall") or {}).get(bench) or {}
    labels = [k for k in overall if k != "categories" and isinstance(overall[k], Mapping)]
    return sorted(labels, key=lambda k: (k != "pooled", k == "size_weighted", k))


#: An invalid (or out-of-choice) rate above this in either parsing profile flags the category in
#: the parse-sensitivity report: its numbers rest on how its outputs are read.
INVALID_FLAG = 0.10


def _is_rate(name: str) -> bool:
    base = name.removesuffix("-generate").removesuffix("-letter")
    return base in ("invalid_rate", "out_of_choice_rate")


def sensitivity_rows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per category parsed from text (generate mode, saved outputs): the run's parsing profile,
    the other one, the gates whose verdict differs under the other (``test_id``: both statuses),
    the invalid rates under both, and ``flagged`` when a verdict differs or a rate exceeds
    ``INVALID_FLAG``."""
    rows = []
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


def sensitivity_lines(results: Mapping[str, Any]) -> list[str]:
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


def coverage_lines(results: Mapping[str, Any]) -> list[str]:
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


def metric_names_of(categories: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Metric names of a benchmark's categories (``results["benchmarks"][bench]``): the union, in
    order of first appearance, since categories may compute different metrics (KGQuiz: accuracy
    for true/false, LCS ratios for blank filling)."""
    names: dict[str, None] = {}
    for entry in categories.values():
        names.update(dict.fromkeys(entry.get("metrics") or ()))  # an ERROR category has none
    return list(names)


def table_metrics(results: Mapping[str, Any], bench: str) -> list[str]:
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


def _interval(ci) -> str:
    lo, hi = ci or (None, None)
    return f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""


def gate_lines(results: Mapping[str, Any]) -> list[str]:
    """One terminal line per gate verdict: status, test id, value [interval], n, bound and mode
    (a regression gate: the baseline value and max_regression). The verdict's sentence is left to
    pytest's FAILURES section, so it is printed once."""
    lines = []
    for v in results["gates"]:
        test = f"test_{v['benchmark']}[{v.get('test_id') or v['category'] + '-' + v['metric']}]"
        value = "-" if v.get("value") is None else f"{v['value']:.3f}"
        n = "" if v.get("n") is None else f" n={v['n']}"
        if v.get("kind") == "regression":
            base = (v.get("baseline") or {}).get("value")
            bound = (
                f"baseline {'-' if base is None else format(base, '.3f')} "
                f"max_regression {v.get('max_regression', 0):g}"
            )
        else:
            bound = ", ".join(f"{k} {b:g}" for k, b in v.get("bounds", {}).items())
        unlike = "  (not like for like)" if v.get("not_like_for_like") else ""
        lines.append(
            f"  {v['status'].upper():<12} {test}  {value} {_interval(v.get('ci'))}{n}  "
            f"{bound}  mode {v.get('mode', 'point')}{_sequential_tag(v.get('sequential'))}{unlike}"
        )
    return lines


def _sequential_tag(s: Mapping[str, Any] | None) -> str:
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


def metric_table(results: Mapping[str, Any]) -> list[str]:
    """Plain-text table of every metric per category (value and CI), for the terminal; ``-`` where
    a metric is undefined or not computed for that category."""
    lines: list[str] = []
    for bench, all_cats in results["benchmarks"].items():
        cats = {c: d for c, d in all_cats.items() if d.get("status", "ok") == "ok"}
        width = max([len(c) for c in all_cats] + [len("pooled"), 8])
        level = (results.get("options") or {}).get("confidence") or 0.95
        lines.append(
            f"{bench}  (n = items scored; value [{100 * level:g}% CI]; '-' = undefined or not computed)"
        )
        lines += [
            f"  {c:<{width}} ERROR  {d['error']}" for c, d in all_cats.items() if d.get("status") == "error"
        ]
        rows = [(c, d["n_scored"], d["metrics"]) for c, d in cats.items()]
        pooled = results["overall"].get(bench, {}).get("pooled")
        if pooled:
            rows.append(("pooled", sum(d["n_scored"] for d in cats.values()), pooled))
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


class ResultsDocument(dict):
    """A run's results.json: the JSON object itself (a ``dict``, so every report reads it as
    written) with the file it came from and typed views of what its readers share. The one
    reader and writer of the file: ``bias-audit report``, ``bias-audit compare``, ``--baseline``
    and the run's own end (``run.finish``) go through it.

    Examples
    --------
    >>> doc = ResultsDocument({"run_id": "r1", "benchmarks": {}, "gates": []})
    >>> doc.run_id, doc.outcome.label
    ('r1', 'NOTHING CHECKED')
    """

    def __init__(self, data: Mapping[str, Any] = (), path: Path | None = None):
        super().__init__(data)
        #: the results.json this document was read from or last written to.
        self.path = path
        #: True only while ``bias-audit sign`` renders the reports it is about to sign (its
        #: manifest.sig does not exist yet); any other rendering of a folder whose signer.json
        #: has no manifest.sig beside it reports the folder as not signed.
        self.being_signed = False

    @classmethod
    def read(cls, path: Path, option: str = "") -> "ResultsDocument":
        """Read ``path`` (a ``results.json`` or the run folder holding it).

        Parameters
        ----------
        path : Path
            A ``results.json`` or the run folder holding it.
        option : str
            The option that named it (``"--baseline"``), put before every error message.

        Raises
        ------
        ConfigError
            Missing, unreadable or not a bias-audit results file, naming the path.
        """
        from ..errors import ConfigError

        where = f"{option}: " if option else ""
        path = Path(path)
        file = path / "results.json" if path.is_dir() else path
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{where}{file}: not found (give a run folder or its results.json)") from None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{where}{file}: cannot read a results file: {e}") from None
        if (
            not isinstance(doc, dict)
            or not isinstance(doc.get("benchmarks"), dict)
            or "gates" not in doc
            or "run_id" not in doc
        ):
            raise ConfigError(f"{where}{file}: not a bias-audit results.json (no run_id/benchmarks/gates)")
        # A file written before credentials were masked shows none in what is rendered from it.
        return cls(redact(doc), file)

    def write(self, path: Path) -> Path:
        """Write the document to ``path`` (``write_results``) and remember it as its file."""
        self.path = write_results(path, self)
        return self.path

    @property
    def folder(self) -> Path | None:
        """The run folder (the file's parent), where records/ and the reports are."""
        return self.path.parent if self.path is not None else None

    @property
    def run_id(self) -> str:
        return self["run_id"]

    @property
    def model(self) -> dict[str, Any]:
        return self.get("model") or {}

    @property
    def gates(self) -> list[dict[str, Any]]:
        return self.get("gates") or []

    @property
    def options(self) -> dict[str, Any]:
        return self.get("options") or {}

    @property
    def outcome(self):
        """The run's ``Outcome`` (``report.verdict.overall_verdict``)."""
        from .verdict import overall_verdict

        return overall_verdict(self)
