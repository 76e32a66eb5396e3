"""Interrupted runs: SIGTERM (what CI runners send on a timeout or a cancel) ends a run as Ctrl-C
does, and Ctrl-C or SIGTERM while a run writes its outputs is counted, not raised, so
results.json is never left half-written or claiming a complete run, and no traceback replaces
the verdict."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterator

#: The signals that interrupt a run: Ctrl-C, and a CI runner's timeout or cancel.
INTERRUPTS = (signal.SIGINT, signal.SIGTERM)


class Presses:
    """How many times SIGINT or SIGTERM arrived while ``deferred_interrupts`` was active."""

    def __init__(self) -> None:
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0


def _raise_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt(f"{signal.Signals(signum).name} received")


def sigterm_as_interrupt() -> Callable[[], None]:
    """From now on SIGTERM raises KeyboardInterrupt, as SIGINT does: pytest then ends the run the
    way it ends a Ctrl-C (the gates not run are NOT RUN, results.json and junit.xml say
    interrupted, exit 2) where the default handler would kill the process with 143 and leave no
    results. Returns the function that puts the previous handler back; outside the main thread
    (where no handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[Presses]:
    """Within the block, SIGINT and SIGTERM only increment ``Presses.count``; the previous
    handlers come back afterwards. Outside the main thread (where no handler can be set) it
    counts nothing."""
    presses = Presses()
    if threading.current_thread() is not threading.main_thread():
        yield presses
        return

    def note(signum, frame):  # noqa: ARG001 - signal handler signature
        presses.count += 1

    previous = {sig: signal.signal(sig, note) for sig in INTERRUPTS}
    try:
        yield presses
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
