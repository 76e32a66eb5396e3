"""The start-up data check: do the selected benchmarks' files exist in the data dir? If not, say
which and print the exact ``bias-audit data fetch`` command, or fetch them (``--fetch-data``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Iterable, Mapping

from ..errors import DataError
from . import benchmark_names, entry, table


def _pinned(needed: Mapping[str, str]) -> dict[str, str]:
    """``needed`` with each file attributed to the benchmark the source table fetches it for: a
    benchmark that reads another one's files (a variant of BBQ) is served by that one's entry."""
    out = {}
    for path, bench in needed.items():
        e = entry(path)
        out[path] = bench if e is None or bench in e.benchmarks or not e.benchmarks else e.benchmarks[0]
    return out


def require_files(
    data_dir: Path, needed: Mapping[str, str], *, fetch: bool = False, base_url: str | None = None
) -> None:
    """Stop (DataError) unless every file in ``needed`` (``{path relative to the data dir:
    benchmark}``: what the selected categories read, ``Benchmark.data_files``) is in
    ``data_dir``. Files the pinned source table knows to be unavailable upstream are not
    required (their gates are skipped, and reported). With ``fetch``, the benchmarks of missing
    files are fetched first and the check repeats.

    Raises:
        DataError: one line naming the data dir, the first missing file (and how many more), the
            benchmark(s), and the fetch command.
    """
    data_dir = Path(data_dir)
    needed = _pinned(needed)
    unavailable = {e.path for e in table() if not e.available}

    def absent() -> dict[str, str]:
        return {p: b for p, b in needed.items() if p not in unavailable and not (data_dir / p).is_file()}

    missing = absent()
    if missing and fetch:
        why = _fetch_missing(data_dir, missing, base_url)
        missing = absent()
        if missing:
            raise DataError(
                f"could not fetch {', '.join(dict.fromkeys(missing.values()))} data "
                f"into {data_dir}{why}; when online run: "
                f"{fetch_command(dict.fromkeys(missing.values()), data_dir)}, or pass "
                "--data-dir DIR with a copy"
            )
        return
    if missing:
        raise _missing_error(data_dir, needed, missing)


def _fetch_missing(data_dir: Path, missing: Mapping[str, str], base_url: str | None) -> str:
    """Fetch the pinned benchmarks of the ``missing`` files into ``data_dir`` (progress on
    stderr); the first failure as `` (<path>: <detail>)``, or ``""``."""
    from .fetch import FAILED
    from .fetch import fetch as do_fetch

    wanted = [b for b in dict.fromkeys(missing.values()) if b in benchmark_names()]
    print(f"bias audit: fetching {', '.join(wanted)} data into {data_dir}", file=sys.stderr)
    results = do_fetch(
        wanted, data_dir, base_url=base_url, out=lambda line: print(f"  {line}", file=sys.stderr)
    )
    failed = [r for r in results if r.status == FAILED]
    return f" ({failed[0].entry.path}: {failed[0].detail})" if failed else ""


def _missing_error(data_dir: Path, needed: Mapping[str, str], missing: Mapping[str, str]) -> DataError:
    """The error naming the data dir, the first missing file (and how many more), the
    benchmarks and the fetch command (or, for a benchmark without a pinned source, that)."""
    benches = list(dict.fromkeys(missing.values()))
    first = next(iter(missing))
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    # A folder holding no benchmark folder at all is most likely one level off (bbq/ itself).
    folders = sorted({p.split("/")[0] for p in needed} | {e.path.split("/")[0] for e in table()})
    if not data_dir.is_dir() or not any((data_dir / f).is_dir() for f in folders):
        lead = (
            f"data directory {data_dir} holds none of {', '.join(f + '/' for f in folders)} "
            "(pass the folder that contains them"
        )
    else:
        lead = (
            f"data directory {data_dir} lacks {', '.join(benches)} data ({first}{more}; pass "
            "--data-dir DIR with a copy"
        )
    unpinned = [b for b in benches if b not in benchmark_names()]
    if unpinned and len(unpinned) == len(benches):
        return DataError(
            f"{lead}; {', '.join(unpinned)} has no pinned source to fetch from: add its files to "
            "audit_harness/sources/sources.yaml)"
        )
    return DataError(f"{lead}, add --fetch-data, or run: {fetch_command(benches, data_dir)})")


def fetch_command(benchmarks: Iterable[str], data_dir: Path) -> str:
    """The shell command that fetches ``benchmarks`` into ``data_dir``; with
    ``--accept-unlicensed`` (and why) when one of them has files without a licence (KGQuiz), since
    fetch skips those otherwise."""
    from . import files_for

    benchmarks = [b for b in benchmarks if b in benchmark_names()]
    command = f"bias-audit data fetch {' '.join(benchmarks)} --to {shlex.quote(str(data_dir))}"
    if any(e.license is None for e in files_for(benchmarks) if e.available):
        command += (
            " --accept-unlicensed (its authors grant no licence: internal evaluation "
            "only, never redistribute)"
        )
    return command
