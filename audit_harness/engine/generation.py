"""Generation requests through the engine: dedupe, the result cache, ordering, token-budget
batching (halved and retried on out-of-memory) and progress, as for scores
(``Generation``, one per ``Engine.generate`` call). A backend that ``runs_generation`` runs
batches (``models.base.Backend`` declares each method and flag below with its default):

- ``encode_prompt(text) -> ids``: the prompt's token ids, as the model will read them.
- ``generate_tokens(prompts, max_new_tokens, score_tokens=None[, stop=None]) -> (texts, tokens
  forwarded, first-step log-probabilities)``: greedy completions of a batch of token-id prompts
  (the decoded text after each prompt, not cut at any stop string), the number of tokens the
  backend actually ran (prompt tokens shared between prompts counted once, plus one per decoded
  step and row), and, when asked, the log-probability of given tokens as the first token after
  each prompt. A backend that ``stops_early`` takes ``stop`` (per prompt, its stop strings) and
  may end a row as soon as its text contains one of them; it must not end it earlier, so a
  text that contains none of its stop strings is the whole generation.

A backend may also stream (continuous batching), used instead of batches when its
``can_stream`` is True:

- ``generate_stream(prompts, max_new_tokens, score_tokens, stop=..., max_rows=...)``: an
  iterator of ``(prompt index, text, tokens run since the previous item, first-step
  log-probabilities or None, prompt forwards since the previous item)``, one item per prompt as
  its row finishes, at most ``max_rows`` rows decoded at once; texts and stop rules as
  ``generate_tokens``. The engine saves texts every few rows (and what is done when the stream
  stops), advances progress per row, and on out-of-memory runs the rows not done again with half
  the rows, down to one. ``stats.forwards`` counts prompt forwards (batches, or a stream's
  refills).

``first_step``: the forward that picks a prompt's first new token has the whole next-token
distribution, so continuations of the same prompt that are one token long (KoBBQ's option
letters, scored in letter mode) are stored from it as ordinary log-likelihood results: a later
``Engine.prompt_loglikelihood`` of (prompt, letter) finds them in the memo or cache instead of running
the prompt again.

Cache: a whole generation (ended by end-of-sequence or ``max_new_tokens``) is stored under
(model key, prompt ids, ``max_new_tokens``) and serves every request with that prompt and
budget, whatever its stop strings: each request's text is cut at its own stop strings on the
way out. A generation that a stop string ended early is only known up to that stop string, so
it is stored under a key that adds the sorted stop strings, and serves only requests with
exactly those stop strings (another stop string may lie after the point where it ended). A
text from a backend that stops early is taken as ended early whenever it contains one of its
stop strings, since the backend cannot say whether it would have gone on. Requests for one
prompt and budget with different stop strings (or some without) run once, whole.

Requests are sorted by their token ids, so prompts with a shared prefix (KoBBQ's 3 option orders
of one question) land in one batch, where a backend can run the prefix once.
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Sequence

from ..models.base import GenerationRequest
from ..models.errors import BackendOutOfMemory
from .cache import request_key
from .store import halving

if TYPE_CHECKING:
    from .executor import Engine


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to (not including) the earliest occurrence of any string in ``stop``."""
    cut = len(text)
    for s in stop:
        if s and (pos := text.find(s)) != -1:
            cut = min(cut, pos)
    return text[:cut]


def stop_set(stop: Sequence[str]) -> tuple[str, ...]:
    """The stop strings that can cut a text (non-empty), sorted and without duplicates: requests
    whose stop strings give the same set cut every text alike."""
    return tuple(sorted({s for s in stop if s}))


def generation_keys(model_key: str, ids: Sequence[int], max_new_tokens: int, stop: Sequence[str]):
    """(whole-generation key, stopped-generation key or None) of one request: the first is the
    result cache's ``"gen"`` key of (prompt ids, ``max_new_tokens``); the second adds the
    request's ``stop_set`` (as JSON, so no two sets share a key) and is None without stop
    strings."""
    whole = request_key(model_key, "gen", ids, (max_new_tokens,))
    stops = stop_set(stop)
    if not stops:
        return whole, None
    return whole, request_key(model_key, "gen-stop" + json.dumps(stops), ids, (max_new_tokens,))


class Generation:
    """One ``Engine.generate`` call: one greedy completion per request, in order, cut at its
    stop strings; each distinct (prompt ids, ``max_new_tokens``, stop strings) computed at most
    once (memo, cache; see the module doc for what a stored text serves).

    Args:
        engine: the engine whose backend runs the batches and whose stores keep the texts.
        requests: the generation requests.
        weights: progress units per request (default 1 each).
        first_step: per request, continuations whose first-step log-likelihood to store, or None.
    Raises:
        ValueError: a request with ``max_new_tokens < 1``, a prompt that encodes to no token,
            or ``first_step`` of another length than ``requests``.
    """

    def __init__(
        self,
        engine: "Engine",
        requests: Sequence[GenerationRequest],
        weights: Sequence[float] | None = None,
        first_step: Sequence[Sequence[str]] | None = None,
    ):
        self.engine = engine
        self.backend = engine.backend
        self.stats = engine.stats
        self.requests = requests
        self.weights = weights
        self.first_step = first_step
        #: Per request: prompt ids, (whole key, stopped key or None), and the key it is read by.
        self.encoded: list[tuple[int, ...]] = []
        self.pairs: list[tuple[bytes, bytes | None]] = []
        self.keys: list[bytes] = []
        #: Per distinct key, its first request; per key its progress weight; the texts found.
        self.first: dict[bytes, int] = {}
        self.weight: dict[bytes, float] = {}
        self.texts: dict[bytes, str] = {}
        #: Per generation to run (its whole key): (the requests it answers, its stop strings),
        #: the request whose prompt it runs, and its first-step tokens (None: none asked).
        self.jobs: dict[bytes, tuple[list[bytes], tuple[str, ...]]] = {}
        self.rep: dict[bytes, int] = {}
        self.scores: dict[bytes, list[int]] | None = None

    def run(self) -> list[str]:
        """The completions, in request order. A backend that does not run generations itself
        (a replay of saved outputs, a test double) answers ``generate`` whole."""
        if not self.backend.runs_generation:
            return self._whole()
        self._encode()
        missing = self._lookup()
        self.jobs = _jobs(missing, self.first, self.pairs, self.requests)
        self.rep = {job: self.first[members[0]] for job, (members, _) in self.jobs.items()}
        self.scores = self._first_step_tokens()
        by_budget: dict[int, list[bytes]] = {}
        for job, i in self.rep.items():
            by_budget.setdefault(self.requests[i].max_new_tokens, []).append(job)
        for max_new, batch_keys in by_budget.items():
            batch_keys.sort(key=lambda k: self.encoded[self.rep[k]])
            if self.backend.can_stream:
                self._run_stream(batch_keys, max_new)
                continue
            for batch in self._batches(batch_keys, max_new):
                halving(partial(self._generate, max_new=max_new), batch, self.stats)
        return [cut_at_stop(self.texts[k], r.stop) for k, r in zip(self.keys, self.requests)]

    def _whole(self) -> list[str]:
        out = list(self.backend.generate(self.requests))
        self.stats.requests += len(self.requests)
        self.stats.computed += len(self.requests)
        # Its answers are items done like any other: without this a replayed category's
        # progress stayed at 0 and closed as "0/5656 items ... stopped early".
        if self.engine.progress is not None and self.requests:
            weights = self.weights
            self.engine.progress.advance(sum(weights) if weights is not None else float(len(self.requests)))
        return out

    def _encode(self) -> None:
        """Check the requests, encode their prompts and key them."""
        requests, first_step = self.requests, self.first_step
        if first_step is not None and len(first_step) != len(requests):
            raise ValueError(f"{len(requests)} requests but {len(first_step)} first_step lists")
        for n, r in enumerate(requests):
            if r.max_new_tokens < 1:
                raise ValueError(f"request {n}: max_new_tokens must be >= 1, got {r.max_new_tokens}")
        self.encoded = [tuple(self.backend.encode_prompt(r.prompt)) for r in requests]
        for n, ids in enumerate(self.encoded):
            if not ids:
                raise ValueError(f"request {n}: prompt {requests[n].prompt[:40]!r} encodes to no token")
        self.encoded = self._fit_window(self.encoded)
        key = self.backend.cache_key
        self.pairs = [
            generation_keys(key, ids, r.max_new_tokens, r.stop) for ids, r in zip(self.encoded, requests)
        ]
        # A request is identified by its stopped key when it has stop strings, else by its whole key.
        self.keys = [stopped or whole for whole, stopped in self.pairs]
        for i, k in enumerate(self.keys):
            self.first.setdefault(k, i)
        weights = [1.0] * len(requests) if self.weights is None else self.weights
        for k, w in zip(self.keys, weights):
            self.weight[k] = self.weight.get(k, 0.0) + w

    def _fit_window(self, encoded: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Each prompt that leaves its generation no room in the model's window (``max_length``:
        its positions) with its left cut off so that prompt and ``max_new_tokens`` fit, as
        lm-evaluation-harness does; counted in ``stats.truncated`` (distinct prompts). Without
        this a long prompt (a CBBQ context, byte-level tokens) ran past the position table.

        Raises:
            ValueError: a request whose ``max_new_tokens`` alone fills the window.
        """
        window = self.backend.max_length
        out, cut = [], set()
        for n, (ids, r) in enumerate(zip(encoded, self.requests)):
            room = window - r.max_new_tokens
            if len(ids) > room:
                if room < 1:
                    raise ValueError(
                        f"request {n}: max_new_tokens {r.max_new_tokens} leaves no room for a prompt "
                        f"in the model's {window}-token window"
                    )
                cut.add(ids)
                ids = ids[-room:]
            out.append(ids)
        self.stats.truncated += len(cut)
        return out

    def _lookup(self) -> list[bytes]:
        """Count the requests, take what the memo and cache hold; returns the keys to run."""
        stats, pairs = self.stats, self.pairs
        stats.requests += len(self.keys)
        stats.distinct += len(self.first)
        found = self.engine.texts.lookup(
            {key for i in self.first.values() for key in pairs[i] if key is not None}
        )
        for k, i in self.first.items():
            whole, stopped = pairs[i]
            if whole in found:
                self.texts[k] = found[whole]  # type: ignore[assignment]
            elif stopped is not None and stopped in found:
                self.texts[k] = found[stopped]  # type: ignore[assignment]
        missing = [k for k in self.first if k not in self.texts]
        stats.from_cache += len(self.first) - len(missing)
        self._advance([k for k in self.first if k in self.texts])
        return missing

    def _first_step_tokens(self) -> dict[bytes, list[int]] | None:
        """Per generation still to run, the single tokens whose log-likelihood after the prompt
        is wanted and not yet known (None when nothing is asked): ``first_step`` continuations
        that the backend's ``encode_continuation`` makes one token long
        (``Engine.prompt_loglikelihood`` then reads them back under the same key)."""
        if self.first_step is None:
            return None
        wanted: dict[tuple[int, ...], list[int]] = {}
        for i, conts in enumerate(self.first_step):
            ids = self.encoded[i]
            for c in conts:
                ctx, cont = self.backend.encode_continuation(self.requests[i].prompt, c)
                if tuple(ctx) == ids and len(cont) == 1:
                    wanted.setdefault(ids, [])
                    if cont[0] not in wanted[ids]:
                        wanted[ids].append(cont[0])
        out: dict[bytes, list[int]] = {}
        key = self.backend.cache_key
        for k in self.jobs:
            ids = self.encoded[self.rep[k]]
            toks = [
                t for t in wanted.get(ids, []) if not self.engine.has_score(request_key(key, "ll", ids, (t,)))
            ]
            if toks:
                out[k] = toks
        return out or None

    def _batches(self, keys: list[bytes], max_new: int):
        """Consecutive runs of at most ``batch_size`` prompts whose padded width (longest prompt +
        new tokens) times rows stays within the backend's token budget (one prompt over it goes
        alone).

        Unlike score forwards, generation batches are not sized by time (``engine.pace``): a
        generation runs ``max_new`` sequential steps whatever its batch, and on a CPU a step of
        16 rows costs a few times one row's, not 16 times. A time target shrank every batch
        after the first to one prompt (KoBBQ: 60 batches for 60 prompts, so no prefix was ever
        shared; KGQuiz Task5: 128 steps per item), and generation times, recorded as tokens per
        second, made the score forwards after them small too. What an interruption loses is one
        batch."""
        m = self.backend
        batch: list[bytes] = []
        width = 0
        for k in keys:
            w = max(width, len(self.encoded[self.rep[k]]) + max_new)
            if batch and (len(batch) >= m.batch_size or (len(batch) + 1) * w > m.token_budget):
                yield batch  # runs before the generator resumes
                batch, w = [], len(self.encoded[self.rep[k]]) + max_new
            batch.append(k)
            width = w
        if batch:
            yield batch

    def _prompts(self, keys: list[bytes]) -> tuple[list[list[int]], list[list[int]] | None]:
        """(prompt ids, first-step tokens or None) of the generations ``keys``."""
        prompts = [list(self.encoded[self.rep[k]]) for k in keys]
        scores = self.scores
        return prompts, [scores.get(k, []) for k in keys] if scores else None

    def _firsts(self, prompt: Sequence[int], tokens: Sequence[int], values) -> dict[bytes, list[float]]:
        """A prompt's first-step log-likelihoods as the scores ``prompt_loglikelihood`` reads."""
        key = self.backend.cache_key
        return {request_key(key, "ll", tuple(prompt), (t,)): [v] for t, v in zip(tokens, values or ())}

    def _take(self, job: bytes, text: str, early: bool, stored: dict[bytes, str]) -> list[bytes]:
        """Record generation ``job``'s ``text`` for its requests and under its key in ``stored``
        (the stopped key when the backend may have ended it at a stop string: ``early``);
        returns the requests it answers."""
        members, stops = self.jobs[job]
        if early and stops and cut_at_stop(text, stops) != text:
            # Possibly ended at the stop string: only requests with these stop strings may read it.
            stored[self.pairs[self.first[members[0]]][1]] = text  # type: ignore[index]
        else:
            stored[job] = text
        for k in members:
            self.texts[k] = text
        return members

    def _generate(self, batch: list[bytes], max_new: int) -> None:
        """One ``generate_tokens`` batch, its texts and first-step scores stored."""
        prompts, score_tokens = self._prompts(batch)
        early = self.backend.stops_early and any(self.jobs[k][1] for k in batch)
        kwargs = {"stop": [list(self.jobs[k][1]) for k in batch]} if early else {}
        out, forwarded, firsts = self.backend.generate_tokens(prompts, max_new, score_tokens, **kwargs)
        if score_tokens is not None:
            scores: dict[bytes, list[float]] = {}
            for p, toks, vals in zip(prompts, score_tokens, firsts):
                scores.update(self._firsts(p, toks, vals))
            self.engine.put_scores(scores)
        stored: dict[bytes, str] = {}
        done: list[bytes] = []
        for job, text in zip(batch, out):
            done += self._take(job, text, early, stored)
        self.stats.forwards += 1
        self.stats.tokens_forwarded += forwarded
        self.stats.computed += len(done)
        self.engine.texts.save(stored)
        self._advance(done)

    def _run_stream(self, keys: list[bytes], max_new: int) -> None:
        """``keys`` through the backend's ``generate_stream`` (continuous batching): each row's
        text is taken as it finishes, saved every few rows (and whatever is done when the stream
        stops, interrupted or failed). On out-of-memory, the rows not done run again with half
        the rows at once, down to one."""
        rows = stream_rows(self.backend, [len(self.encoded[self.rep[k]]) for k in keys], max_new)
        todo = list(keys)
        while todo:
            try:
                self._stream(todo, rows, max_new)
                return
            except BackendOutOfMemory:
                if rows == 1:
                    raise
                self.stats.oom_retries += 1
                rows //= 2
                todo = [k for k in todo if self.jobs[k][0][0] not in self.texts]

    def _stream(self, todo: list[bytes], rows: int, max_new: int) -> None:
        prompts, score_tokens = self._prompts(todo)
        stop = [list(self.jobs[k][1]) for k in todo]
        stats = self.stats
        stored: dict[bytes, str] = {}
        firsts: dict[bytes, list[float]] = {}
        every = max(1, rows // 2)  # about one refill's rows per transaction

        def flush() -> None:
            self.engine.put_scores(firsts)
            self.engine.texts.save(stored)
            firsts.clear()
            stored.clear()

        try:
            stream = self.backend.generate_stream(prompts, max_new, score_tokens, stop=stop, max_rows=rows)
            for index, text, forwarded, first_step, prefills in stream:
                members = self._take(todo[index], text, True, stored)
                if score_tokens is not None:
                    firsts.update(self._firsts(prompts[index], score_tokens[index], first_step))
                stats.forwards += prefills
                stats.tokens_forwarded += forwarded
                stats.computed += len(members)
                self._advance(members)
                if len(stored) >= every:
                    flush()
        finally:
            flush()

    def _advance(self, keys) -> None:
        if self.engine.progress is not None and keys:
            self.engine.progress.advance(sum(self.weight.get(k, 0.0) for k in keys))


def _jobs(missing, first, pairs, requests) -> dict[bytes, tuple[list[bytes], tuple[str, ...]]]:
    """The generations to run for the ``missing`` requests: per whole key, (the requests it
    answers, the stop strings it runs with). Requests for one prompt and budget that all share
    one stop set run with it; any other mix (another stop set, or none) runs once, whole, which
    answers every one of them."""
    members: dict[bytes, list[bytes]] = {}
    for k in missing:
        members.setdefault(pairs[first[k]][0], []).append(k)
    jobs = {}
    for whole, ks in members.items():
        sets = {stop_set(requests[first[k]].stop) for k in ks}
        jobs[whole] = (ks, sets.pop() if len(sets) == 1 else ())
    return jobs


def stream_rows(backend, widths: Sequence[int], max_new: int) -> int:
    """Rows a stream decodes at once: ``batch_size``, fewer when that many rows of the widest
    prompt + ``max_new`` would pass the backend's token budget (at least 1).

    Examples:
        >>> class B: batch_size, token_budget = 16, 8192
        >>> stream_rows(B(), [300, 400], 30), stream_rows(B(), [900], 30), stream_rows(B(), [9000], 30)
        (16, 8, 1)
    """
    return max(1, min(backend.batch_size, backend.token_budget // (max(widths) + max_new)))
