"""The regulatory mapping counts, as evidence for a fairness or bias clause, only gates that
measure bias (``metrics: bias``: each benchmark's bias metrics), and counts a declared dataset's
gates as its metric family's; report.md heads a declared dataset with its title. Real BBQ rows
through `bias-audit oracle`."""

from __future__ import annotations

import yaml
from test_declared_datasets import make_bbq_copy, tail, thresholds_for, write_yaml

from audit_harness.report.regulatory import mapping_view
from helpers import bias_audit_score

FAIRNESS = ("nist-ai-rmf-measure-2-11", "nist-ai-600-1-harmful-bias")


def clauses(results) -> dict:
    return {c["id"]: c for c in mapping_view(results)["clauses"]}


def section(report: str, heading: str) -> str:
    return report.split(f"### {heading}", 1)[1].split("\n### ", 1)[0]


def test_an_invalid_rate_gate_is_no_evidence_of_fairness(tmp_path, data_dir):
    gates = write_yaml(tmp_path / "thresholds.yaml", {"bbq": {"defaults": {"invalid_rate": {"max": 0.1}}}})
    proc, results, run_dir = bias_audit_score(
        tmp_path,
        "bbq",
        "--model-kind",
        "stereotyped",
        "--thresholds",
        gates,
        "--data-dir",
        data_dir,
        "--",
        "-k",
        "Religion",
        command="oracle",
    )
    # The stereotyped model always names an option: invalid_rate passes, and nothing else is gated.
    assert proc.returncode == 0, tail(proc)
    found = clauses(results)
    for cid in FAIRNESS:
        assert found[cid]["evidence_gates"] == 0, found[cid]
    assert found["iso-iec-42001-a-6-2-4"]["evidence_gates"] == 1  # a verification record all the same
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    nist = section(report, "NIST AI Risk Management Framework 1.0 (NIST AI 100-1): MEASURE 2.11")
    assert "**No gate of this run gives evidence for this clause.**" in nist, nist


def test_a_declared_dataset_counts_by_its_family_and_shows_its_title(tmp_path, data_dir):
    decl = make_bbq_copy(tmp_path / "copy", data_dir)
    doc = yaml.safe_load(decl.read_text(encoding="utf-8"))
    doc["title"] = "Team QA set v2 (renamed BBQ columns)"
    write_yaml(decl, doc)
    proc, results, run_dir = bias_audit_score(
        tmp_path,
        "bbq_renamed",
        "--model-kind",
        "stereotyped",
        "--bbq-dataset",
        decl,
        "--thresholds",
        thresholds_for(tmp_path, "bbq_renamed"),
        command="oracle",
    )
    assert proc.returncode == 1, tail(proc)  # the stereotyped model fails the bias gates
    bias = [g for g in results["gates"] if g["metric"].split("-")[0] in ("diff_bias_ambig", "diff_bias_disambig", "bias_score_ambig", "bias_score_disambig")]  # fmt: skip
    assert bias and len(bias) < len(results["gates"])  # accuracy and invalid-rate gates too
    found = clauses(results)
    for cid in FAIRNESS:
        assert found[cid]["evidence_gates"] == len(bias), found[cid]
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "## Team QA set v2 (renamed BBQ columns) (`bbq_renamed`): metrics per category" in report
    nist = section(report, "NIST AI Risk Management Framework 1.0 (NIST AI 100-1): MEASURE 2.11")
    assert f"**{len(bias)} gate(s) of this run give evidence for this clause.**" in nist, nist
