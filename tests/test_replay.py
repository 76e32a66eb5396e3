"""Saved generations through the replay backend equal the live run that produced them: the same
records, metrics and gate verdicts, for every benchmark with a generate mode (KoBBQ, KGQuiz, the
BBQ family in generate mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import bias_audit_score

REPO = Path(__file__).resolve().parents[1]
#: Fields a replay cannot reproduce: how the live prompt was built (the producer's, not ours).
PROMPT_FIELDS = {"prompt_sha256", "prompt_format", "chat_template_sha256"}

CASES = {
    "kobbq": (
        "audits/test_kobbq.py",
        "religion",
        ["--kobbq-prompts", "1", "--kobbq-permutations", "0"],
        "raw_prediction",
    ),
    "kgquiz": ("audits/test_kgquiz.py", "Task1-UMLS or Task3-UMLS", [], "output"),
    "bbq": ("audits/test_bbq.py", "Religion", ["--bbq-answer-mode", "generate"], "raw_prediction"),
}


def _live(tmp_path: Path, data_dir: Path, target: str, keyword: str, extra: list[str]) -> Path:
    results = tmp_path / "live"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        target,
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data_dir),
        "--limit",
        "4",
        "--min-n",
        "1",
        "--results-dir",
        str(results),
        "-k",
        keyword,
        "--cache-dir",
        str(tmp_path / "cache"),
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode in (0, 1), (proc.stdout + proc.stderr)[-3000:]
    (run_dir,) = list(results.iterdir())
    return run_dir


def _records(run_dir: Path, bench: str) -> dict[str, dict]:
    out = {}
    for path in sorted((run_dir / "records" / bench).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out[row["id"]] = {k: v for k, v in row.items() if k not in PROMPT_FIELDS}
    return out


@pytest.mark.parametrize("bench", sorted(CASES))
def test_saved_generations_replay_to_the_live_run(tmp_path, data_dir, bench):
    target, keyword, extra, field = CASES[bench]
    live_dir = _live(tmp_path, data_dir, target, keyword, extra)
    live = _records(live_dir, bench)
    assert live
    preds = tmp_path / "saved.jsonl"
    preds.write_text(
        "".join(json.dumps({"id": i, "out": r[field]}, ensure_ascii=False) + "\n" for i, r in live.items()),
        encoding="utf-8",
    )
    # the live run scored 4 items per category: judge the rows given (--allow-partial)
    own = ["--kobbq-prompt", "1", "--kobbq-permutation", "0"] if bench == "kobbq" else []
    proc, doc, run_dir = bias_audit_score(
        tmp_path,
        bench,
        "--predictions",
        preds,
        "--prediction-field",
        "out",
        "--data-dir",
        data_dir,
        "--allow-partial",
        *own,
        "--",
        "-k",
        keyword,
        "--min-n",
        "1",
    )
    assert proc.returncode in (0, 1), (proc.stdout + proc.stderr)[-3000:]
    assert doc["model"]["kind"] == "replay"
    assert _records(run_dir, bench) == live
    live_doc = json.loads((live_dir / "results.json").read_text())
    for cat, entry in live_doc["benchmarks"][bench].items():
        got = doc["benchmarks"][bench][cat]
        assert got["metrics"] == entry["metrics"], cat
    verdicts = lambda d: {(v["category"], v["metric"]): v["status"] for v in d["gates"]}  # noqa: E731
    assert verdicts(doc) == verdicts(live_doc)
    for name in ("junit.xml", "report.html", "report.md"):
        assert (run_dir / name).is_file()


def test_replay_of_a_benchmark_it_cannot_serve_stops_at_start_up(tmp_path, data_dir):
    # KoBBQ in letter mode reads letter log-probs, which saved outputs (generations) cannot
    # give: a usage error before any item is scored, no run folder, not an ERROR in every gate.
    from audit_harness.benchmarks import registry

    items = registry()["kobbq"].load_category(data_dir, "religion").items[:2]
    path = tmp_path / "kobbq.jsonl"
    path.write_text("".join(json.dumps({"id": it.item_id, "pred": "A"}) + "\n" for it in items))
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "pytest", "audits/test_kobbq.py", "--backend", "replay"]
    cmd += ["--predictions", str(path), "--prediction-field", "pred", "--kobbq-mode", "letter"]
    cmd += ["--data-dir", str(data_dir), "--results-dir", str(results), "-p", "no:cacheprovider"]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "kobbq: saved outputs are generations; --kobbq-mode letter" in out
    assert not results.exists()
