"""Where benchmark data lives, and the provenance (hashes, row counts) every results file records."""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from .errors import DataError

DATA_DIR_ENV = "AUDIT_DATA_DIR"


def default_data_dir() -> Path:
    """Where ``bias-audit data fetch`` puts data by default: ``$BIAS_AUDIT_CACHE/data``
    (``~/.cache/bias-audit/data``), beside the converted models."""
    from .paths import data_dir

    return data_dir()


def resolve_data_dir(option: str | os.PathLike | None) -> Path:
    """The data directory: the ``--data-dir`` option, else ``$AUDIT_DATA_DIR``, else
    :func:`default_data_dir` (which may not exist yet: the start-up check then names what to fetch).

    Raises:
        DataError: a directory given by option or environment does not exist.
    """
    raw = option or os.environ.get(DATA_DIR_ENV)
    if not raw:
        return default_data_dir().resolve()
    # absolute(), not resolve(): messages name the directory the user gave, not where its
    # symlink points.
    path = Path(raw).expanduser().absolute()
    if not path.is_dir():
        raise DataError(
            f"data directory {path} does not exist (from {'--data-dir' if option else DATA_DIR_ENV})"
        )
    return path


def require_file(path: Path, what: str) -> Path:
    """``path`` if it is a file, else DataError naming ``what`` it should hold."""
    if not path.is_file():
        raise DataError(f"missing {what}: {path}")
    return path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class DataFile:
    """Provenance of one data file read by an audit: path relative to the data dir, sha256, rows."""

    path: str
    sha256: str
    rows: int

    @classmethod
    def of(cls, path: Path, data_dir: Path, rows: int) -> "DataFile":
        return cls(str(path.relative_to(data_dir)), sha256_file(path), rows)


def csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, int, dict]]:
    """``(line where the row starts, header width, row)`` for each row of a CSV file with a
    header, read strictly (an unbalanced quote is an error instead of silently swallowing later
    rows). Rows are ``csv.DictReader``'s: a short row has ``None`` values, a long one a ``None``
    key; callers name those in their own terms.

    Raises:
        DataError: an empty file, a malformed header or row, a missing column among
            ``columns``, or bytes that are not UTF-8 (naming the column); messages are
            ``"<file>:<line>: ..."``.
    """
    # Bytes that are not UTF-8 decode as lone surrogates, found below with the line and column.
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f, strict=True)
        try:
            header = reader.fieldnames
        except csv.Error as e:
            raise DataError(f"{path}:1: malformed CSV header ({e})") from None
        if not header:
            raise DataError(f"{path}: empty file (no header row)")
        bad = lone_surrogate({"header": header})
        if bad is not None:
            raise DataError(f"{path}:1: the header holds bytes that are not UTF-8: fix the file's encoding")
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(f"{path}:1: missing column(s) {missing} (header: {header})")
        end = reader.line_num
        while True:
            start = end + 1  # a quoted field may span lines: report where the row starts
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise DataError(f"{path}:{start}: malformed CSV ({e})") from None
            end = reader.line_num
            bad = lone_surrogate({str(k): v for k, v in row.items()})
            if bad is not None:
                column = bad.removeprefix("field ")
                raise DataError(
                    f"{path}:{start}: column {column} holds bytes that are not UTF-8: fix the file's encoding"
                )
            yield start, len(header), row


def lone_surrogate(value: Mapping[str, object]) -> str | None:
    """Where in a decoded JSON row a string holds a lone surrogate (U+D800..U+DFFF, which
    ``json.loads`` accepts from a ``\\ud800`` escape but UTF-8 cannot encode), or None.

    Examples
    --------
    >>> lone_surrogate({"id": "Age-1", "answer": "A"}) is None
    True
    >>> lone_surrogate({"id": "Age-1", "answer": "B \\ud800"})
    "field 'answer'"
    >>> lone_surrogate({"meta": {"notes": ["ok", "\\udfff"]}})
    "field 'meta' at ['notes'][1]"
    """

    def walk(v: object, at: str) -> str | None:
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return at
            return None
        items: Iterable[tuple[object, object]] = (
            v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        )
        for k, inner in items:
            if isinstance(k, str) and walk(k, "") is not None:
                return f"{at}[{k!r}] (its name)"
            found = walk(inner, f"{at}[{k!r}]")
            if found is not None:
                return found
        return None

    for key, v in value.items():
        if walk(key, "") is not None:
            return f"a field name ({key!r})"
        found = walk(v, "")
        if found is not None:
            return f"field {key!r}" + (f" at {found}" if found else "")
    return None


def decoded_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """``(line number, text, whether the line is UTF-8)`` of each line of a text file. A line
    that is not UTF-8 decodes with its bad bytes as lone surrogates (``surrogateescape``), so
    that the caller can name the field holding them (``not_text``) instead of failing on the
    whole file without a line.
    """
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            try:
                yield line_no, raw.decode("utf-8"), True
            except UnicodeDecodeError:
                yield line_no, raw.decode("utf-8", "surrogateescape"), False


def not_text(row: Mapping[str, object], where: str, utf8: bool = True) -> DataError | None:
    """The error for a decoded row holding something that is not text, or None: bytes that were
    not UTF-8 (``decoded_lines``), or a JSON ``\\ud800``-style escape with no partner (which
    ``json.loads`` accepts but no UTF-8 file can hold: a run would die writing its records)."""
    bad = lone_surrogate(row)
    if bad is None:
        return None
    if utf8:
        problem = "holds a lone UTF-16 surrogate (a \\ud800-style escape with no partner), which is not text"
    else:
        problem = "holds bytes that are not UTF-8"
    return DataError(f"{where}: {bad} {problem}: fix the file's encoding")
