"""One verified download: stream a URL into ``<target>.part`` (resuming with a Range request when a
part exists), retry transient failures with exponential backoff, check size and sha256, then move
the file into place atomically. A wrong hash deletes the part and raises; nothing unverified is
ever left at ``target``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import httpx

from ..data import sha256_file
from ..errors import DataError


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per file and the backoff between them: ``backoff_s * 2**k`` seconds, capped."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def delay(self, attempt: int) -> float:
        return min(self.backoff_s * (2**attempt), self.max_backoff_s)


class DownloadError(DataError):
    """A file could not be downloaded (HTTP error, or network failure after every retry).

    ``transport`` is True when the network itself failed (no connection, reset, timeout), so a
    caller can stop trying further files of the same host."""

    def __init__(self, message: str, transport: bool = False):
        super().__init__(message)
        self.transport = transport


class HashMismatch(DataError):
    """The downloaded bytes are not the pinned ones (size or sha256 differ); nothing was kept."""


class _Retryable(Exception):
    pass


def part_path(target: Path) -> Path:
    """Where the bytes of ``target`` accumulate until they are verified."""
    return target.with_name(target.name + ".part")


def download(
    client: httpx.Client,
    url: str,
    target: Path,
    *,
    sha256: str,
    size: int | None,
    retry: RetryPolicy = RetryPolicy(),
    on_bytes: Callable[[int], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Download ``url`` to ``target``, verified against ``sha256`` (hex) and ``size`` (bytes).

    Resumes an existing ``<target>.part`` with ``Range: bytes=N-`` (a 206 reply appends; a 200
    reply, from a server that ignores ranges, restarts the file). Connection errors, timeouts,
    responses cut short, 429 and 5xx are retried ``retry.attempts`` times in all, with
    exponential backoff. ``on_bytes(n)`` is called per chunk written (for a progress bar).

    Returns:
        The number of bytes transferred over the network by this call (0 when a complete part was
        already there).

    Raises:
        DownloadError: a non-retryable HTTP status (e.g. 404), or every attempt failed.
        HashMismatch: the complete file has another size or sha256 (the part is deleted).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(target)
    transferred = 0

    def written(n: int) -> None:  # counts what failed attempts wrote too: it crossed the network
        nonlocal transferred
        transferred += n
        if on_bytes:
            on_bytes(n)

    last_error = "no attempt made"
    network_failed = False
    for attempt in range(max(1, retry.attempts)):
        if attempt:
            sleep(retry.delay(attempt - 1))
        try:
            _fetch_rest(client, url, part, size, written)
            break
        except httpx.TransportError as e:
            last_error, network_failed = f"{type(e).__name__}: {e}", True
        except _Retryable as e:
            last_error, network_failed = str(e), False
    else:
        raise DownloadError(
            f"{url}: failed after {retry.attempts} attempts ({last_error})", transport=network_failed
        )
    _verify_and_move(part, target, sha256, size)
    return transferred


def _fetch_rest(
    client: httpx.Client, url: str, part: Path, size: int | None, written: Callable[[int], None]
) -> None:
    """One attempt: the bytes of ``url`` that ``part`` lacks appended to it (``Range``), or the
    whole file written again when the server ignores ranges; nothing when ``part`` is complete.
    ``written(n)`` is called per chunk.

    Raises:
        _Retryable: HTTP 429 or 5xx. httpx.TransportError: the connection failed or was cut.
        DownloadError: another HTTP status, or a reply for another range.
    """
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:
        part.unlink()  # longer than the file can be: not a prefix of it
        offset = 0
    if size is not None and offset == size:
        return  # a complete part from an earlier run: just verify it
    # identity: a Range then counts the file's own bytes, not those of a gzip encoding.
    headers = {"Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    with client.stream("GET", url, headers=headers) as r:
        if r.status_code == 416 and offset:
            return  # nothing left to send: verify what we have
        if r.status_code == 429 or r.status_code >= 500:
            raise _Retryable(f"HTTP {r.status_code}")
        if r.status_code not in (200, 206):
            raise DownloadError(f"{url}: HTTP {r.status_code}")
        if r.status_code == 206 and not r.headers.get("content-range", "").startswith(f"bytes {offset}-"):
            raise DownloadError(
                f"{url}: server answered the range request with "
                f"Content-Range {r.headers.get('content-range')!r}"
            )
        with open(part, "ab" if r.status_code == 206 else "wb") as f:
            for chunk in r.iter_bytes():  # as received: a cut loses nothing written
                f.write(chunk)
                written(len(chunk))


def _verify_and_move(part: Path, target: Path, sha256: str, size: int | None) -> None:
    actual_size = part.stat().st_size
    actual = sha256_file(part)
    if (size is not None and actual_size != size) or actual != sha256:
        part.unlink()
        raise HashMismatch(
            f"{target.name}: downloaded {actual_size} bytes with sha256 {actual}, "
            f"expected {size} bytes with sha256 {sha256}; rejected, nothing kept"
        )
    os.replace(part, target)  # atomic on one file system: readers see no file or the whole file
