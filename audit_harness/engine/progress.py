"""Progress of long scoring runs: one bar per (benchmark, category).

Modes (``progress_mode``): ``bar`` (tqdm on an interactive terminal: items, items/s, ETA),
``lines`` (plain lines every ``interval`` seconds: in CI, ``CI=true``, where carriage-return bars
turn into noise, and in pytest-xdist workers, whose stderr several processes share; each line is
whole and names the worker), ``off`` (``-q``). Short runs print nothing: a bar appears after
``delay`` seconds, the first line after ``interval``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, TextIO

MODES = ("bar", "lines", "off")
#: Seconds between plain lines (env ``BIAS_AUDIT_PROGRESS_INTERVAL`` overrides).
DEFAULT_INTERVAL = 30.0


def progress_mode(quiet: bool, stream: TextIO | None = None, env=None, worker: str | None = None) -> str:
    """``off`` when quiet; ``lines`` under CI (env ``CI`` true) or in an xdist worker or on a
    non-terminal stream; else ``bar``."""
    env = os.environ if env is None else env
    if quiet:
        return "off"
    if env.get("CI", "").lower() in ("1", "true", "yes") or worker:
        return "lines"
    stream = stream or sys.stderr
    return "bar" if getattr(stream, "isatty", lambda: False)() else "lines"


class Progress:
    """Factory of per-category progress tasks.

    Args:
        mode: one of ``MODES``.
        stream: where to write (default stderr).
        interval: seconds between plain lines (``lines`` mode).
        delay: seconds before a bar appears (``bar`` mode).
        prefix: put before every line (the xdist worker id).
        line_start: called before each plain line, so that a line never continues one the
            caller's terminal has left open (pytest's row of test outcomes).
    Raises:
        ValueError: an unknown mode or a negative interval.
    """

    def __init__(
        self,
        mode: str = "off",
        stream: TextIO | None = None,
        interval: float | None = None,
        delay: float = 2.0,
        prefix: str = "",
        line_start: Callable[[], None] | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {mode!r}")
        if interval is None:
            interval = float(os.environ.get("BIAS_AUDIT_PROGRESS_INTERVAL", DEFAULT_INTERVAL))
        if interval < 0:
            raise ValueError(f"progress interval must be >= 0, got {interval}")
        self.mode, self.stream, self.interval, self.delay, self.prefix = mode, stream, interval, delay, prefix
        self.line_start = line_start

    def task(self, label: str, total: float) -> "ProgressTask":
        return ProgressTask(self, label, total)


class ProgressTask:
    """One category's progress; a context manager. ``advance(n)`` adds ``n`` items done (may be
    fractional: an item's requests finish one by one)."""

    def __init__(self, owner: Progress, label: str, total: float):
        self.owner, self.label, self.total = owner, label, total
        self.done = 0.0
        self._bar = None
        self._start = self._last = time.monotonic()

    def __enter__(self) -> "ProgressTask":
        o = self.owner
        if o.mode == "bar" and self.total:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=self.label,
                unit="item",
                file=o.stream or sys.stderr,
                delay=o.delay,
                dynamic_ncols=True,
                leave=True,
                bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} [{elapsed}<{remaining}, {rate_fmt}]",
            )
        return self

    def advance(self, n: float) -> None:
        if n <= 0:
            return
        self.done = min(self.total, self.done + n)
        if self._bar is not None:
            self._bar.update(n)
        elif self.owner.mode == "lines":
            now = time.monotonic()
            if now - self._last >= self.owner.interval:
                self._last = now
                self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        # Closed early (a sequential category that stopped): a whole item short at least. ``done``
        # adds fractions of items (1/3 per request), so a full category may sum to 119.9999...
        if final and self.total - self.done >= 0.5:
            tail = f"stopped early, done in {elapsed:.1f} s"
        else:
            tail = f"done in {elapsed:.1f} s" if final else f"ETA {eta:.0f} s"
        stream = self.owner.stream or sys.stderr
        if self.owner.line_start is not None:
            self.owner.line_start()
        stream.write(
            f"{self.owner.prefix}{self.label}: {self.done:.0f}/{self.total:.0f} items "
            f"({pct:.0f}%), {rate:.2f} items/s, {tail}\n"
        )
        stream.flush()

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.owner.mode == "lines" and time.monotonic() - self._start >= self.owner.interval:
            self._line(time.monotonic(), final=True)
