"""Report safety, end to end: an audit against a pool of two (fake) OpenAI-compatible servers whose
``--base-url`` carries ``user:password``, with an ``--audit-meta`` file of hostile values. The
servers receive the credentials (HTTP Basic auth); no file of the run folder, no model card, no
MLflow run and no line of the output holds the password, and report.md shows the hostile values
inert (report.html escapes them)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer

from audit_harness.models import load_model

REPO = Path(__file__).resolve().parents[2]
SECRET = "S3cr3tPassw0rd"

HOSTILE = {
    "system_name": "<script>alert('meta')</script>",
    "system_version": "1.0",
    "intended_use": "<img src=x onerror=alert(1)>",
    "responsible_person": "Jane Doe",
    "organisation": "[click me](javascript:alert(1))",
    "notes": '<a href="javascript:alert(2)">x</a> \\[y](javascript:alert(3)) <javascript:alert(4)>',
}


@pytest.fixture(scope="module")
def servers():
    tiny = load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)
    pool = [FakeServer(tiny, "tiny-random-gpt2"), FakeServer(tiny, "tiny-random-gpt2")]
    yield pool
    for s in pool:
        s.stop()


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
        **kw,
    )


@pytest.fixture(scope="module")
def run(servers, data_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secret")
    meta = tmp / "meta.yaml"
    meta.write_text(json.dumps(HOSTILE), encoding="utf-8")  # JSON is YAML
    urls = [s.url.replace("http://", f"http://u:{SECRET}@") for s in servers]
    proc = _cli(
        "-m",
        "pytest",
        "audits/test_bbq.py",
        "--backend",
        "openai",
        *[a for u in urls for a in ("--base-url", u)],
        "--model",
        "tiny-random-gpt2",
        "--limit",
        "2",
        "-k",
        "Religion",
        "--data-dir",
        data_dir,
        "--min-n",
        "1",
        "--results-dir",
        tmp / "results",
        "--audit-meta",
        meta,
        "--no-cache",
        "-p",
        "no:cacheprovider",
        "--bootstrap-resamples",
        "0",
    )
    (run_dir,) = [p for p in (tmp / "results").iterdir() if p.is_dir()]
    return proc, run_dir, tmp


def _files(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file()}


def test_the_password_reaches_the_servers_and_nothing_else(run, servers):
    proc, run_dir, tmp = run
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]
    basic = "Basic " + base64.b64encode(f"u:{SECRET}".encode()).decode()
    for s in servers:  # the pool used both, each request with the credentials
        auth = {h.get("Authorization") or h.get("authorization") for h in s.headers}
        assert s.headers and auth == {basic}, auth
    card = _cli("-m", "audit_harness.cli", "model-card", run_dir, "--output", tmp / "card.md")
    mlflow = _cli(
        "-m", "audit_harness.cli", "export", "mlflow", run_dir, "--tracking-uri", f"file:{tmp / 'mlruns'}"
    )
    assert card.returncode == 0, card.stderr
    outputs = out + card.stdout + card.stderr + mlflow.stdout + mlflow.stderr
    files = _files(run_dir) | _files(tmp / "results") | {tmp / "card.md": (tmp / "card.md").read_text()}
    if mlflow.returncode == 0:  # the extra bias-audit[mlflow] is installed
        files |= _files(tmp / "mlruns")
        params = [p for p in (tmp / "mlruns").rglob("params/*") if p.is_file()]
        assert any("u:***@" in p.read_text() for p in params), "the redacted URL is an MLflow param"
    leaks = [str(p) for p, text in files.items() if SECRET in text]
    assert not leaks and SECRET not in outputs, leaks
    results = json.loads((run_dir / "results.json").read_text())
    shown = [s.url.replace("http://", "http://u:***@") for s in servers]
    assert list(results["options"]["base_url"]) == shown
    assert all(
        f"--base-url={u}" in results["run"]["invocation"] or u in results["run"]["invocation"] for u in shown
    )
    assert [e["base_url"] for e in results["model"]["server"]["endpoints"]] == shown
    for name in ("report.md", "report.html"):
        assert shown[0] in (run_dir / name).read_text(), name


def test_report_md_shows_hostile_metadata_inert(run):
    _, run_dir, _ = run
    md = (run_dir / "report.md").read_text()
    for raw in ("<script", "<img", "<a href", "](javascript:", "<javascript:", "javascript:"):
        assert raw not in md, raw
    assert "| System | &lt;script>alert('meta')&lt;/script> |" in md
    assert "| Organisation | \\[click me\\](javascript&#58;alert(1)) |" in md
    html = (run_dir / "report.html").read_text()
    for value in HOSTILE.values():
        assert "<" not in value or value not in html
    assert "&lt;script&gt;alert(" in html
