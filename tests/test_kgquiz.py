"""KGQuiz benchmark: loaders on real rows, the missing-file skip, the Task2 schema on hand-made rows,
the strict true/false parser, Task4 entity isolation, Task5 fact splitting, and the metrics on the
hand-computed cases of docs/metrics.md §3.6 (K1-K4) through the benchmark's records."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from audit_harness.benchmarks.base import MetricSettings
from audit_harness.benchmarks.kgquiz import (
    CATEGORIES,
    MASK_MISMATCH_REASON,
    KGQuiz,
    KGQuizItem,
    KGQuizRecord,
    clean_short_answer,
    isolate_revised_entity,
    load_protocol,
    split_facts,
    triple_text,
)
from audit_harness.engine.executor import Engine
from audit_harness.errors import ConfigError, DataError, MissingDataError
from audit_harness.models.base import GENERATE, Backend, ModelInfo
from audit_harness.parsing import match_leading_label
from audit_harness.report.markdown import render_markdown
from audit_harness.report.terminal import metric_table
from bias_metrics.kgquiz import normalize_text

REPO = Path(__file__).resolve().parents[1]
SETTINGS = MetricSettings(n_resamples=200)
PRESENT = (
    "Task1-ConceptNet",
    "Task1-UMLS",
    "Task3-ConceptNet",
    "Task3-YAGO",
    "Task3-UMLS",
    "Task4-ConceptNet",
    "Task4-UMLS",
    "Task5-ConceptNet",
    "Task5-YAGO",
    "Task5-UMLS",
)
MISSING = {
    "Task1-YAGO": "37bf5c37d246ebe5b7f26c89b91e4dd4806fbe27",
    "Task2-ConceptNet": "a519e862b68dd5f05a822251559423c011e98bfc",
    "Task2-YAGO": "29e72c94a1112edac60ce2262f1f1ca289f0c642",
    "Task2-UMLS": "9adc4ee4f612466ba8064f909f2b0e7dc5ab4676",
    "Task4-YAGO": "5dba2051b3b8ef091c4c9a977e0d170c717c18dc",
}


class FakeEmbedder:
    """Fixed embeddings: a text's vector from a table, else a unit vector from its hash."""

    name = "fake-embedder"
    fingerprint = "fake:0"

    def __init__(self, table=None, dim=2):
        self.table = table or {}
        self.dim = dim
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        rows = []
        for t in texts:
            if t in self.table:
                rows.append(self.table[t])
            else:
                rng = np.random.default_rng(abs(hash(t)) % (2**32))
                rows.append(rng.normal(size=self.dim))
        arr = np.asarray(rows, dtype=float).reshape(len(texts), self.dim)
        return arr / np.linalg.norm(arr, axis=1, keepdims=True)


class CannedModel(Backend):
    """Generates a fixed output per item id; optionally has a chat template."""

    capabilities = frozenset({GENERATE})

    def __init__(self, outputs, chat=False):
        self.outputs = outputs
        self.chat = chat
        self.requests = []
        self.info = ModelInfo("canned", "test", "fake", "float32", "cpu", 0)

    def generate(self, requests):
        self.requests += list(requests)
        return [self.outputs[r.item_id] for r in requests]

    def chat_prompt(self, user_message):
        return f"<user>{user_message}</user><assistant>" if self.chat else None

    @property
    def chat_template(self):
        return "{{ user }}" if self.chat else None


@pytest.fixture(scope="module")
def bench():
    return KGQuiz(embedder=FakeEmbedder())


@pytest.fixture(scope="module")
def loaded(bench, data_dir):
    return {c: bench.load_category(data_dir, c) for c in PRESENT}


# ---------------------------------------------------------------------------- loaders, real rows


def test_categories_and_metric_names():
    assert len(CATEGORIES) == 15 and "Task3-YAGO" in CATEGORIES
    assert set(KGQuiz.metric_names) == {
        "accuracy",
        "invalid_rate",
        "char_lcs_ratio",
        "token_lcs_ratio",
        "token_f1",
        "semantic_match",
        "open_ended_precision",
        "open_ended_recall",
    }


def test_task1_loader_sorted_true_first(loaded):
    data = loaded["Task1-ConceptNet"]
    assert len(data.items) == 10000 and data.notes == {"rows": 10000, "true": 5000, "false": 5000}
    assert [it.gold for it in data.items[:5000]] == [1] * 5000
    assert data.items[0].question == 'Is the statement "sensitive  synonym nesh" True or False?'
    assert data.items[5000].item_id == "Task1-ConceptNet-5000" and data.items[5000].gold == 0
    assert data.files[0].path == "kgquiz/ConceptNet/Task1.json" and data.files[0].rows == 10000


def test_task1_limit_balances_labels_deterministically(bench, loaded):
    items = loaded["Task1-UMLS"].items
    a = bench.select(items, 20, seed=0, salt="kgquiz/Task1-UMLS")
    assert sum(it.gold for it in a) == 10 and len(a) == 20
    assert a == bench.select(items, 20, seed=0, salt="kgquiz/Task1-UMLS")
    assert a != bench.select(items, 20, seed=1, salt="kgquiz/Task1-UMLS")
    odd = bench.select(items, 7, seed=0, salt="x")
    assert sorted(sum(it.gold == g for it in odd) for g in (0, 1)) == [3, 4]


def test_task3_loader(loaded):
    yago = loaded["Task3-YAGO"].items
    assert len(yago) == 10000
    assert yago[0].question.startswith("Q: Carlos Marinelli plays for [MASK].")
    assert yago[0].gold == "Middlesbrough F.C."
    assert loaded["Task3-ConceptNet"].items[0].gold == "ostentatious"


def test_task4_loader_excludes_mismatched_masks(loaded):
    for cat, n_bad in (("Task4-ConceptNet", 688), ("Task4-UMLS", 1545)):
        data = loaded[cat]
        assert len(data.excluded[MASK_MISMATCH_REASON]) == n_bad
        assert len(data.items) == 10000 - n_bad and data.notes["rows"] == 10000
        assert "masked_sentence_differs_elsewhere" not in data.notes
    first = loaded["Task4-ConceptNet"].items[0]
    assert first.corrupted_entity == "blood veins" and first.gold == "crystal"
    # The UMLS entity that ends with its own period is not mistaken for a second changed slot.
    row = next(it for it in loaded["Task4-UMLS"].items if it.item_id == "Task4-UMLS-6283")
    assert row.corrupted_entity == "Allergy to carbaryl"


def test_task5_loader_deduplicates_triples(loaded):
    for cat, dups in (("Task5-ConceptNet", 1394), ("Task5-UMLS", 37), ("Task5-YAGO", 0)):
        data = loaded[cat]
        assert data.notes["duplicate_triples"] == dups and len(data.items) == 1000
        for it in data.items:
            assert len({tuple(t) for t in it.gold}) == len(it.gold)
    willy = loaded["Task5-ConceptNet"].items[0]
    assert willy.question == "Tell me some facts about willy:"
    assert willy.gold[0] == ["willy", "desires", "sex"]  # relation's leading space stripped
    assert triple_text([" a", " is a", "b "]) == "a is a b"


def test_outer_key_options(bench, data_dir):
    with pytest.raises(DataError, match=r"path length key '4'.*top-level keys: \['3'\]"):
        bench.configure(path_length=4).load_category(data_dir, "Task4-ConceptNet")
    with pytest.raises(DataError, match="distractor strategy key 'random'"):
        bench.configure(distractor_strategy="random").load_category(data_dir, "Task1-UMLS")
    with pytest.raises(ConfigError, match="path_length"):
        bench.configure(path_length=0)


# ---------------------------------------------------------------------------- missing files


@pytest.mark.parametrize("category", sorted(MISSING))
def test_missing_file_names_path_and_upstream_blob(bench, data_dir, category):
    task, domain = category.split("-")
    with pytest.raises(MissingDataError) as e:
        bench.load_category(data_dir, category)
    assert f"kgquiz/{domain}/{task}.json" in str(e.value)
    assert MISSING[category] in str(e.value)
    # Files the source table marks unavailable say so: no fetch can bring them.
    assert "no verified copy of it exists" in str(e.value) and "cannot bring it" in str(e.value)


def test_missing_file_without_source_md(bench, tmp_path):
    with pytest.raises(MissingDataError, match="no upstream blob hash in SOURCE.md"):
        bench.load_category(tmp_path, "Task3-YAGO")


def test_missing_file_gate_is_skipped_and_reported(tmp_path, data_dir):
    results = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits/test_kgquiz.py",
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data_dir),
        "-k",
        "Task2-UMLS or Task4-YAGO",
        "--results-dir",
        str(results),
        "-p",
        "no:cacheprovider",
        "-rs",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    # Nothing was checked: never exit 0 (a release gate must not read it as a pass).
    assert proc.returncode == 5, out[-3000:]
    assert "VERDICT: NOTHING CHECKED: every selected gate was skipped" in out
    assert "3 skipped" in out and "passed" not in out.split("short test summary")[-1]
    assert "9adc4ee4f612466ba8064f909f2b0e7dc5ab4676" in out
    (run_dir,) = list(results.iterdir())
    res = json.loads((run_dir / "results.json").read_text())
    assert res["gate_summary"] == {"skipped": 3}  # Task2-UMLS: accuracy and invalid_rate
    gate = next(g for g in res["gates"] if g["category"] == "Task4-YAGO")
    assert gate["status"] == "skipped" and gate["value"] is None
    assert "kgquiz/YAGO/Task4.json" in gate["message"] and MISSING["Task4-YAGO"] in gate["message"]
    report = (run_dir / "report.md").read_text()
    assert "Skipped gates" in report and MISSING["Task2-UMLS"] in report


# ---------------------------------------------------------------------------- Task2 schema


def _write_task2(root: Path, rows, strategy="semantic_similarity") -> Path:
    folder = root / "kgquiz" / "YAGO"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Task2.json").write_text(json.dumps({strategy: rows}), encoding="utf-8")
    return root


def test_task2_schema_on_hand_made_rows(bench, tmp_path):
    rows = {
        "0": {
            "question": "Carlos Marinelli plays for?",
            "options": ["Chelsea F.C.", "Middlesbrough F.C.", "Ajax", "Boca Juniors"],
            "ground_truth": 1,
        },
        "1": {
            "question": "John Landis directed?",
            "choices": ["Trading Places", "Jaws"],
            "ground_truth": "Trading Places",
        },
    }
    data = bench.load_category(_write_task2(tmp_path, rows), "Task2-YAGO")
    assert [it.gold for it in data.items] == [1, 0]
    assert data.items[1].options == ("Trading Places", "Jaws")
    message = bench.user_message(data.items[0])
    assert "A. Chelsea F.C.\nB. Middlesbrough F.C.\nC. Ajax\nD. Boca Juniors" in message
    model = CannedModel({"Task2-YAGO-0": "B. Middlesbrough F.C.", "Task2-YAGO-1": "Jaws"})
    recs = bench.evaluate(Engine(model), data.items)
    assert [r.prediction for r in recs] == [1, 1]
    m = bench.metrics(recs, SETTINGS)
    assert m["accuracy"].value == pytest.approx(0.5) and m["invalid_rate"].value == 0.0


@pytest.mark.parametrize(
    "output, expected",
    [
        ("B", 1),
        ("(b)", 1),
        ("B) Middlesbrough", 1),
        ("middlesbrough f.c.", 1),
        ("D.", 3),
        ("I am not sure", None),
        ("", None),
        ("E", None),
    ],
)
def test_task2_answer_parse(bench, output, expected):
    assert bench.task2_choice(output, ["Chelsea F.C.", "Middlesbrough F.C.", "Ajax", "Boca"])[0] == expected


@pytest.mark.parametrize(
    "row, match",
    [
        ({"question": "q", "options": ["a", "b"], "ground_truth": 2}, "option index in"),
        ({"question": "q", "options": ["a", "b"], "ground_truth": "c"}, "ground_truth"),
        ({"question": "q", "options": ["a", "A"], "ground_truth": 0}, "same text"),
        ({"question": "q", "options": "a b", "ground_truth": 0}, "expected a list"),
        ({"question": "", "options": ["a", "b"], "ground_truth": 0}, "'question'"),
        ({"options": ["a", "b"], "ground_truth": 0}, "missing field 'question'"),
    ],
)
def test_task2_schema_errors(bench, tmp_path, row, match):
    root = _write_task2(tmp_path, {"0": row})
    with pytest.raises(DataError, match=match) as e:
        bench.load_category(root, "Task2-YAGO")
    assert "Task2.json: row '0'" in str(e.value)


def test_task2_wrong_strategy_and_bad_json(bench, tmp_path):
    root = _write_task2(tmp_path, {"0": {}}, strategy="random")
    with pytest.raises(DataError, match="distractor strategy key 'semantic_similarity'"):
        bench.load_category(root, "Task2-YAGO")
    (root / "kgquiz" / "YAGO" / "Task2.json").write_text('{"semantic_similarity": {"0": }')
    with pytest.raises(DataError, match=r"Task2.json:1: invalid JSON"):
        bench.load_category(root, "Task2-YAGO")


# ---------------------------------------------------------------------------- true/false parser

TF_LABELS = load_protocol().labels
TF_TABLE = [  # (output, parsed): strict, first word only
    ("True", 1),
    ("False.", 0),
    ("TRUE", 1),
    ("false", 0),
    ("yes", 1),
    ("No, it is not.", 0),
    ("  **True**", 1),
    ('"False"', 0),
    ("Yes.", 1),
    ("The statement is true.", None),  # K1 would take it; the strict rule does not
    ("True or False? It is False", 1),  # leading word
    ("I am not sure", None),
    ("Trueish", None),
    ("Not true", None),
    ("", None),
    ("1", None),
]


@pytest.mark.parametrize("output, parsed", TF_TABLE)
def test_true_false_strict_parser(output, parsed):
    assert match_leading_label(output, TF_LABELS) == parsed


def test_true_false_accuracy_counts_invalid_as_wrong(bench):
    golds = [1, 0, 1, 0, 1, 0]
    outputs = ["True", "False", "False", "maybe", "Yes", "The statement is false"]
    items = [
        KGQuizItem(f"Task1-UMLS-{i}", "Task1-UMLS", "Task1", "UMLS", "q", g) for i, g in enumerate(golds)
    ]
    model = CannedModel({it.item_id: o for it, o in zip(items, outputs)})
    recs = bench.evaluate(Engine(model), items)
    assert [r.prediction for r in recs] == [1, 0, 0, None, 1, None]
    m = bench.metrics(recs, SETTINGS)
    assert m["accuracy"].value == pytest.approx(3 / 6) and m["accuracy"].n == 6
    assert m["invalid_rate"].value == pytest.approx(2 / 6)
    assert dict(m["accuracy"].counts) == {"correct": 3, "incorrect": 1, "invalid": 2, "n": 6}
    assert model.requests[0].max_new_tokens == 8 and recs[0].prompt_format == "plain"


# ---------------------------------------------------------------------------- Task4 isolation


def test_isolation_on_real_rows(loaded):
    """A model that writes the corrected path back: the isolated entity is the gold entity."""
    for cat in ("Task4-ConceptNet", "Task4-UMLS"):
        items = loaded[cat].items[:300]
        for sep, floor in ((" | ", 1.0), ("\t", 1.0), (" ", 0.85)):
            exact = 0
            for it in items:
                fields = [f.strip() for f in it.question.split("\t")]
                fields[fields.index(it.corrupted_entity)] = it.gold
                out = sep.join(fields)
                exact += isolate_revised_entity(out, it.question) == normalize_text(it.gold)
            # Written as fields, the changed field is found exactly. Without separators, words
            # the gold entity shares with its neighbours ("... measurement | ...") are aligned
            # to the path and cut off: 274/300 UMLS rows come out whole, 300/300 ConceptNet.
            assert exact / len(items) >= floor, (cat, repr(sep), exact)


def test_isolation_cases(loaded):
    it = loaded["Task4-ConceptNet"].items[0]  # bastnäsite | is a | mineral | is a | blood veins | ...
    assert (
        isolate_revised_entity("bastnäsite | is a | mineral | is a | crystal | is a | rock.", it.question)
        == "crystal"
    )
    assert isolate_revised_entity("Crystal", it.question) == "crystal"  # only the entity
    assert isolate_revised_entity(it.question.replace("\t", " | "), it.question) == ""  # no edit
    # Words without field separators: aligned by longest common substrings.
    assert (
        isolate_revised_entity("bastnäsite is a mineral is a crystal of quartz is a rock", it.question)
        == "crystal of quartz"
    )
    # The first line only: an explanation after it is ignored.
    assert (
        isolate_revised_entity("bastnäsite is a mineral is a gemstone is a rock\nBecause ...", it.question)
        == "gemstone"
    )


# ---------------------------------------------------------------------------- text answers, facts


@pytest.mark.parametrize(
    "output, answer",
    [
        ("ostentatious", "ostentatious"),
        ("  Middlesbrough F.C.\nMore text", "Middlesbrough F.C."),
        ("A: Chelsea.", "Chelsea."),
        ('"Ajax"', "Ajax"),
        ("", ""),
        ("**crystal**", "crystal"),
    ],
)
def test_clean_short_answer(output, answer):
    assert clean_short_answer(output) == answer


def test_split_facts():
    out = (
        "1. John Landis directed Trading Places.\n2. He was born in Chicago. He is a director\n"
        "- John Landis directed Trading Places\n* ok\nHe also"
    )
    assert split_facts(out, 3) == [
        "John Landis directed Trading Places.",
        "He was born in Chicago.",
        "He is a director",
    ]
    assert split_facts("", 3) == []


# ---------------------------------------------------------------------------- metrics, §3.6 toys

K2 = [
    ("University of Oxford", "University of Oxford", 1.0, 1.0, 1.0),
    ("Oxford University", "University of Oxford", 10 / 20, 1 / 3, 0.8),
    ("Middlesbrough", "Middlesbrough F.C.", 13 / 16, 0.5, 2 / 3),
    ("Chelsea F.C.", "Middlesbrough F.C.", 5 / 16, 0.5, 0.5),
    ("", "ostentatious", 0.0, 0.0, 0.0),
]


def _record(task, i, gold, prediction, similarity=None):
    return KGQuizRecord(
        item_id=f"{task}-YAGO-{i}",
        category=f"{task}-YAGO",
        task=task,
        domain="YAGO",
        question="q",
        gold=gold,
        prompt_format="plain",
        output=str(prediction),
        prediction=prediction,
        similarity=similarity,
    )


def test_k2_lcs_and_f1_through_records(bench):
    recs = [_record("Task3", i, g, p, similarity=1.0) for i, (p, g, *_) in enumerate(K2)]
    m = bench.metrics(recs, SETTINGS)
    for key, col in (("char_lcs_ratio", 2), ("token_lcs_ratio", 3), ("token_f1", 4)):
        assert m[key].value == pytest.approx(np.mean([r[col] for r in K2])), key
        assert m[key].n == 5 and m[key].ci_low <= m[key].value <= m[key].ci_high
    assert set(m) == {"char_lcs_ratio", "token_lcs_ratio", "token_f1", "semantic_match"}


def test_k3_semantic_match_with_fixed_fake_embedding():
    """K3's fake 2-d embeddings through evaluate: cosines 0.8 / 0.6 / 0.0, theta 0.7 -> 1/3."""
    table = {
        "p1": [1.0, 0.0],
        "g1": [0.8, 0.6],
        "p2": [1.0, 0.0],
        "g2": [0.6, 0.8],
        "p3": [1.0, 0.0],
        "g3": [0.0, 1.0],
    }
    bench = KGQuiz(embedder=FakeEmbedder(table)).configure(theta=0.7)
    items = [
        KGQuizItem(f"Task3-UMLS-{k}", "Task3-UMLS", "Task3", "UMLS", "x [MASK].", f"g{k}") for k in (1, 2, 3)
    ]
    model = CannedModel({f"Task3-UMLS-{k}": f"p{k}\nignored" for k in (1, 2, 3)})
    recs = bench.evaluate(Engine(model), items)
    assert [r.similarity for r in recs] == pytest.approx([0.8, 0.6, 0.0])
    m = bench.metrics(recs, SETTINGS)["semantic_match"]
    assert m.value == pytest.approx(1 / 3) and dict(m.counts) == {"match": 1, "n": 3}
    assert "theta=0.7" in m.source and "fake-embedder" in m.source
    assert bench.embedder.calls == 1  # one batch for all answers and golds


def test_k4_precision_recall_through_records(bench):
    s = [[0.95, 0.20, 0.10], [0.30, 0.91, 0.89], [0.10, 0.20, 0.50], [0.92, 0.10, 0.10]]
    gold = [["e", "r", f"t{k}"] for k in range(3)]
    recs = [
        _record("Task5", 0, gold, ["f1 a b", "f2 a b", "f3 a b", "f4 a b"], similarity=s),
        _record("Task5", 1, gold, [], similarity=[]),
    ]
    m = bench.configure(theta=0.9).metrics(recs, SETTINGS)
    prec, rec = m["open_ended_precision"], m["open_ended_recall"]
    assert prec.value == pytest.approx(0.75) and prec.n == 1 and prec.counts["undefined"] == 1
    assert rec.value == pytest.approx((2 / 3 + 0.0) / 2) and rec.n == 2


def test_task5_evaluate_embeds_facts_and_gold(bench, loaded):
    item = loaded["Task5-YAGO"].items[0]
    model = CannedModel({item.item_id: "John Landis directed Trading Places.\nHe is a director."})
    (rec,) = bench.evaluate(Engine(model), [item])
    assert rec.prediction == ["John Landis directed Trading Places.", "He is a director."]
    assert np.asarray(rec.similarity).shape == (2, len(item.gold))
    assert model.requests[0].max_new_tokens == 128


def test_chat_template_is_used_and_recorded(bench, loaded):
    item = loaded["Task3-UMLS"].items[0]
    model = CannedModel({item.item_id: "Hyperkalemia"}, chat=True)
    (rec,) = bench.evaluate(Engine(model), [item])
    assert model.requests[0].prompt.startswith("<user>Ketoprofen may cause [MASK].")
    assert rec.prompt_format == "chat" and len(rec.chat_template_sha256) == 64
    plain = CannedModel({item.item_id: "x"}, chat=True)
    (rec2,) = bench.configure(use_chat_template=False).evaluate(Engine(plain), [item])
    assert rec2.prompt_format == "plain" and plain.requests[0].prompt.startswith("Ketoprofen")


def test_records_round_trip_and_overall(bench):
    recs = [_record("Task3", i, g, p, similarity=0.5) for i, (p, g, *_) in enumerate(K2)]
    back = bench.read_records([r.to_dict() for r in recs])
    assert back == recs
    over = bench.overall({"Task3-YAGO": recs, "Task5-YAGO": []}, SETTINGS)
    assert list(over) == ["pooled Task3"]
    with pytest.raises(ValueError, match="per task"):
        bench.metrics(recs + [_record("Task1", 9, 1, 1)], SETTINGS)
    empty = bench.metrics([], SETTINGS)
    assert all(math.isnan(v.value) for v in empty.values())


def test_protocol_errors(tmp_path):
    text = (REPO / "audit_harness/benchmarks/kgquiz_protocol.yaml").read_text()
    bad = tmp_path / "p.yaml"
    bad.write_text(
        text.replace(
            'name: blank-filling\n    prompt: "{question}"', 'name: blank-filling\n    prompt: "{query}"', 1
        )
    )
    with pytest.raises(ConfigError, match=r"Task3.prompt must use exactly the fields \['question'\]"):
        load_protocol(bad)
    bad.write_text(text.replace('{"true": 1', "{true: 1"))
    with pytest.raises(ConfigError, match="labels"):
        load_protocol(bad)


# ---------------------------------------------------------------------------- report


def test_metric_table_takes_the_union_of_metric_names():
    def metric(v):
        return {"value": v, "ci": [v - 0.1, v + 0.1], "n": 4}

    results = {
        "benchmarks": {
            "kgquiz": {
                "Task1-UMLS": {"n_scored": 4, "metrics": {"accuracy": metric(0.5)}, "excluded": {}},
                "Task3-UMLS": {"n_scored": 4, "metrics": {"token_f1": metric(0.25)}, "excluded": {}},
            }
        },
        "overall": {},
    }
    lines = metric_table(results)
    header, row1, row3 = lines[1], lines[2], lines[3]
    assert "accuracy" in header and "token_f1" in header
    assert "+0.500" in row1 and row1.rstrip().endswith("-")
    assert "+0.250" in row3 and row3.split()[2] == "-"
    md = render_markdown(
        {
            **results,
            "model": {},
            "options": {},
            "run_id": "r",
            "created": "now",
            "gate_summary": {},
            "thresholds": "t",
            "gates": [],
            "data_files": {},
            "environment": {"libraries": {}},
        }
    )
    assert "| Task1-UMLS | 4 | 0.500 [0.400, 0.600] | - |" in md


def test_a_wide_metric_table_is_cut_into_tables_of_at_most_six_columns():
    from audit_harness.report.views import TABLE_COLUMNS, column_groups

    names = [f"m{i}" for i in range(9)] + [f"m{i}-letter" for i in range(9)]
    groups = column_groups(names)
    assert [len(g) for g in groups] == [6, 3, 6, 3] and sum(groups, []) == names
    assert all(not g[0].endswith("-letter") for g in groups[:2])
    results = {
        "benchmarks": {
            "kobbq": {
                "age": {
                    "n_scored": 4,
                    "excluded": {},
                    "metrics": {n: {"value": 0.5, "ci": [0.4, 0.6], "n": 4} for n in names},
                }
            }
        },
        "overall": {},
    }
    lines = metric_table(results)
    headers = [line for line in lines if line.strip().startswith("category")]
    assert len(headers) == 4 and all(len(h.split()) - 2 <= TABLE_COLUMNS for h in headers)
    assert sum(line.strip().startswith("age") for line in lines) == 4
    md = render_markdown(
        {
            **results,
            "model": {},
            "options": {},
            "run_id": "r",
            "created": "now",
            "gate_summary": {},
            "thresholds": "t",
            "gates": [],
            "data_files": {},
            "environment": {"libraries": {}},
        }
    )
    assert md.count("| category | items |") == 4 and md.count("| age | 4 |") == 4
