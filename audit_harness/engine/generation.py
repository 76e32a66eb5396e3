"""Generation requests through the engine: dedupe, the result cache, ordering, token-budget
batching (halved and retried on out-of-memory) and progress, as for scores. A backend runs
batches only:

- ``encode_prompt(text) -> ids``: the prompt's token ids, as the model will read them.
- ``generate_tokens(prompts, max_new_tokens, score_tokens=None) -> (texts, tokens forwarded,
  first-step log-probabilities)``: greedy completions of a batch of token-id prompts (the decoded
  text after each prompt, no stop string applied), the number of tokens the backend actually ran
  (prompt tokens shared between prompts counted once, plus one per decoded step and row), and,
  when asked, the log-probability of given tokens as the first token after each prompt.

``first_step``: the forward that picks a prompt's first new token has the whole next-token
distribution, so continuations of the same prompt that are one token long (KoBBQ's option
letters, scored in letter mode) are stored from it as ordinary log-likelihood results: a later
``Engine.prompt_loglikelihood`` of (prompt, letter) finds them in the memo or cache instead of running
the prompt again.

The cache stores the decoded text before stop strings are applied, so requests that differ only
in their stop strings share one entry (key: model key, prompt ids, ``max_new_tokens``).
Requests are sorted by their token ids, so prompts with a shared prefix (KoBBQ's 3 option orders
of one question) land in one batch, where a backend can run the prefix once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..models.base import GenerationRequest
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


def run_generation(
    engine: "Engine",
    requests: Sequence[GenerationRequest],
    weights: Sequence[float] | None = None,
    first_step: Sequence[Sequence[str]] | None = None,
) -> list[str]:
    """``Engine.generate``: one greedy completion per request, in order, each distinct (prompt
    ids, ``max_new_tokens``) computed at most once (memo, cache). A backend without
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
    keys = [request_key(model_key, "gen", ids, (r.max_new_tokens,)) for ids, r in zip(encoded, requests)]
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
    texts: dict[bytes, str] = dict(engine.texts.lookup(first))  # type: ignore[arg-type]
    missing = [k for k in first if k not in texts]
    stats.from_cache += len(first) - len(missing)
    _advance(engine, [k for k in first if k in texts], weight)

    scores = _first_step_tokens(engine, requests, encoded, first_step, first, missing)
    by_budget: dict[int, list[bytes]] = {}
    for k in missing:
        by_budget.setdefault(requests[first[k]].max_new_tokens, []).append(k)
    for max_new, ks in by_budget.items():
        ks.sort(key=lambda k: encoded[first[k]])
        for batch in _batches(engine, ks, encoded, first, max_new):
            _run_batch(engine, batch, encoded, first, max_new, texts, weight, scores)
    return [cut_at_stop(texts[k], r.stop) for k, r in zip(keys, requests)]


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
    new tokens) times rows stays within the token budget and the engine's time budget
    (``engine.pace``; one prompt over it goes alone)."""
    m = engine.backend
    batch: list[bytes] = []
    width = 0
    budget = engine.pace.budget(m.token_budget)
    for k in keys:
        w = max(width, len(encoded[first[k]]) + max_new)
        if batch and (len(batch) >= m.batch_size or (len(batch) + 1) * w > budget):
            yield batch  # runs (and is timed) before the generator resumes
            batch, w = [], len(encoded[first[k]]) + max_new
            budget = engine.pace.budget(m.token_budget)
        batch.append(k)
        width = w
    if batch:
        yield batch


def _run_batch(
    engine: "Engine",
    batch: list[bytes],
    encoded,
    first,
    max_new: int,
    texts: dict[bytes, str],
    weight: dict[bytes, float],
    scores,
) -> None:
    halving(
        lambda part: _generate(engine, part, encoded, first, max_new, texts, weight, scores),
        batch,
        engine.stats,
    )


def _generate(
    engine: "Engine",
    batch,
    encoded,
    first,
    max_new: int,
    texts: dict[bytes, str],
    weight: dict[bytes, float],
    scores,
) -> None:
    prompts = [list(encoded[first[k]]) for k in batch]
    score_tokens = [scores.get(k, []) for k in batch] if scores else None
    with engine.pace.timed(len(prompts) * (max(len(p) for p in prompts) + max_new)):
        if score_tokens is None:
            out, forwarded, _ = engine.backend.generate_tokens(prompts, max_new)
        else:
            out, forwarded, firsts = engine.backend.generate_tokens(prompts, max_new, score_tokens)
    if score_tokens is not None:
        model_key = engine._model_key()
        engine.put_scores(
            {
                request_key(model_key, "ll", tuple(p), (t,)): [v]
                for p, toks, vals in zip(prompts, score_tokens, firsts)
                for t, v in zip(toks, vals)
            }
        )
    new = dict(zip(batch, out))
    engine.stats.forwards += 1
    engine.stats.tokens_forwarded += forwarded
    engine.stats.computed += len(batch)
    texts.update(new)
    engine.texts.save(new)
    _advance(engine, batch, weight)


def _advance(engine: "Engine", keys, weight: dict[bytes, float]) -> None:
    if engine.progress is not None and keys:
        engine.progress.advance(sum(weight.get(k, 0.0) for k in keys))
