"""The per-run results file (JSON): provenance, metrics per category and overall, gate verdicts."""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypedDict

from .. import __version__
from ..gates.identity import RunIdentity
from ..gates.resolution import of_entry
from ..redact import redact
from .schema import (
    CategoryEntry,
    DataFile,
    GateEntry,
    ModelInfo,
    Options,
    ReadEntry,
    Results,
    SuiteInfo,
    as_results,
)

if TYPE_CHECKING:
    from ..run_outcome import Outcome

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


def suite_provenance() -> SuiteInfo:
    """The suite's own version and, when it runs from a git checkout, the commit (and whether
    the work tree has uncommitted changes); ``"not a git checkout"`` otherwise (an installed
    wheel)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    out: SuiteInfo = {"version": __version__, "git_commit": "not a git checkout"}
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


class DataOrigin(TypedDict, total=False):
    """What the pinned source table says of a data file (``data_origin``)."""

    license: str | None
    source: str


def data_origin(path: str) -> DataOrigin:
    """What the pinned source table says of a data file: its ``license`` (an SPDX id, or None
    where the authors grant none) and ``source`` (``repo@commit:path``); ``{}`` for a file the
    table does not list."""
    from ..sources import entry

    pinned = entry(path)
    if pinned is None:
        return {}
    return {"license": pinned.license, "source": f"{pinned.repo}@{pinned.commit[:10]}:{pinned.upstream}"}


@dataclass
class ResultsInput:
    """What the results document is built from (``build_results``). ``outcomes`` and ``verdicts``
    come from every process of the run; ``overall`` holds each benchmark's aggregates
    (``session.overall_from_records``); ``provenance`` what produced each benchmark's numbers
    (``AuditSession.protocol``); ``run`` adds the status (``complete`` | ``interrupted``),
    invocation and pasteable command line, duration, the suite's version and commit, the
    thresholds file's sha256 and the number of gates it configures, so a partial run (``-k``,
    ``-x``) is visible as such; ``errors`` the categories whose evaluation failed
    (``{benchmark, category, message}``), kept under the benchmark with ``status: error`` so
    nothing vanishes; ``benchmark_info`` what the report says about each benchmark besides its
    numbers (``Benchmark.report_info``: title, limitations, charted metrics, rates, metric
    ranges); ``baseline`` the ``--baseline`` run (path, run id, model) when regression gates ran;
    ``audit_meta`` the ``--audit-meta`` file's fields (``compliance.meta.AuditMeta.to_dict``) and
    ``regulatory_mapping`` the mapping the reports render
    (``compliance.mapping.RegulatoryMapping.to_dict``)."""

    run_id: str
    #: the run's identity (``gates.identity.RunIdentity``, ``AuditSession.identity``): results'
    #: ``options`` are its options, as the start-up baseline check and the regression gates saw them.
    identity: RunIdentity
    model: Mapping[str, Any] | None
    outcomes: list[Mapping[str, Any]]
    verdicts: list[Mapping[str, Any]]
    thresholds_path: str
    overall: Mapping[str, Any]
    provenance: Mapping[str, Any] | None = None
    run: Mapping[str, Any] | None = None
    errors: list[Mapping[str, Any]] | None = None
    benchmark_info: Mapping[str, Any] | None = None
    baseline: Mapping[str, Any] | None = None
    audit_meta: Mapping[str, Any] | None = None
    regulatory_mapping: Mapping[str, Any] | None = None
    #: per benchmark how the model was read (``Benchmark.read_modes``: option log-likelihood,
    #: letter log-probs, generated text): ``reads_entry`` makes results' ``reads``.
    read_modes: Mapping[str, Any] | None = None


#: The keys of a category's outcome that its results entry keeps.
_ENTRY_KEYS = (
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


def build_results(parts: ResultsInput) -> Results:
    """The results document of ``parts`` (``ResultsInput`` says what each holds). Each data file
    records the benchmarks that read it and, from the pinned source table, its licence and
    origin."""
    outcomes = sorted(
        parts.outcomes, key=lambda o: (o["benchmark"], o["category"] == "overall", o["category"])
    )
    errors = list(parts.errors or [])
    verdicts = parts.verdicts
    status_counts: dict[str, int] = {}
    for v in verdicts:
        status_counts[v["status"]] = status_counts.get(v["status"], 0) + 1
    doc = {
        "run_id": parts.run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": parts.model,
        "options": dict(parts.identity.options),
        "thresholds": parts.thresholds_path,
        "run": dict(parts.run or {}),
        "environment": {"libraries": library_versions(), "platform": platform.platform()},
        "data_files": _data_files(outcomes),
        "benchmarks": {
            bench: _benchmark_entries(bench, outcomes, errors)
            for bench in sorted({o["benchmark"] for o in outcomes} | {e["benchmark"] for e in errors})
        },
        "errors": errors,
        "overall": dict(parts.overall),
        "protocols": {b: dict(v) for b, v in sorted((parts.provenance or {}).items())},
        "benchmark_info": {b: dict(v) for b, v in sorted((parts.benchmark_info or {}).items())},
        "baseline": dict(parts.baseline) if parts.baseline else None,
        "audit_meta": dict(parts.audit_meta) if parts.audit_meta else None,
        "regulatory_mapping": dict(parts.regulatory_mapping) if parts.regulatory_mapping else None,
        # Each verdict with what its gate can resolve (half-width, certifiable band, what would
        # decide it), computed once here for every reader of the file.
        "gates": sorted(
            ({**v, **of_entry(v)} for v in verdicts),
            key=lambda v: (v["benchmark"], v["category"], v["metric"]),
        ),
        "gate_summary": status_counts,
    }
    if parts.read_modes:
        doc["reads"] = reads_entry(parts.read_modes, parts.model)
    # The guard behind run.finish's own redaction: no credential of a URL (an endpoint, an
    # error message, a note) reaches results.json or anything rendered from it.
    return redact(doc)


def reads_entry(
    read_modes: Mapping[str, Sequence[str]], model: Mapping[str, Any] | None
) -> dict[str, ReadEntry]:
    """results.json's ``reads``: per benchmark how the model was read (``answer_mode``: option
    log-likelihood, letter log-probs, generated text; several joined by " and "), and for letter
    log-probs how: ``exact (in process)``, replayed from saved reads, or through a chat API (the endpoint's model name, the
    endpoint, the ``top_logprobs`` used and asked: ``model.server.letter_read``).

    Examples
    --------
    >>> reads_entry({"bbq": ("letter log-probs",)}, {"server": None})
    {'bbq': {'answer_mode': 'letter log-probs', 'letter_read': 'exact (in process)'}}
    """
    via = ((model or {}).get("server") or {}).get("letter_read")
    if not via:  # in process (exact), or letter reads saved elsewhere and replayed
        via = (
            "replayed from saved letter reads"
            if (model or {}).get("kind") == "replay"
            else "exact (in process)"
        )
    out: dict[str, ReadEntry] = {}
    for bench, modes in sorted(read_modes.items()):
        entry: ReadEntry = {"answer_mode": " and ".join(modes)}
        if "letter log-probs" in modes:
            entry["letter_read"] = dict(via) if isinstance(via, Mapping) else via
        out[bench] = entry
    return out


def read_text(entry: ReadEntry) -> str:
    """One benchmark's ``reads`` entry in words (the report, JUnit, the model card).

    Examples
    --------
    >>> read_text({"answer_mode": "letter log-probs", "letter_read": {"served_model": "m",
    ...            "endpoint": "http://h/v1", "top_logprobs": 20, "requested": 20}})
    'letter log-probs (chat API top_logprobs 20, model m at http://h/v1)'
    """
    how = entry.get("letter_read")
    if isinstance(how, Mapping):
        return (
            f"{entry['answer_mode']} (chat API top_logprobs {how.get('top_logprobs')}, model "
            f"{how.get('served_model')} at {how.get('endpoint')})"
        )
    return f"{entry['answer_mode']} ({how})" if how else str(entry["answer_mode"])


def _data_files(outcomes: list[Mapping[str, Any]]) -> dict[str, DataFile]:
    """Every data file the outcomes read: sha256, rows, status, licence and origin, and the
    benchmarks that read it."""
    data_files: dict[str, DataFile] = {}
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
    return data_files


def _benchmark_entries(
    bench: str, outcomes: list[Mapping[str, Any]], errors: list[Mapping[str, Any]]
) -> dict[str, CategoryEntry]:
    """A benchmark's category entries: each scored category's outcome (``status: ok``) and each
    failed one's error (``status: error``), a pool category last."""
    entries = {
        **{
            o["category"]: {"status": "ok", **{k: o[k] for k in _ENTRY_KEYS if k in o}}
            for o in outcomes
            if o["benchmark"] == bench
        },
        **{
            e["category"]: {"status": "error", "error": e["message"]}
            for e in errors
            if e["benchmark"] == bench
        },
    }
    return dict(sorted(entries.items(), key=lambda kv: (kv[0] == "overall", kv[0])))


def write_results(path: Path, results: Mapping[str, object]) -> Path:
    """Write ``results`` as indented JSON (NaN already mapped to null); returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(results, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    return path


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

    def __init__(self, data: Mapping[str, object] | None = None, path: Path | None = None):
        super().__init__(data or {})
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
    def model(self) -> ModelInfo:
        return as_results(self).get("model") or {}

    @property
    def gates(self) -> list[GateEntry]:
        return as_results(self).get("gates") or []

    @property
    def options(self) -> Options:
        return as_results(self).get("options") or {}

    @property
    def outcome(self) -> Outcome:
        """The run's ``Outcome`` (``report.verdict.overall_verdict``)."""
        from .verdict import overall_verdict

        return overall_verdict(self)
