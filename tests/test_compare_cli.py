"""``bias-audit compare`` as a user runs it, on two real runs of ``bias-audit score bbq``: pooled
rows are compared only over the same categories, and the comparison is never written into a run
folder (a signed one would stop verifying)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, bias_audit_score

ROWS = 120  # per category: enough for intervals, a few seconds per run


def _predictions(data_dir: Path, path: Path, answers: dict[str, str]) -> Path:
    """The first ROWS rows of each category of ``answers``: the gold option (``"gold"``) or
    always option 0 (``"first"``), as 0-based indices."""
    lines = []
    for cat, kind in answers.items():
        rows = (data_dir / "bbq" / "data" / f"{cat}.jsonl").read_text(encoding="utf-8").splitlines()
        for line in rows[:ROWS]:
            row = json.loads(line)
            pred = row["label"] if kind == "gold" else 0
            lines.append(json.dumps({"id": f"{cat}-{row['example_id']}", "pred": pred}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _score(tmp_path: Path, data_dir: Path, name: str, answers: dict[str, str]) -> Path:
    preds = _predictions(data_dir, tmp_path / f"{name}.jsonl", answers)
    proc, doc, run_dir = bias_audit_score(
        tmp_path,
        "bbq",
        "--predictions",
        preds,
        "--prediction-field",
        "pred",
        "--index-base",
        "0",
        "--data-dir",
        data_dir,
        "--allow-partial",
        "--",
        "-k",
        " or ".join(answers),
        "--min-n",
        "1",
        name=name,
    )
    assert proc.returncode in (0, 1) and doc is not None, (proc.stdout + proc.stderr)[-3000:]
    return run_dir


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "audit_harness.cli", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """Two runs sharing one results dir: Age and Religion (Religion always answers A, so the pooled
    accuracy differs a lot), and Age alone."""
    tmp = tmp_path_factory.mktemp("compare")
    two = _score(tmp, data_dir, "results", {"Age": "gold", "Religion": "first"})
    (tmp / "age").mkdir()
    one = _score(tmp / "age", data_dir, "results", {"Age": "gold"})
    return two, one


def test_pooled_rows_over_other_categories_are_not_compared(runs):
    two, one = runs
    proc = _cli("compare", two, one, "--output-dir", two.parent / "out")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    note = "bbq aggregate rows (pooled, ...): pooled over different categories: old only Religion"
    assert note in out
    (js,) = (two.parent / "out").glob("compare-*-vs-*.json")
    rows = {(r["category"], r["metric"]): r for r in json.loads(js.read_text())["metrics"]}
    pooled = rows[("pooled", "acc_ambig-generate")]
    assert pooled["not_comparable"] == "pooled over different categories: old only Religion"
    assert pooled["change"] is None and pooled["intervals_disjoint"] is None
    # the numbers themselves differ by far more than their intervals: only the flag is withheld
    assert pooled["old"]["ci"][1] < pooled["new"]["ci"][0]
    assert not any(r["intervals_disjoint"] for (cat, _), r in rows.items() if cat == "pooled")
    # Age was scored the same in both: its rows are compared, and agree
    age = rows[("Age", "acc_ambig-generate")]
    assert age["change"] == 0 and age["not_comparable"] is None and age["intervals_disjoint"] is False
    line = next(x for x in out.splitlines() if x.startswith("| bbq | pooled | acc_ambig-generate |"))
    assert line.endswith("| - | not comparable (pooled over different categories: old only Religion) |")
    assert "do not overlap" not in line
    # the same runs compared with themselves: the pooled rows are comparable again
    same = _cli("compare", two, two, "--output-dir", two.parent / "same")
    assert same.returncode == 0 and "not comparable" not in same.stdout, same.stdout[-2000:]


def test_compare_writes_beside_the_runs_and_never_into_a_signed_one(runs, tmp_path):
    two, one = runs
    keys = tmp_path / "keys"
    assert _cli("keygen", "--out", keys).returncode == 0
    signed = _cli("sign", one, "--key", keys / "bias-audit-signing-key.pem", "--signer", "Ada Lovelace")
    assert signed.returncode == 0, signed.stderr
    verify = ("verify", one, "--public-key", keys / "bias-audit-signing-key.pub.pem")
    assert _cli(*verify).returncode == 0
    old_id, new_id = (json.loads((d / "results.json").read_text())["run_id"] for d in (two, one))
    proc = _cli("compare", two, one)
    assert proc.returncode == 0, proc.stderr
    written = one.parent / f"compare-{old_id}-vs-{new_id}.md"
    assert f"wrote {written}" in proc.stdout and written.is_file()
    assert not list(one.glob("compare-*"))
    ok = _cli(*verify)
    assert ok.returncode == 0 and ok.stdout.startswith("verified:"), ok.stdout + ok.stderr
    # an explicit output inside the signed run: refused before anything is written
    refused = _cli("compare", two, one, "--output-dir", one / "cmp")
    assert refused.returncode == 4
    assert f"is inside the signed run folder {one.resolve()}" in refused.stderr
    assert not (one / "cmp").exists() and _cli(*verify).returncode == 0
