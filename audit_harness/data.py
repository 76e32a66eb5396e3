"""Where benchmark data lives, and the provenance (hashes, row counts) every results file records."""

from __future__ import annotations

import csv
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

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
        DataError: an empty file, a malformed header or row, or a missing column among
            ``columns``; messages are ``"<file>:<line>: ..."``.
    """
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, strict=True)
        try:
            header = reader.fieldnames
        except csv.Error as e:
            raise DataError(f"{path}:1: malformed CSV header ({e})") from None
        if not header:
            raise DataError(f"{path}: empty file (no header row)")
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
            yield start, len(header), row
