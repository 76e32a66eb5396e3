"""MBBQ's shipped gates end to end through ``bias-audit score`` (the replay backend) on real rows:
a model answering every item correctly PASSes (exit 0); a model answering the stereotyped option in
Dutch and correctly in English FAILs its Dutch bias gates (exit 1), and results.json carries the
cross-language difference (Dutch minus English) with an interval that excludes 0. The full oracle
table (every row, every kind) is ``tests/test_oracles.py``'s, marked slow for MBBQ's size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit_harness.benchmarks.mbbq import MBBQ
from helpers import bias_audit_score

CATEGORY = "Sexual_orientation"


def _predictions(data_dir: Path, path: Path, pick: dict[str, str]) -> None:
    bench = MBBQ()
    rows = []
    for lang, kind in pick.items():
        for it in bench.load_category(data_dir, f"{CATEGORY}_{lang}").items:
            option = it.gold if kind == "perfect" else it.biased_option
            rows.append({"id": it.item_id, "answer": "ABC"[option]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")


def _score(tmp_path: Path, data_dir: Path, pick: dict[str, str], keyword: str = CATEGORY):
    data = Path(data_dir)
    if not (data / "mbbq" / "answer_detection.py").is_file():
        pytest.skip("no mbbq/ in the data directory")
    preds = tmp_path / "predictions.jsonl"
    _predictions(data, preds, pick)
    return bias_audit_score(
        tmp_path,
        "mbbq",
        "--predictions",
        preds,
        "--prediction-field",
        "answer",
        "--data-dir",
        data,
        "--",
        "--mbbq-language",
        ",".join(pick),
        "-k",
        keyword,
    )


def test_a_perfect_model_fails_no_mbbq_gate(tmp_path, data_dir):
    """A perfect model on one category: no detection gate FAILs; each PASSes, or is NOT DECIDED
    where the category's interval is wider than the band (the disambiguated diff-bias of 76
    rows, half-width about 0.07). With no must-pass (pooled) gate selected the run certified
    nothing there: NOT CERTIFIED, exit 1, never a pass."""
    proc, results, _ = _score(tmp_path, data_dir, {"en": "perfect", "nl": "perfect"})
    shown = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 1 and results is not None, shown
    assert "nothing was certified" in results["run"]["outcome"]["reason"], shown
    gates = results["gates"]
    assert {g["category"] for g in gates} == {f"{CATEGORY}_en", f"{CATEGORY}_nl"}
    assert {g["status"] for g in gates} <= {"pass", "not_decided"}, shown
    for g in gates:
        if g["status"] == "not_decided":
            assert g["metric"].startswith("diff_bias_disambig") and g["ci"][1] - g["ci"][0] > 0.1, g
    assert results["overall"]["mbbq"]["nl - en"]["diff_bias_ambig-generate"]["value"] == 0


def test_a_model_stereotyped_in_dutch_fails_and_differs_from_english(tmp_path, data_dir):
    """With the pooled gates selected too: MBBQ pools per language, so Dutch's pooled bias gates
    FAIL and English's PASS (the predictions answer one category, so each language pools it)."""
    pick = {"en": "perfect", "nl": "stereotyped"}
    proc, results, _ = _score(tmp_path, data_dir, pick, keyword=f"{CATEGORY} or pooled")
    shown = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 1 and results is not None, shown
    failed = {(g["category"], g["metric"]) for g in results["gates"] if g["status"] == "fail"}
    assert (f"{CATEGORY}_nl", "diff_bias_ambig-generate") in failed
    assert (f"{CATEGORY}_nl", "diff_bias_disambig-generate") in failed
    assert ("pooled_nl", "diff_bias_ambig-generate") in failed
    assert not any(c.endswith("_en") for c, _ in failed)
    pooled_en = {g["metric"]: g["status"] for g in results["gates"] if g["category"] == "pooled_en"}
    assert pooled_en["diff_bias_ambig-generate"] == "pass", pooled_en
    assert "test_mbbq[pooled_nl-diff_bias_ambig-generate]" in proc.stdout
    diff = results["overall"]["mbbq"]["nl - en"]["diff_bias_ambig-generate"]
    assert diff["value"] == pytest.approx(1.0) and diff["counts"]["interval_excludes_0"] == 1
    assert "nl - en" in proc.stdout  # the terminal's table lists the difference


def test_a_complete_output_set_with_responses_to_excluded_rows_is_scored(tmp_path, data_dir):
    """The authors' pipeline answers every row of Gender_identity_nl, the 16 whose targeted option
    cannot be resolved (their ``target_loc = 100``) among them, each in its 5 templates. ``bias-audit
    score`` scores the rest (a perfect model passes, exit 0) and results.json names the 80 held-out
    responses with the loader's reasons; it exited 4 on the first (``id
    'Gender_identity_nl-276-p1' is not in the mbbq data``)."""
    data = Path(data_dir)
    if not (data / "mbbq" / "answer_detection.py").is_file():
        pytest.skip("no mbbq/ in the data directory")
    category = "Gender_identity_nl"
    loaded = MBBQ().load_category(data, category)
    held = {
        reason: [f"{row}-p{k}" for row in rows for k in range(1, 6)]
        for reason, rows in loaded.excluded.items()
    }
    assert (
        sum(map(len, held.values())) == 80
        and "Gender_identity_nl-276-p1" in held["no option's answer_info group is in stereotyped_groups"]
    )
    rows = [{"id": it.item_id, "answer": "ABC"[it.gold]} for it in loaded.items]
    rows += [{"id": i, "answer": "A"} for ids in held.values() for i in ids]
    preds = tmp_path / "predictions.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    proc, results, _ = bias_audit_score(
        tmp_path,
        "mbbq",
        "--predictions",
        preds,
        "--prediction-field",
        "answer",
        "--data-dir",
        data,
        "--",
        "--mbbq-language",
        "nl",
        "-k",
        category,
    )
    shown = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0 and results is not None, shown
    excluded = results["benchmarks"]["mbbq"][category]["excluded"]
    for reason, ids in held.items():
        assert sorted(excluded[f"{reason} (rows of the predictions file)"]) == sorted(ids)
    gates = [g for g in results["gates"] if g["category"] == category]
    assert gates and all(g["status"] == "pass" for g in gates), shown
