"""A server backend's window is the ``max_model_len`` its ``/v1/models`` reports (the fake server:
1,024, the tiny model's): a generation prompt past it is left-truncated by the engine, counted,
and sent as token ids that fit, rather than refused by the server. Real CBBQ rows."""

from __future__ import annotations

import pytest
from fake_openai import FakeServer

from audit_harness.benchmarks import registry
from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.base import GenerationRequest
from audit_harness.models.openai_server import connect


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)


def test_a_prompt_past_the_servers_window_is_truncated_to_fit(tiny, data_dir):
    cbbq = registry()["cbbq"]
    items = cbbq.load_category(data_dir, "disease").items[:12]
    long_prompt = "\n\n".join(cbbq.generate_prompt(it) for it in items)  # Chinese: > 1,024 tokens
    assert len(tiny.encode_prompt(long_prompt)) > 1024
    server = FakeServer(tiny, "tiny-random-gpt2")
    try:
        model = connect(server.url, "tiny-random-gpt2")
        engine = Engine(model)
        (text,) = engine.generate([GenerationRequest(long_prompt, 4)])
        assert isinstance(text, str) and engine.stats.truncated == 1
        sent = server.paths("/v1/completions")[-1]["prompt"]
        (ids,) = sent if isinstance(sent[0], list) else [sent]
        # The window the server reported, less one (the backend's margin) and the 4 new tokens.
        assert len(ids) == model.max_length - 4 and model.max_length == 1023
        assert ids == tiny.encode_prompt(long_prompt)[-len(ids) :]  # the prompt's end, kept whole
    finally:
        server.stop()
