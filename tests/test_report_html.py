"""report.html: rendered from results.json alone, self-contained, escaped, and shown by a real
browser (headless Chromium) with the verdict, every benchmark section and loaded charts, without
any network request."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from audit_harness import cli
from audit_harness.report.html import render_html

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
# Without these flags Chromium reaches for the (closed) network and the GPU.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
#: Runs before </body> of the probed copy: writes each image's load state and every resource the
#: page fetched into the DOM, which --dump-dom then prints.
PROBE = """<script>
window.addEventListener('load', () => {
  const out = document.createElement('pre');
  out.id = 'probe';
  out.textContent = JSON.stringify({
    images: [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                                             width: i.naturalWidth})),
    resources: performance.getEntriesByType('resource').map(e => e.name)});
  document.body.appendChild(out);
});
</script>"""


def audit(tmp_path: Path, data_dir: Path, keyword: str, *extra: str) -> Path:
    """A real run of the audits selected by ``keyword`` on the tiny model (``extra``: further
    options, e.g. ``--audit-meta FILE``); its run folder."""
    results = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits",
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data_dir),
        "--limit",
        "8",
        "--min-n",
        "1",
        "--results-dir",
        str(results),
        "--bootstrap-resamples",
        "100",
        "-p",
        "no:cacheprovider",
        "--cache-dir",
        str(tmp_path / "cache"),
        "-k",
        keyword,
        *extra,
    ]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the shipped gates fail
    (run_dir,) = list(results.iterdir())
    return run_dir


@pytest.fixture(scope="module")
def two_benchmark_run(tmp_path_factory, data_dir) -> Path:
    """A real run of two benchmarks (a QA and a sentence-pair one) on the tiny model."""
    return audit(
        tmp_path_factory.mktemp("html"),
        data_dir,
        "(test_bbq and (Religion or Age)) or (test_crows_pairs and (religion or overall))",
    )


def test_report_html_is_complete_and_self_contained(two_benchmark_run):
    html = (two_benchmark_run / "report.html").read_text()
    results = json.loads((two_benchmark_run / "results.json").read_text())
    # The verdict comes first, before any benchmark.
    assert html.index('id="verdict"') < html.index('class="benchmark"')
    # A run of a few categories (-k): the label says the scope is partial.
    assert re.search(r'id="verdict-label">FAIL on a partial scope<', html)
    assert "<title>Bias audit: tiny-random-gpt2 (FAIL on a partial scope)</title>" in html
    for bench in ("bbq", "crows_pairs"):
        section = html[html.index(f'id="bench-{bench}"') :]
        for heading in (
            "Metrics and gates",
            "Invalid and out-of-choice answers",
            "Rows excluded",
            "What this does not show",
        ):
            assert heading in section.split('class="benchmark"')[0], (bench, heading)
    assert "A low bias score is not evidence that a model is unbiased" in html
    assert "US English only" in html and "mixes accuracy and bias" in html
    # One inline PNG chart per benchmark, each a real PNG.
    charts = re.findall(r'<img class="chart" src="data:image/png;base64,([^"]+)"', html)
    assert len(charts) == 2 and all(base64.b64decode(c).startswith(b"\x89PNG") for c in charts)
    # No network: no resource outside the document, and a policy that forbids fetching any.
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', html, re.I)
    assert "url(" not in html and "@import" not in html and "<script" not in html
    assert "default-src 'none'; img-src data:" in html
    # Provenance.
    model = results["model"]
    for text in (
        model["fingerprint"],
        model["dtype"],
        results["run"]["suite"]["git_commit"],
        results["run"]["thresholds_sha256"],
        results["run"]["started"],
        "bbq/data/Religion.jsonl",
        results["data_files"]["bbq/data/Religion.jsonl"]["sha256"],
        "seed 0; 8 to 72 per category (--limit 8;",
    ):
        assert str(text) in html, text
    assert results["environment"]["libraries"]["matplotlib"] in html
    for v in results["gates"]:
        assert f"test_{v['benchmark']}[{v['test_id']}]" in html.replace("<wbr>", "") or v["status"] == "pass"


def test_bias_audit_report_renders_the_same_reports_again(two_benchmark_run, tmp_path, capsys):
    assert cli.main(["report", str(two_benchmark_run), "--output-dir", str(tmp_path)]) == 0
    for name in ("report.html", "report.md"):
        assert (tmp_path / name).read_text() == (two_benchmark_run / name).read_text(), name
    assert "wrote" in capsys.readouterr().out


def test_model_text_is_escaped(two_benchmark_run):
    results = json.loads((two_benchmark_run / "results.json").read_text())
    evil = '<script>alert(1)</script><img src="http://evil.example/x.png">'
    entry = results["benchmarks"]["bbq"]["Religion"]
    entry["examples"] = [
        {
            "id": "Religion-1",
            "output": evil,
            "reason": "no option matched",
            "options": [evil, "B & C", "Unknown"],
        }
    ]
    entry["excluded"] = {"because <b>": ["Religion-2"]}
    html = render_html(results)
    assert "<script>" not in html and 'src="http://evil' not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "B &amp; C" in html
    md = (two_benchmark_run / "report.md").read_text()
    # The title, then the signature block and the audited system, then the verdict.
    assert md.startswith("# Bias audit report: tiny-random-gpt2\n\n**Signature:** Unsigned")
    assert md.index("Audited system: not described") < md.index("**Verdict: FAIL") < md.index("## Gates")


# --- headless Chromium --------------------------------------------------------------------------
def chromium_or_skip() -> str:
    if CHROMIUM:
        return CHROMIUM
    if os.environ.get("CI"):
        pytest.fail(
            "CI=true but chromium is not installed (.ci/run installs Debian's chromium)", pytrace=False
        )
    pytest.skip("chromium not installed (apt-get install chromium); CI installs it")


def browse(page: Path, tmp_path: Path) -> tuple[dict, list[str], str]:
    """Load ``page`` with the probe in headless Chromium: (probe result, URLs the page itself
    requested from the network per Chromium's net log, the dumped DOM)."""
    exe = chromium_or_skip()
    net_log = tmp_path / "net.json"
    proc = subprocess.run(
        [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--log-net-log={net_log}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r'<pre id="probe">(.*?)</pre>', proc.stdout, re.S)
    assert match, proc.stderr[-2000:]
    import html as html_lib

    probe = json.loads(html_lib.unescape(match.group(1)))
    return probe, page_requests(net_log), proc.stdout


def page_requests(net_log: Path) -> list[str]:
    """URLs of network requests a page started: the net log's URL_REQUEST_START_JOB events whose
    initiator is an origin (the browser's own background requests have none)."""
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == start_job and e.get("params", {}).get("initiator") not in (None, "not an origin")
    ]


def probed_copy(report: Path, folder: Path) -> Path:
    """The report with the probe before </body>, and without its policy (which would block the
    probe, and would also hide a request the page itself tries to make)."""
    html = report.read_text()
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    page = folder / "probed.html"
    page.write_text(html.replace("</body>", PROBE + "</body>"))
    return page


def test_chromium_shows_the_verdict_every_section_and_loaded_charts(two_benchmark_run, tmp_path):
    report = two_benchmark_run / "report.html"
    probe, requests, dom = browse(probed_copy(report, tmp_path), tmp_path)
    assert 'id="verdict-label">FAIL on a partial scope</div>' in dom
    for bench in ("bbq", "crows_pairs"):
        assert f'<section class="benchmark" id="bench-{bench}">' in dom
    charts = [i for i in probe["images"] if "by category" in i["alt"]]
    assert len(charts) == 2 and all(i["loaded"] and i["width"] > 100 for i in probe["images"]), probe
    assert probe["resources"] == [] and requests == [], (probe["resources"], requests)
    # The report as shipped (its policy in place, no probe), as a reviewer sees it.
    shot = Path(os.environ.get("BIAS_AUDIT_SCREENSHOT_DIR") or tmp_path) / "report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            chromium_or_skip(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'shot'}",
            "--window-size=1280,6000",
            f"--screenshot={shot}",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file() and shot.read_bytes().startswith(b"\x89PNG"), proc.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_the_browser_check_sees_a_broken_image_and_a_request(tmp_path):
    """The probe's own control: a page with an image from the network is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img alt="remote" src="http://127.0.0.1:9/x.png"></body></html>'
    )
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    probe, requests, _ = browse(probed, tmp_path)
    assert probe["images"] == [{"alt": "remote", "loaded": False, "width": 0}]
    assert probe["resources"] == ["http://127.0.0.1:9/x.png"] and requests == ["http://127.0.0.1:9/x.png"]


def test_chart_limits_keep_a_marker_at_the_range_end_inside_the_frame():
    from audit_harness.report.charts import _limits

    points = [
        {"value": 1.0, "ci": [0.6, 1.0], "band": None},
        {"value": -1.0, "ci": [-1.0, -0.7], "band": (-0.05, 0.05)},
    ]
    lo, hi = _limits(points, (-1.0, 1.0))
    assert -1.1 < lo < -1.0 and 1.0 < hi < 1.1
    lo, hi = _limits([{"value": 0.2, "ci": [0.1, 0.3], "band": None}], (-1.0, 1.0))
    assert 0.0 < lo < 0.1 and 0.3 < hi < 0.4  # not stretched to the whole range


def test_long_ids_wrap_at_their_separators_and_headers_stay_with_rows(two_benchmark_run):
    # On paper, test ids broke every few characters (``word-break: break-all`` on code) and a
    # table header sat alone at page 1's foot. Now: a <wbr> after each separator of an id, no
    # break-all but on hashes, and print rules that keep a header with its rows.
    import re

    from audit_harness.report.html import breakable

    html = (two_benchmark_run / "report.html").read_text()
    results = json.loads((two_benchmark_run / "results.json").read_text())
    problems = [g for g in results["gates"] if g["status"] != "pass"]
    assert problems
    for g in problems:
        test_id = f"test_{g['benchmark']}[{g['test_id']}]"
        assert f"<code>{breakable(test_id)}</code>" in html, test_id
    css = re.sub(r"/\*.*?\*/", "", html.split("</style>", 1)[0], flags=re.S)
    assert [s.strip() for s in re.findall(r"([^{}]+)\{[^}]*break-all", css)] == [".hash"], css
    assert "thead { display: table-header-group; }" in css and "thead, h2, h3 { break-after: avoid; }" in css
    assert "<thead><tr><th>verdict</th><th>test</th>" in html


def test_whitespace_values_and_unknown_counts_are_shown_not_blank(two_benchmark_run):
    # Issue 48: BBQ's delimiter (a space) printed as a blank cell; a served model's parameter
    # count (0: none reported) printed as "0 parameters".
    from audit_harness.report.html import render_html
    from audit_harness.report.results import ResultsDocument

    results = ResultsDocument.read(two_benchmark_run)
    page = render_html(results)
    assert '<tr><th>delimiter</th><td class="mono">&#39; &#39;</td></tr>' in page
    results["model"]["n_parameters"] = 0
    assert "unknown parameters" in render_html(results) and " 0 parameters" not in render_html(results)
