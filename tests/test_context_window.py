"""Prompts longer than the model's context window are read as lm-evaluation-harness reads them
(the left of the context cut off to fit; a generation keeps room for its new tokens), counted per
category (``requests.truncated``) and reported, instead of running past the position table
(``IndexError: index out of range in self``, a RUN ERROR). Real CBBQ rows, the tiny random GPT-2
(1,024 positions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from audit_harness.benchmarks import registry
from audit_harness.engine.executor import Engine
from audit_harness.models.base import GenerationRequest
from helpers import REPO


@pytest.mark.parametrize("mode", ["generate", "loglikelihood"])
def test_cbbq_prompts_past_the_window_are_truncated_and_counted(tmp_path, data_dir, mode):
    results = tmp_path / "results"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "audits",
            "-k",
            "cbbq and disease",
            "--bbq-answer-mode",
            mode,
            "--model",
            "tiny-random-gpt2",
            "--limit",
            "8",
            "--min-n",
            "1",
            "--data-dir",
            str(data_dir),
            "--results-dir",
            str(results),
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    out = proc.stdout + proc.stderr
    # The random model's answers fail its gates (1); a crash of the category would be 3.
    assert proc.returncode == 1, out[-3000:]
    assert "IndexError" not in out
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    entry = json.loads((run_dir / "results.json").read_text())["benchmarks"]["cbbq"]["disease"]
    cut = entry["requests"]["truncated"]
    if mode == "generate":  # the lettered Chinese prompt of one of these 8 items is past 1,024 - 48
        assert 1 <= cut <= entry["n_scored"]
        line = f"cbbq/disease: {cut} prompt(s) of {entry['n_scored']} items longer than the model's context window"
        assert f"TRUNCATED: {line}" in proc.stdout
        assert line in (run_dir / "report.md").read_text(encoding="utf-8")
        page = (run_dir / "report.html").read_text(encoding="utf-8")
        assert line.replace("'", "&#39;") in page
    else:  # the cloze prompts of the same items fit: nothing cut, nothing reported
        assert cut == 0 and "TRUNCATED:" not in proc.stdout


@pytest.fixture
def cbbq_items(data_dir):
    bench = registry()["cbbq"]
    return bench, list(bench.load_category(data_dir, "disease").items)[:6]


def test_loglikelihood_cuts_the_context_left_and_keeps_the_continuation(tiny_model, cbbq_items, monkeypatch):
    bench, items = cbbq_items
    requests = [(bench.prompt(it), " " + c) for it in items for c in bench.choices(it)]
    full = Engine(tiny_model).loglikelihood(requests)
    encoded = tiny_model.encode_pairs(requests)
    window = 40  # shorter than every one of these prompts, as 1,024 is for a long one
    monkeypatch.setattr(tiny_model, "max_length", window)
    short = Engine(tiny_model)
    values = short.loglikelihood(requests)
    assert short.stats.truncated == len(items)  # distinct contexts: one per item
    # Each value is the continuation after the last tokens of its context that fit the window.
    monkeypatch.setattr(tiny_model, "max_length", 1024)
    cut = [(ctx[-(window - len(cont)) :], cont) for ctx, cont in encoded]
    expected = Engine(tiny_model).loglikelihood_tokens(cut)
    assert values == pytest.approx(expected, abs=1e-4)  # the engine's tolerance for summed log-probs
    assert values != pytest.approx(full, abs=1e-4)  # the cut changed what the model read


def test_generation_keeps_room_for_its_new_tokens(tiny_model, cbbq_items, monkeypatch):
    bench, items = cbbq_items
    prompts = [bench.generate_prompt(it) for it in items]
    lengths = [len(tiny_model.encode_prompt(p)) for p in prompts]
    window, new = min(lengths) + 4, 8  # every prompt leaves fewer than 8 positions free
    monkeypatch.setattr(tiny_model, "max_length", window)
    engine = Engine(tiny_model)
    texts = engine.generate([GenerationRequest(p, new) for p in prompts])
    assert len(texts) == len(prompts) and engine.stats.truncated == len(set(prompts))
    with pytest.raises(ValueError, match="leaves no room for a prompt"):
        Engine(tiny_model).generate([GenerationRequest(prompts[0], window)])
