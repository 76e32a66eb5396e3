"""Against a real vLLM (CPU build, fp32) serving the embedded SmolLM2: an audit through the
server predicts exactly what the in-process backend predicts on the same items, the alignment
check passes, and tokenization, per-token scores and generation agree with the in-process
model. Marked ``server``: ``make test-server`` runs them (``make test`` does not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit_harness.engine.executor import Engine
from audit_harness.models import load_model
from audit_harness.models.base import GenerationRequest
from audit_harness.models.openai_server import connect
from audit_harness.models.zoo import DEFAULT_MODEL as SERVED_NAME

pytestmark = pytest.mark.server
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local():
    return load_model(SERVED_NAME, device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="module")
def served(vllm_server):
    return connect(vllm_server.url, vllm_server.name)


def _audit(tmp_path: Path, data_dir: Path, name: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    """Start ``pytest audits/test_bbq.py audits/test_esbbq.py audits/test_cabbq.py --limit 8`` (the in-process run
    goes first and alone: vLLM's worker is bound to every core, and a second process on them
    would stall its threads)."""
    results = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits/test_bbq.py",
        "audits/test_esbbq.py",
        "audits/test_cabbq.py",
        "--model",
        SERVED_NAME,
        "--limit",
        "8",
        "--data-dir",
        str(data_dir),
        "--min-n",
        "1",
        "--results-dir",
        str(results),
        "--no-cache",
        "--bootstrap-resamples",
        "0",
        "-p",
        "no:cacheprovider",
        "-q",
        *extra,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(len(os.sched_getaffinity(0)))},
    )
    return proc, results


def _finish(run: tuple[subprocess.Popen, Path]) -> Path:
    proc, results = run
    out, _ = proc.communicate(timeout=3000)
    assert proc.returncode in (0, 1), out[-4000:]  # gate verdicts (pass or fail), not errors
    (run_dir,) = list(results.iterdir())
    return run_dir


def _records(run: Path) -> dict[str, dict]:
    out = {}
    for path in sorted((run / "records").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out[f"{path.parent.name}/{row['id']}"] = row
    return out


def test_audit_through_vllm_predicts_what_the_in_process_run_predicts(vllm_server, tmp_path, data_dir):
    local_run = _finish(_audit(tmp_path, data_dir, "local"))
    server_run = _finish(
        _audit(tmp_path, data_dir, "server", "--backend", "openai", "--base-url", vllm_server.url)
    )
    served, local = _records(server_run), _records(local_run)
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
        model["fingerprint"] == json.loads((local_run / "results.json").read_text())["model"]["fingerprint"]
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
