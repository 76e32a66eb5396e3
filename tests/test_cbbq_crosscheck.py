"""The authors' CBBQ counting (tools/crosscheck/cbbq_authors_rule.py, independent of the suite's
parser) against the suite's ``authors`` profile on the same saved generations: they agree on
every item but those our recorded deviations touch (docs/metrics.md), and those are named."""

from __future__ import annotations

import importlib.util
import json
import re

from audit_harness.benchmarks.cbbq import CBBQ
from helpers import REPO, bias_audit_score

SCRIPT = REPO / "tools" / "crosscheck" / "cbbq_authors_rule.py"
#: Generations as models write them, cycled over the items: letters, Chinese statements, and the
#: cases a deviation touches (a letter inside a word, both letters, no letter).
OUTPUTS = ("A", "B", "C", "答案：A", "答案：B", "Answer: C", "我认为是B", "A或B", "无法确定", "Banana")


def _script():
    spec = importlib.util.spec_from_file_location("cbbq_authors_rule", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _deviations(record: dict) -> set[str]:
    """Which recorded deviations apply to one item."""
    text = str(record["raw_prediction"]).lower()
    found = {"position"} if record["target_option"] != 0 else set()
    standalone = set(re.findall(r"(?<![a-z0-9])([ab])(?![a-z0-9])", text))
    if {c for c in "ab" if c in text} != standalone:
        found.add("letter-inside-a-word")
    if "a" in text and "b" in text:
        found.add("both-letters")
    return found


def test_authors_script_agrees_with_the_authors_profile_but_for_the_deviations(tmp_path, data_dir):
    bench = CBBQ()
    rows = []
    for category in ("gender", "religion"):
        items = bench.load_category(data_dir, category).items
        items = items[:100] + items[-100:]  # both conditions; the run judges them (--allow-partial)
        rows += [{"id": it.item_id, "answer": OUTPUTS[k % len(OUTPUTS)]} for k, it in enumerate(items)]
    predictions = tmp_path / "generations.jsonl"
    predictions.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    proc, results, run = bias_audit_score(
        tmp_path,
        "cbbq",
        "--predictions",
        predictions,
        "--prediction-field",
        "answer",
        "--answer-parsing",
        "authors",
        "--allow-partial",
        "--data-dir",
        data_dir,
        "--",
        "-k",
        "gender or religion",
    )
    assert results is not None, proc.stdout[-3000:] + proc.stderr[-2000:]
    script = _script()
    records = script.read_records(run)
    assert set(records) == {"gender", "religion"}
    kinds: dict[str, int] = {}
    differ = 0
    for category, recs in records.items():
        clean = []
        for r in recs:
            ours = (int(r["predicted_class"] == "biased"), int(r["predicted_class"] == "counter-biased"))
            theirs = script.authors_counts(r["raw_prediction"], r["polarity"])
            why = _deviations(r)
            for k in why:
                kinds[k] = kinds.get(k, 0) + 1
            if not why:  # no deviation: the same count, item by item
                assert ours == theirs, r["id"]
                clean.append(r)
            differ += ours != theirs
        # On the items no deviation touches, the script's scores are ours.
        got = script.category_scores(clean)
        ours_metrics = results["benchmarks"]["cbbq"][category]["metrics"]
        assert got and ours_metrics
        for cond, s in got.items():
            ours_clean = [r for r in clean if r["context_condition"] == cond]
            biased = sum(r["predicted_class"] == "biased" for r in ours_clean)
            reverse = sum(r["predicted_class"] == "counter-biased" for r in ours_clean)
            assert (s["biased"], s["reverse"]) == (biased, reverse), (category, cond)
    # Each deviation occurs in this sample (the test checks something of each).
    assert set(kinds) == {"position", "letter-inside-a-word", "both-letters"}, kinds
    assert differ > 0  # and they change counts: the two rules do differ there
