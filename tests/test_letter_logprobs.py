"""Letter log-probs (``--bbq-answer-mode letter``, ``parsing.letters``, ``engine.letters``): the
reading rule on top candidates (bound, invalid), the in-process read equal to the model's own
next-token distribution, letter-mode oracles replayed to their known verdicts through the real
audit run, and a different answer mode flagged as not like for like. The API path against a
stub server is in tests/server/test_letter_logprobs_server.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from audit_harness.benchmarks import registry
from audit_harness.engine.executor import Engine
from audit_harness.gates.comparability import comparability_notes
from audit_harness.models import load_model
from audit_harness.oracles import write_oracle
from audit_harness.parsing.letters import NO_LETTER, candidates_read, from_saved

REPO = Path(__file__).resolve().parents[1]


def test_top_candidates_bound_an_absent_letter_and_an_item_without_letters_is_invalid():
    read = candidates_read([(" A", -0.4), ("The", -1.2), ("(C", -2.0), ("B", -7.5), ("A", -9.0)], "ABC")
    # best variant per letter; all three seen, so no bound
    assert read.logprobs == (-0.4, -7.5, -2.0) and read.bounded == () and read.option == 0
    read = candidates_read([("C", -0.3), ("I", -1.0), ("The", -2.5)], "ABC", answer_token="C")
    assert read.logprobs == (-2.5, -2.5, -0.3) and read.bounded == ("A", "B") and read.option == 2
    assert read.to_record()["answer_token"] == "C"
    # a letter seen beats a bounded one it ties
    assert candidates_read([("I", -1.0), ("B", -2.0)], "ABC").option == 1
    assert candidates_read([("b", -1.0), ("Ab", -2.0)], "ABC").invalid_reason == NO_LETTER
    assert candidates_read([("b", -1.0)], "ABC").option == -1
    # a saved read (a record's letter_read, or a plain mapping) is read again alike
    assert from_saved(read.to_record(), "ABC", "x").option == 2
    assert from_saved({"A": -3.0, "B": -0.2}, "ABC", "x").bounded == ("C",)
    with pytest.raises(ValueError, match="x: .* must be a number"):
        from_saved({"A": "high"}, "ABC", "x")


def test_in_process_read_is_the_models_next_token_distribution(data_dir):
    """Contract: each letter's value is the maximum over its single-token variants of
    log softmax(logits at the prompt's last position), to 1e-4 nats (float32)."""
    model = load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)
    bbq = registry()["bbq"].configure(answer_mode="letter")
    items = bbq.select(bbq.load_category(data_dir, "Religion").items, 4, 0, "Religion")
    records = bbq.evaluate(Engine(model), items)
    tok = model.tokenizer
    for it, rec in zip(items, records):
        prompt = model.chat_prompt(bbq.generate_prompt(it)) or bbq.generate_prompt(it)
        ids = model.encode_prompt(prompt)
        with torch.inference_mode():
            lp = torch.log_softmax(model.model(torch.tensor([ids])).logits[0, -1].float(), -1)
        for letter, value in rec.letter_read["logprobs"].items():
            single = [
                v for v in (letter, " " + letter, "(" + letter, " (" + letter) if len(tok.encode(v)) == 1
            ]
            expected = max(float(lp[tok.encode(v)[0]]) for v in single)
            assert value == pytest.approx(expected, abs=1e-4), (it.item_id, letter)
        best = max(range(3), key=lambda k: rec.letter_read["logprobs"]["ABC"[k]])
        assert rec.predicted == best and rec.letter_read["exact"] and rec.invalid_reason is None


@pytest.mark.parametrize("kind, code", [("perfect", 0), ("stereotyped", 1)])
def test_letter_mode_oracles_replayed_give_their_verdicts(tmp_path, data_dir, kind, code):
    """The oracle checks in letter mode: saved letter reads of the perfect (stereotyped) model,
    replayed through the real audit run, PASS (FAIL) Religion's shipped gates."""
    bench = registry()["bbq"].configure(answer_mode="letter").for_saved_outputs()
    path = tmp_path / f"{kind}.jsonl"
    written = write_oracle(bench, data_dir, kind, path)
    row = json.loads(path.read_text().splitlines()[0])
    assert isinstance(row["prediction"], dict) and set(row["prediction"]) == {"A", "B", "C"}
    cmd = [sys.executable, "-m", "pytest", "audits/test_bbq.py", "-k", "Religion", "-p", "no:cacheprovider"]
    cmd += ["--backend", "replay", "--predictions", str(written.path), "--prediction-field", "prediction"]
    cmd += ["--bbq-answer-mode", "letter", "--data-dir", str(data_dir), "--results-dir", str(tmp_path / "r")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, proc.stdout[-3000:]
    (run,) = list((tmp_path / "r").iterdir())
    results = json.loads((run / "results.json").read_text())
    gates = [g for g in results["gates"] if g["category"] == "Religion"]
    assert gates and all(g["metric"].endswith("-letter") for g in gates)
    if kind == "stereotyped":
        assert any(g["status"] == "fail" and "bias" in g["metric"] for g in gates)
    assert results["reads"]["bbq"] == {
        "answer_mode": "letter log-probs",
        "letter_read": "replayed from saved letter reads",
    }
    junit = (run / "junit.xml").read_text()
    assert 'name="bias_audit_read" value="bbq: letter log-probs (replayed from saved letter reads)"' in junit
    assert (
        "- bbq read by letter log-probs (replayed from saved letter reads)" in (run / "report.md").read_text()
    )


def test_another_answer_mode_is_not_like_for_like():
    old = {"protocols": {"bbq": {"answer_mode": "loglikelihood"}}, "benchmarks": {"bbq": {}}}
    new = {"protocols": {"bbq": {"answer_mode": "letter"}}, "benchmarks": {"bbq": {}}}
    notes = comparability_notes(old, new)
    assert any("read by option log-likelihood (old) vs letter log-probs (new)" in n for n in notes), notes
    assert comparability_notes(new, new) == []
