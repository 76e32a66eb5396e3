"""BBQ-format datasets declared in YAML (``--bbq-dataset``, docs/datasets.md), on real rows: BBQ
items rewritten with renamed fields (JSONL and CSV) and EsBBQ's Spanish items in a schema of
their own, made at test time in tmp_path (no data is copied into the repository).

Checked: a declared copy of BBQ gives the built-in ``bbq``'s records and metrics on the same
items; it gates, reports, signs and verifies; the oracles' verdicts (perfect PASS, stereotyped
FAIL); both answer modes; and every bad declaration stops the run at start-up with exit 4 naming
the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from audit_harness.benchmarks import registry
from audit_harness.benchmarks.bbq import BBQ
from audit_harness.benchmarks.declaration import read_declaration
from audit_harness.benchmarks.esbbq import EsBBQ
from audit_harness.errors import ConfigError, DataError
from audit_harness.exit_codes import GATE_FAILED, OK, USAGE_ERROR
from helpers import FROM_COUNTS, REPO, bias_audit_score

CATEGORIES = ("Religion", "Sexual_orientation")
#: BBQ's columns under other names, as a team's own files may have them.
RENAMED = {
    "id": "qid",
    "context": "premise",
    "question": "query",
    "ans0": "opt_a",
    "ans1": "opt_b",
    "ans2": "opt_c",
    "label": "gold",
    "question_polarity": "polarity",
    "context_condition": "condition",
    "unknown_option": "unknown_idx",
    "target_option": "target_idx",
    "template_id": "template",
}
#: The declared copy's gates: bbq's section of the shipped thresholds file, under its name.
BBQ_GATES = yaml.safe_load((REPO / "thresholds.yaml").read_text())["bbq"]


def _target(item) -> int:
    """The targeted group's option: BBQ's bias-aligned option in a negative question, the other
    group's in a non-negative one (the inverse of ``biased_option``)."""
    if item.polarity == "neg":
        return item.biased_option
    return next(k for k in range(3) if k not in (item.biased_option, item.unknown_option))


def bbq_items(data_dir: Path, category: str, keep=None, every: int = 1) -> list:
    """The built-in loader's items of one BBQ category (every ``every``-th, or those in ``keep``)."""
    items = BBQ().load_category(data_dir, category).items
    if keep is not None:
        return [it for it in items if it.item_id in keep]
    return items[::every]


def renamed_row(item) -> dict:
    """One BBQ item under the renamed columns, polarity written ``non_neg``."""
    return {
        "qid": int(item.item_id.rsplit("-", 1)[1]),
        "premise": item.context,
        "query": item.question,
        "opt_a": item.options[0],
        "opt_b": item.options[1],
        "opt_c": item.options[2],
        "gold": item.gold,
        "polarity": "non_neg" if item.polarity == "nonneg" else "neg",
        "condition": item.context_condition,
        "unknown_idx": item.unknown_option,
        "target_idx": _target(item),
        "template": item.template_id,
    }


def write_rows(path: Path, rows: list[dict]) -> Path:
    """``rows`` as JSONL or CSV (by the extension)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def declaration(name: str, files: dict) -> dict:
    """A declaration of the renamed BBQ columns (with the built-in bbq's cloze prompt)."""
    return {
        "name": name,
        "language": "en",
        "metric_family": "bbq",
        "files": files,
        "fields": dict(RENAMED),
        "values": {"question_polarity": {"neg": "neg", "non_neg": "nonneg"}},
        "prompt": "{context}\n\nQ: {question}\nA:",
    }


def write_yaml(path: Path, doc) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def make_bbq_copy(folder: Path, data_dir: Path, ext: str = "jsonl", keep=None, every: int = 3) -> Path:
    """A declared copy ``bbq_renamed`` of BBQ's Religion and Sexual_orientation items in
    ``folder/data`` (``keep``: those ids per category; else every ``every``-th row, where 3 keeps
    BBQ's four cells of context x polarity); returns the declaration's path."""
    files = {}
    for cat in CATEGORIES:
        items = bbq_items(data_dir, cat, (keep or {}).get(cat), every=every)
        write_rows(folder / "data" / f"{cat.lower()}.{ext}", [renamed_row(it) for it in items])
        files[cat] = f"data/{cat.lower()}.{ext}"
    return write_yaml(folder / "bbq_renamed.yaml", declaration("bbq_renamed", files))


def thresholds_for(folder: Path, name: str, section=None) -> Path:
    """A thresholds file with a section for ``name`` (default: bbq's gates)."""
    doc = {"min_n": 30, "mode": "ci_three_way", name: section or BBQ_GATES}
    return write_yaml(folder / "thresholds.yaml", doc)


def run(args: list, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m pytest ARGS`` from the repository (an audit run, as a user starts one)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", *map(str, args), "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def tail(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-3000:] + proc.stderr[-3000:]


# -- the declaration, read directly ----------------------------------------------------------------


def test_declared_copy_reads_as_bbqs_items(tmp_path, data_dir):
    """Every field of the renamed JSONL and CSV copies reads back as the built-in loader's item
    (the bias-aligned option is recomputed from the targeted group's option and polarity)."""
    for ext in ("jsonl", "csv"):
        path = make_bbq_copy(tmp_path / ext, data_dir, ext=ext)
        bench = registry([path])["bbq_renamed"]
        for cat in CATEGORIES:
            want = bbq_items(data_dir, cat, every=3)
            got = bench.load_category(data_dir, cat).items
            assert len(got) == len(want) > 100
            for a, b in zip(got, want):
                assert (a.item_id, a.context, a.question, a.options, a.gold) == (
                    b.item_id,
                    b.context,
                    b.question,
                    b.options,
                    b.gold,
                )
                assert (
                    a.context_condition,
                    a.polarity,
                    a.biased_option,
                    a.unknown_option,
                    a.template_id,
                ) == (
                    b.context_condition,
                    b.polarity,
                    b.biased_option,
                    b.unknown_option,
                    b.template_id,
                )


def spanish_copy(folder: Path, data_dir: Path, categories=("Age", "Religion"), every: int = 8) -> Path:
    """EsBBQ's Spanish items in a schema of their own (CSV, Spanish column names, label and
    condition values of their own, the unknown option written out); metric family esbbq."""
    es = EsBBQ("es")
    files = {}
    for cat in categories:
        rows = []
        for it in es.load_category(data_dir, cat).items[::every]:
            options = list(it.options)
            options[it.unknown_option] = es.protocol.unknown_phrasings[0]
            rows.append(
                {
                    "id": it.extra["instance_id"],
                    "plantilla": it.template_id,
                    "contexto": it.context,
                    "pregunta": it.question,
                    "a": options[0],
                    "b": options[1],
                    "c": options[2],
                    "respuesta": "ABC"[it.gold],
                    "polaridad": "negativa" if it.polarity == "neg" else "no_negativa",
                    "contexto_tipo": "ambiguo" if it.context_condition == "ambig" else "desambiguado",
                    "desconocida": "ABC"[it.unknown_option],
                    "sesgada": "ABC"[it.biased_option],
                }
            )
        files[cat] = write_rows(folder / f"{cat}.csv", rows).name
    letters = {"A": 0, "B": 1, "C": 2}
    doc = {
        "name": "esbbq_propio",
        "title": "EsBBQ rows in a schema of their own (test)",
        "language": "es",
        "metric_family": "esbbq",
        "files": files,
        "fields": {
            "id": "id",
            "template_id": "plantilla",
            "context": "contexto",
            "question": "pregunta",
            "ans0": "a",
            "ans1": "b",
            "ans2": "c",
            "label": "respuesta",
            "question_polarity": "polaridad",
            "context_condition": "contexto_tipo",
            "unknown_option": "desconocida",
            "biased_option": "sesgada",
        },
        "values": {
            "label": letters,
            "unknown_option": letters,
            "biased_option": letters,
            "question_polarity": {"negativa": "neg", "no_negativa": "nonneg"},
            "context_condition": {"ambiguo": "ambig", "desambiguado": "disambig"},
        },
        "prompt": es.protocol.prompt,
        "unknown_phrasings": list(es.protocol.unknown_phrasings),
    }
    return write_yaml(folder / "esbbq_propio.yaml", doc)


def test_spanish_declaration_reads_esbbqs_items(tmp_path, data_dir):
    """The Spanish copy (CSV, letters for options, values of its own) reads back as EsBBQ's
    loader's items, with the suite's Spanish lettered prompt for generate mode."""
    bench = registry([spanish_copy(tmp_path, data_dir)])["esbbq_propio"]
    assert bench.flavour == "esbbq" and bench.language == "es"
    want = EsBBQ("es").load_category(data_dir, "Religion").items[::8]
    got = bench.load_category(data_dir, "Religion").items
    assert [(a.gold, a.biased_option, a.polarity, a.context_condition) for a in got] == [
        (b.gold, b.biased_option, b.polarity, b.context_condition) for b in want
    ]
    assert bench.generate_prompt(got[0]).startswith(got[0].context + "\n\nPregunta: ")
    assert (
        bench.configure(answer_mode="generate")
        .provenance()["generate_prompt_template"]
        .startswith("{context}\n\nPregunta:")
    )


def test_a_language_without_the_suites_prompt_takes_the_declared_one(tmp_path, data_dir):
    """In a language the suite has no lettered prompt for, the declared one is shown to the model
    and recorded, in generate and letter modes."""
    path = spanish_copy(tmp_path, data_dir, categories=("Religion",), every=40)
    doc = yaml.safe_load(path.read_text())
    doc.update(language="pt", generate_prompt="{context}\nPergunta: {question}\nA) {a}\nB) {b}\nC) {c}")
    bench = registry([write_yaml(path, doc)])["esbbq_propio"]
    item = bench.load_category(data_dir, "Religion").items[0]
    assert (
        bench.generate_prompt(item)
        == f"{item.context}\nPergunta: {item.question}\nA) "
        + "\nB) ".join(item.options[:2])
        + f"\nC) {item.options[2]}"
    )
    for mode in ("generate", "letter"):
        recorded = bench.configure(answer_mode=mode).provenance()["generate_prompt_template"]
        assert recorded == doc["generate_prompt"]


@pytest.mark.parametrize(
    ("edit", "field", "line"),
    [
        (lambda d: d.pop("prompt"), "'prompt'", 1),
        (lambda d: d["fields"].pop("question"), "fields.question", 7),
        (lambda d: d["fields"].update(context="premis"), "'fields.context'", 9),
        (lambda d: d.update(metric_family="bbqq"), "'metric_family'", 3),
        (lambda d: d["files"].update(Religion="data/absent.jsonl"), "'files.Religion'", 5),
        (lambda d: d.update(name="kobbq"), "'name'", 1),
        (
            lambda d: d["values"]["question_polarity"].update(non_neg="positive"),
            "values.question_polarity",
            23,
        ),
        (lambda d: d.update(prompt="{context} {answer}"), "'prompt'", 24),
        (lambda d: d.update(language="zz"), "generate_prompt", 2),
    ],
)
def test_bad_declaration_names_line_and_field(tmp_path, data_dir, edit, field, line):
    """Each problem is a ConfigError naming the file, the line of the field and the field."""
    path = make_bbq_copy(tmp_path, data_dir)
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    write_yaml(path, doc)
    with pytest.raises(ConfigError) as e:
        read_declaration(path, {"kobbq": "a built-in benchmark"})
    assert f"{path}:{line}:" in str(e.value) and field in str(e.value), str(e.value)


def test_bad_rows_name_file_line_and_column(tmp_path, data_dir):
    """A label outside the options, an unknown polarity value and a gold that is not the
    unknown option of an ambiguous row stop the loader at that row."""
    path = make_bbq_copy(tmp_path, data_dir)
    data = tmp_path / "data" / "religion.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    bench = registry([path])["bbq_renamed"]
    for key, value, expect in (
        ("gold", 3, "column 'gold' (label): 3 is not one of the options 0, 1, 2"),
        ("polarity", "pos", "column 'polarity' (question_polarity): 'pos' is not one of the declared values"),
    ):
        broken = [dict(r) for r in rows]
        broken[6][key] = value
        write_rows(data, broken)
        with pytest.raises(DataError) as e:
            bench.load_category(data_dir, "Religion")
        assert f"{data}:7: {expect}" in str(e.value), str(e.value)
    ambiguous = next(i for i, r in enumerate(rows) if r["condition"] == "ambig")
    broken = [dict(r) for r in rows]
    broken[ambiguous]["gold"] = (rows[ambiguous]["unknown_idx"] + 1) % 3
    write_rows(data, broken)
    with pytest.raises(DataError, match=f"{data}:{ambiguous + 1}: column 'gold'.*must be the unknown option"):
        bench.load_category(data_dir, "Religion")


# -- end to end ------------------------------------------------------------------------------------


def audit(tmp_path: Path, decl: Path, thresholds: Path, *extra, name: str = "results") -> tuple:
    """``pytest audits --bbq-dataset DECL`` with the tiny random model; (process, run folder)."""
    results = tmp_path / name
    proc = run(
        [
            "audits",
            "--bbq-dataset",
            decl,
            "--thresholds",
            thresholds,
            "--model",
            "tiny-random-gpt2",
            "--results-dir",
            results,
            "--cache-dir",
            tmp_path / "cache",
            "--bootstrap-resamples",
            "1000",
            *extra,
        ]
    )
    runs = [p for p in results.iterdir() if p.is_dir()] if results.exists() else []
    return proc, (runs[0] if runs else None)


@pytest.fixture(scope="module")
def bbq_and_copy(tmp_path_factory, data_dir):
    """The built-in bbq on 16 items of each category, then a declared copy of exactly those
    items, each audited in log-likelihood mode: (bbq run folder, declared run folder, process)."""
    tmp = tmp_path_factory.mktemp("equal")
    bbq_gates = write_yaml(tmp / "bbq_thresholds.yaml", {"min_n": 1, "bbq": BBQ_GATES})
    run(
        [
            "audits/test_bbq.py",
            "--thresholds",
            bbq_gates,
            "--model",
            "tiny-random-gpt2",
            "--limit",
            "16",
            "-k",
            " or ".join(CATEGORIES),
            "--results-dir",
            tmp / "bbq",
            "--cache-dir",
            tmp / "cache",
            "--min-n",
            "1",
        ]
    )
    (bbq_run,) = [p for p in (tmp / "bbq").iterdir() if p.is_dir()]
    keep = {
        cat: {json.loads(line)["id"] for line in (bbq_run / "records" / "bbq" / f"{cat}.jsonl").open()}
        for cat in CATEGORIES
    }
    decl = make_bbq_copy(tmp / "copy", data_dir, keep=keep)
    # --no-cache: the copy's scores are computed again, not read back from the bbq run's cache.
    proc, copy_run = audit(
        tmp, decl, thresholds_for(tmp, "bbq_renamed"), "--min-n", "1", "--no-cache", name="copy_run"
    )
    return bbq_run, copy_run, proc


def test_declared_copy_scores_as_builtin_bbq(bbq_and_copy):
    """The same items give the same log-likelihoods (within the engine's 1e-4 nats), the same
    predictions and the same metrics and intervals as the built-in bbq."""
    bbq_run, copy_run, proc = bbq_and_copy
    assert proc.returncode in (OK, GATE_FAILED), tail(proc)
    assert "TestDeclared::test_bbq_renamed[Religion-diff_bias_ambig]" in proc.stdout
    for cat in CATEGORIES:
        want = {r["id"]: r for r in map(json.loads, (bbq_run / "records/bbq" / f"{cat}.jsonl").open())}
        got = {
            r["id"]: r for r in map(json.loads, (copy_run / "records/bbq_renamed" / f"{cat}.jsonl").open())
        }
        assert set(got) == set(want) and len(got) == 16
        for item_id, r in got.items():
            assert r["predicted"] == want[item_id]["predicted"]
            assert r["prompt_sha256"] == want[item_id]["prompt_sha256"]
            assert (
                max(abs(a - b) for a, b in zip(r["loglikelihoods"], want[item_id]["loglikelihoods"])) < 1e-4
            )
    a = json.loads((bbq_run / "results.json").read_text())["benchmarks"]["bbq"]
    b = json.loads((copy_run / "results.json").read_text())["benchmarks"]["bbq_renamed"]
    for cat in CATEGORIES:
        for metric, m in a[cat]["metrics"].items():
            other = b[cat]["metrics"][metric]
            for key in ("value", "n"):
                x, y = m[key], other[key]
                assert (x is None and y is None) or math.isclose(x, y, abs_tol=FROM_COUNTS), (cat, metric)
            assert m.get("ci") == other.get("ci"), (cat, metric)


def test_declared_run_gates_reports_signs_and_verifies(bbq_and_copy, tmp_path):
    """The declared dataset's run writes its gates, results.json and report.md; it signs and
    verifies as any run does."""
    _, copy_run, _ = bbq_and_copy
    results = json.loads((copy_run / "results.json").read_text())
    gates = [g for g in results["gates"] if g["benchmark"] == "bbq_renamed"]
    assert {g["category"] for g in gates} == set(CATEGORIES) and len(gates) == 6
    assert results["protocols"]["bbq_renamed"]["declaration"] == "bbq_renamed.yaml"
    assert results["options"]["bbq_datasets"][0].endswith("bbq_renamed.yaml")
    assert "bbq_renamed" in (copy_run / "report.md").read_text()
    cli = [sys.executable, "-m", "audit_harness.cli"]
    keys = tmp_path / "keys"
    for args in (
        ["keygen", "--out", keys],
        ["sign", copy_run, "--key", keys / "bias-audit-signing-key.pem", "--signer", "A. Reviewer"],
        ["verify", copy_run, "--public-key", keys / "bias-audit-signing-key.pub.pem"],
    ):
        proc = subprocess.run([*cli, *map(str, args)], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    assert "verified:" in proc.stdout


@pytest.mark.parametrize(("kind", "code"), [("perfect", OK), ("stereotyped", GATE_FAILED)])
def test_oracles_of_a_declared_dataset(tmp_path, data_dir, kind, code):
    """``bias-audit oracle NAME --bbq-dataset FILE``: with bbq's gates, the perfect model passes
    and the stereotyped one fails (every item of the copy, 288 and 400 per category; the copy
    in CSV here, JSONL in the other runs)."""
    decl = make_bbq_copy(tmp_path / "copy", data_dir, ext="csv")
    proc, results, _ = bias_audit_score(
        tmp_path,
        "bbq_renamed",
        "--model-kind",
        kind,
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, "bbq_renamed"),
        command="oracle",
    )
    assert proc.returncode == code, tail(proc)
    statuses = {g["status"] for g in results["gates"]}
    assert "fail" in statuses if kind == "stereotyped" else statuses == {"pass"}, statuses
    if kind == "stereotyped":
        failed = {(g["category"], g["metric"]) for g in results["gates"] if g["status"] == "fail"}
        assert {(c, "diff_bias_ambig-generate") for c in CATEGORIES} <= failed


@pytest.mark.slow  # about 30 s on 2 shared cores: greedy decoding; the verdicts are guarded above
def test_spanish_declared_dataset_in_generate_mode(tmp_path, data_dir):
    """The Spanish declaration runs end to end in generate mode (the suite's Spanish lettered
    prompt, the esbbq metric family's gates ending in -generate)."""
    decl = spanish_copy(tmp_path, data_dir, categories=("Religion",), every=20)
    section = {
        "defaults": {"bias_score_ambig": {"abs_max": 0.05}, "acc_disambig": {"min": 0.5}},
        "categories": {},
    }
    proc, run_dir = audit(
        tmp_path,
        decl,
        thresholds_for(tmp_path, "esbbq_propio", section),
        "--bbq-answer-mode",
        "generate",
        "--limit",
        "8",
        "--min-n",
        "1",
    )
    assert proc.returncode in (OK, GATE_FAILED), tail(proc)
    assert "test_esbbq_propio[Religion-bias_score_ambig-generate]" in proc.stdout
    results = json.loads((run_dir / "results.json").read_text())
    protocol = results["protocols"]["esbbq_propio"]
    assert protocol["answer_mode"] == "generate" and protocol["metric_flavour"] == "esbbq"
    assert protocol["generate_prompt_template"].startswith("{context}\n\nPregunta:")


# -- bad declarations stop the run at start-up (exit 4) -------------------------------------------


def _break(path: Path, edit) -> Path:
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    return write_yaml(path, doc)


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda d: d["fields"].pop("label"), ":7: field 'fields': missing field 'fields.label'"),
        (
            lambda d: d["fields"].update(context="premis"),
            ":9: field 'fields.context': column 'premis' is not in",
        ),
        (lambda d: d["files"].update(Religion="data/gone.jsonl"), ":5: field 'files.Religion': data file"),
        (lambda d: d.update(metric_family="bbqq"), ":3: field 'metric_family': unknown metric family 'bbqq'"),
        (lambda d: d.update(name="bbq"), ":1: field 'name': 'bbq' is already the name of a built-in"),
    ],
)
def test_bad_declaration_exits_4_at_startup(tmp_path, data_dir, edit, expect):
    """Through ``bias-audit run``: exit 4 before anything is scored, the message naming the
    declaration, the line and the field."""
    decl = _break(make_bbq_copy(tmp_path, data_dir, every=37), edit)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit_harness.cli",
            "run",
            "--bbq-dataset",
            str(decl),
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == USAGE_ERROR, tail(proc)
    assert f"{decl}{expect}" in proc.stderr, proc.stderr[-2000:]


def test_label_outside_options_exits_4_naming_the_data_line(tmp_path, data_dir):
    """A row whose label is not an option stops ``pytest audits`` at start-up (exit 4), naming
    the data file, its line and the column."""
    decl = make_bbq_copy(tmp_path, data_dir)
    data = tmp_path / "data" / "sexual_orientation.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[9]["gold"] = 7
    write_rows(data, rows)
    proc, run_dir = audit(tmp_path, decl, thresholds_for(tmp_path, "bbq_renamed"))
    assert proc.returncode == USAGE_ERROR and run_dir is None, tail(proc)
    assert f"{data}:10: column 'gold' (label): 7 is not one of the options" in proc.stderr


def test_declared_dataset_without_gates_exits_4(tmp_path, data_dir):
    """A declared dataset the thresholds file has no section for would run no test: exit 4,
    never a PASS of nothing."""
    decl = make_bbq_copy(tmp_path, data_dir, every=37)
    proc, run_dir = audit(tmp_path, decl, write_yaml(tmp_path / "gates.yaml", {"bbq": BBQ_GATES}))
    assert proc.returncode == USAGE_ERROR and run_dir is None, tail(proc)
    assert "the dataset 'bbq_renamed' declared in" in proc.stderr and "has no gates" in proc.stderr


# -- format: bbq: BBQ's own rows, read as the built-in bbq reads them ------------------------------


def native_copy(folder: Path, data_dir: Path, categories: dict, metadata: bool = False) -> Path:
    """A ``format: bbq`` declaration ``mybbq`` of copies of BBQ's own files in ``folder``
    (``{category: example ids to keep, or None for every row}``), with BBQ's metadata file where
    ``metadata``; returns the declaration's path."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for cat, keep in categories.items():
        lines = (data_dir / "bbq" / "data" / f"{cat}.jsonl").read_text(encoding="utf-8").splitlines()
        if keep is not None:
            lines = [line for line in lines if f"{cat}-{json.loads(line)['example_id']}" in keep]
        (folder / f"{cat}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        files[cat] = f"{cat}.jsonl"
    doc = {"name": "mybbq", "format": "bbq", "files": files}
    if metadata:
        doc["metadata"] = str(data_dir / "bbq" / "supplemental" / "additional_metadata.csv")
    return write_yaml(folder / "mybbq.yaml", doc)


@pytest.mark.parametrize(
    ("categories", "metadata"), [(("Religion",), False), (("Religion", "Gender_identity"), True)]
)
def test_bbq_native_rows_read_as_the_builtin_bbqs_items(tmp_path, data_dir, categories, metadata):
    """``format: bbq`` on copies of BBQ's files gives the built-in loader's items field for field
    (the unknown option from ``answer_info``; the bias-aligned option from the row's
    ``stereotyped_groups``, or with ``metadata`` from ``target_loc``, the 16 Gender_identity rows
    without one excluded for the same reason)."""
    from dataclasses import asdict

    decl = native_copy(tmp_path, data_dir, dict.fromkeys(categories), metadata=metadata)
    bench = registry([decl])["mybbq"]
    for cat in categories:
        got, want = bench.load_category(data_dir, cat), BBQ().load_category(data_dir, cat)
        assert len(got.items) == len(want.items) > 1000
        assert [asdict(it) for it in got.items] == [asdict(it) for it in want.items]
        assert got.excluded == want.excluded


def test_bbq_native_rows_the_row_cannot_resolve_exit_4_naming_metadata(tmp_path, data_dir):
    """Without ``metadata``, a row whose groups are spelt otherwise in ``stereotyped_groups``
    (Gender_identity's ``F`` for ``woman``) cannot give its targeted option: exit 4 at start-up
    naming the file, the line, the field and the ``metadata`` key, never a guessed option."""
    decl = native_copy(tmp_path / "copy", data_dir, {"Gender_identity": None})
    proc, results, _ = bias_audit_score(
        tmp_path,
        "mybbq",
        "--model-kind",
        "perfect",
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, "mybbq"),
        command="oracle",
    )
    assert proc.returncode == USAGE_ERROR and results is None, tail(proc)
    data = tmp_path / "copy" / "Gender_identity.jsonl"
    assert f"{data}:1: field 'additional_metadata.stereotyped_groups': no option's" in proc.stderr
    assert "under metadata:" in proc.stderr


def test_bbq_native_declaration_refuses_fields(tmp_path, data_dir):
    """``fields`` would be ignored on BBQ's own rows: refused from its line."""
    decl = native_copy(tmp_path, data_dir, {"Religion": {"Religion-0"}})
    doc = yaml.safe_load(decl.read_text())
    write_yaml(decl, {**doc, "fields": dict(RENAMED)})
    with pytest.raises(ConfigError, match=r"mybbq.yaml:5: field 'fields': does not apply to format: bbq"):
        read_declaration(decl)


def test_the_bbq_native_example_reads_with_the_users_copies(tmp_path, data_dir):
    """``examples/declared/bbq_edited.yaml`` beside copies of BBQ's files at the paths it names
    reads as the built-in bbq's categories; its thresholds file gates it."""
    from audit_harness.gates import load_thresholds

    example = REPO / "examples" / "declared"
    decl = tmp_path / "bbq_edited.yaml"
    decl.write_text((example / "bbq_edited.yaml").read_text())
    doc = yaml.safe_load(decl.read_text())
    for cat, rel in doc["files"].items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((data_dir / "bbq" / "data" / f"{cat}.jsonl").read_bytes())
    (tmp_path / doc["metadata"]).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / doc["metadata"]).symlink_to(data_dir / "bbq" / "supplemental" / "additional_metadata.csv")
    bench = registry([decl])["bbq_edited"]
    for cat in doc["files"]:
        assert len(bench.load_category(data_dir, cat).items) == len(BBQ().load_category(data_dir, cat).items)
    catalogue = {"bbq_edited": (bench.categories, bench.metric_names)}
    assert load_thresholds(example / "bbq_edited_thresholds.yaml", catalogue)["bbq_edited"]


@pytest.mark.parametrize("kind", ["stereotyped", "perfect"])
def test_bbq_native_copy_of_religion_gives_the_builtin_oracle_metrics(tmp_path, data_dir, kind):
    """``bias-audit oracle``: a ``format: bbq`` copy of Religion.jsonl and the built-in
    ``bbq -k Religion`` end with the same exit code and every metric, n and interval equal."""
    decl = native_copy(tmp_path / "copy", data_dir, {"Religion": None})
    gates = {"min_n": 30, "mode": "ci_three_way"}
    runs = {}
    for name, extra in (
        (
            "bbq",
            [
                "--thresholds",
                write_yaml(tmp_path / "bbq.yaml", {**gates, "bbq": BBQ_GATES}),
                "--",
                "-k",
                "Religion",
            ],
        ),
        ("mybbq", ["--bbq-dataset", decl, "--thresholds", thresholds_for(tmp_path, "mybbq")]),
    ):
        proc, results, _ = bias_audit_score(
            tmp_path, name, "--model-kind", kind, *extra, command="oracle", name=f"results_{name}"
        )
        assert results is not None, tail(proc)
        runs[name] = (proc.returncode, results["benchmarks"][name]["Religion"]["metrics"])
    assert runs["bbq"][0] == runs["mybbq"][0] == (GATE_FAILED if kind == "stereotyped" else OK)
    assert runs["bbq"][1] == runs["mybbq"][1] and runs["bbq"][1]


@pytest.fixture(scope="module")
def bbq_and_native_copy(tmp_path_factory, data_dir):
    """The built-in bbq on 16 items of Religion with tiny-random-gpt2, then a ``format: bbq``
    copy of exactly those rows of Religion.jsonl: (bbq run folder, copy's run folder, process)."""
    tmp = tmp_path_factory.mktemp("native")
    bbq_gates = write_yaml(tmp / "bbq_thresholds.yaml", {"min_n": 1, "bbq": BBQ_GATES})
    run(
        [
            "audits/test_bbq.py",
            "--thresholds",
            bbq_gates,
            "--model",
            "tiny-random-gpt2",
            "--limit",
            "16",
            "-k",
            "Religion",
            "--results-dir",
            tmp / "bbq",
            "--cache-dir",
            tmp / "cache",
            "--min-n",
            "1",
        ]
    )
    (bbq_run,) = [p for p in (tmp / "bbq").iterdir() if p.is_dir()]
    keep = {json.loads(line)["id"] for line in (bbq_run / "records" / "bbq" / "Religion.jsonl").open()}
    decl = native_copy(tmp / "copy", data_dir, {"Religion": keep})
    proc, copy_run = audit(
        tmp, decl, thresholds_for(tmp, "mybbq"), "--min-n", "1", "--no-cache", name="copy_run"
    )
    return bbq_run, copy_run, proc


def test_bbq_native_copy_scores_as_builtin_bbq(bbq_and_native_copy):
    """tiny-random-gpt2 on the same 16 Religion rows: the same prompts and predictions, the
    log-likelihoods within the engine's 1e-4 nats, every metric, n and interval equal."""
    bbq_run, copy_run, proc = bbq_and_native_copy
    assert proc.returncode in (OK, GATE_FAILED), tail(proc)
    want = {r["id"]: r for r in map(json.loads, (bbq_run / "records/bbq/Religion.jsonl").open())}
    got = {r["id"]: r for r in map(json.loads, (copy_run / "records/mybbq/Religion.jsonl").open())}
    assert set(got) == set(want) and len(got) == 16
    for item_id, r in got.items():
        assert r["predicted"] == want[item_id]["predicted"]
        assert r["prompt_sha256"] == want[item_id]["prompt_sha256"]
        assert max(abs(a - b) for a, b in zip(r["loglikelihoods"], want[item_id]["loglikelihoods"])) < 1e-4
    a = json.loads((bbq_run / "results.json").read_text())["benchmarks"]["bbq"]["Religion"]["metrics"]
    b = json.loads((copy_run / "results.json").read_text())["benchmarks"]["mybbq"]["Religion"]["metrics"]
    assert a.keys() == b.keys() and a
    for metric, m in a.items():
        for key in ("value", "n"):
            x, y = m[key], b[metric][key]
            assert (x is None and y is None) or math.isclose(x, y, abs_tol=FROM_COUNTS), metric
        assert m.get("ci") == b[metric].get("ci"), metric


# -- hostile data files stop the run at start-up (exit 4) ------------------------------------------


def _bad_bytes(data: Path) -> None:
    """Line 3's context holds bytes that are not UTF-8 (a file saved in another encoding)."""
    lines = data.read_bytes().split(b"\n")
    if data.suffix == ".csv":
        premise = list(csv.DictReader(data.open(encoding="utf-8", newline="")))[1]["premise"].encode()
        lines[2] = lines[2].replace(premise, b"\xe9" + premise, 1)
    else:
        lines[2] = lines[2].replace(b'"premise": "', b'"premise": "\xff\xfe', 1)
    data.write_bytes(b"\n".join(lines))


def _lone_surrogate(data: Path) -> None:
    """Line 3's context holds a JSON escape of half an emoji (valid JSON, not text)."""
    lines = data.read_text(encoding="utf-8").split("\n")
    lines[2] = lines[2].replace('"premise": "', '"premise": "\\ud83d ', 1)
    data.write_text("\n".join(lines), encoding="utf-8")


def _symlink_loop(data: Path) -> None:
    loop = data.with_name("loop")
    data.unlink()
    data.symlink_to(loop)
    loop.symlink_to(data)


def _header_only(data: Path) -> None:
    data.write_text(data.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("ext", "spoil", "expect"),
    [
        ("jsonl", _bad_bytes, "{data}:3: field 'premise' holds bytes that are not UTF-8"),
        ("csv", _bad_bytes, "{data}:3: column 'premise' holds bytes that are not UTF-8"),
        ("jsonl", _lone_surrogate, "{data}:3: field 'premise' holds a lone UTF-16 surrogate"),
        (
            "jsonl",
            _symlink_loop,
            "{decl}:6: field 'files.Sexual_orientation': data file data/sexual_orientation.jsonl",
        ),
        ("csv", _header_only, "{data}:2: no rows after the header"),
        ("jsonl", lambda data: data.write_bytes(b""), "{data}:1: empty file (no rows)"),
    ],
    ids=[
        "bad-bytes-jsonl",
        "bad-bytes-csv",
        "lone-surrogate",
        "symlink-loop",
        "header-only-csv",
        "empty-jsonl",
    ],
)
def test_hostile_data_files_exit_4_at_startup_naming_file_line_and_field(
    tmp_path, data_dir, ext, spoil, expect
):
    """``bias-audit oracle``: each data file a declaration names is read to the last row before
    anything is scored; bytes that are not UTF-8, a lone surrogate, a symbolic link loop or a file
    without rows (a header-only CSV as a 0-byte JSONL) is exit 4 naming the file, the line and
    the field, never an internal error (exit 3) or categories of n = 0."""
    decl = make_bbq_copy(tmp_path / "copy", data_dir, ext=ext, every=37)
    data = tmp_path / "copy" / "data" / f"sexual_orientation.{ext}"
    spoil(data)
    proc, results, _ = bias_audit_score(
        tmp_path,
        "bbq_renamed",
        "--model-kind",
        "perfect",
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, "bbq_renamed"),
        command="oracle",
    )
    assert proc.returncode == USAGE_ERROR and results is None, tail(proc)
    assert expect.format(data=data, decl=decl) in proc.stderr, proc.stderr[-2000:]
    assert "internal error" not in proc.stderr


def test_a_lone_surrogate_stops_bias_audit_run_before_scoring(tmp_path, data_dir):
    """Through ``bias-audit run`` with a model: exit 4 at start-up, no run folder (it was exit 3
    after every category had been scored, writing the records)."""
    decl = make_bbq_copy(tmp_path / "copy", data_dir, every=37)
    data = tmp_path / "copy" / "data" / "sexual_orientation.jsonl"
    _lone_surrogate(data)
    proc, results, _ = bias_audit_score(
        tmp_path,
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, "bbq_renamed"),
        "--model",
        "tiny-random-gpt2",
        command="run",
    )
    assert proc.returncode == USAGE_ERROR and results is None, tail(proc)
    assert f"{data}:3: field 'premise' holds a lone UTF-16 surrogate" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda d: d.update(name="b" * 300), ":1: field 'name': 300 characters: at most 64"),
        (
            lambda d: d["files"].update({"R" * 300: d["files"]["Religion"]}),
            ":7: field 'files.RRRR",
        ),
    ],
    ids=["name", "category"],
)
def test_a_name_too_long_for_a_file_is_refused_up_front(tmp_path, data_dir, edit, expect):
    """A 300-character name or category would name the run's files (255 bytes at most): exit 4
    from the declaration's line, before scoring (it was ``File name too long`` late)."""
    decl = _break(make_bbq_copy(tmp_path / "copy", data_dir, every=37), edit)
    name = yaml.safe_load(decl.read_text())["name"]
    proc, results, _ = bias_audit_score(
        tmp_path,
        name,
        "--model-kind",
        "perfect",
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, name),
        command="oracle",
    )
    assert proc.returncode == USAGE_ERROR and results is None, tail(proc)
    assert f"{decl}{expect}" in proc.stderr, proc.stderr[-2000:]


# -- the option and the selection ------------------------------------------------------------------


def test_declarations_come_from_the_environment_then_the_flags(monkeypatch, tmp_path):
    """``AUDIT_BBQ_DATASETS`` (os.pathsep-separated) gives the declarations the flags add to,
    for the audit run and for ``bias-audit score``/``oracle`` alike."""
    from audit_harness.cli import build_parser, declarations
    from audit_harness.options import SUITE, default_of

    monkeypatch.setenv("AUDIT_BBQ_DATASETS", os.pathsep.join(["a.yaml", "", "b.yaml"]))
    assert default_of(SUITE["--bbq-dataset"]) == ["a.yaml", "b.yaml"]
    ns = build_parser("score").parse_args(
        ["score", "x", "--predictions", "p", "--prediction-field", "f", "--bbq-dataset", "c.yaml"]
    )
    assert declarations(ns) == ["a.yaml", "b.yaml", "c.yaml"]
    monkeypatch.delenv("AUDIT_BBQ_DATASETS")
    assert default_of(SUITE["--bbq-dataset"]) is None


def test_keyword_selection_reaches_the_declared_tests(tmp_path):
    """``-k`` selects a declared dataset's gates as a built-in's, before collection (the start-up
    checks read only what is selected)."""
    from audit_harness.selection import selected_gate_ids

    ids = {"bbq": ["Age-diff_bias_ambig"], "team": ["Age-diff_bias_ambig", "SES-diff_bias_ambig"]}
    assert selected_gate_ids(REPO / "audits", ["audits"], REPO, "team and SES", ids) == {
        "team": ["SES-diff_bias_ambig"]
    }
    only = ["audits/test_declared.py::TestDeclared::test_team"]
    assert selected_gate_ids(REPO / "audits", only, REPO, None, ids) == {"team": ids["team"]}
    assert selected_gate_ids(REPO / "audits", ["audits/test_bbq.py"], REPO, None, ids) == {"bbq": ids["bbq"]}
