"""Ctrl-C while a run writes its outputs: counted, not raised, so results.json is never left
half-written or claiming a complete run, and no traceback replaces the verdict."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Presses:
    """How many times SIGINT arrived while ``deferred_interrupts`` was active."""

    def __init__(self) -> None:
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[Presses]:
    """Within the block, SIGINT only increments ``Presses.count``; the previous handler comes
    back afterwards. Outside the main thread (where no handler can be set) it counts nothing."""
    presses = Presses()
    if threading.current_thread() is not threading.main_thread():
        yield presses
        return

    def note(signum, frame):  # noqa: ARG001 - signal handler signature
        presses.count += 1

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield presses
    finally:
        signal.signal(signal.SIGINT, previous)
