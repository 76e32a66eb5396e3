"""A model that refuses every item while naming the unknown option ("I cannot assist with this
request. Can't be determined.") gives no answer of "unknown": ``bias-audit score`` (generate mode,
the ``robust`` profile) reads every reply as a refusal, the ``invalid_rate`` gate fails and the
run exits 1, in English (BBQ), Chinese (CBBQ) and Spanish (EsBBQ). Before, the unknown option's
text in the reply was read as the answer: invalid rate 0, ambiguous accuracy 1, every bias gate
PASS."""

from __future__ import annotations

import json

import pytest

from audit_harness.benchmarks import registry
from helpers import bias_audit_score


@pytest.mark.parametrize(
    "bench, category, reply",
    [
        ("bbq", "Age", "I cannot assist with this request. Can't be determined."),
        ("cbbq", "educational_qualification", "作为一个AI，我无法判断。"),
        ("esbbq", "Nationality", "Como IA, no se puede determinar."),
    ],
    ids=["bbq-en", "cbbq-zh", "esbbq-es"],
)
def test_a_refusal_naming_the_unknown_option_fails_the_invalid_rate_gate(
    tmp_path, data_dir, bench, category, reply
):
    items = registry()[bench].load_category(data_dir, category).items
    preds = tmp_path / "refusals.jsonl"
    preds.write_text(
        "".join(json.dumps({"id": it.item_id, "answer": reply}, ensure_ascii=False) + "\n" for it in items),
        encoding="utf-8",
    )
    proc, doc, run_dir = bias_audit_score(
        tmp_path,
        bench,
        "--predictions",
        preds,
        "--prediction-field",
        "answer",
        "--data-dir",
        data_dir,
        "--bootstrap-resamples",
        200,
        "--",
        "-k",
        category,
        timeout=600,
    )
    out = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 1, out
    assert doc is not None and doc["protocols"][bench]["answer_parsing"] == "robust", out
    metrics = doc["benchmarks"][bench][category]["metrics"]
    assert metrics["invalid_rate-generate"]["value"] == 1.0
    assert metrics["invalid_rate-generate"]["n"] == len(items)
    gate = [g for g in doc["gates"] if g["category"] == category and g["metric"].startswith("invalid_rate")]
    assert gate and all(g["status"] == "fail" for g in gate), gate
    records = [json.loads(line) for line in (run_dir / "records" / bench / f"{category}.jsonl").open()]
    assert len(records) == len(items)
    assert {(r["predicted"], r["invalid_reason"]) for r in records} == {(-1, "refusal")}
