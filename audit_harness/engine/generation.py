"""Generation requests through the engine: dedupe, the result cache, ordering, token-budget
batching (halved and retried on out-of-memory) and progress, as for scores. A backend runs
batches:

- ``encode_prompt(text) -> ids``: the prompt's token ids, as the model will read them.
- ``generate_tokens(prompts, max_new_tokens, score_tokens=None[, stop=None]) -> (texts, tokens
  forwarded, first-step log-probabilities)``: greedy completions of a batch of token-id prompts
  (the decoded text after each prompt, not cut at any stop string), the number of tokens the
  backend actually ran (prompt tokens shared between prompts counted once, plus one per decoded
  step and row), and, when asked, the log-probability of given tokens as the first token after
  each prompt. A backend whose ``generate_tokens`` takes ``stop`` (per prompt, its stop
  strings) may end a row as soon as its text contains one of them; it must not end it earlier,
  so a text that contains none of its stop strings is the whole generation.

A backend may also stream (continuous batching), used instead of batches when it has
``generate_stream`` and its ``can_stream`` is not False:

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

import inspect
import json
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


def run_generation(
    engine: "Engine",
    requests: Sequence[GenerationRequest],
    weights: Sequence[float] | None = None,
    first_step: Sequence[Sequence[str]] | None = None,
) -> list[str]:
    """``Engine.generate``: one greedy completion per request, in order, cut at its stop strings;
    each distinct (prompt ids, ``max_new_tokens``, stop strings) computed at most once (memo,
    cache; see the module doc for what a stored text serves). A backend without
    ``generate_tokens`` (a replay of saved outputs, a test double) answers ``generate`` itself.

    Raises:
        ValueError: a request with ``max_new_tokens < 1``, a prompt that encodes to no token,
            or ``first_step`` of another length than ``requests``.
    """
    m = engine.backend
    if not hasattr(m, "generate_tokens"):
        out = list(m.generate(requests))
        engine.stats.requests += len(requests)
        engine.stats.computed += len(requests)
        # Its answers are items done like any other: without this a replayed category's
        # progress stayed at 0 and closed as "0/5656 items ... stopped early".
        if engine.progress is not None and requests:
            engine.progress.advance(sum(weights) if weights is not None else float(len(requests)))
        return out
    if first_step is not None and len(first_step) != len(requests):
        raise ValueError(f"{len(requests)} requests but {len(first_step)} first_step lists")
    for n, r in enumerate(requests):
        if r.max_new_tokens < 1:
            raise ValueError(f"request {n}: max_new_tokens must be >= 1, got {r.max_new_tokens}")
    encoded = [tuple(m.encode_prompt(r.prompt)) for r in requests]
    for n, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"request {n}: prompt {requests[n].prompt[:40]!r} encodes to no token")
    model_key = engine._model_key()
    pairs = [generation_keys(model_key, ids, r.max_new_tokens, r.stop) for ids, r in zip(encoded, requests)]
    # A request is identified by its stopped key when it has stop strings, else by its whole key.
    keys = [stopped or whole for whole, stopped in pairs]
    first: dict[bytes, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    weights = [1.0] * len(requests) if weights is None else weights
    weight: dict[bytes, float] = {}
    for k, w in zip(keys, weights):
        weight[k] = weight.get(k, 0.0) + w

    stats = engine.stats
    stats.requests += len(keys)
    stats.distinct += len(first)
    found = engine.texts.lookup({key for i in first.values() for key in pairs[i] if key is not None})
    texts: dict[bytes, str] = {}
    for k, i in first.items():
        whole, stopped = pairs[i]
        if whole in found:
            texts[k] = found[whole]  # type: ignore[assignment]
        elif stopped is not None and stopped in found:
            texts[k] = found[stopped]  # type: ignore[assignment]
    missing = [k for k in first if k not in texts]
    stats.from_cache += len(first) - len(missing)
    _advance(engine, [k for k in first if k in texts], weight)

    jobs = _jobs(missing, first, pairs, requests)
    rep = {job: first[members[0]] for job, (members, _) in jobs.items()}
    scores = _first_step_tokens(engine, requests, encoded, first_step, rep, list(jobs))
    by_budget: dict[int, list[bytes]] = {}
    for job, i in rep.items():
        by_budget.setdefault(requests[i].max_new_tokens, []).append(job)
    streams = hasattr(m, "generate_stream") and getattr(m, "can_stream", True)
    for max_new, batch_keys in by_budget.items():
        batch_keys.sort(key=lambda k: encoded[rep[k]])
        if streams:
            _run_stream(engine, batch_keys, encoded, rep, max_new, jobs, pairs, first, texts, weight, scores)
            continue
        for batch in _batches(engine, batch_keys, encoded, rep, max_new):
            _run_batch(engine, batch, encoded, rep, max_new, jobs, pairs, first, texts, weight, scores)
    return [cut_at_stop(texts[k], r.stop) for k, r in zip(keys, requests)]


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


def _first_step_tokens(engine: "Engine", requests, encoded, first_step, first, missing):
    """Per generation key still to run, the single tokens whose log-likelihood after the prompt
    is wanted and not yet known (None when nothing is asked): ``first_step`` continuations that
    the backend's ``encode_continuation`` makes one token long (``Engine.prompt_loglikelihood``
    then reads them back under the same key)."""
    if first_step is None or not hasattr(engine.backend, "encode_continuation"):
        return None
    wanted: dict[bytes, list[int]] = {}
    todo = set(missing)
    model_key = engine._model_key()
    for i, conts in enumerate(first_step):
        ids = encoded[i]
        for c in conts:
            ctx, cont = engine.backend.encode_continuation(requests[i].prompt, c)
            if tuple(ctx) == ids and len(cont) == 1:
                wanted.setdefault(ids, [])
                if cont[0] not in wanted[ids]:
                    wanted[ids].append(cont[0])
    out: dict[bytes, list[int]] = {}
    for k in todo:
        ids = encoded[first[k]]
        toks = [
            t for t in wanted.get(ids, []) if not engine.has_score(request_key(model_key, "ll", ids, (t,)))
        ]
        if toks:
            out[k] = toks
    return out or None


def _batches(engine: "Engine", keys: list[bytes], encoded, first, max_new: int):
    """Consecutive runs of at most ``batch_size`` prompts whose padded width (longest prompt +
    new tokens) times rows stays within the backend's token budget (one prompt over it goes
    alone).

    Unlike score forwards, generation batches are not sized by time (``engine.pace``): a
    generation runs ``max_new`` sequential steps whatever its batch, and on a CPU a step of 16
    rows costs a few times one row's, not 16 times. A time target shrank every batch after the
    first to one prompt (KoBBQ: 60 batches for 60 prompts, so no prefix was ever shared; KGQuiz
    Task5: 128 steps per item), and generation times, recorded as tokens per second, made the
    score forwards after them small too. What an interruption loses is one batch."""
    m = engine.backend
    batch: list[bytes] = []
    width = 0
    for k in keys:
        w = max(width, len(encoded[first[k]]) + max_new)
        if batch and (len(batch) >= m.batch_size or (len(batch) + 1) * w > m.token_budget):
            yield batch  # runs before the generator resumes
            batch, w = [], len(encoded[first[k]]) + max_new
        batch.append(k)
        width = w
    if batch:
        yield batch


def _run_batch(
    engine: "Engine",
    batch: list[bytes],
    encoded,
    rep,
    max_new: int,
    jobs,
    pairs,
    first,
    texts,
    weight,
    scores,
) -> None:
    halving(
        lambda part: _generate(
            engine, part, encoded, rep, max_new, jobs, pairs, first, texts, weight, scores
        ),
        batch,
        engine.stats,
    )


def _takes_stop(backend) -> bool:
    try:
        return "stop" in inspect.signature(backend.generate_tokens).parameters
    except (TypeError, ValueError):
        return False


def _generate(
    engine: "Engine",
    batch,
    encoded,
    rep,
    max_new: int,
    jobs,
    pairs,
    first,
    texts: dict[bytes, str],
    weight: dict[bytes, float],
    scores,
) -> None:
    prompts = [list(encoded[rep[k]]) for k in batch]
    score_tokens = [scores.get(k, []) for k in batch] if scores else None
    early = _takes_stop(engine.backend)
    kwargs = {"stop": [list(jobs[k][1]) for k in batch]} if early and any(jobs[k][1] for k in batch) else {}
    out, forwarded, firsts = engine.backend.generate_tokens(prompts, max_new, score_tokens, **kwargs)
    if score_tokens is not None:
        model_key = engine._model_key()
        engine.put_scores(
            {
                request_key(model_key, "ll", tuple(p), (t,)): [v]
                for p, toks, vals in zip(prompts, score_tokens, firsts)
                for t, v in zip(toks, vals)
            }
        )
    stored: dict[bytes, str] = {}
    done: list[bytes] = []
    for job, text in zip(batch, out):
        members, stops = jobs[job]
        if "stop" in kwargs and stops and cut_at_stop(text, stops) != text:
            # Possibly ended at the stop string: only requests with these stop strings may read it.
            stored[pairs[first[members[0]]][1]] = text
        else:
            stored[job] = text
        for k in members:
            texts[k] = text
        done += members
    engine.stats.forwards += 1
    engine.stats.tokens_forwarded += forwarded
    engine.stats.computed += len(done)
    engine.texts.save(stored)
    _advance(engine, done, weight)


def stream_rows(backend, widths: Sequence[int], max_new: int) -> int:
    """Rows a stream decodes at once: ``batch_size``, fewer when that many rows of the widest
    prompt + ``max_new`` would pass the backend's token budget (at least 1).

    Examples:
        >>> class B: batch_size, token_budget = 16, 8192
        >>> stream_rows(B(), [300, 400], 30), stream_rows(B(), [900], 30), stream_rows(B(), [9000], 30)
        (16, 8, 1)
    """
    return max(1, min(backend.batch_size, backend.token_budget // (max(widths) + max_new)))


def _run_stream(
    engine: "Engine", keys, encoded, rep, max_new: int, jobs, pairs, first, texts, weight, scores
):
    """``keys`` through the backend's ``generate_stream`` (continuous batching): each row's text
    is taken as it finishes, saved every few rows (and whatever is done when the stream stops,
    interrupted or failed). On out-of-memory, the rows not done run again with half the rows at
    once, down to one."""
    m = engine.backend
    rows = stream_rows(m, [len(encoded[rep[k]]) for k in keys], max_new)
    todo = list(keys)
    while todo:
        try:
            _stream(engine, todo, rows, encoded, rep, max_new, jobs, pairs, first, texts, weight, scores)
            return
        except BackendOutOfMemory:
            if rows == 1:
                raise
            engine.stats.oom_retries += 1
            rows //= 2
            todo = [k for k in todo if jobs[k][0][0] not in texts]


def _stream(
    engine: "Engine", todo, rows: int, encoded, rep, max_new, jobs, pairs, first, texts, weight, scores
):
    prompts = [list(encoded[rep[k]]) for k in todo]
    score_tokens = [scores.get(k, []) for k in todo] if scores else None
    stop = [list(jobs[k][1]) for k in todo]
    model_key = engine._model_key()
    stats = engine.stats
    stored: dict[bytes, str] = {}
    firsts: dict[bytes, list[float]] = {}
    every = max(1, rows // 2)  # about one refill's rows per transaction

    def flush() -> None:
        engine.put_scores(firsts)
        engine.texts.save(stored)
        firsts.clear()
        stored.clear()

    try:
        stream = engine.backend.generate_stream(prompts, max_new, score_tokens, stop=stop, max_rows=rows)
        for index, text, forwarded, first_step, prefills in stream:
            job = todo[index]
            members, stops = jobs[job]
            if stops and cut_at_stop(text, stops) != text:
                stored[pairs[first[members[0]]][1]] = text  # possibly ended at the stop string
            else:
                stored[job] = text
            if score_tokens is not None:
                firsts.update(
                    {
                        request_key(model_key, "ll", tuple(prompts[index]), (t,)): [v]
                        for t, v in zip(score_tokens[index], first_step or ())
                    }
                )
            for k in members:
                texts[k] = text
            stats.forwards += prefills
            stats.tokens_forwarded += forwarded
            stats.computed += len(members)
            _advance(engine, members, weight)
            if len(stored) >= every:
                flush()
    finally:
        flush()


def _advance(engine: "Engine", keys, weight: dict[bytes, float]) -> None:
    if engine.progress is not None and keys:
        engine.progress.advance(sum(weight.get(k, 0.0) for k in keys))
