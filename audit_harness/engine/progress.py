"""Progress of long scoring runs: one bar per (benchmark, category), and a line for the whole run.

Modes (``progress_mode``): ``bar`` (tqdm on an interactive terminal: items, items/s, ETA),
``lines`` (plain lines every ``interval`` seconds: in CI, ``CI=true``, where carriage-return bars
turn into noise, and in pytest-xdist workers, whose stderr several processes share; each line is
whole and names the worker), ``off`` (``-q``). On a terminal a bar shows from the start (a short
run too); plain lines start after ``interval``.

Every line counts whole items (a category's requests finish item by item, in fractions of one:
``2/8 items`` is two done, and its percentage is of those two), and says a time span in one
format (``duration``). When the run's categories and their item counts are known before scoring
(``Progress.expect``: the controller of a serial run, or of a ``--plan``), the whole run's
position goes on the same line as the category's, taken at the same moment, and its ETA is the
only one: ``mbbq/Age_nl: 37/80 items (46%); run: category 2 of 2, 117/160 items (73%), rate,
ETA``, the rate measured since the first category began. A run line of its own follows a category
that closes, and closes the run. In ``bar`` mode the run's position is the bar's postfix and the
bar shows no ETA of its own. An xdist worker scores only its share of the categories and does not
know the run's: it prints its per-category lines alone, each with its own ETA.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Callable, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

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
        delay: seconds before a bar appears (``bar`` mode; 0: at once, so a short run shows one
            too, where tqdm shows none when the last update came before the delay).
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
        delay: float = 0.0,
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
        #: the whole run's position, once ``expect`` has said what the run will score.
        self.run: RunProgress | None = None

    def expect(self, totals: dict[str, float]) -> None:
        """The run's categories (``"<benchmark>/<category>"``, in the order they will run) and the
        items each will score; a run of fewer than two categories gets no run line (it would
        repeat the category's)."""
        self.run = RunProgress(totals) if len(totals) >= 2 else None

    def task(self, label: str, total: float) -> "ProgressTask":
        return ProgressTask(self, label, total)

    def write_line(self, text: str) -> None:
        """One line of progress on the stream (after the line start hook, when set)."""
        stream = self.stream or sys.stderr
        if self.line_start is not None:
            self.line_start()
        stream.write(f"{self.prefix}{text}\n")
        stream.flush()


def whole(done: float, total: float) -> tuple[int, float]:
    """(items done, counted whole; its percentage of ``total``): ``done`` adds an item's
    requests in fractions, and a full category may sum to 119.9999.

    Examples
    --------
    >>> whole(1.7, 8), whole(119.99999999999, 120), whole(0, 0)
    ((1, 12.5), (120, 100.0), (0, 100.0))
    """
    n = int(done + 1e-6)
    return n, (100.0 * n / total if total else 100.0)


def items(done: float, total: float) -> str:
    """``2/8 items (25%)``: whole items done of ``total``, and their percentage.

    Examples
    --------
    >>> items(2.6, 8)
    '2/8 items (25%)'
    """
    n, pct = whole(done, total)
    return f"{n:,}/{total:,.0f} items ({pct:.0f}%)"


def duration(seconds: float) -> str:
    """A time span for a person: ``42 s``, ``12 min 05 s``, ``2 h 03 min``; ``?`` when unknown.

    Examples
    --------
    >>> duration(42.4), duration(725), duration(7385), duration(float("nan"))
    ('42 s', '12 min 05 s', '2 h 03 min', '?')
    """
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "?"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class RunProgress:
    """The whole run's position: categories begun and closed, items done of the total, and the
    rate measured over the run's wall time since its first category began (model loading is
    before it; metric and bootstrap time between categories is in it, as it is in what is left).

    Parameters
    ----------
    totals : dict
        ``{label: items}`` expected, in run order. A category's count is replaced by its task's
        own when it begins (items another category already scored are not scored again), and by
        the items it did when it closes (a sequential category that stopped early has nothing
        left), so the total stays the work the run will do.

    Examples
    --------
    >>> run = RunProgress({"bbq/Age": 10, "bbq/Religion": 30})
    >>> run.begin("bbq/Age", 10); run.done = 10.0; run.close("bbq/Age", 10.0)
    >>> run.text(now=run.start + 2.0)
    'run: category 2 of 2, 10/40 items (25%), 5.00 items/s, ETA 6 s'
    """

    def __init__(self, totals: dict[str, float]):
        self.totals = dict(totals)
        self.closed: set[str] = set()
        self.done = 0.0
        self.start: float | None = None
        self.last = 0.0

    @property
    def total(self) -> float:
        return sum(self.totals.values())

    @property
    def finished(self) -> bool:
        return self.closed >= set(self.totals)

    def begin(self, label: str, total: float) -> None:
        now = time.monotonic()
        if self.start is None:
            self.start = self.last = now
        self.totals[label] = total

    def close(self, label: str, done: float) -> None:
        # Fractions of items (a third per request) sum to 7.999...: the run's total stays 16,
        # not 15.999... whose percentages round differently from the category's.
        self.totals[label] = round(done, 6)
        self.closed.add(label)

    def text(self, now: float | None = None) -> str:
        """The run line (no prefix, no newline)."""
        now = time.monotonic() if now is None else now
        elapsed = now - (self.start if self.start is not None else now)
        total, n = self.total, len(self.totals)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        position = f"{items(self.done, total)}, {rate:.2f} items/s"
        if self.finished:
            return f"run: {n} of {n} categories, {position}, done in {duration(elapsed)}"
        # The category running now, or the next one between two categories.
        k = min(n, len(self.closed & set(self.totals)) + 1)
        eta = (total - self.done) / rate if rate > 0 else float("nan")
        return f"run: category {k} of {n}, {position}, ETA {duration(eta)}"

    def postfix(self) -> str:
        """The run's position for a bar's postfix (``bar`` mode)."""
        text = self.text()
        return text.replace("run: category ", "run ", 1).replace(" of ", "/", 1)


class ProgressTask:
    """One category's progress; a context manager. ``advance(n)`` adds ``n`` items done (may be
    fractional: an item's requests finish one by one)."""

    def __init__(self, owner: Progress, label: str, total: float):
        self.owner, self.label, self.total = owner, label, total
        self.done = 0.0
        self.bar: tqdm | None = None  # the tqdm bar on a terminal
        self._shown = 0  # whole items the bar has been told of
        self._start = self._last = time.monotonic()

    def __enter__(self) -> "ProgressTask":
        o = self.owner
        if o.run is not None:
            o.run.begin(self.label, self.total)
        if o.mode == "bar" and self.total:
            from tqdm import tqdm

            # With the run's position beside it, the run's ETA is the only one shown.
            remaining = "" if o.run is not None else "<{remaining}"
            self.bar = tqdm(
                total=self.total,
                desc=self.label,
                unit="item",
                file=o.stream or sys.stderr,
                delay=o.delay,
                dynamic_ncols=True,
                leave=True,
                bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} items [{elapsed}"
                + remaining
                + ", {rate_fmt}{postfix}]",
            )
            if o.run is not None:
                self.bar.set_postfix_str(o.run.postfix(), refresh=False)
        return self

    def advance(self, n: float) -> None:
        if n <= 0:
            return
        before = self.done
        self.done = min(self.total, self.done + n)
        run = self.owner.run
        if run is not None:
            run.done += self.done - before
        if self.bar is not None:
            if run is not None:  # once per forward: tqdm redraws at most ten times a second
                self.bar.set_postfix_str(run.postfix(), refresh=False)
            # Whole items only: the bar's count and its percentage then agree.
            shown, _ = whole(self.done, self.total)
            if shown > self._shown:
                self.bar.update(shown - self._shown)
                self._shown = shown
        elif self.owner.mode == "lines":
            now = time.monotonic()
            # A category done is said once, by its closing line (no "100%, ETA 0 s" before it).
            if now - self._last >= self.owner.interval and whole(self.done, self.total)[0] < self.total:
                self._last = now
                if run is not None:
                    run.last = now
                self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        elapsed = now - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        run = self.owner.run
        # Closed early (a sequential category that stopped): a whole item short at least.
        if final and whole(self.done, self.total)[0] < self.total:
            tail = f"{rate:.2f} items/s, stopped early, done in {duration(elapsed)}"
        elif final:
            tail = f"{rate:.2f} items/s, done in {duration(elapsed)}"
        elif run is not None:  # the run's position, at the same moment, with the one ETA
            tail = run.text(now)
            self.owner.write_line(f"{self.label}: {items(self.done, self.total)}; {tail}")
            return
        else:
            tail = f"{rate:.2f} items/s, ETA {duration(eta)}"
        self.owner.write_line(f"{self.label}: {items(self.done, self.total)}, {tail}")

    def __exit__(self, *exc) -> None:
        o, run = self.owner, self.owner.run
        if run is not None:
            run.close(self.label, self.done)
        if self.bar is not None:
            self.bar.close()
        elif o.mode == "lines" and time.monotonic() - self._start >= o.interval:
            self._line(time.monotonic(), final=True)
        # The run line after each category that took an interval or more, and once at the end of
        # a run that did (a short run prints nothing, as a short category does).
        if o.mode != "off" and run is not None and run.start is not None:
            now = time.monotonic()
            if now - run.start >= o.interval and (run.finished or now - run.last >= o.interval):
                run.last = now
                o.write_line(run.text(now))
