"""What a run says about itself, tried as a user would (issue 36, "the smaller ones"): bad input
that used to die mid-run (exit 3) stops at start-up (exit 4, no run folder), and the lines of the
summary say what happened: a replay computed nothing, a replayed category that scored every row
did not stop early, a ``-k`` that selects nothing names no file that is gone, and a partial
scope counts each row of a pair benchmark once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import bias_audit_score

REPO = Path(__file__).resolve().parents[1]


def gold_rows(data_dir: Path, category: str, n: int) -> list[dict]:
    """The first ``n`` BBQ rows of ``category`` answered with their gold letter."""
    out = []
    with open(data_dir / "bbq" / "data" / f"{category}.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out.append(
                {"category": row["category"], "example_id": row["example_id"], "pred": "ABC"[row["label"]]}
            )
            if len(out) == n:
                break
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def pytest_audits(tmp: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m pytest audits/... ARGS`` as a user runs it, writing into ``tmp / results``."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *args,
        "--data-dir",
        str(data_dir),
        "--results-dir",
        str(tmp / "results"),
        "--cache-dir",
        str(tmp / "cache"),
        "-p",
        "no:cacheprovider",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def no_run_folder(tmp: Path) -> bool:
    results = tmp / "results"
    return not results.exists() or not any(results.iterdir())


# --- replay: the summary says what a replay did ------------------------------------------------
def test_replayed_sequential_category_counts_its_rows_and_no_model_requests(tmp_path, data_dir, monkeypatch):
    # 40 rows of Age under --sequential: its first round (184 items) takes all 40, so every row
    # is scored. The progress line said "0/40 items ... stopped early" (a replay's answers never
    # advanced it) and the summary "requests: 0 distinct, 0 from the result cache, 40 computed".
    monkeypatch.setenv("BIAS_AUDIT_PROGRESS_INTERVAL", "0")  # a line for every category, however short
    monkeypatch.delenv("CI", raising=False)
    preds = write_jsonl(tmp_path / "age40.jsonl", gold_rows(data_dir, "Age", 40))
    proc, doc, _ = bias_audit_score(
        tmp_path,
        "bbq",
        "--predictions",
        preds,
        "--prediction-field",
        "pred",
        "--data-dir",
        data_dir,
        "--allow-partial",
        "--",
        "--sequential",
        "-k",
        "Age",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1) and proc.returncode == doc["run"]["outcome"]["exit_code"], out[-3000:]
    assert doc["benchmarks"]["bbq"]["Age"]["n_scored"] == 40
    assert "predictions: 40 saved outputs replayed (no model ran)" in proc.stdout
    assert "requests:" not in proc.stdout and " computed\n" not in proc.stdout
    assert "bbq/Age: 40/40 items (100%)" in proc.stderr and "done in" in proc.stderr, proc.stderr[-2000:]
    assert "stopped early" not in proc.stderr
    # Without --limit the rows came short from the file: 40 were judged, not 40 left out.
    assert "part of the rows: 40 of 3,680 rows judged in bbq/Age" in proc.stdout
    assert "rows left out" not in proc.stdout


# --- bad input stops at start-up ------------------------------------------------------------------
def test_a_lone_surrogate_in_a_predictions_row_stops_at_startup(tmp_path, data_dir):
    rows = gold_rows(data_dir, "Age", 3)
    path = tmp_path / "preds.jsonl"
    write_jsonl(path, rows)
    # json.dumps writes "B \ud800" as the escape a broken encoder leaves: valid JSON, no text.
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"pred": "', '"pred": "\\ud800 ')
    path.write_text("\n".join(lines) + "\n")
    proc, doc, _ = bias_audit_score(
        tmp_path, "bbq", "--predictions", path, "--prediction-field", "pred", "--data-dir", data_dir
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and doc is None, out[-3000:]  # was exit 3, a RUN ERROR mid-run
    assert f"{path}:2: field 'pred' holds a lone UTF-16 surrogate" in out
    assert "Traceback" not in out and no_run_folder(tmp_path)


def test_a_predictions_row_with_bytes_that_are_not_utf8_names_its_line_and_field(tmp_path, data_dir):
    rows = gold_rows(data_dir, "Age", 3)
    path = tmp_path / "preds.jsonl"
    write_jsonl(path, rows)
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b'"pred": "', b'"pred": "\xff', 1)  # a Latin-1 or broken writer's byte
    path.write_bytes(b"\n".join(lines))
    proc, doc, _ = bias_audit_score(
        tmp_path, "bbq", "--predictions", path, "--prediction-field", "pred", "--data-dir", data_dir
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and doc is None, out[-3000:]  # was refused without its line
    assert f"{path}:2: field 'pred' holds bytes that are not UTF-8" in out
    assert "Traceback" not in out and no_run_folder(tmp_path)


@pytest.mark.parametrize(
    "template,needle",
    [
        (
            "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ raise_exception('no user turns') }}",
            "does not render a user turn: TemplateError: no user turns",
        ),
        (
            "{% for m in messages %}{{ m['content'] }",
            "does not render a user turn (line 1): TemplateSyntaxError",
        ),
        ("<|user|>hello<|assistant|>", "renders a user turn without the user's message"),
    ],
    ids=["raises", "syntax", "drops-the-message"],
)
def test_a_chat_template_that_does_not_render_stops_at_startup(tmp_path, data_dir, template, needle):
    path = tmp_path / "chat.jinja"
    path.write_text(template, encoding="utf-8")
    proc = pytest_audits(
        tmp_path,
        data_dir,
        "audits/test_kobbq.py",
        "--model",
        "tiny-random-gpt2",
        "-k",
        "test_kobbq and religion",
        "--limit",
        "4",
        "--chat-template",
        str(path),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]  # was exit 3 with every gate ERROR
    assert f"--chat-template {path}: " in out and needle in out
    assert "Traceback" not in out and no_run_folder(tmp_path)


def test_device_cuda_without_a_gpu_stops_at_startup(tmp_path, data_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    proc = pytest_audits(
        tmp_path,
        data_dir,
        "audits/test_kobbq.py",
        "--model",
        "tiny-random-gpt2",
        "-k",
        "test_kobbq and religion",
        "--limit",
        "4",
        "--device",
        "cuda",
    )
    out = proc.stdout + proc.stderr
    # Was: a run folder, "model tiny-random-gpt2 (not loaded)", pytest's "1 error" beside the
    # audit's "3 error". Now the start-up checks refuse it as they refuse any bad option.
    assert proc.returncode == 4, out[-3000:]
    assert "ERROR: --device cuda: this machine has no CUDA device" in out
    assert "not loaded" not in out and "error" not in proc.stdout.lower()
    assert no_run_folder(tmp_path)


# --- -k selecting nothing names no file -----------------------------------------------------------
def test_a_keyword_that_selects_nothing_names_no_junit_file(tmp_path, data_dir):
    proc = pytest_audits(tmp_path, data_dir, "audits/test_bbq.py", "-k", "no_such_category")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out[-3000:]
    assert "-k 'no_such_category' selects no audit gate" in proc.stdout
    assert "VERDICT: NOTHING CHECKED" in proc.stdout
    # pytest printed "generated xml file: <run folder>/junit.xml", a folder then removed.
    assert "junit" not in out and "xml file" not in out
    assert no_run_folder(tmp_path)


# --- partial scope: a pair benchmark's rows counted once ------------------------------------------
def test_partial_scope_counts_a_pair_benchmarks_overall_rows_once(tmp_path, data_dir):
    proc = pytest_audits(
        tmp_path,
        data_dir,
        "audits/test_crows_pairs.py",
        "--model",
        "tiny-random-gpt2",
        "-k",
        "gender or religion or overall",
        "--limit",
        "5",
        "--min-n",
        "1",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    doc = json.loads((run_dir / "results.json").read_text())
    cats = doc["benchmarks"]["crows_pairs"]
    assert proc.returncode == doc["run"]["outcome"]["exit_code"]
    # --limit 5 per subgroup: overall takes the union of the nine subgroups' samples, which holds
    # the gender and religion rows; those are not counted again beside it.
    overall = cats["overall"]
    assert cats["gender"]["n_scored"] == cats["religion"]["n_scored"] == 5 and overall["n_scored"] == 45
    line = (
        f"items sampled (--limit 5): 45 of {overall['n_available']:,} rows judged in 3 categories "
        "(5 of 262 rows judged in crows_pairs/gender, ...); each row counted once: "
        "crows_pairs/overall already holds the subgroups' rows"
    )
    assert line in proc.stdout, proc.stdout[-3000:]
    assert any(line in r for r in doc["run"]["outcome"]["partial"])


def test_a_first_run_says_what_it_loads_before_the_first_item(tmp_path, data_dir, monkeypatch):
    # A first run builds or converts the model before its first item: it says so (model, where
    # it is cached, first use) and how long the load took, live on the terminal, not later as a
    # failing gate's "Captured stderr setup".
    monkeypatch.setenv("BIAS_AUDIT_CACHE", str(tmp_path / "models"))
    proc = pytest_audits(
        tmp_path, data_dir, "audits", "--model", "tiny-random-gpt2", "--limit", "4", "-k", "cbbq and religion"
    )
    assert proc.returncode == 1, proc.stderr[-2000:]  # --limit 4: too few items to pass
    err = proc.stderr
    first_use = "bias audit: building model tiny-random-gpt2"
    assert first_use in err and str(tmp_path / "models") in err and "once (first use)" in err, err
    assert "bias audit: model tiny-random-gpt2 loaded in " in err and " M parameters" in err, err
    assert err.index(first_use) < err.index("loaded in ")
    assert "Captured stderr setup" not in proc.stdout
