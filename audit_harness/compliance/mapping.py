"""The regulatory mapping: which clause of which text each benchmark and gate gives evidence for,
and when each benchmark's data was published. Shipped as data (``regulatory_mapping.yaml``, its
format explained at its top and in docs/compliance.md) so a reviewer can edit a copy and pass it
with ``--regulatory-mapping FILE``; the run records the mapping it used in results.json, and the
reports render that record.

Also the contamination status of a benchmark's data: published before the model's training-data
cutoff (``--audit-meta``) means the items may be in its training data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Collection, Iterable, Mapping, NoReturn, TypedDict

from ..errors import ConfigError
from .meta import read_yaml_file

#: The mapping shipped with the suite (used when no ``--regulatory-mapping`` is given).
PACKAGED_MAPPING = Path(__file__).with_name("regulatory_mapping.yaml")
#: What a row's gates are for its clause: records it asks for, or information short of that.
KINDS = ("evidence", "context")
_CLAUSE_KEYS = ("id", "framework", "reference", "title", "rows")
_ROW_KEYS = ("kind", "benchmarks", "metrics", "evidence", "not_covered")
_RELEASE_KEYS = ("files", "published", "source")
#: A row's ``metrics: bias``: each benchmark's own bias metrics (results' ``benchmark_info``
#: ``bias_metrics``), so a fairness clause never counts an accuracy or invalid-rate gate.
BIAS = "bias"


class RowRecord(TypedDict):
    """A row as recorded (``Row.to_dict``): ``all`` or the names, ``bias`` for ``metrics``."""

    kind: str
    benchmarks: str | list[str]
    metrics: str | list[str]
    evidence: str
    not_covered: str


class ClauseRecord(TypedDict):
    """A clause as recorded (``Clause.to_dict``)."""

    id: str
    framework: str
    reference: str
    title: str
    rows: list[RowRecord]


class ReleaseRecord(TypedDict):
    """A release as recorded (``Release.to_dict``), its date as ``YYYY-MM-DD``."""

    files: str
    published: str
    source: str


class _BenchmarkRecordBase(TypedDict):
    releases: list[ReleaseRecord]


class BenchmarkRecord(_BenchmarkRecordBase, total=False):
    """A benchmark's data as recorded (``BenchmarkData.to_dict``)."""

    licence_note: str


class MappingRecord(TypedDict):
    """A mapping as recorded in results.json's ``regulatory_mapping`` (``RegulatoryMapping.to_dict``):
    the file's own shape, with the file and its sha256."""

    file: str
    sha256: str
    version: int
    clauses: list[ClauseRecord]
    benchmarks: dict[str, BenchmarkRecord]


@dataclass(frozen=True)
class Row:
    """The gates that speak to a clause, and how.

    Attributes:
        kind: ``evidence`` or ``context`` (``KINDS``).
        benchmarks, metrics: the gates it covers; None for all; ``metrics`` ``BIAS`` for each
            benchmark's bias metrics.
        evidence: what their results show for the clause. not_covered: what they do not.
    """

    kind: str
    benchmarks: tuple[str, ...] | None
    metrics: tuple[str, ...] | str | None
    evidence: str
    not_covered: str

    def covers(self, gate: Mapping[str, object], info: Mapping[str, object] | None = None) -> bool:
        """Whether ``gate`` (a results.json gate verdict) is one of this row's: its benchmark is
        listed (a declared dataset counts as its metric ``family``), and its metric is, or is a
        listed one in another answer mode (``<metric>-letter``). ``info``: the benchmark's
        results ``benchmark_info`` (``family``, ``bias_metrics``)."""
        info = info or {}
        if self.benchmarks is not None and not (
            gate.get("benchmark") in self.benchmarks or info.get("family") in self.benchmarks
        ):
            return False
        if self.metrics is None:
            return True
        bias = info.get("bias_metrics")
        names = (
            (tuple(bias) if isinstance(bias, (list, tuple)) else ()) if self.metrics == BIAS else self.metrics
        )
        metric = str(gate.get("metric", ""))
        return any(metric == m or metric.startswith(f"{m}-") for m in names)

    def to_dict(self) -> RowRecord:
        return {
            "kind": self.kind,
            "benchmarks": "all" if self.benchmarks is None else list(self.benchmarks),
            "metrics": "all"
            if self.metrics is None
            else self.metrics
            if self.metrics == BIAS
            else list(self.metrics),
            "evidence": self.evidence,
            "not_covered": self.not_covered,
        }


@dataclass(frozen=True)
class Clause:
    """One requirement: ``id`` (stable, for tools), the ``framework`` (law, standard or practice),
    the ``reference`` in it, a paraphrased ``title``, and its ``rows``."""

    id: str
    framework: str
    reference: str
    title: str
    rows: tuple[Row, ...]

    def to_dict(self) -> ClauseRecord:
        return {
            "id": self.id,
            "framework": self.framework,
            "reference": self.reference,
            "title": self.title,
            "rows": [r.to_dict() for r in self.rows],
        }


@dataclass(frozen=True)
class Release:
    """When a benchmark's data files under the prefix ``files`` were first public, and the
    ``source`` of that date."""

    files: str
    published: date
    source: str

    def to_dict(self) -> ReleaseRecord:
        return {"files": self.files, "published": self.published.isoformat(), "source": self.source}


@dataclass(frozen=True)
class BenchmarkData:
    """What the mapping says of one benchmark's data: a licence note and its releases."""

    licence_note: str | None
    releases: tuple[Release, ...]

    def release_for(self, paths: Iterable[str]) -> Release | None:
        """The first release whose prefix matches one of ``paths`` (the data files the run read,
        relative to the data folder), or None."""
        paths = list(paths)
        return next((r for r in self.releases if any(p.startswith(r.files) for p in paths)), None)

    def to_dict(self) -> BenchmarkRecord:
        out: BenchmarkRecord = {"releases": [r.to_dict() for r in self.releases]}
        if self.licence_note:
            out["licence_note"] = self.licence_note
        return out


@dataclass(frozen=True)
class RegulatoryMapping:
    """A validated mapping, with the file it came from (``packaged`` for the shipped one) and
    that file's sha256."""

    clauses: tuple[Clause, ...]
    benchmarks: dict[str, BenchmarkData]
    file: str
    sha256: str

    def to_dict(self) -> MappingRecord:
        """JSON-ready, in the file's own shape (results.json ``regulatory_mapping``), so
        ``from_dict`` validates it again as a file is."""
        return {
            "file": self.file,
            "sha256": self.sha256,
            "version": 1,
            "clauses": [c.to_dict() for c in self.clauses],
            "benchmarks": {name: b.to_dict() for name, b in self.benchmarks.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object], where: str = "regulatory_mapping") -> RegulatoryMapping:
        """A recorded mapping (``to_dict``) back, validated.

        Raises:
            ConfigError: as ``load_mapping``, naming ``where``.
        """
        doc = {k: v for k, v in data.items() if k not in ("file", "sha256")}
        return _parse(doc, where, str(data.get("file", "")), str(data.get("sha256", "")), None)


@dataclass(frozen=True)
class Contamination:
    """A benchmark's contamination status: ``before`` (may be in the training data), ``after``
    (not in it by date) or ``unknown``, and the sentence the reports print."""

    status: str
    text: str


def contamination(published: date | None, cutoff: date | None) -> Contamination:
    """Whether data published on ``published`` can be in training data that ends on ``cutoff``.

    Data published on the cutoff day counts as before it: the check errs towards "may be in the
    training data".

    Examples
    --------
    >>> contamination(date(2021, 10, 15), date(2024, 6, 30)).status
    'before'
    >>> contamination(date(2025, 7, 15), date(2024, 6, 30)).text
    'after: published 2025-07-15, after the training-data cutoff 2024-06-30: not in the training data by date'
    >>> contamination(date(2021, 10, 15), None).status
    'unknown'
    """
    if cutoff is None:
        return Contamination(
            "unknown", "unknown: no training-data cutoff given (training_data_cutoff in --audit-meta)"
        )
    if published is None:
        return Contamination(
            "unknown", "unknown: the regulatory mapping gives no publication date for this data"
        )
    if published <= cutoff:
        return Contamination(
            "before",
            f"before: published {published.isoformat()}, before the training-data cutoff "
            f"{cutoff.isoformat()}: may be in the training data",
        )
    return Contamination(
        "after",
        f"after: published {published.isoformat()}, after the training-data cutoff "
        f"{cutoff.isoformat()}: not in the training data by date",
    )


def load_mapping(
    path: str | Path | None = None,
    known: Mapping[str, Collection[str]] | None = None,
    option: str = "--regulatory-mapping",
) -> RegulatoryMapping:
    """Read and validate a mapping file (the packaged one when ``path`` is None).

    Parameters
    ----------
    path : str or Path, optional
        The YAML file.
    known : mapping, optional
        ``{benchmark: metric names}`` of the suite: a row naming another benchmark or metric is
        an error (a typo would otherwise map nothing, silently).
    option : str
        The option that named the file, put before every message.

    Raises
    ------
    ConfigError
        Unreadable, not YAML, or a field missing, unknown or of the wrong type or value: the
        message names the file and the field (``clauses[2].rows[0].kind``).
    """
    file = Path(path) if path is not None else PACKAGED_MAPPING
    where = f"{option} {file}" if path is not None else str(file)
    doc, raw = read_yaml_file(file, where)
    name = str(path) if path is not None else "packaged"
    return _parse(doc, where, name, hashlib.sha256(raw).hexdigest(), known)


def _parse(
    raw: object, where: str, file: str, sha256: str, known: Mapping[str, Collection[str]] | None
) -> RegulatoryMapping:
    """``raw`` (a parsed YAML document or a recorded mapping, unchecked) validated."""
    read = _Reader(where, known)
    doc = read.mapping_of(raw, "top level", ("version", "clauses", "benchmarks"))
    if doc["version"] != 1:
        read.fail("version", f"must be 1, got {doc['version']!r}")
    listed = doc["clauses"]
    if not isinstance(listed, list) or not listed:
        read.fail("clauses", "must be a non-empty list")
    ids: set[str] = set()
    clauses = [read.clause(item, f"clauses[{i}]", ids) for i, item in enumerate(listed)]
    named = doc["benchmarks"]
    if not isinstance(named, dict):
        read.fail("benchmarks", "must be a mapping of benchmark names")
    benchmarks = {bench: read.benchmark(item, bench) for bench, item in named.items()}
    return RegulatoryMapping(tuple(clauses), benchmarks, file, sha256)


class _Reader:
    """Reads a mapping document's fields, each problem a ``ConfigError`` naming the file
    (``where``) and the field (``clauses[2].rows[0].kind``); ``known`` (``{benchmark: metric
    names}``, or None) checks the names rows give."""

    def __init__(self, where: str, known: Mapping[str, Collection[str]] | None):
        self.where = where
        self.known = known

    def fail(self, field: str, problem: str) -> NoReturn:
        raise ConfigError(f"{self.where}: {field}: {problem}")

    def mapping_of(
        self, value: object, field: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()
    ) -> dict[str, object]:
        if not isinstance(value, dict):
            self.fail(field, f"expected a mapping with {', '.join(keys)}")
        for k in value:
            if k not in keys:
                self.fail(f"{field}.{k}", f"unknown field (the fields: {', '.join(keys)})")
        for k in keys:
            if k not in value and k not in optional:
                self.fail(f"{field}.{k}", "missing")
        return value

    def text(self, value: object, field: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"must be non-empty text, got {value!r}")
        return " ".join(value.split())

    def names(self, value: object, field: str, allowed: Collection[str] | None) -> tuple[str, ...] | None:
        if value == "all":
            return None
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            also = f", '{BIAS}'" if field.endswith(".metrics") else ""
            self.fail(field, f"must be 'all'{also} or a non-empty list of names, got {value!r}")
        if allowed is not None:
            for v in value:
                if v not in allowed:
                    self.fail(field, f"unknown name {v!r} (known: {', '.join(sorted(allowed))})")
        return tuple(value)

    def clause(self, value: object, at: str, ids: set[str]) -> Clause:
        """A clause, its id not among ``ids`` (the clauses before it), which it joins."""
        raw = self.mapping_of(value, at, _CLAUSE_KEYS)
        cid = self.text(raw["id"], f"{at}.id")
        if cid in ids:
            self.fail(f"{at}.id", f"{cid!r} is listed twice")
        ids.add(cid)
        listed = raw["rows"]
        if not isinstance(listed, list) or not listed:
            self.fail(f"{at}.rows", "must be a non-empty list")
        rows = tuple(self.row(r, f"{at}.rows[{j}]") for j, r in enumerate(listed))
        return Clause(
            id=cid,
            framework=self.text(raw["framework"], f"{at}.framework"),
            reference=self.text(raw["reference"], f"{at}.reference"),
            title=self.text(raw["title"], f"{at}.title"),
            rows=rows,
        )

    def row(self, value: object, at: str) -> Row:
        r = self.mapping_of(value, at, _ROW_KEYS)
        kind = r["kind"]
        if not isinstance(kind, str) or kind not in KINDS:
            self.fail(f"{at}.kind", f"must be {' or '.join(KINDS)}, got {kind!r}")
        known = self.known
        benches = self.names(r["benchmarks"], f"{at}.benchmarks", known)
        metrics_known = None if known is None else {m for b in (benches or known) for m in known[b]}
        return Row(
            kind=kind,
            benchmarks=benches,
            metrics=BIAS
            if r["metrics"] == BIAS
            else self.names(r["metrics"], f"{at}.metrics", metrics_known),
            evidence=self.text(r["evidence"], f"{at}.evidence"),
            not_covered=self.text(r["not_covered"], f"{at}.not_covered"),
        )

    def benchmark(self, value: object, bench: str) -> BenchmarkData:
        at = f"benchmarks.{bench}"
        if self.known is not None and bench not in self.known:
            self.fail(at, f"unknown benchmark (known: {', '.join(sorted(self.known))})")
        raw = self.mapping_of(value, at, ("licence_note", "releases"), optional=("licence_note",))
        listed = raw["releases"]
        if not isinstance(listed, list):
            self.fail(f"{at}.releases", "must be a list")
        releases = tuple(self.release(rel, f"{at}.releases[{j}]") for j, rel in enumerate(listed))
        note = raw.get("licence_note")
        return BenchmarkData(self.text(note, f"{at}.licence_note") if note is not None else None, releases)

    def release(self, value: object, at: str) -> Release:
        rel = self.mapping_of(value, at, _RELEASE_KEYS)
        published = self.text(rel["published"], f"{at}.published")
        try:
            day = date.fromisoformat(published)
        except ValueError:
            self.fail(f"{at}.published", f"not a date YYYY-MM-DD: {published!r}")
        return Release(self.text(rel["files"], f"{at}.files"), day, self.text(rel["source"], f"{at}.source"))
