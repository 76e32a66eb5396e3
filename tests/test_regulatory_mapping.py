"""The regulatory mapping: the packaged file is valid for every benchmark of the suite; a bad
mapping names the file and the field; a run records the mapping it used, and the reports list
each clause with the gates that give evidence for it and their verdicts, and per benchmark its
limitations: what it does not show, its data licence and its contamination status for each
training-data cutoff case."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
import yaml
from test_report_html import audit

from audit_harness.benchmarks import registry
from audit_harness.compliance.mapping import (
    PACKAGED_MAPPING,
    RegulatoryMapping,
    contamination,
    load_mapping,
)
from audit_harness.errors import ConfigError
from audit_harness.report.html import render_html
from audit_harness.report.markdown import render_markdown
from audit_harness.report.results import ResultsDocument

REPO = Path(__file__).resolve().parents[1]
KNOWN = {name: tuple(b.metric_names) for name, b in registry().items()}


def packaged_doc() -> dict:
    return yaml.safe_load(PACKAGED_MAPPING.read_text())


def test_the_packaged_mapping_covers_every_benchmark_with_a_dated_release():
    mapping = load_mapping(known=KNOWN)
    assert mapping.file == "packaged"
    assert set(mapping.benchmarks) == set(KNOWN)
    for name, data in mapping.benchmarks.items():
        assert data.releases and all(r.published > date(2019, 1, 1) and r.source for r in data.releases), name
    # Both kinds are used, and every row names what it does not cover.
    kinds = {row.kind for c in mapping.clauses for row in c.rows}
    assert kinds == {"evidence", "context"}
    assert all(row.not_covered and row.evidence for c in mapping.clauses for row in c.rows)
    ids = [c.id for c in mapping.clauses]
    for wanted in ("annex-iv-2g", "art-10-2fg", "art-15-3", "measure-2-11", "600-1", "42001", "model-cards"):
        assert any(wanted in i for i in ids), wanted
    # The recorded form validates back to the same mapping.
    assert RegulatoryMapping.from_dict(json.loads(json.dumps(mapping.to_dict()))) == mapping


def test_winoqueer_v0_and_final_have_their_own_release():
    data = load_mapping().benchmarks["winoqueer"]
    assert data.release_for(["winoqueer/v0/winoqueer_benchmark.csv"]).published == date(2022, 6, 23)
    assert data.release_for(["winoqueer/data/winoqueer_final.csv"]).published == date(2023, 6, 26)


def edited(tmp_path: Path, edit) -> Path:
    doc = packaged_doc()
    edit(doc)
    path = tmp_path / "mapping.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "edit, field, problem",
    [
        (
            lambda d: d["clauses"][1]["rows"][0].update(kind="proof"),
            "clauses[1].rows[0].kind",
            "evidence or context",
        ),
        (
            lambda d: d["clauses"][0]["rows"][0].update(benchmarks=["bbqq"]),
            "clauses[0].rows[0].benchmarks",
            "unknown name 'bbqq'",
        ),
        (
            lambda d: d["clauses"][2]["rows"][0].update(metrics=["acc_disambig", "bias_scor"]),
            "clauses[2].rows[0].metrics",
            "unknown name 'bias_scor'",
        ),
        (
            lambda d: d["clauses"][3]["rows"][0].pop("not_covered"),
            "clauses[3].rows[0].not_covered",
            "missing",
        ),
        (lambda d: d["clauses"][0].update(clause="x"), "clauses[0].clause", "unknown field"),
        (lambda d: d["clauses"][4].update(id=d["clauses"][0]["id"]), "clauses[4].id", "listed twice"),
        (
            lambda d: d["benchmarks"]["bbq"]["releases"][0].update(published="2021-10"),
            "benchmarks.bbq.releases[0].published",
            "not a date YYYY-MM-DD",
        ),
        (lambda d: d["benchmarks"].update(wino={"releases": []}), "benchmarks.wino", "unknown benchmark"),
        (lambda d: d.update(version=2), "version", "must be 1"),
    ],
)
def test_a_bad_mapping_names_the_file_and_the_field(tmp_path, edit, field, problem):
    path = edited(tmp_path, edit)
    with pytest.raises(ConfigError) as e:
        load_mapping(path, KNOWN)
    assert str(e.value).startswith(f"--regulatory-mapping {path}: {field}: "), str(e.value)
    assert problem in str(e.value)


def test_a_bad_mapping_stops_the_run_with_a_usage_error(tmp_path, data_dir):
    path = edited(tmp_path, lambda d: d["clauses"][1]["rows"][0].update(kind="proof"))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "audits", "--model", "tiny-random-gpt2", "--data-dir", str(data_dir)]
        + ["--results-dir", str(tmp_path / "r"), "-p", "no:cacheprovider", "--regulatory-mapping", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"--regulatory-mapping {path}: clauses[1].rows[0].kind: must be evidence or context" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_contamination_status_by_date():
    published = date(2021, 10, 15)
    assert contamination(published, date(2024, 6, 30)).status == "before"
    assert contamination(published, published).status == "before"  # the same day: may be in it
    assert contamination(published, date(2021, 10, 14)).status == "after"
    assert contamination(published, None).status == "unknown"
    assert contamination(None, date(2024, 6, 30)).status == "unknown"
    assert "may be in the training data" in contamination(published, date(2024, 6, 30)).text
    assert "not in the training data by date" in contamination(published, date(2020, 1, 1)).text
    assert "no training-data cutoff given" in contamination(published, None).text


# --- a real run with its own mapping -------------------------------------------------------------
#: A clause no gate of the run can speak to (KGQuiz is not selected).
KGQUIZ_ONLY = {
    "id": "test-kgquiz-only",
    "framework": "Test framework",
    "reference": "Clause 9",
    "title": "A clause only KGQuiz gates give evidence for.",
    "rows": [
        {
            "kind": "evidence",
            "benchmarks": ["kgquiz"],
            "metrics": "all",
            "evidence": "Knowledge floors.",
            "not_covered": "Everything else.",
        }
    ],
}


@pytest.fixture(scope="module")
def mapped_run(tmp_path_factory, data_dir) -> tuple[Path, Path]:
    """A run of BBQ and CrowS-Pairs with the packaged mapping plus a KGQuiz-only clause."""
    folder = tmp_path_factory.mktemp("mapping")
    mapping = edited(folder, lambda d: d["clauses"].append(KGQUIZ_ONLY))
    run = audit(
        folder,
        data_dir,
        "(test_bbq and Religion) or (test_crows_pairs and (religion or overall))",
        "--regulatory-mapping",
        str(mapping),
    )
    return run, mapping


def section(md: str, heading: str) -> str:
    """The Markdown from ``heading`` to the next heading of its level or above."""
    start = md.index(heading)
    level = heading.split(" ")[0]
    ends = [md.find(f"\n{'#' * n} ", start + len(heading)) for n in range(1, len(level) + 1)]
    ends = [e for e in ends if e != -1]
    return md[start : min(ends) if ends else len(md)]


def test_the_run_records_the_mapping_it_used(mapped_run):
    run, mapping = mapped_run
    results = json.loads((run / "results.json").read_text())
    recorded = results["regulatory_mapping"]
    assert recorded == load_mapping(mapping, KNOWN).to_dict()
    assert recorded["file"] == str(mapping) and recorded["clauses"][-1]["id"] == "test-kgquiz-only"


def test_each_clause_lists_its_gates_and_their_verdicts(mapped_run):
    run, mapping = mapped_run
    results = json.loads((run / "results.json").read_text())
    gates = results["gates"]
    info = results["benchmark_info"]  # a row of `metrics: bias` reads each benchmark's bias metrics
    assert {g["benchmark"] for g in gates} == {"bbq", "crows_pairs"}
    # verdicts of several kinds to see (ci_three_way leaves the tiny model's few items inconclusive
    # where the point-mode gates passed them)
    statuses = {g["status"] for g in gates}
    assert "fail" in statuses and statuses & {"pass", "inconclusive"}
    md = (run / "report.md").read_text()
    part = section(md, "## Regulatory mapping")
    assert f"Mapping: `{mapping}` (sha256 `{results['regulatory_mapping']['sha256'][:16]}…`)" in part
    doc = load_mapping(mapping, KNOWN)
    for clause in doc.clauses:
        text = section(part, f"### {clause.framework}: {clause.reference}")
        assert clause.title in text
        evidence = [
            g
            for g in gates
            if any(r.kind == "evidence" and r.covers(g, info[g["benchmark"]]) for r in clause.rows)
        ]
        if evidence:
            assert f"**{len(evidence)} gate(s) of this run give evidence for this clause.**" in text
        else:
            assert "**No gate of this run gives evidence for this clause" in text, clause.id
        blocks = text.split("\n- *")[1:]  # one per row, in order
        assert len(blocks) == len(clause.rows), clause.id
        for row, block in zip(clause.rows, blocks):
            assert block.startswith(f"{row.kind}* (") and row.not_covered in block
            for g in (g for g in gates if row.covers(g, info[g["benchmark"]])):
                # The gate's verdict is listed with its test id, on its benchmark's line.
                line = next(x for x in block.splitlines() if x.startswith(f"  - gates: {g['benchmark']} ("))
                verdict = line.split(f"{g['status'].upper()} ", 1)[1].split(";")[0]
                assert g["test_id"] in verdict.split(", "), (clause.id, g["test_id"], line)
    # The clause no gate of this run speaks to says so; the Art. 10 clause has context only.
    kg = section(part, "### Test framework: Clause 9")
    assert "**No gate of this run gives evidence for this clause.**" in kg and "gates: none in this run" in kg
    art10 = section(part, "### EU AI Act (Regulation (EU) 2024/1689): Article 10(2)(f) and (g)")
    context = [g for g in gates if g["metric"].startswith(("bias_score", "diff_bias"))]
    assert len(context) == 4  # bbq's two diff-bias gates, crows_pairs' two categories
    assert (
        f"**No gate of this run gives evidence for this clause; {len(context)} gate(s) give context only.**"
        in art10
    )
    # The HTML report shows the same clauses and verdicts.
    html = (run / "report.html").read_text()
    assert html.index('id="regulatory-mapping"') < html.index('class="benchmark"')
    for clause in doc.clauses:
        assert f'id="clause-{clause.id}"' in html
    assert "No gate of this run gives evidence for this clause." in html
    fail = next(g for g in gates if g["status"] == "fail")
    block = html[html.index('id="clause-eu-ai-act-annex-iv-2g"') :]
    block = block[: block.index("</table>")]
    assert 'class="status s-fail">FAIL</span> ' in block and fail["test_id"] in block


@pytest.mark.parametrize(
    "cutoff, status, text",
    [
        (
            "2024-06-30",
            "before",
            "before: published 2021-10-15, before the training-data cutoff 2024-06-30: may be in the training data",
        ),
        (
            "2021-01-01",
            "after",
            "after: published 2021-10-15, after the training-data cutoff 2021-01-01: not in the training data by date",
        ),
        (None, "unknown", "unknown: no training-data cutoff given"),
    ],
)
def test_limitations_show_licence_and_contamination_for_each_cutoff(mapped_run, cutoff, status, text):
    run, _ = mapped_run
    results = ResultsDocument.read(run)
    doc = copy.deepcopy(dict(results))
    if cutoff:
        doc["audit_meta"] = {
            "system_name": "S",
            "system_version": "1",
            "intended_use": "u",
            "responsible_person": "p",
            "organisation": "o",
            "training_data_cutoff": cutoff,
            "notes": None,
            "file": "meta.yaml",
            "sha256": "0" * 64,
        }
    md = render_markdown(doc)
    bbq = section(md, "### bbq: limitations")
    assert "What this does not show:" in bbq and "US English only" in bbq
    read = sorted(p for p, d in doc["data_files"].items() if "bbq" in d["benchmarks"])
    assert read == ["bbq/data/Religion.jsonl", "bbq/supplemental/additional_metadata.csv"]
    assert "- data licence: CC-BY-4.0 (nyu-mll/BBQ at bea11bd97d; 2 file(s) read)" in bbq
    assert f"- contamination: {text}" in bbq
    assert "(publication date: arXiv 2110.08193 v1 (15 Oct 2021)" in bbq
    crows = section(md, "### crows_pairs: limitations")
    assert "- data licence: CC-BY-SA-4.0 (nyu-mll/crows-pairs at 8aaac11c48; 1 file(s) read)" in crows
    # CrowS-Pairs (2020) is older than both cutoffs, so "before" even where BBQ (2021) is "after".
    if cutoff:
        assert (
            f"- contamination: before: published 2020-09-30, before the training-data cutoff {cutoff}"
            in crows
        )
    else:
        assert "- contamination: unknown: no training-data cutoff given" in crows
    html = render_html(doc)
    limits = html[html.index('id="bench-bbq"') :]
    limits = limits[limits.index("<h3>Limitations</h3>") : limits.index("</section>")]
    assert "CC-BY-4.0 (nyu-mll/BBQ at bea11bd97d; 2 file(s) read)" in limits
    assert f'<span class="contamination-{status}">{text}' in limits


def test_a_results_file_without_a_recorded_mapping_renders_the_packaged_one(mapped_run):
    run, _ = mapped_run
    doc = dict(ResultsDocument.read(run))
    doc.pop("regulatory_mapping")
    md = render_markdown(doc)
    assert "Mapping: this results file records none (it predates them); the packaged mapping" in md
    assert "Test framework" not in md


def test_a_clause_names_what_did_not_pass_and_counts_many_passes():
    from audit_harness.report.regulatory import NAMED_PASSES, _gate_groups, verdict_line

    gates = [
        {
            "benchmark": "bbq",
            "category": f"C{i}",
            "metric": "acc_disambig",
            "status": "pass",
            "test_id": f"p{i}",
        }
        for i in range(NAMED_PASSES + 2)
    ] + [
        {"benchmark": "bbq", "category": "Age", "metric": "bias_score", "status": s, "test_id": s}
        for s in ("fail", "undefined")
    ]
    (group,) = _gate_groups(gates)
    line = verdict_line(group)
    assert (
        line
        == f"bbq ({NAMED_PASSES + 4} gates): FAIL fail; UNDEFINED undefined; PASS {NAMED_PASSES + 2} gates"
    )
    few = _gate_groups(gates[:NAMED_PASSES])
    assert verdict_line(few[0]).endswith("PASS " + ", ".join(f"p{i}" for i in range(NAMED_PASSES)))
