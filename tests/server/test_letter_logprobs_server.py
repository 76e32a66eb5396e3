"""Letter log-probs through the OpenAI-protocol backend against the stub server of
``fake_openai.py`` (SmolLM2 in this process behind /v1/chat/completions): the API read equals the
in-process read, a server without chat log-probabilities stops the run at start-up (exit 4)
naming the endpoint and the generate mode, and a ``top_logprobs`` above the server's limit is
lowered to it with a note. The real vLLM is tested in test_vllm.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer

from audit_harness.benchmarks import registry
from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.openai_server import connect

REPO = Path(__file__).resolve().parents[2]
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2():
    return load_model(NAME, device="cpu", dtype="float32", batch_size=4)


@pytest.mark.slow  # make test-server's vLLM test holds the same parity against a real server
def test_api_read_equals_the_in_process_read(smollm2, data_dir):
    """Same weights and dtype on both sides: equal choices, log-probs within 1e-4 nats (the
    forwards differ only in batching), and every letter among the top 20 candidates."""
    server = FakeServer(smollm2, NAME)
    try:
        served = connect(server.url, NAME, letters=True)
        bbq = registry()["bbq"].configure(answer_mode="letter")
        items = bbq.select(bbq.load_category(data_dir, "Religion").items, 4, 0, "Religion")
        api = bbq.evaluate(Engine(served), items)
        local = bbq.evaluate(Engine(smollm2), items)
    finally:
        server.stop()
    body = server.paths("/v1/chat/completions")[-1]
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["max_tokens"] == 1
    assert [r.predicted for r in api] == [r.predicted for r in local]
    for a, b in zip(api, local):
        ra, rb = a.letter_read, b.letter_read
        assert not ra["exact"] and rb["exact"] and len(ra["candidates"]) == 20
        assert ra["answer_token"] and "bounded" not in ra
        for letter in "ABC":
            assert ra["logprobs"][letter] == pytest.approx(rb["logprobs"][letter], abs=1e-4)
    assert served.info.server["letter_read"]["top_logprobs"] == 20


def test_a_server_without_chat_logprobs_stops_at_start_up(smollm2, tmp_path, data_dir):
    server = FakeServer(smollm2, NAME, chat_logprobs=False)
    try:
        cmd = [sys.executable, "-m", "pytest", "audits/test_bbq.py", "-k", "Religion", "--limit", "2"]
        cmd += ["--backend", "openai", "--base-url", server.url, "--bbq-answer-mode", "letter"]
        cmd += ["--data-dir", str(data_dir), "--results-dir", str(tmp_path), "-p", "no:cacheprovider"]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert f"{server.url}/chat/completions returned no log-probabilities" in out
    assert "--bbq-answer-mode generate" in out
    # nothing was scored: the probe was the only chat request
    assert len(server.paths("/v1/chat/completions")) == 1


def test_top_logprobs_above_the_servers_limit_is_lowered_with_a_note(smollm2, capsys):
    server = FakeServer(smollm2, NAME, max_logprobs=5)
    try:
        served = connect(server.url, NAME, letters=True)
        prompt = served.chat_prompt("Answer with A, B or C.\nA. yes\nB. no\nC. maybe")
        (top,) = served.first_token_top([prompt])
    finally:
        server.stop()
    assert served.chat_logprobs.top_logprobs == 5 and len(top.candidates) == 5
    read = served.info.server["letter_read"]
    assert read["top_logprobs"] == 5 and read["requested"] == 20 and "lowered to 5" in read["note"]
    assert "NOTE: top_logprobs 20 is above what" in capsys.readouterr().err
