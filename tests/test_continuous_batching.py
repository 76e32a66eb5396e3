"""Continuous batching (``HFCausalLM.generate_stream``, ``models/continuous.py``): a batch refilled
with waiting prompts as its rows finish gives, on real KoBBQ prompts, the texts and first-step
scores of one prompt at a time and of the per-batch path; it runs fewer decoding steps when one
answer is long; and the engine keeps its guarantees (results saved as rows finish, out-of-memory
retries, progress, the per-batch fallback)."""

from __future__ import annotations

import pytest

from audit_harness.benchmarks.kobbq import KoBBQ
from audit_harness.engine.cache import ResultCache
from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.base import GenerationRequest

NEVER = "\u2603never"


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)


def kobbq_prompts(engine, data_dir, limit: int, prompts: str = "1,5") -> tuple[list[str], list[list[str]]]:
    """(prompts, option letters as first-step continuations) of KoBBQ age rows as the benchmark
    renders them for ``engine``'s model (its chat template when it has one): the letter variants
    that are one token after their prompt, the ones a generation's first step scores."""
    bench = KoBBQ().configure(answer_mode="generate", prompts=prompts)
    data = bench.load_category(data_dir, "age")
    items = bench.select(data.items, limit, 0, salt="kobbq/age")
    shaped = [KoBBQ.model_input(engine, it) for it in items]

    def one_token(prompt: str, variant: str) -> bool:
        return len(engine.backend.encode_continuation(prompt, variant)[1]) == 1

    letters = [
        [v for v in KoBBQ.letter_continuations(it) if one_token(p, v)] for it, (p, _) in zip(items, shaped)
    ]
    return [p for p, _ in shaped], letters


def run(model, requests, *, continuous: bool, batch_size: int, first_step=None, memo=False):
    """(texts, engine, decoding steps) of ``requests`` through a fresh engine."""
    model.continuous_batching, model.batch_size = continuous, batch_size
    try:
        engine = Engine(model, memo=memo)
        before = model.decode_steps
        out = engine.generate(requests, first_step=first_step)
        return out, engine, model.decode_steps - before
    finally:
        model.continuous_batching, model.batch_size = True, 4


def prefix_stops(texts: list[str]) -> list[list[str]]:
    """Per text a stop string that ends its row at a different step: a prefix of the text (it
    first occurs once that much is generated), longer for later texts; every third (the first
    included) none, so early rows leave while a long one runs and the stream refills."""
    stops = []
    for n, text in enumerate(texts):
        stop = text[: max(1, len(text) * (n % 5 + 1) // 6)].rstrip("\ufffd")
        stops.append([stop] if stop and n % 3 else [NEVER])
    return stops


def assert_exact(model, prompts, letters, max_new: int, rows: int, monkeypatch, engine=True) -> None:
    """The backend's stream (``rows`` at once, refilled) == ``generate_tokens`` of one prompt at
    a time == of batches of ``rows``: texts (uncut, so where each row ended counts) n/n with rows
    ending at stop strings at many steps, first-step scores within 1e-4 nats; then the same
    through the engine, with KoBBQ's option letters as first-step continuations (``engine``)."""
    import audit_harness.models.continuous as continuous

    merges = []
    merge = continuous.DecodingRows.merge
    monkeypatch.setattr(
        continuous.DecodingRows, "merge", lambda self, other: merges.append(1) or merge(self, other)
    )
    ids = [model.encode_prompt(p) for p in prompts]
    whole = [
        t for i in range(0, len(ids), rows) for t in model.generate_tokens(ids[i : i + rows], max_new)[0]
    ]
    stops = prefix_stops(whole)
    letter_ids = [[model.encode_continuation(p, x)[1][0] for x in ls] for p, ls in zip(prompts, letters)]
    alone = [model.generate_tokens([p], max_new, [t], stop=[s]) for p, t, s in zip(ids, letter_ids, stops)]
    batched = []
    for i in range(0, len(ids), rows):
        texts, _, firsts = model.generate_tokens(
            ids[i : i + rows], max_new, letter_ids[i : i + rows], stop=stops[i : i + rows]
        )
        batched += zip(texts, firsts)
    stream: dict[int, tuple[str, list[float]]] = {}
    prefills = 0
    for i, text, _, first, started in model.generate_stream(
        ids, max_new, letter_ids, stop=stops, max_rows=rows
    ):
        stream[i] = (text, first)
        prefills += started
    assert sorted(stream) == list(range(len(ids)))
    texts = [stream[i][0] for i in range(len(ids))]
    assert texts == [a[0][0] for a in alone] == [b[0] for b in batched]
    assert len({len(t) for t in texts}) > 1 and merges  # rows ended at several steps; refills merged
    flat = [v for i in range(len(ids)) for v in stream[i][1]]
    assert flat == pytest.approx([v for a in alone for v in a[2][0]], abs=1e-4)
    assert flat == pytest.approx([v for b in batched for v in b[1]], abs=1e-4)
    if not engine:
        return
    requests = [GenerationRequest(p, max_new, stop=tuple(s)) for p, s in zip(prompts, stops)]
    out, eng, _ = run(model, requests, continuous=True, batch_size=rows, first_step=letters, memo=True)
    assert out == run(model, requests, continuous=False, batch_size=1)[0]
    pairs = [(p, x) for p, ls in zip(prompts, letters) for x in ls]
    computed = eng.stats.computed
    from_first_step = eng.prompt_loglikelihood(pairs)
    assert eng.stats.computed == computed  # every letter came from the stream's first steps
    model.prefix_sharing, model.batch_size = False, 1
    try:
        expected = Engine(model).prompt_loglikelihood(pairs)
    finally:
        model.prefix_sharing, model.batch_size = True, 4
    assert from_first_step == pytest.approx(expected, abs=1e-4)


def test_continuous_batching_equals_one_prompt_at_a_time_on_kobbq_tiny(tiny, data_dir, monkeypatch):
    engine = Engine(tiny)
    prompts, letters = kobbq_prompts(engine, data_dir, 3)  # 3 rows x 2 templates x 3 orders
    assert len(prompts) == 18
    assert_exact(tiny, prompts, letters, 12, 4, monkeypatch)


def test_continuous_batching_equals_one_prompt_at_a_time_on_kobbq_smollm2(data_dir, monkeypatch):
    """A real model, chat-formatted prompts (about 400 tokens each); the engine part is the tiny
    model's (one prompt of SmolLM2 takes seconds on a busy CPU)."""
    model = load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=4)
    prompts, letters = kobbq_prompts(Engine(model), data_dir, 2, prompts="1")
    assert len(prompts) == 6 and prompts[0].startswith("<|im_start|>")
    assert_exact(model, prompts, letters, 6, 2, monkeypatch, engine=False)


# -- the refill ----------------------------------------------------------------------------------
PLAIN = [
    "Answer:",
    "Who was not comfortable using the phone?",
    "The grandfather",
    "The grandson was",
    "La semana pasada vi a un nieto con su abuelo",
    "Question: who forgot?",
    "Context: two friends",
    "hello there",
]


def long_and_short(model, max_new: int):
    """Requests over ``PLAIN`` in the engine's order (sorted by token ids) whose rows 0 and 4 run
    ``max_new`` tokens and every other row stops after its first (a stop string = its first
    character)."""
    prompts = sorted(PLAIN, key=lambda p: model.encode_prompt(p))
    whole, _, _ = run(model, [GenerationRequest(p, max_new) for p in prompts], continuous=False, batch_size=1)
    assert all(whole) and all(len(model.tokenizer(t)["input_ids"]) >= max_new for t in whole)
    return [
        GenerationRequest(p, max_new, stop=(NEVER,) if n in (0, 4) else (t[0],))
        for n, (p, t) in enumerate(zip(prompts, whole))
    ]


def test_the_refill_runs_fewer_decoding_steps_than_batches(tiny):
    requests = long_and_short(tiny, 12)
    stream, s_eng, s_steps = run(tiny, requests, continuous=True, batch_size=4)
    batched, b_eng, b_steps = run(tiny, requests, continuous=False, batch_size=4)
    assert stream == batched
    # Batches of 4: each holds one long row, 11 steps each. The stream refills while row 0 runs,
    # so rows 0 and 4 decode side by side.
    assert b_eng.stats.forwards == 2 and b_steps == 22
    assert s_steps == 11 and s_eng.stats.forwards > 2  # the refills' prompt forwards
    assert s_eng.stats.computed == b_eng.stats.computed == len(requests)
    # Tokens run: the prompts (a trie per forward) plus one per generated token.
    assert s_eng.stats.tokens_forwarded >= sum(len(tiny.encode_prompt(r.prompt)) for r in requests) // 2


def test_rows_merge_at_different_widths_and_positions(tiny):
    """Prompts of very different lengths, one row at a time refilled (2 rows at once): each
    merge left-pads one side; texts equal the prompts run alone."""
    prompts = [" ".join(["word"] * n) + " end" for n in (1, 30, 2, 17, 5, 40, 3)]
    ids = [tiny.encode_prompt(p) for p in prompts]
    stops = prefix_stops([tiny.generate_tokens([p], 9)[0][0] for p in ids])
    alone = [tiny.generate_tokens([p], 9, stop=[s])[0][0] for p, s in zip(ids, stops)]
    stream = dict((i, t) for i, t, *_ in tiny.generate_stream(ids, 9, stop=stops, max_rows=2))
    assert [stream[i] for i in range(len(ids))] == alone


def test_a_refill_continues_the_kept_prefix_of_the_previous_one(tiny, data_dir, monkeypatch):
    """KoBBQ prompts share the template's instruction across refills: a refill continues the
    kept cache of the previous refill's last prompt rather than running it again, with texts
    and first-step scores equal to one prompt at a time, and fewer tokens run than with the
    reuse switched off."""
    from audit_harness.models.hf import HFCausalLM

    prompts, _ = kobbq_prompts(Engine(tiny), data_dir, 3)
    ids = sorted(tiny.encode_prompt(p) for p in prompts)
    letters = [[ids[n][-1]] for n in range(len(ids))]  # any token: a first-step score to compare
    reused = []
    prefill = HFCausalLM.prefill

    def spy(self, group, past=None):
        if past is not None:
            reused.append(past.length)
        return prefill(self, group, past)

    monkeypatch.setattr(HFCausalLM, "prefill", spy)

    def stream():
        out, run_tokens = {}, 0
        for i, text, tokens, first, _ in tiny.generate_stream(ids, 8, letters, max_rows=4):
            out[i], run_tokens = (text, first), run_tokens + tokens
        return [out[i] for i in range(len(ids))], run_tokens

    texts_firsts, tokens = stream()
    assert reused and max(reused) >= 32  # the template's instruction, at least, was not run again
    alone = [tiny.generate_tokens([p], 8, [t]) for p, t in zip(ids, letters)]
    assert [t for t, _ in texts_firsts] == [a[0][0] for a in alone]
    assert [v for _, f in texts_firsts for v in f] == pytest.approx([a[2][0][0] for a in alone], abs=1e-4)
    from audit_harness.models.prompt_prefix import PromptPrefix

    monkeypatch.setattr(PromptPrefix, "shared_with", lambda self, group: None)
    again, more = stream()
    assert [t for t, _ in again] == [t for t, _ in texts_firsts]
    assert tokens + sum(reused) == more  # exactly the reused columns were not run again


# -- the engine's guarantees ---------------------------------------------------------------------
def test_out_of_memory_reruns_the_unfinished_rows_with_fewer(tiny, monkeypatch):
    import functools

    import torch

    requests = long_and_short(tiny, 10)
    expected, _, _ = run(tiny, requests, continuous=False, batch_size=1)
    forward = tiny.model.forward

    @functools.wraps(forward)  # its signature: the backend reads its parameters
    def small_only(*args, **kwargs):
        if kwargs["input_ids"].shape[0] > 1:
            raise torch.OutOfMemoryError("test: more than one row")
        return forward(*args, **kwargs)

    monkeypatch.setattr(tiny.model, "forward", small_only)
    out, eng, _ = run(tiny, requests, continuous=True, batch_size=4)
    assert out == expected and eng.stats.oom_retries == 2  # 4 -> 2 -> 1 rows
    assert eng.stats.computed == len(requests)


def test_finished_rows_are_saved_before_an_interruption(tiny, tmp_path):
    requests = [GenerationRequest(p, 6) for p in PLAIN]

    class Interrupt:
        done = 0.0

        def advance(self, n):
            self.done += n
            if self.done >= 3:
                raise KeyboardInterrupt

    engine = Engine(tiny, cache=ResultCache(tmp_path))
    engine.progress = Interrupt()
    with pytest.raises(KeyboardInterrupt):
        engine.generate(requests)
    again = Engine(tiny, cache=ResultCache(tmp_path))
    out = again.generate(requests)
    assert again.stats.from_cache == 3 and again.stats.computed == len(PLAIN) - 3
    assert out == run(tiny, requests, continuous=False, batch_size=1)[0]


def test_progress_advances_per_generation(tiny):
    class Task:
        done = 0.0

        def advance(self, n):
            self.done += n

    engine = Engine(tiny)
    engine.progress = Task()
    engine.generate([GenerationRequest(p, 3) for p in PLAIN], weights=[0.5] * len(PLAIN))
    assert engine.progress.done == pytest.approx(len(PLAIN) / 2)


def test_a_cache_that_does_not_merge_runs_batch_by_batch(tiny, monkeypatch):
    import audit_harness.models.continuous as continuous

    requests = long_and_short(tiny, 8)
    expected, b_eng, b_steps = run(tiny, requests, continuous=False, batch_size=4)
    monkeypatch.setattr(continuous, "mergeable", lambda cache: False)
    out, eng, steps = run(tiny, requests, continuous=True, batch_size=4)
    assert out == expected and steps == b_steps
    assert eng.stats.forwards == b_eng.stats.forwards
    assert eng.stats.tokens_forwarded == b_eng.stats.tokens_forwarded


def test_who_streams(tiny):
    assert tiny.can_stream
    tiny.continuous_batching = False
    try:
        assert not tiny.can_stream
    finally:
        tiny.continuous_batching = True
    config = tiny.model.generation_config
    old = config.repetition_penalty
    config.repetition_penalty = 1.5  # decodes through transformers' generate
    try:
        assert not tiny.can_stream
    finally:
        config.repetition_penalty = old
    with pytest.raises(ValueError, match="max_rows"):
        tiny.generate_stream([[1, 2]], 3, max_rows=0)
