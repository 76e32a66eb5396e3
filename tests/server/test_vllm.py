"""Against a real vLLM (CPU build, fp32) serving the embedded SmolLM2: an audit through the
server predicts exactly what the in-process backend predicts on the same items, the alignment
check passes, and tokenization, per-token scores and generation agree with the in-process
model. Marked ``server``: ``make test-server`` runs them (``make test`` does not). The two-server
pool is tested in test_vllm_pool.py."""

from __future__ import annotations

import json

import pytest
from vllm_runs import PARITY, audit, finish, records

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
