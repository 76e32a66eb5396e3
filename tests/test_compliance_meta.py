"""--audit-meta: the audited system's description, validated (a bad field stops the run with exit
4, naming the file and the field), recorded in results.json and shown first in both reports,
after the signature block that signer.json in the run folder gives."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest
from test_report_html import audit

from audit_harness import cli
from audit_harness.compliance.meta import FIELDS, AuditMeta, load_audit_meta
from audit_harness.compliance.signer import Signer
from audit_harness.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
system_name: Acme Support Assistant
system_version: "2.3.0"
intended_use: Answering customer questions about Acme products, in English.
responsible_person: Jane Doe
organisation: Acme GmbH
training_data_cutoff: 2021-12-31
notes: Fine-tuned from an open-weights model.
"""


def write(tmp_path: Path, text: str, name: str = "meta.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_is_read_with_its_hash(tmp_path):
    path = write(tmp_path, GOOD)
    meta = load_audit_meta(path)
    assert meta.system_name == "Acme Support Assistant" and meta.system_version == "2.3.0"
    assert meta.training_data_cutoff == date(2021, 12, 31)
    assert meta.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and meta.file == str(path)
    assert AuditMeta.from_dict(json.loads(json.dumps(meta.to_dict()))) == meta


def test_the_optional_fields_may_be_left_out(tmp_path):
    text = "".join(line + "\n" for line in GOOD.splitlines() if not line.startswith(("notes", "training")))
    meta = load_audit_meta(write(tmp_path, text))
    assert meta.training_data_cutoff is None and meta.notes is None


@pytest.mark.parametrize(
    "change, field, problem",
    [
        (("system_name: Acme Support Assistant", "system_nmae: Acme"), "system_nmae", "unknown field"),
        (("organisation: Acme GmbH\n", ""), "organisation", "is missing"),
        (("responsible_person: Jane Doe", "responsible_person: ''"), "responsible_person", "is empty"),
        (('system_version: "2.3.0"', "system_version: 2.30"), "system_version", "must be text, got a number"),
        (("notes: Fine-tuned from an open-weights model.", "notes: [a, b]"), "notes", "got a list"),
        (("2021-12-31", "2021-13-01"), "training_data_cutoff", "is not a date"),
        (("2021-12-31", "December 2021"), "training_data_cutoff", "is not a date"),
    ],
)
def test_a_bad_field_is_named_with_the_file(tmp_path, change, field, problem):
    old, new = change
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ConfigError) as e:
        load_audit_meta(path)
    assert f"--audit-meta {path}" in str(e.value) and repr(field) in str(e.value), str(e.value)
    assert problem in str(e.value)


@pytest.mark.parametrize(
    "text, problem",
    [("- a list\n", "expected a mapping"), ("system_name: [unclosed\n", "not a YAML file")],
)
def test_a_file_that_is_not_a_mapping_is_refused(tmp_path, text, problem):
    with pytest.raises(ConfigError, match=problem):
        load_audit_meta(write(tmp_path, text))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"--audit-meta .*nope\.yaml: cannot read it"):
        load_audit_meta(tmp_path / "nope.yaml")


def test_every_field_has_a_report_label():
    from audit_harness.compliance.meta import LABELS

    assert list(LABELS) == list(FIELDS)


@pytest.mark.parametrize("entry", ["pytest", "bias-audit"])
def test_a_bad_file_stops_the_run_with_a_usage_error(tmp_path, data_dir, entry):
    """End to end, as a user runs it: exit 4, one line naming the file and the field, no run
    folder, and no model loaded."""
    bad = write(tmp_path, GOOD.replace("2021-12-31", "2021-02-30"))
    head = ["-m", "pytest", "audits"] if entry == "pytest" else ["-m", "audit_harness.cli", "run"]
    proc = subprocess.run(
        [sys.executable, *head, "--model", "tiny-random-gpt2", "--data-dir", str(data_dir)]
        + ["--results-dir", str(tmp_path / "results"), "-p", "no:cacheprovider", "--audit-meta", str(bad)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"--audit-meta {bad}: field 'training_data_cutoff' is not a date YYYY-MM-DD: '2021-02-30'" in (
        proc.stdout + proc.stderr
    )
    assert not (tmp_path / "results").exists()


# --- a real run --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def meta_run(tmp_path_factory, data_dir) -> Path:
    folder = tmp_path_factory.mktemp("meta")
    meta = write(folder, GOOD)
    return audit(folder, data_dir, "test_bbq and Religion", "--audit-meta", str(meta))


def test_the_metadata_is_recorded_in_results_json(meta_run):
    results = json.loads((meta_run / "results.json").read_text())
    recorded = results["audit_meta"]
    meta = load_audit_meta(recorded["file"])
    assert recorded == meta.to_dict()
    assert recorded["training_data_cutoff"] == "2021-12-31" and recorded["responsible_person"] == "Jane Doe"
    assert results["options"]["audit_meta"] == recorded["file"]


def test_the_reports_show_the_signature_then_the_metadata_then_the_verdict(meta_run):
    md = (meta_run / "report.md").read_text()
    order = [
        "# Bias audit report: tiny-random-gpt2",
        "**Signature:** Unsigned",
        "## Audited system",
        "| System | Acme Support Assistant |",
        "| Training-data cutoff | 2021-12-31 |",
        "| Notes | Fine-tuned from an open-weights model. |",
        "**Verdict: FAIL",
        "## Gates",
    ]
    positions = [md.index(x) for x in order]
    assert positions == sorted(positions), list(zip(order, positions))
    html = (meta_run / "report.html").read_text()
    order = ['id="signature"', "Unsigned", 'id="audit-meta"', "Acme Support Assistant", 'id="verdict"']
    positions = [html.index(x) for x in order]
    assert positions == sorted(positions), list(zip(order, positions))
    assert html.index("<body>") < html.index('id="signature"') < html.index('class="benchmark"')


def test_a_signed_run_folder_names_its_signer_first(meta_run, tmp_path, capsys):
    """``bias-audit sign`` writes signer.json and renders the reports again through
    ``bias-audit report``: the reports then name the signer, key and how to check it. A
    signer.json without manifest.sig beside it (copied into an unsigned folder) is not a
    signature, and the reports say the folder is not signed."""
    run = tmp_path / meta_run.name
    shutil.copytree(meta_run, run)
    Signer("Jane Doe", "2026-12-02T08:00:00Z", "ab" * 32).write(run)
    assert cli.main(["report", str(run)]) == 0
    not_signed = "NOT SIGNED: signer.json names Jane Doe (2026-12-02T08:00:00Z), but the run folder has no manifest.sig"
    for name in ("report.md", "report.html"):
        text = (run / name).read_text()
        assert not_signed in text and "Signed by" not in text, name
    (run / "manifest.sig").write_text("c2ln\n")  # what sign leaves; verify checks it, not the report
    assert cli.main(["report", str(run)]) == 0
    line = (
        f"Signed by Jane Doe on 2026-12-02T08:00:00Z, Ed25519 key sha256:{'ab' * 32}. This line is part "
        "of what was signed, not a proof of it: check with `bias-audit verify RUN_DIR --public-key PUB` "
        "before relying on it"
    )
    md = (run / "report.md").read_text()
    assert f"**Signature:** {line}" in md and md.index(line) < md.index("## Audited system")
    assert "Unsigned" not in md and "NOT SIGNED" not in md
    html = (run / "report.html").read_text()
    assert "Signed by Jane Doe on 2026-12-02T08:00:00Z" in html
    assert "<code>bias-audit verify RUN_DIR --public-key PUB</code>" in html
    assert html.index("Signed by Jane Doe") < html.index('id="audit-meta"')
    # A signer.json that is not a signer record: one line naming the file and field, exit 4.
    (run / "signer.json").write_text('{"name": "Jane Doe", "date": ""}')
    capsys.readouterr()
    assert cli.main(["report", str(run)]) == 4
    assert f"{run / 'signer.json'}: field 'date' must be a non-empty string" in capsys.readouterr().err
