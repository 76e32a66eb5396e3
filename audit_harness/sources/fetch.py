"""``bias-audit data fetch`` and ``data verify``: bring benchmark files from the authors' pinned
commits into a data dir, and check a data dir against the source table.

Every file comes from ``{base}/{repo}/{commit}/{upstream path}`` (raw.githubusercontent.com by
default) and is kept only when its sha256 equals the pinned one. Beside each benchmark folder a
``SOURCE.md`` stub records where the files came from (an existing ``SOURCE.md`` not written by
this module is never touched); the licence files are table entries and are fetched with the data.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from ..data import sha256_file
from ..redact import redact_text
from . import SourceFile, files_for, git_blob_file
from .download import DownloadError, HashMismatch, RetryPolicy, download, part_path

BASE_URL_ENV = "BIAS_AUDIT_SOURCE_BASE_URL"  # a mirror in the repositories' layout
STUB_MARKER = "<!-- written by `bias-audit data fetch`; replaced on the next fetch -->"
UNLICENSED_REASON = (
    "the authors grant no licence (see the benchmark's SOURCE.md: no LICENSE, "
    "no terms; KGQuiz's UMLS items must never be redistributed); pass "
    "--accept-unlicensed to fetch it for internal evaluation only"
)

# Statuses of a FileResult.
FETCHED, PRESENT, UNAVAILABLE, SKIPPED, FAILED = "fetched", "present", "unavailable", "skipped", "failed"
OK, MODIFIED, MISSING = "ok", "MODIFIED", "missing"


@dataclass(frozen=True)
class FileResult:
    """Outcome for one table entry: ``status`` (see the constants), a human ``detail``, and the
    bytes transferred over the network for it."""

    entry: SourceFile
    status: str
    detail: str = ""
    bytes: int = 0

    def line(self) -> str:
        return f"{self.status:<11} {self.entry.path}" + (f"  ({self.detail})" if self.detail else "")


def _interactive(stream) -> bool:
    """A progress bar only for a person watching: a TTY, and not under CI."""
    return stream.isatty() and os.environ.get("CI", "").lower() not in ("1", "true", "yes")


def fetch(
    benchmarks: Iterable[str] | None,
    to: Path,
    *,
    base_url: str | None = None,
    accept_unlicensed: bool = False,
    retry: RetryPolicy | None = None,
    timeout_s: float = 30.0,
    out: Callable[[str], None] | None = None,
    progress: bool | None = None,
) -> list[FileResult]:
    """Fetch the table's files for ``benchmarks`` (all when None) into the data dir ``to``.

    A file already in place with the pinned sha256 is "present" (nothing downloaded); one in place
    with another sha256 is "failed" and left untouched (never overwritten, never kept silently as
    if it were the published file). Entries without a verified copy are "unavailable"; files
    without a licence are "skipped" unless ``accept_unlicensed``. After a network failure
    (connection refused, DNS, timeouts after every retry) the remaining downloads are not
    attempted. ``base_url`` defaults to ``$BIAS_AUDIT_SOURCE_BASE_URL``, else raw GitHub. ``out`` receives one line per file (default: stdout); ``progress`` shows a tqdm bar
    (default: when stderr is a TTY and ``CI`` is not set).

    Returns:
        One FileResult per entry, in table order.

    Raises:
        DataError: an unknown benchmark name.
    """
    import httpx

    entries = files_for(benchmarks)
    retry = retry or RetryPolicy()
    base_url = base_url or os.environ.get(BASE_URL_ENV) or None
    out = out or print
    to = Path(to)
    show_bar = _interactive(sys.stderr) if progress is None else progress
    results: list[FileResult] = []
    network_down: str | None = None
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        for e in entries:
            result = _fetch_one(client, e, to, base_url, accept_unlicensed, retry, show_bar, network_down)
            if result.status == FAILED and result.detail.startswith("network:"):
                network_down = network_down or result.detail
            results.append(result)
            out(result.line())
    _write_stubs(to, results, base_url)
    return results


def _fetch_one(
    client, e: SourceFile, to: Path, base_url, accept_unlicensed, retry, show_bar, network_down
) -> FileResult:
    target = to / e.path
    if not e.available:
        where = f"{e.repo}@{e.commit[:7]}:{e.upstream}"
        return FileResult(
            e, UNAVAILABLE, f"no verified copy pinned; upstream {where}" + (f"; {e.note}" if e.note else "")
        )
    if e.license is None and not accept_unlicensed:
        return FileResult(e, SKIPPED, UNLICENSED_REASON)
    if target.is_file():
        actual = sha256_file(target)
        if actual == e.sha256:
            return FileResult(e, PRESENT, "sha256 ok")
        return FileResult(
            e,
            FAILED,
            f"already there with sha256 {actual[:16]}…, not the published "
            f"{e.sha256[:16]}…; left untouched (delete it to re-fetch)",
        )
    if network_down:
        return FileResult(e, FAILED, "network: not attempted after an earlier network failure")
    bar = None
    if show_bar:
        from tqdm import tqdm

        done = part_path(target).stat().st_size if part_path(target).exists() else 0
        bar = tqdm(
            total=e.size, initial=done, unit="B", unit_scale=True, desc=e.path, leave=False, file=sys.stderr
        )
    try:
        n = download(
            client,
            e.url(base_url),
            target,
            sha256=e.sha256,
            size=e.size,
            retry=retry,
            on_bytes=bar.update if bar else None,
        )
    except HashMismatch as err:
        return FileResult(e, FAILED, redact_text(f"rejected: {err}"))
    except DownloadError as err:  # its message names the URL: a mirror's credentials masked
        return FileResult(e, FAILED, ("network: " if err.transport else "") + redact_text(str(err)))
    finally:
        if bar:
            bar.close()
    return FileResult(e, FETCHED, f"{n} bytes downloaded, sha256 ok", n)


def _write_stubs(to: Path, results: list[FileResult], base_url: str | None) -> None:
    """A SOURCE.md per benchmark folder touched: repositories, commits, licences, file hashes."""
    by_folder: dict[str, list[FileResult]] = {}
    for r in results:
        if r.status in (FETCHED, PRESENT):
            by_folder.setdefault(r.entry.folder, []).append(r)
    for folder, rs in by_folder.items():
        path = to / folder / "SOURCE.md"
        if path.exists() and STUB_MARKER not in path.read_text(encoding="utf-8", errors="replace"):
            continue  # a curated SOURCE.md: never overwritten
        now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        repos = dict.fromkeys((r.entry.repo, r.entry.commit, r.entry.license) for r in rs)
        lines = [
            STUB_MARKER,
            f"# {folder}: fetched from the authors' repositories",
            "",
            f"Fetched {now} by `bias-audit data fetch` from "
            f"{redact_text((base_url or 'https://raw.githubusercontent.com').rstrip('/'))}; every file's "
            "sha256 equals the pinned source table (`audit_harness/sources/sources.yaml`).",
            "",
        ]
        for repo, commit, lic in repos:
            lines.append(
                f"- `{repo}` @ `{commit}`: licence "
                + (
                    f"{lic} (see the LICENSE file here, or the repository README where it ships none)"
                    if lic
                    else "**none granted**: internal evaluation only, never redistribute"
                )
            )
        lines += ["", "| file | upstream | bytes | sha256 |", "|---|---|---:|---|"]
        lines += [
            f"| `{r.entry.path[len(folder) + 1 :]}` | `{r.entry.upstream}` | {r.entry.size} | "
            f"`{r.entry.sha256}` |"
            for r in rs
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def verify(data_dir: Path, benchmarks: Iterable[str] | None = None) -> list[FileResult]:
    """Check ``data_dir`` against the table: every entry of ``benchmarks`` (default: those whose
    folder exists in ``data_dir``) is "ok" (published bytes), "MODIFIED" (other bytes), "missing",
    or "unavailable" (absent, and no verified copy exists). An entry pinned only by git blob is
    "ok" when its git blob matches. Reads every file once (about 0.3 s per 100 MB)."""
    data_dir = Path(data_dir)
    entries = (
        files_for(benchmarks)
        if benchmarks
        else [e for e in files_for(None) if (data_dir / e.folder).is_dir()]
    )
    results = []
    for e in entries:
        path = data_dir / e.path
        if not path.is_file():
            results.append(
                FileResult(
                    e,
                    MISSING if e.available else UNAVAILABLE,
                    "" if e.available else (e.note or "no verified copy"),
                )
            )
            continue
        if e.sha256 is not None:
            actual = sha256_file(path)
            ok = actual == e.sha256
            detail = "sha256 ok" if ok else f"sha256 {actual}, published {e.sha256}"
        elif e.git_blob is not None:
            actual = git_blob_file(path)
            ok = actual == e.git_blob
            detail = "git blob ok" if ok else f"git blob {actual}, published {e.git_blob}"
        else:
            results.append(FileResult(e, UNAVAILABLE, "present, but no hash is known to check it"))
            continue
        results.append(FileResult(e, OK if ok else MODIFIED, detail))
    return results


def summary(results: list[FileResult], seconds: float | None = None) -> str:
    """One line: counts per status (and bytes and time for a fetch)."""
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    text = ", ".join(f"{n} {s}" for s, n in counts.items()) or "nothing to do"
    moved = sum(r.bytes for r in results)
    if seconds is not None:
        text += f"; {moved} bytes downloaded in {seconds:.1f} s"
    return text


def timed_fetch(*args, **kwargs) -> tuple[list[FileResult], float]:
    """:func:`fetch` and its wall time in seconds."""
    start = time.perf_counter()
    results = fetch(*args, **kwargs)
    return results, time.perf_counter() - start
