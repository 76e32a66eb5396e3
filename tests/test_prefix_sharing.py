"""Prefix sharing in the HF backend over copied key/value caches (``packing=False``; the packed
tree-attention path is tested in test_engine.py): each distinct context runs once with a key/value
cache and all its continuations are scored against it. Scores must equal the full-sequence path and the
unbatched reference definition (tests/test_models.py), for absolute (GPT-2) and rotary (Llama,
Gemma 3 with sliding-window layers) positions."""

from __future__ import annotations

import pytest
import torch
from test_models import reference_loglikelihood

from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.hf import HFCausalLM

# Shared contexts (3 and 2 continuations), unshared ones, continuations of 1 to ~10 tokens,
# and empty contexts (conditioned on BOS, so they share one context too).
REQUESTS = [
    ("The grandfather and the grandson", " were trying to book a cab."),
    ("The grandfather and the grandson", " A"),
    ("The grandfather and the grandson", " Not enough information."),
    ("Who was not comfortable using the phone?\nA:", " Can't be determined"),
    ("Who was not comfortable using the phone?\nA:", " The grandson"),
    ("La semana pasada vi a un nieto", " con su abuelo."),
    ("La setmana passada vaig veure un nét amb el seu avi. No hi ha prou informació.", " B"),
    ("Answer:", " A"),
    ("Answer:", " B"),
    ("Answer:", " C. The woman, the man, the doctor, the nurse, the teacher."),
    ("", "Not enough information."),
    ("", "The nurse"),
    ("Answer: ", "A"),  # same tokens as ("Answer:", " A") after the whitespace move
]


@pytest.fixture(scope="module")
def gpt2() -> HFCausalLM:
    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=7)


def _tiny(arch: str, tokenizer, info) -> HFCausalLM:
    """A seeded 2-3 layer random RoPE model on the tiny GPT-2's tokenizer (no download).
    initializer_range 0.3 gives peaked distributions, so a wrong position or mask shows."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        max_position_embeddings=256,
        initializer_range=0.3,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_key_value_heads=2, **common))
    else:
        # sliding_window=4 < every context: the cache of sliding layers is cropped, which the
        # continuation forward must handle (Gemma 3's window is 512 tokens).
        cfg = Gemma3TextConfig(
            num_hidden_layers=3,
            num_key_value_heads=1,
            head_dim=16,
            sliding_window=4,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            **common,
        )
        model = Gemma3ForCausalLM(cfg)
    return HFCausalLM(model.eval(), tokenizer, info, batch_size=7)


@pytest.fixture(scope="module", params=["gpt2", "llama", "gemma3"])
def model(request, gpt2) -> HFCausalLM:
    return gpt2 if request.param == "gpt2" else _tiny(request.param, gpt2.tokenizer, gpt2.info)


def _scores(model: HFCausalLM, requests, *, sharing: bool, batch_size: int, **budgets) -> list[float]:
    saved = (model.prefix_sharing, model.batch_size, model.token_budget, model.logits_budget)
    model.prefix_sharing, model.batch_size, model.packing = sharing, batch_size, False
    model.token_budget = budgets.get("token_budget", model.token_budget)
    model.logits_budget = budgets.get("logits_budget", model.logits_budget)
    try:
        return Engine(model).loglikelihood(requests)
    finally:
        model.prefix_sharing, model.batch_size, model.token_budget, model.logits_budget = saved
        model.packing = True


class ForwardCounter:
    """Wraps ``model.model.forward``: counts context forwards (cache built, none passed in) and
    the context rows they carry, and forwards that continue a passed-in cache."""

    def __init__(self, model: HFCausalLM, monkeypatch):
        self.context_calls = self.context_rows = self.full_calls = 0
        self.continuation_calls = self.continuation_rows = 0
        inner = model.model.forward

        def forward(*args, **kwargs):
            if kwargs.get("cache") is not None or kwargs.get("past_key_values") is not None:
                self.continuation_calls += 1
                self.continuation_rows += kwargs["input_ids"].shape[0]
            elif kwargs.get("use_cache"):
                self.context_calls += 1
                self.context_rows += kwargs["input_ids"].shape[0]
            else:
                self.full_calls += 1
            return inner(*args, **kwargs)

        monkeypatch.setattr(model.model, "forward", forward)


@pytest.mark.parametrize("batch_size", [1, 7])
def test_prefix_sharing_equals_full_path_and_reference(model, batch_size):
    shared = _scores(model, REQUESTS, sharing=True, batch_size=batch_size)
    full = _scores(model, REQUESTS, sharing=False, batch_size=batch_size)
    expected = [reference_loglikelihood(model, c, x) for c, x in REQUESTS]
    assert shared == pytest.approx(full, abs=1e-4)
    assert shared == pytest.approx(expected, abs=1e-4)
    assert all(s < 0 for s in shared)


def test_many_requests_in_shuffled_order(model):
    """Contexts of many lengths in one batch (different left padding per row), requests
    interleaved across contexts: results come back in request order."""
    contexts = [" ".join(["The grandfather and the grandson"] * k) for k in range(1, 6)] + [""]
    conts = [" A", " were trying to book a cab.", " Not enough information.", " The nurse, the doctor"]
    requests = [(c, x) for x in conts for c in contexts]
    generator = torch.Generator().manual_seed(0)
    requests = [requests[i] for i in torch.randperm(len(requests), generator=generator).tolist()]
    shared = _scores(model, requests, sharing=True, batch_size=4)
    expected = [reference_loglikelihood(model, c, x) for c, x in requests]
    assert shared == pytest.approx(expected, abs=1e-4)


def test_tight_budgets_split_batches_without_changing_scores(model):
    """A token budget below one context's continuations forces several continuation forwards
    over copies of one cache; a logits budget of one vocabulary allows one position each."""
    expected = _scores(model, REQUESTS, sharing=False, batch_size=7)
    tight = _scores(model, REQUESTS, sharing=True, batch_size=7, token_budget=30)
    one_position = _scores(model, REQUESTS, sharing=True, batch_size=7, logits_budget=1)
    assert tight == pytest.approx(expected, abs=1e-4)
    assert one_position == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("batch_size", [1, 7])
def test_each_distinct_context_runs_once(gpt2, monkeypatch, batch_size):
    encoded = [gpt2.encode_pair(c, x) for c, x in REQUESTS]
    distinct = len({tuple(ctx) for ctx, _ in encoded})
    assert distinct < len(REQUESTS)  # the fixture does share contexts
    counter = ForwardCounter(gpt2, monkeypatch)
    _scores(gpt2, REQUESTS, sharing=True, batch_size=batch_size)
    assert counter.context_rows == distinct
    assert counter.context_calls == -(-distinct // batch_size)
    assert counter.full_calls == 0
    # Each request with a continuation of 2+ tokens is one row of one continuation forward
    # (a 1-token continuation is scored by its context's last logits alone).
    assert counter.continuation_rows == sum(len(cont) > 1 for _, cont in encoded)
    assert counter.continuation_calls >= 1


def test_full_path_is_used_when_sharing_is_off(gpt2, monkeypatch):
    counter = ForwardCounter(gpt2, monkeypatch)
    _scores(gpt2, REQUESTS, sharing=False, batch_size=7)
    assert counter.context_calls == counter.continuation_calls == 0
    assert counter.full_calls == -(-len(REQUESTS) // 7)


def test_requests_longer_than_the_window_take_the_truncating_full_path(monkeypatch):
    model = load_model("tiny-random-gpt2", device="cpu", batch_size=4)
    model.max_length, model.packing = 24, False
    long_ctx = "The grandfather and the grandson " * 12
    requests = [(long_ctx, " were here."), (long_ctx, " A"), ("Answer:", " A"), ("Answer:", " B")]
    counter = ForwardCounter(model, monkeypatch)
    shared = Engine(model).loglikelihood(requests)
    assert counter.full_calls == 1 and counter.context_rows == 1  # only "Answer:" is shared
    model.prefix_sharing = False
    assert shared == pytest.approx(Engine(model).loglikelihood(requests), abs=1e-4)


def test_model_without_cache_argument_falls_back_to_full_path(gpt2, monkeypatch):
    """A forward that takes no cache (e.g. custom code) cannot continue a context."""

    class NoCache(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(
            self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0
        ):
            return self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=logits_to_keep,
            )

    wrapped = HFCausalLM(NoCache(gpt2.model), gpt2.tokenizer, gpt2.info, batch_size=7)
    assert wrapped.prefix_sharing and not wrapped.can_share
    assert Engine(wrapped).loglikelihood(REQUESTS) == pytest.approx(
        _scores(gpt2, REQUESTS, sharing=False, batch_size=7), abs=1e-4
    )


def test_uncacheable_output_falls_back_to_full_path(gpt2, monkeypatch):
    """A cache that is not a batch-indexable transformers Cache (legacy tuples, recurrent
    state) switches sharing off for the model and rescores everything on the full path."""
    model = load_model("tiny-random-gpt2", device="cpu", batch_size=7)
    model.packing = False
    inner = model.model.forward

    def forward(*args, **kwargs):
        out = inner(*args, **kwargs)
        if getattr(out, "cache", None) is not None:
            out.cache = tuple((layer.keys, layer.values) for layer in out.cache.layers)
        return out

    monkeypatch.setattr(model.model, "forward", forward)
    scores = Engine(model).loglikelihood(REQUESTS)
    assert not model.can_share
    assert scores == pytest.approx(_scores(gpt2, REQUESTS, sharing=False, batch_size=7), abs=1e-4)


def test_empty_ids_are_refused(gpt2):
    with pytest.raises(ValueError, match="empty context or continuation"):
        Engine(gpt2).loglikelihood_tokens([([], [5, 6])])
    with pytest.raises(ValueError, match="empty context or continuation"):
        Engine(gpt2).loglikelihood_tokens([([5], [])])


def test_budgets_are_validated(gpt2):
    with pytest.raises(ValueError, match="token_budget"):
        HFCausalLM(gpt2.model, gpt2.tokenizer, gpt2.info, token_budget=0)
