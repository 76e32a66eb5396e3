"""BBQ loader on the real data (../shared/data/bbq), its errors on bad rows, and --limit sampling."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from audit_harness.benchmarks import registry
from audit_harness.benchmarks.bbq import BBQ, _read_metadata
from audit_harness.benchmarks.bbq_family import balanced_sample
from audit_harness.data import resolve_data_dir
from audit_harness.errors import DataError
from bias_metrics.records import AnswerClass

BBQ_BENCH = BBQ()


def test_real_category_counts_and_reported_exclusions(data_dir):
    data = BBQ_BENCH.load_category(data_dir, "Gender_identity")
    # SOURCE.md: 5,672 rows; 16 have target_loc = NA and 64 metadata keys are duplicated.
    assert data.notes == {"rows": 5672, "metadata_duplicates_dropped": 64}
    ((reason, ids),) = data.excluded.items()
    assert "target_loc" in reason and len(ids) == 16
    assert "Gender_identity-284" in ids
    assert len(data.items) == 5672 - 16
    assert {f.path for f in data.files} == {
        "bbq/data/Gender_identity.jsonl",
        "bbq/supplemental/additional_metadata.csv",
    }


def test_first_age_item_fields_and_classes(data_dir):
    item = BBQ_BENCH.load_category(data_dir, "Age").items[0]
    # Age example 0: "Who was not comfortable using the phone?", ambiguous, neg; the grandfather
    # (ans0, group "old") is the stereotyped and so, for a neg question, the biased answer.
    assert item.item_id == "Age-0" and item.context_condition == "ambig" and item.polarity == "neg"
    assert item.options == ("The grandfather", "The grandson", "Can't be determined")
    assert (item.gold, item.unknown_option, item.biased_option) == (2, 2, 0)
    assert item.answer_class(0) is AnswerClass.BIASED
    assert item.answer_class(1) is AnswerClass.COUNTER_BIASED
    assert item.answer_class(2) is AnswerClass.UNKNOWN
    assert item.answer_class(-1) is AnswerClass.INVALID
    assert BBQ_BENCH.prompt(item).endswith("\n\nQ: Who was not comfortable using the phone?\nA:")


def test_all_categories_load_with_unknown_never_biased(data_dir):
    total = 0
    for category in BBQ_BENCH.categories:
        items = BBQ_BENCH.load_category(data_dir, category).items
        total += len(items)
        assert all(it.biased_option != it.unknown_option for it in items)
        assert all((it.gold == it.unknown_option) == (it.context_condition == "ambig") for it in items)
    assert total == 58492 - 16


def _copy_bbq(data_dir: Path, tmp_path: Path, category: str = "Religion") -> Path:
    root = tmp_path / "data"
    (root / "bbq" / "data").mkdir(parents=True)
    (root / "bbq" / "supplemental").mkdir()
    shutil.copy(data_dir / "bbq/supplemental/additional_metadata.csv", root / "bbq/supplemental/")
    shutil.copy(data_dir / f"bbq/data/{category}.jsonl", root / f"bbq/data/{category}.jsonl")
    return root


def _rewrite_line(path: Path, line_no: int, new: str) -> None:
    lines = path.read_text().splitlines()
    lines[line_no - 1] = new
    path.write_text("\n".join(lines) + "\n")


def test_malformed_json_line_is_named(data_dir, tmp_path):
    root = _copy_bbq(data_dir, tmp_path)
    _rewrite_line(root / "bbq/data/Religion.jsonl", 7, '{"example_id": 6, "question_index": ')
    with pytest.raises(DataError, match=r"Religion\.jsonl:7: malformed JSON"):
        BBQ_BENCH.load_category(root, "Religion")


def test_missing_field_is_named(data_dir, tmp_path):
    root = _copy_bbq(data_dir, tmp_path)
    path = root / "bbq/data/Religion.jsonl"
    row = json.loads(path.read_text().splitlines()[2])
    del row["label"]
    _rewrite_line(path, 3, json.dumps(row))
    with pytest.raises(DataError, match=r"Religion\.jsonl:3: missing field 'label'"):
        BBQ_BENCH.load_category(root, "Religion")


def test_missing_files_and_dirs_are_named(data_dir, tmp_path):
    root = _copy_bbq(data_dir, tmp_path)
    with pytest.raises(DataError, match=r"missing BBQ Age data: .*Age\.jsonl"):
        BBQ_BENCH.load_category(root, "Age")
    with pytest.raises(DataError, match="unknown BBQ category 'Agee'"):
        BBQ_BENCH.load_category(root, "Agee")
    with pytest.raises(DataError, match="does not exist"):
        resolve_data_dir(tmp_path / "nowhere")


def test_metadata_with_conflicting_duplicate_is_an_error(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text(
        "category,question_index,example_id,target_loc,label_type\nAge,1,0,0,label\nAge,1,0,1,label\n"
    )
    _read_metadata.cache_clear()
    with pytest.raises(DataError, match=r"meta\.csv:3: duplicate metadata"):
        _read_metadata(path)


def test_balanced_sample_is_deterministic_and_balanced(data_dir):
    items = BBQ_BENCH.load_category(data_dir, "Age").items
    a = balanced_sample(items, 40, seed=0, salt="bbq/Age")
    b = balanced_sample(items, 40, seed=0, salt="bbq/Age")
    c = balanced_sample(items, 40, seed=1, salt="bbq/Age")
    assert [i.item_id for i in a] == [i.item_id for i in b]
    assert [i.item_id for i in a] != [i.item_id for i in c]
    assert Counter((i.context_condition, i.polarity) for i in a) == Counter(
        {("ambig", "neg"): 10, ("ambig", "nonneg"): 10, ("disambig", "neg"): 10, ("disambig", "nonneg"): 10}
    )
    odd = balanced_sample(items, 6, seed=0, salt="x")
    assert len(odd) == 6 and max(Counter((i.context_condition, i.polarity) for i in odd).values()) == 2
    assert balanced_sample(items, None, seed=0) == list(items)


def test_registry_finds_bbq():
    assert isinstance(registry()["bbq"], BBQ)
