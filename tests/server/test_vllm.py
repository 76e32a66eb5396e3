"""Against a real vLLM (CPU build, fp32) serving the embedded SmolLM2: an audit through the
server predicts exactly what the in-process backend predicts on the same items, the alignment
check passes, and tokenization, per-token scores and generation agree with the in-process
model. Marked ``server``: ``make test-server`` runs them (``make test`` does not). The two-server
pool is tested in test_vllm_pool.py."""

from __future__ import annotations

import json

import pytest
from vllm_runs import LETTER_ARGS, LETTER_PARITY, PARITY, audit, finish, records

from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.base import GenerationRequest
from audit_harness.models.openai_server import connect
from audit_harness.models.zoo import DEFAULT_MODEL as SERVED_NAME

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def local():
    return load_model(SERVED_NAME, device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="module")
def served(vllm_server):
    return connect(vllm_server.url, vllm_server.name)


def test_audit_through_vllm_predicts_what_the_in_process_run_predicts(
    in_process_run, vllm_server, tmp_path, data_dir
):
    results = tmp_path / "server"
    server_run = finish(
        audit(results, data_dir, PARITY, "--backend", "openai", "--base-url", vllm_server.url), results
    )
    served, local = records(server_run), records(in_process_run)
    assert served.keys() == local.keys() and len(served) == 8 * (11 + 10 + 10)
    worst = max(
        abs(a - b) for k in served for a, b in zip(served[k]["loglikelihoods"], local[k]["loglikelihoods"])
    )
    differ = [k for k in served if served[k]["predicted_choice"] != local[k]["predicted_choice"]]
    print(f"\n{len(served)} items, {len(served) - len(differ)} identical predictions, max |dLL| {worst:.2e}")
    assert not differ and worst < 1e-3
    results = json.loads((server_run / "results.json").read_text())
    model = results["model"]
    assert model["server"]["engine"].startswith("vllm ") and model["server"]["alignment"]["ok"]
    assert (
        model["fingerprint"]
        == json.loads((in_process_run / "results.json").read_text())["model"]["fingerprint"]
    )


def test_letter_logprobs_through_vllm_chat_choose_what_the_in_process_run_chooses(
    in_process_letter_run, vllm_server, tmp_path, data_dir
):
    """BBQ, EsBBQ and KoBBQ in letter mode through vLLM's /v1/chat/completions top_logprobs:
    the same letter on every item as the exact in-process read; each letter both saw within
    1e-3 nats (both fp32: what differs is the kernels, as for the scores above); a letter
    outside the server's top 20 gets a bound no lower than its exact value."""
    results = tmp_path / "server-letter"
    args = ("--backend", "openai", "--base-url", vllm_server.url, *LETTER_ARGS)
    server_run = finish(audit(results, data_dir, LETTER_PARITY, *args), results)
    served, local = records(server_run), records(in_process_letter_run)
    assert served.keys() == local.keys() and len(served) == 3 * 8
    differ = [k for k in served if served[k]["predicted"] != local[k]["predicted"]]
    worst = 0.0
    for k in served:
        api, exact = served[k]["letter_read"], local[k]["letter_read"]
        assert exact["exact"] and not api["exact"] and len(api["candidates"]) == 20
        for letter, value in api["logprobs"].items():
            if letter in api.get("bounded", ()):
                assert value >= exact["logprobs"][letter] - 1e-3, (k, letter)
            else:
                worst = max(worst, abs(value - exact["logprobs"][letter]))
    print(
        f"\n{len(served)} letter reads, {len(served) - len(differ)} identical choices, max |dlogp| {worst:.2e}"
    )
    assert not differ and worst < 1e-3
    doc = json.loads((server_run / "results.json").read_text())
    read = doc["reads"]["bbq"]["letter_read"]
    assert doc["reads"]["bbq"]["answer_mode"] == "letter log-probs"
    assert read["served_model"] == vllm_server.name and read["top_logprobs"] == 20


def test_alignment_check_passes_on_vllm(served):
    report = served.alignment
    assert report.ok, report.reason
    assert report.max_error < 1e-3 and len(report.sentences) == 3
    assert served.remote_tokenize and served.vllm


def test_server_tokenizer_and_scores_agree_with_the_local_model(served, local, data_dir):
    from audit_harness.benchmarks import registry

    bbq = registry()["esbbq"]
    items = bbq.load_category(data_dir, "Age").items[:2]
    requests = [(bbq.prompt(it), " " + c) for it in items for c in bbq.choices(it)]
    assert served.encode_pairs(requests) == [local.encode_pair(c, x) for c, x in requests]
    sentences = ["The old man forgot his keys again.", "The young man forgot his keys again."]
    enc = [served.encode_sentence(s) for s in sentences]
    assert enc == [local.encode_sentence(s) for s in sentences]
    positions = [list(range(1, len(e.ids))) for e in enc]
    a = Engine(served).token_logprobs([e.ids for e in enc], positions)
    b = Engine(local).token_logprobs([e.ids for e in enc], positions)
    assert max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)) < 1e-3


def test_greedy_generation_matches_the_in_process_model(served, local):
    chat = served.chat_prompt("What is the capital of France? Answer in one word.")
    assert chat == local.chat_prompt("What is the capital of France? Answer in one word.")
    requests = [GenerationRequest(chat, 12), GenerationRequest("The capital of France is", 8, stop=("\n",))]
    assert Engine(served).generate(requests) == Engine(local).generate(requests)
