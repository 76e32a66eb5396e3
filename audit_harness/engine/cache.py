"""The result cache: scores already computed, in one SQLite file, so a repeated run costs nothing and
a run killed half-way recomputes only what is missing.

A key is the sha256 of (engine version, model key, request kind, exact token ids [, positions]):
the model key is the weights' fingerprint with the dtype and device type (bf16 and fp32 scores
differ), so changing the weights, the tokenizer's output or the engine's numerics misses.
Scores are little-endian float64 arrays; generations (``"gen"`` requests) are the decoded text,
in their own table, before any stop string is applied. Several processes (pytest-xdist workers) may read and
write one file at once: WAL journal, a busy timeout, and retries of a locked write.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import struct
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

#: Bumped whenever the engine's numbers for the same tokens could change.
ENGINE_VERSION = "engine-1"
FILE_NAME = "scores.sqlite"


def default_cache_dir() -> Path:
    """``<user cache dir>/scores`` (``audit_harness.paths.scores_dir()``)."""
    from ..paths import scores_dir

    return scores_dir()


def open_checked(folder: str | os.PathLike) -> "ResultCache":
    """A ``ResultCache`` in ``folder``, checked to be a readable cache before any scoring.

    Raises:
        ConfigError: the folder cannot be created, or ``scores.sqlite`` there is not a valid
            cache (not a database, or not this suite's tables): move it away or use --no-cache.
    """
    from ..errors import ConfigError

    path = Path(folder).expanduser() / FILE_NAME
    try:
        cache = ResultCache(folder)
        cache.check()
    except sqlite3.DatabaseError as e:
        raise ConfigError(
            f"cache file {path} is not a valid cache ({e}): move it away or use --no-cache"
        ) from None
    except OSError as e:
        raise ConfigError(
            f"--cache-dir {Path(folder)}: cannot open the result cache ({e.strerror or e})"
        ) from None
    return cache


def request_key(model_key: str, kind: str, ids: Sequence[int], extra: Sequence[int] = ()) -> bytes:
    """32-byte key of one request. ``kind`` names the request type (``"ll"``: continuation
    log-likelihood of (context, continuation) with ``ids`` the context and ``extra`` the
    continuation; ``"tlp"``: token log-probabilities of ``ids`` at positions ``extra``; ``"gen"``:
    greedy generation after prompt ``ids`` with ``extra`` = (max_new_tokens,))."""
    h = hashlib.sha256()
    h.update(f"{ENGINE_VERSION}\0{model_key}\0{kind}\0{len(ids)}\0".encode())
    h.update(struct.pack(f"<{len(ids)}q", *ids))
    h.update(struct.pack(f"<{len(extra)}q", *extra))
    return h.digest()


def pack(values: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(values)}d", *values)


def unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 8}d", blob))


class ResultCache:
    """SQLite key -> float64 array store (see module doc).

    Args:
        folder: created if missing; the database is ``folder/scores.sqlite``.
        retries: attempts of a write that finds the database locked (exponential back-off
            from 50 ms), on top of SQLite's own 30 s busy timeout.
    Raises:
        OSError / sqlite3.Error: the folder cannot be created or the file is not a database.
    """

    def __init__(self, folder: str | os.PathLike, retries: int = 8):
        self.folder = Path(folder).expanduser()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / FILE_NAME
        self.retries = retries
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._retry(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._retry(
            lambda: self._db.execute(
                "CREATE TABLE IF NOT EXISTS results (key BLOB PRIMARY KEY, value BLOB NOT NULL)"
            )
        )
        self._retry(
            lambda: self._db.execute(
                "CREATE TABLE IF NOT EXISTS generations (key BLOB PRIMARY KEY, text TEXT NOT NULL)"
            )
        )

    def _retry(self, fn):
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or attempt == self.retries:
                    raise
                time.sleep(delay)
                delay *= 2

    def _select(self, table: str, column: str, keys: Iterable[bytes]) -> list[tuple]:
        keys = list(keys)
        rows: list[tuple] = []
        for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
            chunk = keys[start : start + 500]
            rows += self._retry(
                lambda chunk=chunk: self._db.execute(
                    f"SELECT key, {column} FROM {table} WHERE key IN ({','.join('?' * len(chunk))})", chunk
                ).fetchall()
            )
        return rows

    def _insert(self, table: str, column: str, rows: list[tuple]) -> None:
        if not rows:
            return

        def write():
            with self._db:  # BEGIN ... COMMIT, rolled back on error
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(f"INSERT OR IGNORE INTO {table} (key, {column}) VALUES (?, ?)", rows)

        self._retry(write)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, list[float]]:
        """The stored scores of those ``keys`` that are present."""
        return {k: unpack(v) for k, v in self._select("results", "value", keys)}

    def put_many(self, items: Mapping[bytes, Sequence[float]]) -> None:
        """Store scores in one transaction (an existing key keeps its value: same key, same
        numbers)."""
        self._insert("results", "value", [(k, pack(v)) for k, v in items.items()])

    def get_texts(self, keys: Iterable[bytes]) -> dict[bytes, str]:
        """The stored generations of those ``keys`` that are present."""
        return dict(self._select("generations", "text", keys))

    def put_texts(self, items: Mapping[bytes, str]) -> None:
        """Store generations in one transaction (an existing key keeps its text)."""
        self._insert("generations", "text", list(items.items()))

    def check(self) -> None:
        """Read one row of each table, so a damaged file fails here rather than mid-run.

        Raises:
            sqlite3.DatabaseError: the file is not a database, or its tables are unreadable.
        """
        for table in ("results", "generations"):
            self._db.execute(f"SELECT key FROM {table} LIMIT 1").fetchall()
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(results)")}
        if not {"key", "value"} <= columns:
            raise sqlite3.DatabaseError("its results table is not this suite's (key, value)")

    def __len__(self) -> int:
        """Stored entries, scores and generations together."""
        return sum(
            self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("results", "generations")
        )

    def close(self) -> None:
        self._db.close()
