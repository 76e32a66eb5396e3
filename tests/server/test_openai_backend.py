"""The OpenAI-server backend against a small fake server backed by an in-process model
(``fake_openai.py``): the same token ids and numbers as the in-process backend, requests grouped
by context, retries, API-key hygiene, cache resume, generation routes, the alignment check
(a server that shifts prompt log-probabilities, as llama.cpp's does, stops a scoring audit but
not a generation-only one) and the option checks. The real vLLM is tested in test_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer

from audit_harness.engine.cache import ResultCache
from audit_harness.engine.executor import Engine
from audit_harness.errors import ConfigError, ModelError
from audit_harness.models import load_model
from audit_harness.models.base import GENERATE, GenerationRequest
from audit_harness.models.openai_server import ScoringUnavailable, connect

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=4)


@pytest.fixture
def fake(tiny):
    server = FakeServer(tiny, "tiny-random-gpt2")
    yield server
    server.stop()


def bbq_requests(data_dir, rows=3):
    from audit_harness.benchmarks import registry

    bbq = registry()["bbq"]
    items = bbq.load_category(data_dir, "Religion").items[:rows]
    return [(bbq.prompt(it), " " + c) for it in items for c in bbq.choices(it)]


def test_scores_and_token_ids_equal_the_in_process_backend(fake, tiny, data_dir):
    model = connect(fake.url, "tiny-random-gpt2")
    assert model.alignment.ok and model.alignment.max_error < 1e-4
    requests = bbq_requests(data_dir) + [("", "Unknown"), ("Answer: ", "A")]
    encoded = model.encode_pairs(requests)
    assert encoded == [tiny.encode_pair(c, x) for c, x in requests]
    before = len(fake.paths("/v1/completions"))
    served = Engine(model).loglikelihood(requests)
    local = Engine(tiny).loglikelihood(requests)
    assert max(abs(a - b) for a, b in zip(served, local)) < 1e-4
    # Every scoring request sends token ids, at most 8 prompts, in lexicographic order, and
    # whole prefix groups: the three choices of one context travel together.
    bodies = [b["prompt"] for b in fake.paths("/v1/completions")[before:]]
    scored = [p for b in bodies for p in b]
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in scored)
    assert all(len(b) <= 8 and b == sorted(b) for b in bodies)
    assert len(scored) == len({tuple(p) for p in scored}) == len(requests)
    request_of = {tuple(p): n for n, b in enumerate(bodies) for p in b}
    for item in range(3):
        choices = {request_of[tuple(c + x)] for c, x in encoded[3 * item : 3 * item + 3]}
        assert len(choices) == 1, f"item {item}'s choices went out in several requests"


def test_token_logprobs_for_pair_benchmarks(fake, tiny):
    model = connect(fake.url, "tiny-random-gpt2")
    enc = [model.encode_sentence(s) for s in ("The woman was a nurse.", "The man was a nurse.")]
    assert enc == [tiny.encode_sentence(s) for s in ("The woman was a nurse.", "The man was a nurse.")]
    seqs = [e.ids for e in enc]
    positions = [list(range(1, len(s))) for s in seqs]
    served = Engine(model).token_logprobs(seqs, positions)
    local = Engine(tiny).token_logprobs(seqs, positions)
    assert all(abs(a - b) < 1e-4 for x, y in zip(served, local) for a, b in zip(x, y))
    assert [len(x) for x in served] == [len(p) for p in positions]


def test_local_tokenizer_when_the_server_has_no_tokenize(tiny):
    server = FakeServer(tiny, "tiny-random-gpt2", tokenize=False, owned_by="someone")
    try:
        model = connect(server.url, "tiny-random-gpt2")
        assert not model.remote_tokenize and model.info.server["tokenizer"] == "zoo:tiny-random-gpt2"
        before = len(server.paths("/tokenize"))
        assert model.encode_pair("Who was it?", " The nun") == tiny.encode_pair("Who was it?", " The nun")
        assert len(server.paths("/tokenize")) == before
        # Not vLLM: no vLLM-only field is sent.
        assert all("return_tokens_as_token_ids" not in b for b in server.paths("/v1/completions"))
    finally:
        server.stop()


def test_no_tokenize_and_no_local_tokenizer_is_a_clear_error(tiny):
    server = FakeServer(tiny, "served-name", tokenize=False)
    try:
        with pytest.raises(ModelError, match="no /tokenize endpoint and no local tokenizer.*--tokenizer"):
            connect(server.url, "served-name")
        with pytest.raises(ModelError, match="does not serve model 'other'.*served-name"):
            connect(server.url, "other")
    finally:
        server.stop()


def test_another_model_behind_the_name_is_refused(tiny):
    from audit_harness.models.zoo import materialize

    materialize("smollm2-135m-instruct")  # a tokenizer that disagrees with the served one
    server = FakeServer(tiny, "tiny-random-gpt2")
    try:
        with pytest.raises(ModelError, match="disagree on a fixed sentence"):
            connect(server.url, "tiny-random-gpt2", tokenizer="smollm2-135m-instruct")
    finally:
        server.stop()


def test_retries_429_and_5xx_then_succeeds(fake, tiny):
    model = connect(fake.url, "tiny-random-gpt2")
    model.pool.endpoints[0].client.backoff = 0.01
    fake.fail_next = [429, 503, 500]
    value = Engine(model).loglikelihood([("The nun", " prayed")])[0]
    assert abs(value - Engine(tiny).loglikelihood([("The nun", " prayed")])[0]) < 1e-4
    assert model.pool.retries == 3 and fake.fail_next == []
    assert model.info.server["endpoints"][0]["retries"] == 3


def test_gives_up_after_max_retries_and_never_shows_the_key(fake, monkeypatch):
    monkeypatch.setenv("FAKE_SERVER_KEY", "sk-very-secret-123")
    model = connect(fake.url, "tiny-random-gpt2", api_key_env="FAKE_SERVER_KEY", max_retries=2)
    assert fake.headers[-1]["Authorization"] == "Bearer sk-very-secret-123"
    model.pool.endpoints[0].client.backoff = 0.01
    fake.fail_next = [503] * 50
    with pytest.raises(ModelError, match=r"HTTP 503 after 2 retries") as err:
        Engine(model).loglikelihood([("The monk", " sang")])
    assert "sk-very-secret" not in str(err.value)
    assert "sk-very-secret" not in json.dumps(model.info.to_dict())
    assert model.info.server["api_key_env"] == "FAKE_SERVER_KEY" and model.info.server["api_key_set"]


def test_unreachable_server_names_the_url():
    with pytest.raises(ModelError, match=r"127\.0\.0\.1:9/v1/models.*is the server running"):
        connect("http://127.0.0.1:9/v1", "x", max_retries=0)
    with pytest.raises(ConfigError, match="--base-url must be an http"):
        connect("127.0.0.1:8000", "x")


def test_a_resumed_run_asks_the_server_only_for_what_is_missing(fake, data_dir, tmp_path):
    requests = bbq_requests(data_dir, rows=4)
    first = connect(fake.url, "tiny-random-gpt2")
    done = Engine(first, cache=ResultCache(tmp_path)).loglikelihood(requests[:6])  # then "crashed"
    second = connect(fake.url, "tiny-random-gpt2")
    assert second.cache_key == first.cache_key and second.cache_key.startswith("server|")
    engine = Engine(second, cache=ResultCache(tmp_path))
    before = len(fake.paths("/v1/completions"))
    values = engine.loglikelihood(requests)
    sent = [p for b in fake.paths("/v1/completions")[before:] for p in b["prompt"]]
    assert values[:6] == done
    assert engine.stats.from_cache == 6 and len(sent) == len(requests) - 6


def test_generation_routes_chat_prompts_to_chat_completions(fake, tiny, capsys):
    model = connect(fake.url, "tiny-random-gpt2")
    assert model.chat_prompt("Hi") is None  # the tiny tokenizer has no chat template: give it one
    assert model.chat_prompt("Hi") is None
    warned = capsys.readouterr().err
    assert warned.count("no local chat template for 'tiny-random-gpt2'") == 1  # once, not per prompt
    template = "{% for m in messages %}<|endoftext|>{{ m['content'] }}{% endfor %} Answer:"
    tiny.tokenizer.chat_template = model.tokenizer.chat_template = template  # server's, local copy
    try:
        chat = model.chat_prompt("Who was not comfortable using the phone?")
        assert chat == tiny.chat_prompt("Who was not comfortable using the phone?")
        requests = [GenerationRequest(chat, 5), GenerationRequest("The grandfather and the", 4)]
        engine = Engine(model, memo=True)  # as an audit's session gives it
        assert engine.generate(requests) == Engine(tiny).generate(requests)
        (turn,) = fake.paths("/v1/chat/completions")
        assert turn["messages"] == [{"role": "user", "content": "Who was not comfortable using the phone?"}]
        assert turn["temperature"] == 0 and turn["max_tokens"] == 5
        assert fake.paths("/v1/completions")[-1]["prompt"] == [tiny.encode_prompt("The grandfather and the")]
        # Generation goes through the engine: asked again, nothing is sent.
        before = len(fake.requests)
        assert engine.generate(requests) == Engine(tiny).generate(requests)
        assert len(fake.requests) == before and engine.stats.from_cache >= 2
    finally:
        tiny.tokenizer.chat_template = None


@pytest.fixture(scope="module")
def shifted(smollm2):
    server = FakeServer(smollm2, "smollm2-135m-instruct", shift=True)
    yield server
    server.stop()


def test_alignment_check_catches_shifted_prompt_logprobs(shifted):
    model = connect(shifted.url, "smollm2-135m-instruct")
    report = model.alignment
    assert not report.ok
    assert "shifted by -1 position" in report.reason, report.reason
    assert model.capabilities == frozenset({GENERATE})
    with pytest.raises(ScoringUnavailable, match="failed the start-up alignment check"):
        Engine(model).loglikelihood([("The capital of France is", " Paris")])


def test_a_server_that_refuses_echo_fails_the_check_and_keeps_generation(smollm2):
    # TGI's OpenAI routes, llama-server: no prompt log-probabilities at all. That is a failed
    # check (generation audits still run), not a connection failure that stops everything.
    server = FakeServer(smollm2, "smollm2-135m-instruct", echo=False)
    try:
        model = connect(server.url, "smollm2-135m-instruct")
        assert not model.alignment.ok
        assert model.alignment.reason.startswith("the server cannot score prompts: POST ")
        assert "HTTP 400" in model.alignment.reason and "echo is not supported" in model.alignment.reason
        assert model.capabilities == frozenset({GENERATE})
        request = GenerationRequest("The capital of France is", 4)
        assert Engine(model).generate([request]) == Engine(smollm2).generate([request])
    finally:
        server.stop()


def test_an_unreachable_server_is_not_a_failed_check(smollm2):
    from audit_harness.models.alignment import check_alignment
    from audit_harness.models.server_client import ServerUnavailable

    server = FakeServer(smollm2, "smollm2-135m-instruct")
    model = connect(server.url, "smollm2-135m-instruct", check=False, max_retries=0)
    server.stop()
    with pytest.raises(ServerUnavailable, match="is the server running"):
        check_alignment(model)


def test_alignment_check_passes_an_honest_server_of_a_real_model(smollm2):
    server = FakeServer(smollm2, "smollm2-135m-instruct")
    try:
        report = connect(server.url, "smollm2-135m-instruct").alignment
        assert report.ok and report.max_error < 1e-4 and len(report.signature) == 16
        assert all(r["error"] < 1e-4 for r in report.sentences)
    finally:
        server.stop()


def run_audit(tmp_path, data_dir, *args):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *args,
        "--data-dir",
        str(data_dir),
        "--min-n",
        "1",
        "--results-dir",
        str(tmp_path / "results"),
        "--no-cache",
        "-p",
        "no:cacheprovider",
        "--bootstrap-resamples",
        "0",
    ]
    return subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def results_of(tmp_path):
    (run,) = list((tmp_path / "results").iterdir())
    return json.loads((run / "results.json").read_text())


def test_a_scoring_audit_against_a_shifted_server_stops_with_the_reason(shifted, tmp_path, data_dir):
    proc = run_audit(
        tmp_path,
        data_dir,
        "audits/test_bbq.py",
        "--backend",
        "openai",
        "--base-url",
        shifted.url,
        "--model",
        "smollm2-135m-instruct",
        "--limit",
        "2",
        "-k",
        "Religion or Age",
    )
    out = proc.stdout + proc.stderr
    # Known once connected at start-up (BackendSpec.capabilities): a usage error before any
    # item is scored, naming the backend, the benchmark, the capability and the reason.
    assert proc.returncode == 4, out[-3000:]
    assert "--backend openai cannot run bbq: bbq needs loglikelihood" in out
    assert "failed the start-up alignment check" in out and "shifted by -1 position" in out
    assert "computes generate only; it can run" in out and "kgquiz" in out
    assert not (tmp_path / "results").exists()


def test_a_generation_audit_still_runs_against_it_and_says_so(shifted, tmp_path, data_dir):
    proc = run_audit(
        tmp_path,
        data_dir,
        "audits/test_kobbq.py",
        "--backend",
        "openai",
        "--base-url",
        shifted.url,
        "--model",
        "smollm2-135m-instruct",
        "--limit",
        "1",
        "-k",
        "age",
        "--kobbq-prompts",
        "1",
        "--kobbq-permutations",
        "0",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]  # gates decided (pass or fail), not errors
    assert "only generation audits can run against it" in out
    results = results_of(tmp_path)
    assert results["model"]["server"]["alignment"]["ok"] is False
    assert results["benchmarks"]["kobbq"]["age"]["n_scored"] == 1
    assert {v["status"] for v in results["gates"]} <= {"pass", "fail", "undefined"}
    assert shifted.paths("/v1/chat/completions"), "KoBBQ's chat prompts go to chat completions"


@pytest.mark.parametrize(
    "args, message",
    [
        (("--backend", "openai"), "--backend openai needs --base-url"),
        (("--base-url", "http://127.0.0.1:1/v1"), "is only used with --backend openai"),
        (
            ("--backend", "openai", "--base-url", "http://127.0.0.1:1/v1", "--max-concurrency", "0"),
            "--max-concurrency must be >= 1",
        ),
    ],
)
def test_bad_backend_options_stop_at_start(tmp_path, data_dir, args, message):
    proc = run_audit(tmp_path, data_dir, "audits/test_bbq.py", "--limit", "1", "-k", "Religion", *args)
    assert proc.returncode == 4 and message in proc.stdout + proc.stderr
