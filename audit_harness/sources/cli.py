"""``bias-audit data``: fetch the benchmark files from the authors' pinned commits, or verify a
data folder against the source table.

    bias-audit data fetch [BENCHMARK ...] [--to DIR] [--accept-unlicensed] [--source-base-url URL]
                          [--retries N] [--no-progress]
    bias-audit data verify [BENCHMARK ...] [--data-dir DIR]
    bias-audit data list

Exit codes: 0 when every requested file is in place and verified (unavailable and skipped files
are reported, not errors); 1 when a file failed (download error, wrong hash, a local file that
differs); 4 for a usage error (raised as ConfigError for ``bias-audit``'s one-line handler).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Sequence

from ..errors import ConfigError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse API
        raise ConfigError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    from . import benchmark_names

    names = ", ".join(benchmark_names())
    p = _Parser(prog="bias-audit data", description="Benchmark data from the authors' sources.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    f = sub.add_parser("fetch", help="download and verify benchmark files")
    f.add_argument("benchmarks", nargs="*", metavar="BENCHMARK", help=f"any of {names} (default: all)")
    f.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="DIR",
        help="data dir to fill (default: $AUDIT_DATA_DIR, else $BIAS_AUDIT_CACHE/data)",
    )
    f.add_argument(
        "--accept-unlicensed",
        action="store_true",
        help="also fetch files whose authors grant no licence (KGQuiz), for internal evaluation only",
    )
    f.add_argument(
        "--source-base-url",
        default=None,
        metavar="URL",
        help="fetch {URL}/{repo}/{commit}/{path} instead of raw.githubusercontent.com (a mirror)",
    )
    f.add_argument("--retries", type=int, default=4, metavar="N", help="attempts per file")
    f.add_argument("--no-progress", action="store_true", help="plain lines, no progress bar")
    v = sub.add_parser("verify", help="check a data dir against the pinned hashes")
    v.add_argument(
        "benchmarks",
        nargs="*",
        metavar="BENCHMARK",
        help="default: every benchmark whose folder exists in the data dir",
    )
    v.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="default: $AUDIT_DATA_DIR, else $BIAS_AUDIT_CACHE/data",
    )
    sub.add_parser("list", help="print the source table")
    return p


def main(argv: Sequence[str]) -> int:
    """Run ``bias-audit data ARGV``; returns the exit code (see the module docstring).

    Raises:
        ConfigError: bad arguments. DataError: an unknown benchmark name, a missing data dir.
    """
    from ..data import DATA_DIR_ENV, default_data_dir, resolve_data_dir
    from . import files_for, table
    from .download import RetryPolicy
    from .fetch import FAILED, MISSING, MODIFIED, summary, timed_fetch, verify

    try:
        ns = _parser().parse_args(list(argv))
    except SystemExit as e:  # --help
        return int(e.code or 0) if isinstance(e.code, int) else 0
    if ns.action == "list":
        for entry in table():
            state = entry.sha256[:12] if entry.sha256 else "unavailable"
            print(
                f"{'/'.join(entry.benchmarks):<12} {entry.path:<58} {state:<12} "
                f"{entry.license or 'NO LICENCE'}  {entry.repo}@{entry.commit[:7]}:{entry.upstream}"
            )
        return 0
    if ns.action == "fetch":
        if ns.retries < 1:
            raise ConfigError("bias-audit data fetch: --retries must be >= 1")
        files_for(ns.benchmarks or None)  # unknown names stop here, before any download
        # Like resolve_data_dir, except that the folder need not exist yet.
        to = Path(ns.to or os.environ.get(DATA_DIR_ENV) or default_data_dir()).expanduser().resolve()
        print(f"fetching into {to}")
        results, seconds = timed_fetch(
            ns.benchmarks or None,
            to,
            base_url=ns.source_base_url,
            accept_unlicensed=ns.accept_unlicensed,
            retry=RetryPolicy(attempts=ns.retries),
            progress=False if ns.no_progress else None,
        )
        print(summary(results, seconds))
        return 1 if any(r.status == FAILED for r in results) else 0
    data_dir = resolve_data_dir(ns.data_dir)
    if not data_dir.is_dir():
        raise ConfigError(f"bias-audit data verify: {data_dir} does not exist")
    results = verify(data_dir, ns.benchmarks or None)
    for r in results:
        print(r.line())
    print(f"{data_dir}: {summary(results)}")
    return 1 if any(r.status in (MODIFIED, MISSING) for r in results) else 0
