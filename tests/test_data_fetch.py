"""`bias-audit data fetch/verify`, the source table and the start-up data check, over real HTTP.

A local server (127.0.0.1, port 0, a thread) serves a copy of the curated data in the repositories'
layout, ``<repo>/<commit>/<upstream path>``, built under a temporary folder; the real fetch code
downloads from it via ``--source-base-url``. The handler (test-only) supports Range requests and
can cut a response half-way, corrupt a file, or answer 503 a few times.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest

from audit_harness import sources
from audit_harness.errors import DataError
from audit_harness.sources import check
from audit_harness.sources import fetch as fetch_mod
from audit_harness.sources.download import RetryPolicy, part_path

REPO = Path(__file__).resolve().parents[1]
FAST = RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)
AVAILABLE = [e for e in sources.table() if e.available]


class MirrorHandler(BaseHTTPRequestHandler):
    """GET of files under ``server.root``, with ``Range: bytes=N-`` support and fault modes set
    on the server: ``cut`` (paths whose first response stops half-way), ``corrupt`` (paths served
    with one byte flipped), ``fail`` ({path: remaining 503 answers}), ``ranges`` (False: ignore
    Range and always send 200). Every request is logged in ``server.log`` as (path, Range)."""

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):  # noqa: N802 - http.server API
        srv = self.server
        rel = unquote(self.path).lstrip("/")
        rng = self.headers.get("Range")
        with srv.lock:
            srv.log.append((rel, rng))
            if srv.fail.get(rel, 0) > 0:
                srv.fail[rel] -= 1
                self.send_error(503)
                return
            cut = rel in srv.cut
            srv.cut.discard(rel)
        path = srv.root / rel
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        if rel in srv.corrupt:
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and srv.ranges:
            start = int(m[1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if cut:
            # Promise the whole body, send half, drop the connection: a download cut half-way.
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory, data_dir) -> Path:
    """The curated files copied into ``<repo>/<commit>/<upstream>`` (the raw GitHub layout)."""
    root = tmp_path_factory.mktemp("mirror")
    for e in AVAILABLE:
        dest = root / e.repo / e.commit / e.upstream
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data_dir / e.path, dest)
    return root


@pytest.fixture
def server(mirror):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), MirrorHandler)
    srv.root, srv.lock, srv.log = mirror, threading.Lock(), []
    srv.cut, srv.corrupt, srv.fail, srv.ranges = set(), set(), {}, True
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def upstream_key(e: sources.SourceFile) -> str:
    return f"{e.repo}/{e.commit}/{e.upstream}"


def entry(path: str) -> sources.SourceFile:
    e = sources.entry(path)
    assert e is not None, path
    return e


def run_fetch(server, to, benchmarks=None, **kw):
    lines = []
    results = fetch_mod.fetch(
        benchmarks, to, base_url=server.url, retry=FAST, progress=False, out=lines.append, **kw
    )
    return {r.entry.path: r for r in results}, lines


# --- the table -------------------------------------------------------------------------------


def test_table_pins_every_curated_file(data_dir):
    results = fetch_mod.verify(data_dir)
    bad = [r.line() for r in results if r.status not in (fetch_mod.OK, fetch_mod.UNAVAILABLE)]
    assert not bad
    # 80 files of the first seven benchmarks, MBBQ's 49 (48 data files and answer_detection.py),
    # CBBQ's 100 available ones.
    assert sum(r.status == fetch_mod.OK for r in results) == len(AVAILABLE) == 80 + 49 + 100
    unavailable = {r.entry.path for r in results if r.status == fetch_mod.UNAVAILABLE}
    assert "winoqueer/data/winoqueer_final.csv" in unavailable
    assert {p for p in unavailable if p.startswith("kgquiz/")} == {
        "kgquiz/ConceptNet/Task2.json",
        "kgquiz/UMLS/Task2.json",
        "kgquiz/YAGO/Task1.json",
        "kgquiz/YAGO/Task2.json",
        "kgquiz/YAGO/Task4.json",
    }
    from audit_harness.benchmarks import registry

    assert (
        {"bbq", "cabbq", "crows_pairs", "esbbq", "kgquiz", "kobbq", "winoqueer"}
        <= set(sources.benchmark_names())
        <= set(registry())
    )


def test_table_knows_upstream_paths_and_licences():
    crows = entry("crows_pairs/crows_pairs_anonymized.csv")
    assert (crows.repo, crows.upstream, crows.license) == (
        "nyu-mll/crows-pairs",
        "data/crows_pairs_anonymized.csv",
        "CC-BY-SA-4.0",
    )
    v0 = entry("winoqueer/v0/winoqueer_benchmark.csv")
    assert (v0.repo, v0.upstream) == ("katyfelkner/winoqueer-v0", "winoqueer_benchmark.csv")
    final = entry("winoqueer/data/winoqueer_final.csv")
    assert (final.sha256, final.git_blob, final.size) == (
        None,
        "0c874a4b98b41435a2359e9a69d95ab7bd95302d",
        4816487,
    )
    assert entry("kgquiz/UMLS/Task1.json").license is None
    assert entry("esbbq_cabbq/LICENSE.txt").benchmarks == ("esbbq", "cabbq")
    assert entry("bbq/data/Age.jsonl").url() == (
        "https://raw.githubusercontent.com/nyu-mll/BBQ/bea11bd97d79217245b5871acd247b9d6eb24598/"
        "data/Age.jsonl"
    )


def test_generator_reproduces_the_shipped_table(tmp_path, data_dir):
    out = tmp_path / "sources.yaml"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_sources_table.py"), str(data_dir), "--output", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert out.read_text(encoding="utf-8") == sources.TABLE_FILE.read_text(encoding="utf-8")
    # A data folder of no pinned benchmark (cbbq/, mbbq/ here) is skipped and named, not a crash.
    pinned = {f.path.split("/", 1)[0] for f in sources.load_table(sources.TABLE_FILE)}
    unknown = sorted(p.name for p in data_dir.iterdir() if p.is_dir() and p.name not in pinned)
    if unknown:
        assert f"skipped folders of no pinned benchmark: {', '.join(unknown)}" in proc.stdout


def test_malformed_table_names_entry_and_field(tmp_path):
    text = sources.TABLE_FILE.read_text(encoding="utf-8").replace(
        "sha256: 46e805b3fc2d8cbd26eeb8e8430d98cf7b2dc9c83574ff3674e8ce4f0fca2a60", "sha256: nope", 1
    )
    bad = tmp_path / "sources.yaml"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=r"files\[1\] \(bbq/data/Age.jsonl\): field 'sha256'"):
        sources.load_table(bad)


def test_unknown_benchmark_is_named():
    with pytest.raises(DataError, match="unknown benchmark.*nope.*known: bbq"):
        sources.files_for(["nope"])


def test_file_status(tmp_path, data_dir):
    assert sources.file_status(data_dir, "bbq/data/Religion.jsonl") == "published"
    copy = tmp_path / "bbq" / "data" / "Religion.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes((data_dir / "bbq/data/Religion.jsonl").read_bytes() + b"\n")
    status = sources.file_status(tmp_path, "bbq/data/Religion.jsonl")
    assert status.startswith("MODIFIED (sha256 ") and len(status) > 30
    (tmp_path / "extra.csv").write_text("x\n")
    assert sources.file_status(tmp_path, "extra.csv") == "unknown"
    # An entry pinned by git blob only: the blob decides.
    final = tmp_path / "winoqueer" / "data" / "winoqueer_final.csv"
    final.parent.mkdir(parents=True)
    final.write_text("not the benchmark\n")
    assert sources.file_status(tmp_path, "winoqueer/data/winoqueer_final.csv").startswith("MODIFIED")
    with pytest.raises(DataError, match="missing data file"):
        sources.file_status(tmp_path, "bbq/data/Age.jsonl")


# --- fetch over HTTP -------------------------------------------------------------------------


def test_full_fetch_verifies_every_hash_and_second_fetch_downloads_nothing(server, tmp_path, data_dir):
    to = tmp_path / "data"
    results, lines = run_fetch(server, to, accept_unlicensed=True)
    fetched = [p for p, r in results.items() if r.status == fetch_mod.FETCHED]
    assert len(fetched) == len(AVAILABLE)
    assert {p for p, r in results.items() if r.status == fetch_mod.UNAVAILABLE} == {
        e.path for e in sources.table() if not e.available
    }
    for e in AVAILABLE:  # byte-identical to the curated copy
        assert filecmp.cmp(to / e.path, data_dir / e.path, shallow=False), e.path
    assert not list(to.rglob("*.part"))
    assert all(r.status == fetch_mod.OK for r in fetch_mod.verify(to) if r.entry.available)
    # Licences travel with the data, and each folder gets a SOURCE.md stub.
    assert (to / "bbq" / "LICENSE").is_file() and (to / "kobbq" / "LICENSE").is_file()
    stub = (to / "crows_pairs" / "SOURCE.md").read_text(encoding="utf-8")
    assert "nyu-mll/crows-pairs" in stub and "CC-BY-SA-4.0" in stub and "dfb36986ce05" in stub
    assert "none granted" in (to / "kgquiz" / "SOURCE.md").read_text(encoding="utf-8")

    n_requests = len(server.log)
    again, _ = run_fetch(server, to, accept_unlicensed=True)
    assert {r.status for r in again.values() if r.entry.available} == {fetch_mod.PRESENT}
    assert len(server.log) == n_requests  # nothing downloaded
    assert sum(r.bytes for r in again.values()) == 0


def test_corrupted_file_is_rejected_and_named(server, tmp_path):
    bad = entry("bbq/data/Religion.jsonl")
    server.corrupt.add(upstream_key(bad))
    to = tmp_path / "data"
    results, lines = run_fetch(server, to, ["bbq"])
    r = results[bad.path]
    assert r.status == fetch_mod.FAILED and "rejected" in r.detail and "Religion.jsonl" in r.detail
    assert bad.sha256 in r.detail
    assert not (to / bad.path).exists() and not part_path(to / bad.path).exists()
    assert results["bbq/data/Age.jsonl"].status == fetch_mod.FETCHED  # the others still come
    assert any(line.startswith("failed") and bad.path in line for line in lines)


def test_download_cut_half_way_resumes_with_a_range_request(server, tmp_path, data_dir):
    e = entry("bbq/data/Age.jsonl")
    server.cut.add(upstream_key(e))
    to = tmp_path / "data"
    results, _ = run_fetch(server, to, ["bbq"])
    assert results[e.path].status == fetch_mod.FETCHED
    asks = [rng for path, rng in server.log if path == upstream_key(e)]
    assert len(asks) == 2 and asks[0] is None, asks
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", asks[1])[1])
    assert 0 < resumed_at <= e.size // 2
    assert results[e.path].bytes == e.size  # the first part, then the rest: nothing twice
    assert filecmp.cmp(to / e.path, data_dir / e.path, shallow=False)


def test_part_file_left_by_an_earlier_run_is_resumed(server, tmp_path, data_dir):
    e = entry("kobbq/data/KoBBQ_test_samples.tsv")
    to = tmp_path / "data"
    part = part_path(to / e.path)
    part.parent.mkdir(parents=True)
    part.write_bytes((data_dir / e.path).read_bytes()[:1000])
    results, _ = run_fetch(server, to, ["kobbq"])
    assert results[e.path].status == fetch_mod.FETCHED and results[e.path].bytes == e.size - 1000
    assert [rng for p, rng in server.log if p == upstream_key(e)] == ["bytes=1000-"]
    assert filecmp.cmp(to / e.path, data_dir / e.path, shallow=False)


def test_server_ignoring_ranges_restarts_the_file(server, tmp_path, data_dir):
    server.ranges = False
    e = entry("crows_pairs/crows_pairs_anonymized.csv")
    to = tmp_path / "data"
    part = part_path(to / e.path)
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage that a 200 reply must replace")
    results, _ = run_fetch(server, to, ["crows_pairs"])
    assert results[e.path].status == fetch_mod.FETCHED
    assert filecmp.cmp(to / e.path, data_dir / e.path, shallow=False)


def test_server_errors_are_retried_then_reported(server, tmp_path):
    e = entry("crows_pairs/crows_pairs_anonymized.csv")
    server.fail[upstream_key(e)] = 2
    results, _ = run_fetch(server, tmp_path / "a", ["crows_pairs"])
    assert results[e.path].status == fetch_mod.FETCHED
    server.fail[upstream_key(e)] = 10
    results, _ = run_fetch(server, tmp_path / "b", ["crows_pairs"])
    assert results[e.path].status == fetch_mod.FAILED and "HTTP 503" in results[e.path].detail


def test_unavailable_files_are_reported_never_fetched(server, tmp_path):
    to = tmp_path / "data"
    results, lines = run_fetch(server, to, ["winoqueer"])
    final = results["winoqueer/data/winoqueer_final.csv"]
    assert final.status == fetch_mod.UNAVAILABLE and "katyfelkner/winoqueer@1180ba6" in final.detail
    assert not (to / "winoqueer" / "data").exists()
    assert not any(p.endswith("winoqueer_final.csv") for p, _ in server.log)
    assert results["winoqueer/v0/winoqueer_benchmark.csv"].status == fetch_mod.FETCHED
    assert results["winoqueer/LICENSE"].status == fetch_mod.FETCHED
    assert any(line.startswith("unavailable") and "winoqueer_final.csv" in line for line in lines)


def test_unlicensed_benchmark_needs_consent(server, tmp_path):
    to = tmp_path / "data"
    results, _ = run_fetch(server, to, ["kgquiz"])
    skipped = [r for r in results.values() if r.status == fetch_mod.SKIPPED]
    assert len(skipped) == 10 and "no licence" in skipped[0].detail
    assert "--accept-unlicensed" in skipped[0].detail and not server.log
    results, _ = run_fetch(server, to, ["kgquiz"], accept_unlicensed=True)
    assert sum(r.status == fetch_mod.FETCHED for r in results.values()) == 10


def test_a_local_file_that_differs_is_left_untouched_and_fails(server, tmp_path):
    to = tmp_path / "data"
    mine = to / "crows_pairs" / "crows_pairs_anonymized.csv"
    mine.parent.mkdir(parents=True)
    mine.write_text("my edited copy\n")
    results, _ = run_fetch(server, to, ["crows_pairs"])
    r = results["crows_pairs/crows_pairs_anonymized.csv"]
    assert r.status == fetch_mod.FAILED and "left untouched" in r.detail
    assert mine.read_text() == "my edited copy\n"


def test_network_down_fails_fast_and_stops_trying(tmp_path):
    import socket

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    results = fetch_mod.fetch(
        ["bbq"], tmp_path, base_url=url, retry=FAST, progress=False, out=lambda line: None
    )
    failed = [r for r in results if r.status == fetch_mod.FAILED]
    assert len(failed) == 27 and failed[0].detail.startswith("network: ")
    assert all("not attempted" in r.detail for r in failed[1:])


def test_cli_fetch_and_verify(server, tmp_path, capsys):
    from audit_harness.cli import main

    to = tmp_path / "data"
    assert (
        main(
            [
                "data",
                "fetch",
                "crows_pairs",
                "kobbq",
                "--to",
                str(to),
                "--source-base-url",
                server.url,
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "fetched     crows_pairs/crows_pairs_anonymized.csv" in out
    assert "unavailable kobbq/data/KoBBQ_all_samples.tsv" in out
    assert re.search(r"7 fetched, 1 unavailable; \d+ bytes downloaded in", out), out
    assert main(["data", "verify", "--data-dir", str(to)]) == 0
    assert "7 ok, 1 unavailable" in capsys.readouterr().out
    (to / "kobbq" / "data" / "KoBBQ_survey_result.json").write_text("[]")
    assert main(["data", "verify", "--data-dir", str(to)]) == 1
    assert "MODIFIED    kobbq/data/KoBBQ_survey_result.json" in capsys.readouterr().out
    assert main(["data", "fetch", "nope", "--to", str(to)]) == 4
    assert "unknown benchmark(s) nope" in capsys.readouterr().err


# --- the start-up check ----------------------------------------------------------------------


def test_require_files_names_missing_files_and_the_fetch_command(tmp_path):
    from audit_harness.benchmarks import registry

    (tmp_path / "bbq" / "data").mkdir(parents=True)
    bbq = registry()["bbq"]
    needed = {p: "bbq" for c in bbq.categories for p in bbq.data_files(c)}
    with pytest.raises(DataError) as info:
        check.require_files(tmp_path, needed)
    msg = str(info.value)
    assert "lacks bbq data (bbq/data/Age.jsonl and 11 more" in msg
    assert f"bias-audit data fetch bbq --to {tmp_path}" in msg
    check.require_files(tmp_path, {})  # nothing selected: nothing required
    # One category needs its own file (and the metadata), not the other ten.
    with pytest.raises(DataError, match=r"\(bbq/data/Age.jsonl and 1 more"):
        check.require_files(tmp_path, {p: "bbq" for p in bbq.data_files("Age")})


def test_a_benchmark_reading_another_ones_files_is_sent_to_that_ones_fetch(tmp_path):
    (tmp_path / "bbq").mkdir()
    with pytest.raises(DataError, match=r"lacks bbq data \(bbq/data/Age.jsonl.*data fetch bbq --to"):
        check.require_files(tmp_path, {"bbq/data/Age.jsonl": "bbq_variant"})


def test_files_without_a_pinned_source_say_so(tmp_path):
    (tmp_path / "bbq").mkdir()
    with pytest.raises(DataError, match=r"lacks toyqa data.*toyqa has no pinned source to fetch from"):
        check.require_files(tmp_path, {"bbq/toy.jsonl": "toyqa"})


def test_require_files_fetches_with_fetch_data(server, tmp_path):
    to = tmp_path / "data"
    check.require_files(
        to, {"crows_pairs/crows_pairs_anonymized.csv": "crows_pairs"}, fetch=True, base_url=server.url
    )
    assert (to / "crows_pairs" / "crows_pairs_anonymized.csv").is_file()


@pytest.mark.parametrize(
    "args, keyword, expected",
    [
        (["audits"], None, "every registered benchmark"),
        (["audits"], "crows_pairs or winoqueer", ["crows_pairs", "winoqueer"]),
        (["audits/test_bbq.py"], None, ["bbq"]),
        (["audits"], "test_bbq and (Age or Religion)", ["bbq"]),
        (["audits"], "esbbq or cabbq", ["cabbq", "esbbq"]),
        (["audits"], "bbq", ["bbq", "cabbq", "cbbq", "esbbq", "kobbq", "mbbq"]),  # pytest's substring match
        (["audits/test_cabbq.py::test_cabbq"], None, ["cabbq"]),
        (["audits"], "SpanishRegion", ["cabbq", "esbbq"]),
        (["tests"], None, []),
    ],
)
def test_selected_benchmarks(args, keyword, expected):
    from audit_harness.benchmarks import registry
    from audit_harness.gates import load_thresholds
    from audit_harness.selection import selected_benchmarks

    catalogue = {n: b.gate_catalogue() for n, b in registry().items()}
    gates = load_thresholds(REPO / "thresholds.yaml", catalogue)
    ids = {b: [g.test_id for g in gs] for b, gs in gates.items()}
    if expected == "every registered benchmark":  # a new benchmark need not edit this test
        expected = sorted(registry())
        assert {"bbq", "cabbq", "crows_pairs", "esbbq", "kgquiz", "kobbq", "winoqueer"} <= set(expected)
    assert selected_benchmarks(REPO / "audits", args, REPO, keyword, ids) == expected


def _audit(tmp_path, *args, env=None):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits/test_bbq.py",
        "--model",
        "tiny-random-gpt2",
        "--limit",
        "4",
        "--bootstrap-resamples",
        "0",
        "-k",
        "Religion",
        "-p",
        "no:cacheprovider",
        "--results-dir",
        str(tmp_path / "results"),
        *args,
    ]
    full_env = {k: v for k, v in os.environ.items() if k != "AUDIT_DATA_DIR"}
    full_env.update(BIAS_AUDIT_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=full_env)


def test_audit_without_data_stops_with_the_fetch_command(tmp_path):
    proc = _audit(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-2000:]
    default = tmp_path / "cache" / "data"
    assert f"bias-audit data fetch bbq --to {default}" in out
    assert "Traceback" not in out


def test_audit_with_fetch_data_fetches_then_runs(server, tmp_path):
    proc = _audit(tmp_path, "--fetch-data", env={fetch_mod.BASE_URL_ENV: server.url})
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]  # gates may fail on a random model
    assert "fetching bbq data into" in out
    assert (tmp_path / "cache" / "data" / "bbq" / "data" / "Religion.jsonl").is_file()
    assert re.search(r"\d+ (passed|failed)", out) and "results:" in out  # the audit ran


# --- the Hugging Face source (EsBBQ / CaBBQ) --------------------------------------------------


def _typed(row: dict[str, str]) -> dict:
    """A CSV row as the Hub's JSONL record: list literals parsed, answer_info nested, label and
    instance_id integers, proper_nouns_only a boolean (SOURCE.md: the JSONL twins equal the CSV)."""
    import ast

    out: dict = {}
    for key, value in row.items():
        if key.startswith("answer_info."):
            out.setdefault("answer_info", {})[key.split(".", 1)[1]] = ast.literal_eval(value)
        elif key in ("stereotyped_groups", "source"):
            out[key] = ast.literal_eval(value)
        elif key in ("label", "instance_id"):
            out[key] = int(value)
        elif key == "proper_nouns_only":
            out[key] = {"True": True, "False": False}[value]
        else:
            out[key] = value
    return out


@pytest.mark.parametrize(
    "benchmark, categories", [("esbbq", ["Nationality", "Religion"]), ("cabbq", ["Nationality"])]
)
def test_hf_rows_equal_pinned_csv_rows(tmp_path, data_dir, benchmark, categories):
    datasets = pytest.importorskip("datasets")
    from audit_harness.sources.hf import read_rows

    hub = tmp_path / "hub"  # the layout push_to_hub writes: <config>/test-*.parquet + README configs
    readme = ["---", "configs:"]
    for cat in categories:
        rows, _ = read_rows(benchmark, cat, data_dir=data_dir)
        (hub / cat).mkdir(parents=True)
        datasets.Dataset.from_list([_typed(r) for r in rows]).to_parquet(
            str(hub / cat / "test-00000-of-00001.parquet")
        )
        readme += [f"- config_name: {cat}", "  data_files:", "  - split: test", f"    path: {cat}/test-*"]
    (hub / "README.md").write_text("\n".join(readme + ["---", ""]), encoding="utf-8")
    for cat in categories:
        pinned, prov_files = read_rows(benchmark, cat, data_dir=data_dir)
        from_hf, prov = read_rows(
            benchmark, cat, source="hf", hf_path=str(hub), cache_dir=tmp_path / "hf-cache"
        )
        assert from_hf == pinned and len(pinned) > 100
        assert list(from_hf[0]) == list(pinned[0])  # same columns, same order
        assert prov["source"] == "hf" and prov["config"] == cat and prov["revision"]
        assert prov_files["path"].endswith(f"{cat}.full.csv")


def test_hf_source_errors_are_named(tmp_path, data_dir):
    from audit_harness.sources.hf import read_rows

    with pytest.raises(DataError, match="cannot load .*config 'Nope'"):
        read_rows("esbbq", "Nope", source="hf", hf_path=str(tmp_path / "nowhere"), cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match="unknown source 'web'"):
        read_rows("esbbq", "Age", source="web")
    with pytest.raises(DataError, match="unknown benchmark 'bbq'"):
        read_rows("bbq", "Age", data_dir=data_dir)


def test_esbbq_loader_on_the_hub_copy_gives_the_same_items(tmp_path, data_dir):
    """``--data-source hf``: the EsBBQ benchmark reads its rows through ``datasets`` from a copy in
    the Hub layout and builds exactly the items the pinned CSV gives, with the Hub revision in the
    provenance."""
    datasets = pytest.importorskip("datasets")
    from audit_harness.benchmarks import registry
    from audit_harness.sources.hf import read_rows

    hub = tmp_path / "hub"
    rows, _ = read_rows("esbbq", "PhysicalAppearance", data_dir=data_dir)
    (hub / "PhysicalAppearance").mkdir(parents=True)
    datasets.Dataset.from_list([_typed(r) for r in rows]).to_parquet(
        str(hub / "PhysicalAppearance" / "test-00000-of-00001.parquet")
    )
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: PhysicalAppearance\n  data_files:\n"
        "  - split: test\n    path: PhysicalAppearance/test-*\n---\n"
    )
    bench = registry()["esbbq"]
    files = bench.load_category(data_dir, "PhysicalAppearance")
    from_hub = bench.configure(data_source="hf", hf_path=str(hub)).load_category(
        tmp_path / "unused", "PhysicalAppearance"
    )
    assert from_hub.items == files.items and len(files.items) > 100
    assert from_hub.excluded == files.excluded and from_hub.notes == files.notes  # 4 flagged rows
    (prov,) = from_hub.files
    assert prov.path.startswith(f"hf:{hub}/PhysicalAppearance@") and prov.rows == len(rows)
    with pytest.raises(Exception, match="data_source must be files or hf"):
        bench.configure(data_source="web")


def test_the_suggested_fetch_command_accepts_the_licence_only_for_kgquiz(tmp_path):
    from audit_harness.sources.check import fetch_command

    assert fetch_command(["bbq"], tmp_path) == f"bias-audit data fetch bbq --to {tmp_path}"
    assert "--accept-unlicensed" in fetch_command(["kgquiz"], tmp_path)
