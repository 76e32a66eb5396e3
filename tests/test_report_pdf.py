"""report.pdf (``bias-audit report RUN_DIR --pdf``): a real run's report printed by headless
Chromium, read back with poppler (pdftotext, pdfimages, pdftoppm): the verdict, the signature block
and the audited system on the first page, every benchmark from a page of its own with its chart,
and a clear error where Chromium is missing. Skipped where chromium or poppler-utils is missing,
except under ``CI=true``, where that fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report_html import audit, chromium_or_skip

from audit_harness import cli
from audit_harness.report import terminal
from audit_harness.report.results import ResultsDocument

META = """\
system_name: Acme Support Assistant
system_version: "2.3.0"
intended_use: Answering customer questions about Acme products, in English.
responsible_person: Jane Doe
organisation: Acme GmbH
training_data_cutoff: 2024-06-30
"""


def poppler_or_skip(tool: str) -> str:
    exe = shutil.which(tool)
    if exe:
        return exe
    if os.environ.get("CI"):
        pytest.fail(f"CI=true but {tool} is not installed (.ci/run installs poppler-utils)", pytrace=False)
    pytest.skip(f"{tool} not installed (apt-get install poppler-utils); CI installs it")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory, data_dir) -> Path:
    """A real run of two benchmarks with audit metadata (no PDF yet)."""
    folder = tmp_path_factory.mktemp("pdf")
    meta = folder / "meta.yaml"
    meta.write_text(META)
    return audit(
        folder,
        data_dir,
        # Race_x_SES: among the longest ids of the packaged gates (the PDF must keep them whole).
        "(test_bbq and (Religion or Race_x_SES)) or (test_crows_pairs and (religion or overall))",
        "--audit-meta",
        str(meta),
    )


@pytest.fixture(scope="module")
def pdf(run_folder) -> Path:
    chromium_or_skip()
    assert cli.main(["report", str(run_folder), "--pdf"]) == 0
    path = run_folder / "report.pdf"
    assert path.read_bytes().startswith(b"%PDF")
    return path


def pdf_text(pdf: Path) -> str:
    """The PDF's text layer as pdftotext gives it (lines as printed, pages split by form feeds)."""
    return subprocess.run(
        [poppler_or_skip("pdftotext"), str(pdf), "-"], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def pages(pdf: Path) -> list[str]:
    """The text of each page (pdftotext separates pages with form feeds), whitespace collapsed."""
    return [" ".join(page.split()) for page in pdf_text(pdf).split("\f") if page.strip()]


def test_every_gate_id_the_terminal_prints_can_be_found_in_the_pdf(pdf, run_folder):
    # A reviewer searches the PDF for the id the terminal printed: each must be on one line of
    # the text layer, not wrapped at its "[" or "-" (pdftotext drops a line-end hyphen).
    results = ResultsDocument.read(run_folder)
    found = (re.search(r"test_\w+\[[^\]]+\]", line) for line in terminal.gate_lines(results))
    printed = [m.group(0) for m in found if m]  # a gate's "to decide:" line names no test
    not_passed = [test for test, v in zip(printed, results["gates"]) if v["status"] != "pass"]
    assert any("Race_x_SES" in test for test in not_passed), not_passed  # a long id is among them
    lines = pdf_text(pdf).splitlines()
    missing = [test for test in not_passed if not any(test in line for line in lines)]
    assert not missing, missing


def test_no_heading_or_lone_row_ends_a_page(pdf):
    # A heading, the limitations box's title or the provenance table's first rows never end a
    # page with their content on the next.
    text = pages(pdf)
    for i, page in enumerate(text[:-1]):
        for heading in ("Limitations", "What this does not show", "Provenance", "Data files"):
            assert not page.endswith(heading), (i, page[-200:])
    (provenance,) = [p for p in text if "Provenance model " in p]
    assert "command line" in provenance and "platform" in provenance  # the table is on one page
    assert "--audit-meta" in provenance  # the option is not broken after its "--"


def test_the_pdf_shows_the_verdict_and_every_benchmark(pdf, run_folder):
    results = ResultsDocument.read(run_folder)
    text = " ".join(pages(pdf))
    outcome = results.outcome
    # A run of a few categories: the label says its scope is partial, as report.html does.
    assert outcome.label == "FAIL" and outcome.partial
    # pdftotext drops a hyphen that ends a line ("--min-n" wrapped after its first "-"): compare
    # with runs of hyphens as one.
    assert re.sub("-+", "-", f"FAIL on a partial scope {outcome.reason}.") in re.sub("-+", "-", text)
    for bench, info in results["benchmark_info"].items():
        assert info["title"] in text, bench
    assert text.count("Limitations What this does not show") == len(results["benchmarks"]) == 2
    assert (
        "Regulatory mapping" in text and "EU AI Act (Regulation (EU) 2024/1689): Annex IV, point 2(g)" in text
    )
    # The <details> are printed open: the protocol tables are on paper too.
    assert "protocol_version" in text


def test_the_first_page_has_the_signature_the_audited_system_and_the_verdict(pdf):
    first = pages(pdf)[0]
    order = [
        "Signature: Unsigned",
        "Audited system",
        "Acme Support Assistant",
        "Jane Doe",
        "2024-06-30",
        "FAIL",
    ]
    positions = [first.find(x) for x in order]
    assert -1 not in positions and positions == sorted(positions), list(zip(order, positions))


def test_every_benchmark_and_the_mapping_start_a_page(pdf, run_folder):
    results = ResultsDocument.read(run_folder)
    text = pages(pdf)
    starts = [info["title"] for info in results["benchmark_info"].values()] + ["Regulatory mapping"]
    found = []
    for heading in starts:
        (page,) = [i for i, p in enumerate(text) if p.startswith(heading)]
        found.append(page)
    assert len(set(found)) == len(starts) and 0 not in found, found


def test_the_charts_are_in_the_pdf(pdf):
    listing = subprocess.run(
        [poppler_or_skip("pdfimages"), "-list", str(pdf)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()[2:]
    widths = [int(line.split()[3]) for line in listing]
    assert len([w for w in widths if w > 300]) == 2, listing  # one chart per benchmark, whole


def test_the_first_page_renders(pdf, tmp_path):
    folder = Path(os.environ.get("BIAS_AUDIT_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            poppler_or_skip("pdftoppm"),
            "-png",
            "-r",
            "60",
            "-f",
            "1",
            "-l",
            "1",
            str(pdf),
            str(folder / "page"),
        ],
        check=True,
        timeout=60,
    )
    (png,) = folder.glob("page-*1.png")
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 20_000  # not a blank page


def test_a_missing_chromium_is_named_with_what_to_install(run_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("audit_harness.report.pdf.shutil.which", lambda name: None)
    assert cli.main(["report", str(run_folder), "--pdf", "--output-dir", str(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert "headless Chromium, which is not installed" in err and "apt-get install chromium" in err
    assert not (tmp_path / "report.pdf").exists()
