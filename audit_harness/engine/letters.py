"""Letter log-probs for the engine (``Engine.letter_logprobs``): the first answer token after a
chat prompt, read as a distribution over option letters (``parsing.letters``).

- In process (a backend that runs forwards): every variant of every letter
  (``parsing.letters.variants``) that the backend's ``encode_continuation`` makes one token after
  the prompt is scored as a continuation of the prompt, through the engine's ordinary scoring
  (cache, dedupe, prefix sharing): the exact next-token log-probabilities. A generation's first
  step (KoBBQ ``both``) stores the same keys, so nothing is computed twice.
- Through a chat API (``Backend.reads_top_candidates``): one ``first_token_top`` request per
  prompt (the server's own chat template, one token, its top candidates), read by
  ``parsing.letters.candidates_read``. Not cached: the server's answer is re-read, not
  recomputed, by replaying the records.
"""

from __future__ import annotations

from typing import Sequence

from ..parsing.letters import LetterRead, candidates_read, exact_read, variants


def variant_texts(letters: Sequence[str]) -> list[str]:
    """Every variant text of ``letters`` (the continuations a generation's first step scores)."""
    return [v for x in letters for v in variants(x)]


def read_letters(engine, prompts: Sequence[str], letters: Sequence[Sequence[str]]) -> list[LetterRead]:
    """One ``LetterRead`` per prompt (see the module doc); each prompt one progress unit.

    Raises:
        ValueError: prompts and letter lists differ in length.
        ModelError: the backend can be read neither way.
    """
    if len(prompts) != len(letters):
        raise ValueError(f"{len(prompts)} prompts but {len(letters)} letter lists")
    backend = engine.backend
    if backend.reads_top_candidates:
        tops = backend.first_token_top(list(prompts))
        engine.stats.requests += len(prompts)
        engine.stats.distinct += len(prompts)  # each item's own prompt: nothing to dedupe
        engine.stats.computed += len(prompts)
        if engine.progress is not None:
            engine.progress.advance(float(len(prompts)))
        return [candidates_read(t.candidates, ls, t.answer_token) for t, ls in zip(tops, letters)]
    if not engine.keyed_forwards:
        return _strings(engine, prompts, letters)
    return _exact(engine, prompts, letters)


def _strings(engine, prompts: Sequence[str], letters: Sequence[Sequence[str]]) -> list[LetterRead]:
    """A backend that scores strings itself (a test double): every variant scored as its text,
    read as exact (the backend has no tokens to say which variants are one token)."""
    pairs = [(p, v) for p, ls in zip(prompts, letters) for v in variant_texts(ls)]
    values = iter(
        engine.prompt_loglikelihood(
            pairs,
            [1.0 / len(variant_texts(ls)) for p, ls in zip(prompts, letters) for _ in variant_texts(ls)],
        )
    )
    out = []
    for ls in letters:
        per = {x: {v: float(next(values)) for v in variants(x)} for x in ls}
        out.append(exact_read(per, ls))
    return out


def _exact(engine, prompts: Sequence[str], letters: Sequence[Sequence[str]]) -> list[LetterRead]:
    """The exact read: each single-token variant's log-likelihood right after its prompt."""
    backend = engine.backend
    encoded, where = [], []
    for i, (prompt, ls) in enumerate(zip(prompts, letters)):
        seen: set[int] = set()
        for x in ls:
            for v in variants(x):
                ctx, cont = backend.encode_continuation(prompt, v)
                # A variant of several tokens is no first token; two variants of one token
                # (a tokenizer that drops the space) are one candidate.
                if len(cont) == 1 and cont[0] not in seen:
                    seen.add(cont[0])
                    encoded.append((ctx, cont))
                    where.append((i, x, v))
    share = [0.0] * len(prompts)
    for i, _, _ in where:
        share[i] += 1
    weights = [1.0 / share[i] for i, _, _ in where]
    values = engine.loglikelihood_tokens(encoded, weights) if encoded else []
    per: list[dict[str, dict[str, float]]] = [{} for _ in prompts]
    for (i, x, v), value in zip(where, values):
        per[i].setdefault(x, {})[v] = float(value)
    return [exact_read(p, ls) for p, ls in zip(per, letters)]
