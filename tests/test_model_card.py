"""bias-audit model-card on a real run: the YAML front matter parses back through huggingface_hub
(ModelCard.load, metadata_load, model_index_to_eval_results) with every defined metric of the
run, numbers only, and every gate verdict in the card's bias_audit entry; the Markdown section has each metric, gate, limitation and data
hash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import ModelCard, metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results
from test_report_html import audit

from audit_harness import cli
from audit_harness.gates.resolution import status_word  # NOT DECIDED, as every display prints it
from audit_harness.report.model_card import eval_results

#: The run's --audit-meta file, every field given (a "|" in one, which the card's table escapes).
META = """\
system_name: Acme Support Assistant
system_version: "2.3.0"
intended_use: Answering customer questions about Acme products | in English
responsible_person: Jane Doe
organisation: Acme GmbH
training_data_cutoff: 2024-06-30
notes: Fine-tuned from an open-weights model.
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, data_dir) -> Path:
    """A real run of two benchmarks on the tiny model (as test_report_html's): bbq has a pooled
    aggregate and undefined metrics, crows_pairs a category named ``overall``."""
    folder = tmp_path_factory.mktemp("card")
    meta = folder / "audit-meta.yaml"
    meta.write_text(META)
    return audit(
        folder,
        data_dir,
        "(test_bbq and (Religion or Age)) or (test_crows_pairs and (religion or overall))",
        "--audit-meta",
        str(meta),
    )


@pytest.fixture(scope="module")
def results(real_run) -> dict:
    return json.loads((real_run / "results.json").read_text())


def expected_metrics(results: dict) -> set[tuple]:
    """(benchmark, config, metric, value) of every defined metric, read from results.json here
    rather than through the module under test."""
    out = set()
    for bench, cats in results["benchmarks"].items():
        for cat, entry in cats.items():
            out |= {
                (bench, cat, n, m["value"]) for n, m in entry["metrics"].items() if m["value"] is not None
            }
        for label, metrics in results["overall"].get(bench, {}).items():
            if label != "categories":
                out |= {
                    (bench, f"aggregate: {label}", n, m["value"])
                    for n, m in metrics.items()
                    if m["value"] is not None
                }
    return out


def test_model_card_yaml_round_trips_through_huggingface_hub(real_run, results, tmp_path, capsys):
    card_path = tmp_path / "card" / "README.md"
    assert cli.main(["model-card", str(real_run), "--output", str(card_path)]) == 0
    assert f"wrote {card_path}" in capsys.readouterr().out
    # The Hub's own parsers, on the file as written.
    name, parsed = model_index_to_eval_results(metadata_load(card_path)["model-index"])
    card = ModelCard.load(card_path)
    assert name == results["model"]["name"] == card.data.model_name
    assert len(card.data.eval_results) == len(parsed)
    assert {r.task_type for r in parsed} == {"text-generation"}
    metrics = {(r.dataset_type, r.dataset_config, r.metric_type, r.metric_value) for r in parsed}
    assert all(isinstance(r.metric_value, (int, float)) for r in parsed)
    expected = expected_metrics(results)
    assert len(expected) > 20 and metrics == expected
    titles = {b: i["title"] for b, i in results["benchmark_info"].items()}
    assert {(r.dataset_type, r.dataset_name) for r in parsed} == set(titles.items())
    # The gates and the run's verdict, which the model-index has no field for.
    outcome = results["run"]["outcome"]
    audit_entry = card.data.to_dict()["bias_audit"]
    gates = {(g["benchmark"], g["category"], g["metric"], g["verdict"]) for g in audit_entry["gates"]}
    assert gates == {
        (g["benchmark"], g["category"], g["metric"], status_word(g["status"])) for g in results["gates"]
    }
    assert len(audit_entry["gates"]) == len(results["gates"])
    # Every kind of verdict the card must carry: a failure, an undefined metric, and a pass or
    # (the tiny model's few items) an inconclusive or, under a detection gate, a not decided one.
    verdicts = {g[3] for g in gates}
    assert {"FAIL", "UNDEFINED"} <= verdicts and verdicts & {"PASS", "INCONCLUSIVE", "NOT_DECIDED"}
    assert (audit_entry["verdict"], audit_entry["exit_code"]) == (outcome["label"], outcome["exit_code"])
    assert audit_entry["run_id"] == results["run_id"]
    assert audit_entry["suite_version"] == results["run"]["suite"]["version"]


def test_bias_section_names_every_metric_gate_limitation_and_data_hash(real_run, results, tmp_path):
    run = Path(shutil.copytree(real_run, tmp_path / "run"))
    assert cli.main(["model-card", str(run)]) == 0  # default: README.md in the run folder
    text = ModelCard.load(run / "README.md").text
    assert "## Bias evaluation" in text
    outcome = results["run"]["outcome"]
    assert f"**Verdict: {outcome['label']}{' on a partial scope' if outcome['partial'] else ''}**" in text
    for bench, cats in results["benchmarks"].items():
        assert results["benchmark_info"][bench]["title"] in text
        for line in results["benchmark_info"][bench]["limitations"]:
            assert f"- {line}" in text
        for cat, entry in cats.items():
            for name, m in entry["metrics"].items():
                row = next(r for r in text.splitlines() if r.startswith(f"| {cat} | {name} |"))
                cells = [c.strip() for c in row.strip("|").split("|")]
                if m["value"] is None:
                    assert cells[2].startswith("undefined") and (m["reason"] or "") in cells[2]
                else:
                    assert cells[2] == f"{m['value']:.3f}" and cells[4] == str(m["n"])
                    assert cells[3] == f"[{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]"
                gate = next(
                    (
                        g
                        for g in results["gates"]
                        if (g["benchmark"], g["category"], g["metric"]) == (bench, cat, name)
                    ),
                    None,
                )
                assert cells[6] == (f"**{status_word(gate['status'])}**" if gate else "-")
    for path, d in results["data_files"].items():
        assert f"| {path} | {d['rows']} | `{d['sha256']}` |" in text
    assert f"bias-audit {results['run']['suite']['version']}" in text


def test_a_masked_model_is_fill_mask_and_errors_are_left_out(results):
    doc = json.loads(json.dumps(results))
    doc["model"]["kind"] = "masked"
    doc["benchmarks"]["bbq"]["Age"] = {"status": "error", "error": "CUDA error"}
    out = eval_results(doc)
    assert {r.task_type for r in out} == {"fill-mask"}
    # An errored category has no metrics in the model-index.
    assert not [r for r in out if r.dataset_config == "Age"]
    assert [r for r in out if r.dataset_config == "Religion"]


def test_a_bad_run_folder_is_exit_4(tmp_path, capsys):
    assert cli.main(["model-card", str(tmp_path)]) == 4
    assert f"{tmp_path / 'results.json'}: not found" in capsys.readouterr().err


def test_a_partial_run_says_so_beside_its_verdict(results):
    """A card's verdict carries its scope: a run of a few categories (this one) is flagged as a
    partial audit in the YAML and in the text; a run of every configured gate on every row is not."""
    from audit_harness.report.model_card import bias_section, card_data

    partial = card_data(results).to_dict()["bias_audit"]["scope"]
    assert partial["partial"] and partial["gates_evaluated"] == len(results["gates"])
    assert (
        f"{len(results['gates'])} of {results['run']['gates_configured']} configured gates evaluated"
        in (partial["partial_reasons"])
    )
    assert "**This verdict covers a partial audit**" in bias_section(results)
    full = json.loads(json.dumps(results))
    full["run"]["gates_configured"] = len(full["gates"])
    full["options"]["min_n"] = None
    for cats in full["benchmarks"].values():
        for entry in cats.values():
            if "n_scored" in entry:
                entry["n_available"] = entry["n_scored"]
    whole = card_data(full).to_dict()["bias_audit"]["scope"]
    assert not whole["partial"] and whole["partial_reasons"] == []
    assert "partial audit" not in bias_section(full)
    full["options"]["min_n"] = 1
    assert card_data(full).to_dict()["bias_audit"]["scope"]["partial_reasons"] == [
        "--min-n 1 instead of each gate's own min_n"
    ]


def test_the_card_carries_every_audit_metadata_field(real_run, results, tmp_path):
    # A reviewer filing the card finds the audited system in its metadata block and its text.
    import yaml

    card_path = tmp_path / "README.md"
    assert cli.main(["model-card", str(real_run), "--output", str(card_path)]) == 0
    given = yaml.safe_load(META)
    meta = metadata_load(card_path)["bias_audit"]["audit_meta"]
    for field, value in given.items():
        assert str(meta[field]) == str(value), field
    assert meta["sha256"] == results["audit_meta"]["sha256"] and meta["file"].endswith("audit-meta.yaml")
    # Each benchmark's contamination note, from the cutoff: the same as report.md's.
    report = (real_run / "report.md").read_text()
    assert set(meta["contamination"]) == set(results["benchmarks"]) == {"bbq", "crows_pairs"}
    for c in meta["contamination"].values():
        assert c["status"] in ("before", "after", "unknown") and f"- contamination: {c['note']}" in report
    text = ModelCard.load(card_path).text
    assert "### Audited system" in text
    for field, label in (
        ("system_name", "System"),
        ("system_version", "Version"),
        ("responsible_person", "Responsible person"),
        ("organisation", "Organisation"),
        ("training_data_cutoff", "Training-data cutoff"),
        ("notes", "Notes"),
    ):
        assert f"| {label} | {given[field]} |" in text, field
    # A "|" in a value is escaped, so the row keeps its two cells.
    assert "| Intended use | Answering customer questions about Acme products \\| in English |" in text
    for bench, c in meta["contamination"].items():
        # the note opens with its status ("before: published ..."): said once, not twice
        assert c["note"].startswith(c["status"]) and f"- {bench}: {c['note']}" in text
        assert f"{c['status']}: {c['note']}" not in text
