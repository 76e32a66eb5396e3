"""Decoding steps' linear layers through oneDNN (``models/decode_linear.py``): a few rows go the
converted weights' way, within float rounding of sgemm's, more rows stay on sgemm bit for bit;
greedy texts on real KoBBQ prompts equal those decoded without it; a model on another dtype, or a
copy that would not fit, is left alone."""

from __future__ import annotations

import pytest
import torch

from audit_harness.engine.executor import Engine
from audit_harness.models import decode_linear, load_model
from audit_harness.models.base import GenerationRequest

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


def layers(rows_in: int = 24, out: int = 40):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(rows_in, out), torch.nn.Linear(out, 7, bias=False))
    return model.eval()


def rounding_bound(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """How far two float32 evaluations of ``layer(x)`` may differ by rounding alone, in any order
    of summation: each is within gamma_k (|x| |W|^T + |b|) of the exact value, gamma_k ~ k eps for
    a sum of k = in_features + 1 terms (the standard forward error bound of a dot product)."""
    k = layer.in_features + 1
    magnitude = x.abs() @ layer.weight.abs().T
    if layer.bias is not None:
        magnitude = magnitude + layer.bias.abs()
    return 2 * k * torch.finfo(torch.float32).eps * magnitude


def test_few_rows_take_onednn_within_rounding_and_many_rows_stay_on_sgemm():
    model = layers()
    x_few, x_many = torch.randn(3, 5, 24), torch.randn(decode_linear.MAX_ROWS + 1, 24)
    with torch.inference_mode():
        hidden = model[0](x_few)  # each layer checked on the same input by both paths
        few, many = [model[0](x_few), model[1](hidden)], model(x_many)
        bounds = [rounding_bound(model[0], x_few), rounding_bound(model[1], hidden)]
        assert decode_linear.enable(model) == 2
        assert decode_linear.enable(model) == 2  # idempotent: no second copy
        fast_few, fast_many = [model[0](x_few), model[1](hidden)], model(x_many)
    for fast, dense, bound in zip(fast_few, few, bounds):
        assert fast.shape == dense.shape and bool(((fast - dense).abs() <= bound).all())
    assert torch.equal(fast_many, many)  # the dense path itself


def test_it_declines_what_does_not_apply(monkeypatch):
    assert decode_linear.enable(layers().to(torch.float64)) == 0  # sgemm's dtype only
    monkeypatch.setattr(decode_linear, "available_bytes", lambda: 100)  # the copy would not fit
    model = layers()
    assert decode_linear.enable(model) == 0
    x = torch.randn(2, 24)
    with torch.inference_mode():
        assert torch.equal(model(x), torch.nn.Sequential(*model)(x))


def test_greedy_texts_on_kobbq_equal_those_without_it(data_dir):
    """SmolLM2 (its layers are ``nn.Linear``) on chat-formatted KoBBQ prompts, 12 new tokens:
    the same texts, and the same first-step letter scores within 1e-4 nats."""
    from audit_harness.benchmarks.kobbq import KoBBQ

    plain = load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=4)
    plain.onednn_decoding = False
    bench = KoBBQ().configure(answer_mode="generate", prompts="1")
    items = bench.select(bench.load_category(data_dir, "age").items, 2, 0, salt="kobbq/age")
    shaped = [KoBBQ.model_input(Engine(plain), it) for it in items]
    requests = [GenerationRequest(p, 12) for p, _ in shaped]
    letters = [KoBBQ.letter_continuations(it) for it in items]

    def run(model):
        engine = Engine(model)
        return engine.generate(requests, first_step=letters), engine

    expected, _ = run(plain)
    fast = load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=4)
    assert fast is not plain and fast.onednn_decoding
    got, engine = run(fast)
    assert getattr(fast.model, decode_linear.MARK) > 0 and got == expected
    pairs = [(p, x) for (p, _), ls in zip(shaped, letters) for x in ls]
    assert engine.prompt_loglikelihood(pairs) == pytest.approx(
        Engine(plain).prompt_loglikelihood(pairs), abs=1e-4
    )
