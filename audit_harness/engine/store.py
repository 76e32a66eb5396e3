"""Where the engine keeps what it computed: this process's memo and the persistent result cache,
for scores and generations alike, with one lookup and one save; and the one out-of-memory retry
every forward path shares (a batch that does not fit is halved until it does)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from ..models.errors import BackendOutOfMemory
from .cache import ResultCache

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class EngineStats:
    """Counters since the engine (or ``reset_stats``) started.

    Attributes:
        requests: requests asked (duplicates included); distinct: after dedupe.
        from_cache: distinct requests answered by the result cache or this process's memo.
        computed: distinct requests the model computed.
        tokens_forwarded: real (non-padding) tokens fed to the model.
        forwards: forward passes.
        oom_retries: batches halved after an out-of-memory error.
        truncated: distinct prompts (contexts) longer than the model's window, read with their
            left cut off to fit it, as lm-evaluation-harness does: the continuation whole, and
            for a generation room for its ``max_new_tokens``.
    """

    requests: int = 0
    distinct: int = 0
    from_cache: int = 0
    computed: int = 0
    tokens_forwarded: int = 0
    forwards: int = 0
    oom_retries: int = 0
    truncated: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


class ResultStore:
    """The memo (optional) in front of the cache (optional), for one kind of result: ``scores``
    (lists of floats) or ``texts`` (decoded generations).

    Args:
        cache: the persistent result cache, or None.
        kind: ``"scores"`` or ``"texts"``.
        memo: keep every result of this process in memory too.
    """

    def __init__(self, cache: ResultCache | None, kind: str, memo: bool):
        if kind not in ("scores", "texts"):
            raise ValueError(f"kind must be scores or texts, got {kind!r}")
        self.cache = cache
        self.kind = kind
        self.memo: dict[bytes, object] | None = {} if memo else None

    def has(self, key: bytes) -> bool:
        """Whether ``key`` is in the memo or the cache."""
        return bool(self.lookup([key]))

    def lookup(self, keys: Iterable[bytes]) -> dict[bytes, object]:
        """The stored results of those ``keys`` that are present (the cache's answers are kept
        in the memo)."""
        keys = list(keys)
        found = {k: self.memo[k] for k in keys if self.memo is not None and k in self.memo}
        missing = [k for k in keys if k not in found]
        if self.cache is not None and missing:
            got = self.cache.get_many(missing) if self.kind == "scores" else self.cache.get_texts(missing)
            found.update(got)
            if self.memo is not None:
                self.memo.update(got)
        return found

    def save(self, values: Mapping[bytes, object]) -> None:
        """Keep ``values`` in the memo and commit them to the cache (one transaction)."""
        if not values:
            return
        if self.memo is not None:
            self.memo.update(values)
        if self.cache is not None:
            if self.kind == "scores":
                self.cache.put_many(values)  # type: ignore[arg-type]
            else:
                self.cache.put_texts(values)  # type: ignore[arg-type]


def halving(
    run: Callable[[Sequence[T]], R],
    batch: Sequence[T],
    stats: EngineStats,
    then: Callable[[R], None] | None = None,
) -> None:
    """``run(batch)``; on ``BackendOutOfMemory`` run each half, recursively, counting the
    retries in ``stats.oom_retries``. ``then(result)`` follows each successful run, outside the
    retry (so an out-of-memory error inside it is not taken for this batch's).

    Raises:
        BackendOutOfMemory: a batch of one item does not fit.
    """
    try:
        result = run(batch)
    except BackendOutOfMemory:
        if len(batch) == 1:
            raise
        stats.oom_retries += 1
        half = len(batch) // 2
        halving(run, batch[:half], stats, then)
        halving(run, batch[half:], stats, then)
        return
    if then is not None:
        then(result)
