"""The start-up data check: do the selected benchmarks' files exist in the data dir? If not, say
which and print the exact ``bias-audit data fetch`` command, or fetch them (``--fetch-data``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Iterable

from ..errors import DataError
from . import SourceFile, benchmark_names, files_for


def missing_data(data_dir: Path, benchmarks: Iterable[str]) -> dict[str, list[SourceFile]]:
    """Per benchmark, the table's available ``data`` files absent from ``data_dir`` (benchmarks
    with nothing missing, and names the table does not know, are left out)."""
    known = set(benchmark_names())
    missing: dict[str, list[SourceFile]] = {}
    for b in benchmarks:
        if b not in known:
            continue
        absent = [e for e in files_for([b]) if e.role == "data" and e.available
                  and not (Path(data_dir) / e.path).is_file()]
        if absent:
            missing[b] = absent
    return missing


def fetch_command(benchmarks: Iterable[str], data_dir: Path) -> str:
    """The shell command that fetches ``benchmarks`` into ``data_dir``; with
    ``--accept-unlicensed`` (and why) when one of them has files without a licence (KGQuiz), since
    fetch skips those otherwise."""
    from . import files_for

    benchmarks = list(benchmarks)
    command = f"bias-audit data fetch {' '.join(benchmarks)} --to {shlex.quote(str(data_dir))}"
    if any(e.license is None for e in files_for(benchmarks) if e.available):
        command += (" --accept-unlicensed (its authors grant no licence: internal evaluation "
                    "only, never redistribute)")
    return command


def require_data(data_dir: Path, benchmarks: Iterable[str], all_folders: Iterable[str], *,
                 fetch: bool = False, base_url: str | None = None) -> None:
    """Stop (DataError) unless every selected benchmark's data files are in ``data_dir``.

    ``all_folders``: the data folders of every registered benchmark, so that a data dir holding
    none of them (typically the wrong level) is named as such. With ``fetch``, missing files are
    fetched first (progress on stderr) and the check repeats.

    Raises:
        DataError: one line naming the data dir, the benchmark(s) and first missing file, and the
            fetch command (or, with ``fetch``, what the fetch could not bring).
    """
    data_dir = Path(data_dir)
    benchmarks = list(dict.fromkeys(benchmarks))
    missing = missing_data(data_dir, benchmarks)
    if missing and fetch:
        from .fetch import FAILED, fetch as do_fetch

        print(f"bias audit: fetching {', '.join(missing)} data into {data_dir}", file=sys.stderr)
        results = do_fetch(list(missing), data_dir, base_url=base_url,
                           out=lambda line: print(f"  {line}", file=sys.stderr))
        failed = [r for r in results if r.status == FAILED]
        missing = missing_data(data_dir, benchmarks)
        if missing:
            why = f" ({failed[0].entry.path}: {failed[0].detail})" if failed else ""
            raise DataError(f"could not fetch {', '.join(missing)} data into {data_dir}{why}; "
                            f"when online run: {fetch_command(missing, data_dir)}, or pass "
                            "--data-dir DIR with a copy")
        return
    if not missing:
        return
    folders = sorted(set(all_folders))
    if not any((data_dir / f).is_dir() for f in folders):
        lead = (f"data directory {data_dir} holds none of {', '.join(f + '/' for f in folders)}"
                " (pass the folder that contains them")
    else:
        first = next(iter(missing.values()))
        n = sum(len(v) for v in missing.values())
        lead = (f"data directory {data_dir} lacks {', '.join(missing)} data ({first[0].path}"
                + (f" and {n - 1} more" if n > 1 else "") + "; pass --data-dir DIR with a copy")
    raise DataError(f"{lead}, add --fetch-data, or run: {fetch_command(missing, data_dir)})")
