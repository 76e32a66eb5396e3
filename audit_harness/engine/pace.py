"""Forwards sized by time as well as tokens: the result cache is written after each forward, so a
forward that runs for half a minute on a loaded CPU is half a minute an interruption loses. The
engine measures its throughput and keeps each forward near ``target_s`` seconds."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

#: Seconds of work one forward aims at (the most an interrupted run loses, give or take one
#: forward), unless the backend's token budget is reached first. ``BIAS_AUDIT_FORWARD_SECONDS=0``
#: sizes forwards by tokens alone (batches then do not depend on the machine's speed).
DEFAULT_TARGET_S = float(os.environ.get("BIAS_AUDIT_FORWARD_SECONDS", "3.0"))


class Pace:
    """Throughput of this process's forwards, and the token budget that keeps the next one near
    ``target_s`` seconds.

    Parameters
    ----------
    target_s : float
        Seconds per forward to aim at; ``0`` turns pacing off (only the token budget applies).
    first_tokens : int
        Budget of the first forward, before any throughput is known.

    Examples
    --------
    >>> p = Pace(target_s=2.0, first_tokens=100)
    >>> p.budget(8192)
    100
    >>> p.record(tokens=1000, seconds=1.0)
    >>> p.budget(8192)
    2000
    """

    def __init__(self, target_s: float = DEFAULT_TARGET_S, first_tokens: int = 512):
        self.target_s = target_s
        self.first_tokens = first_tokens
        self._rate: float | None = None  # tokens per second, smoothed

    def record(self, tokens: int, seconds: float) -> None:
        """One forward of ``tokens`` tokens took ``seconds``."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        # Smoothed, but quick to follow a slowdown: the machine's load changes under a run.
        self._rate = rate if self._rate is None else min(rate, 0.5 * (self._rate + rate))

    def budget(self, token_budget: int) -> int:
        """Tokens the next forward may take: the backend's ``token_budget`` capped by time (at
        least 1; a single row over it still runs alone, as with the token budget)."""
        if not self.target_s:
            return token_budget
        by_time = self.first_tokens if self._rate is None else int(self._rate * self.target_s)
        return max(1, min(token_budget, by_time))

    @contextmanager
    def timed(self, tokens: int) -> Iterator[None]:
        """Time the forward in the block and ``record`` it (not when it raises)."""
        start = time.perf_counter()
        yield
        self.record(tokens, time.perf_counter() - start)
