"""A pool of OpenAI-compatible endpoints (``models/pool.py``) against fake servers backed by an
in-process model (``fake_openai.py``): every prefix group on one endpoint, the same in every
process; a replica killed mid-run loses and duplicates nothing; a slow replica's work is stolen;
a replica serving another model, tokenizer or dtype is refused; a run whose endpoints are all
gone stops with exit 3 and a rerun (with xdist) resumes from the cache, its per-endpoint counts
summed over the workers; a first endpoint that hangs or refuses connections at start-up hands
the reference to the next one (the run says so at its end), and none answering is exit 4
naming each. The real two-server run is in test_vllm_pool.py."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer

from audit_harness.engine.cache import ResultCache
from audit_harness.engine.executor import Engine
from audit_harness.errors import ConfigError, ModelError
from audit_harness.models import load_model
from audit_harness.models.openai_server import connect
from audit_harness.models.pool import group_key, preference

REPO = Path(__file__).resolve().parents[2]
NAME = "tiny-random-gpt2"


@pytest.fixture(scope="module")
def tiny():
    return load_model(NAME, device="cpu", dtype="float32", batch_size=4)


@pytest.fixture
def pair(tiny):
    servers = [FakeServer(tiny, NAME), FakeServer(tiny, NAME)]
    yield servers
    for s in servers:
        s.stop()


def bbq_requests(data_dir, rows: int):
    from audit_harness.benchmarks import registry

    bbq = registry()["bbq"]
    items = bbq.load_category(data_dir, "Religion").items[:rows]
    return [(bbq.prompt(it), " " + c) for it in items for c in bbq.choices(it)]


def scored_by(server: FakeServer, since: int = 0) -> list[tuple[int, ...]]:
    """The sequences ``server`` answered in scoring requests (echo), from its ``since``-th
    answered completion on."""
    return [tuple(p) for b in server.completions()[since:] if b.get("echo") for p in b["prompt"]]


def groups_of(model, requests) -> dict[bytes, set[tuple[int, ...]]]:
    """Prefix group -> its sequences, as the backend routes them (an item's context)."""
    out: dict[bytes, set[tuple[int, ...]]] = {}
    for ctx, cont in model.encode_pairs(requests):
        out.setdefault(group_key(ctx + cont, len(ctx)), set()).add(tuple(ctx + cont))
    return out


def test_each_prefix_group_goes_to_one_endpoint_the_same_in_every_process(pair, tiny, data_dir):
    a, b = pair
    model = connect([a.url, b.url], NAME)
    requests = bbq_requests(data_dir, rows=16)
    groups = groups_of(model, requests)
    marks = [len(s.completions()) for s in pair]
    values = Engine(model).loglikelihood(requests)
    assert max(abs(x - y) for x, y in zip(values, Engine(tiny).loglikelihood(requests))) < 1e-4
    answered = [set(scored_by(s, m)) for s, m in zip(pair, marks)]
    home = {}
    for key, seqs in groups.items():
        (home[key],) = [i for i, got in enumerate(answered) if seqs & got]  # one endpoint each
        assert seqs <= answered[home[key]]
        # ... the one rendezvous hashing ranks first for the group, whatever the URLs' order.
        assert home[key] == preference(key, [a.url, b.url])[0] == 1 - preference(key, [b.url, a.url])[0]
    assert set(home.values()) == {0, 1}  # 16 groups: both endpoints get some
    server = model.info.server
    assert sum(e["scored"] for e in server["endpoints"]) == len(requests)
    assert sum(e["groups"] for e in server["endpoints"]) == server["pool"]["groups"] == 16
    assert server["pool"]["groups_split"] == 0
    # Another process (an xdist worker, a rerun; another hash seed) routes every group alike.
    code = (
        "import sys, json; from audit_harness.models.pool import preference; "
        "keys = [bytes.fromhex(k) for k in json.loads(sys.argv[1])]; "
        "print(json.dumps([preference(k, sys.argv[2:])[0] for k in keys]))"
    )
    keys = list(home)
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps([k.hex() for k in keys]), a.url, b.url],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        check=True,
    )
    assert json.loads(out.stdout) == [home[k] for k in keys]


def test_a_replica_killed_mid_run_loses_nothing_and_computes_nothing_twice(pair, tiny, data_dir, tmp_path):
    requests = bbq_requests(data_dir, rows=20)
    requests, more = requests[:48], requests[48:]
    reference = Engine(connect(pair[0].url, NAME))  # one healthy server
    expected, expected_more = reference.loglikelihood(requests), reference.loglikelihood(more)
    model = connect([s.url for s in pair], NAME, max_concurrency=2)
    groups = groups_of(model, requests)
    # The endpoint with more groups dies after answering one scoring request: it still had
    # others, in flight or queued.
    share = [sum(preference(k, model.pool.urls)[0] == i for k in groups) for i in (0, 1)]
    victim = max((0, 1), key=lambda i: share[i])
    marks = [len(s.completions()) for s in pair]
    pair[victim].die_after = marks[victim] + 1
    engine = Engine(model, cache=ResultCache(tmp_path))
    values = engine.loglikelihood(requests)
    assert values == expected  # exactly the values of the run that lost no replica
    answered = [scored_by(s, m) for s, m in zip(pair, marks)]
    everything = answered[0] + answered[1]
    assert sorted(everything) == sorted(s for seqs in groups.values() for s in seqs)  # each once
    assert engine.stats.computed == engine.stats.distinct == len(everything)
    assert len(ResultCache(tmp_path)) == len(everything)
    out = model.info.server["endpoints"]
    assert out[victim]["state"] == "down" and out[victim]["failures"] >= 1 and out[victim]["reason"]
    assert out[1 - victim]["state"] == "up" and out[1 - victim]["failures"] == 0
    assert [e["scored"] for e in out] == [len(x) for x in answered]
    # A second call after the loss goes to the survivor alone.
    assert engine.loglikelihood(more) == expected_more


def test_a_slow_replica_keeps_what_it_started_and_the_other_steals_the_rest(pair, tiny, data_dir):
    a, b = pair
    model = connect([a.url, b.url], NAME, max_concurrency=1)
    requests = bbq_requests(data_dir, rows=24)  # 72 sequences: two engine calls of 64 and 8
    groups = groups_of(model, requests)
    slow = max((0, 1), key=lambda i: sum(preference(k, model.pool.urls)[0] == i for k in groups))
    pair[slow].delay = 0.5
    marks = [len(s.completions()) for s in pair]
    values = Engine(model).loglikelihood(requests)
    assert max(abs(x - y) for x, y in zip(values, Engine(tiny).loglikelihood(requests))) < 1e-4
    out = model.info.server["endpoints"]
    assert out[1 - slow]["stolen"] >= 1 and out[slow]["stolen"] == 0
    answered = [set(scored_by(s, m)) for s, m in zip(pair, marks)]
    routed = sum(len(seqs) for k, seqs in groups.items() if preference(k, model.pool.urls)[0] == 1 - slow)
    assert len(answered[1 - slow]) > routed  # it did more than its own share
    assert all(sum(bool(seqs & got) for got in answered) == 1 for seqs in groups.values())
    assert model.info.server["pool"]["groups_split"] == 0


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=4)


def test_a_replica_serving_another_model_tokenizer_or_dtype_is_refused(tiny, smollm2):
    honest = FakeServer(tiny, NAME)
    other_name = FakeServer(tiny, "another-model")
    other_tokenizer = FakeServer(smollm2, NAME)  # another model behind the same name
    fp32 = FakeServer(smollm2, "smollm2")
    bf16 = copy.copy(smollm2)
    bf16.model = copy.deepcopy(smollm2.model).to(__import__("torch").bfloat16)
    half = FakeServer(bf16, "smollm2")
    try:
        with pytest.raises(
            ModelError, match=rf"endpoint {other_name.url} is refused: .*does not serve model"
        ):
            connect([honest.url, other_name.url], NAME)
        with pytest.raises(ModelError, match=rf"{other_tokenizer.url} is refused: its /tokenize splits"):
            connect([honest.url, other_tokenizer.url], NAME)
        with pytest.raises(ModelError, match=rf"{half.url} is refused: its prompt log-probabilities differ"):
            connect([fp32.url, half.url], "smollm2", tokenizer="smollm2-135m-instruct")
        with pytest.raises(ConfigError, match="is given twice"):
            connect([honest.url, honest.url + "/"], NAME)
    finally:
        for s in (honest, other_name, other_tokenizer, fp32, half):
            s.stop()


def test_an_endpoint_down_is_left_out_probed_and_admitted_only_if_it_matches(tiny, data_dir, capsys):
    import time

    a, b, c = FakeServer(tiny, NAME), FakeServer(tiny, NAME), FakeServer(tiny, NAME)
    ports = [int(s.url.rsplit(":", 1)[1].split("/")[0]) for s in (b, c)]
    b.stop()  # down at start-up
    c.stop()
    back = []
    try:
        model = connect([a.url, b.url, c.url], NAME)
        assert [e.state for e in model.pool.endpoints] == ["up", "down", "down"]
        assert f"endpoint {b.url} taken out" in capsys.readouterr().err
        requests = bbq_requests(data_dir, rows=16)
        Engine(model).loglikelihood(requests[:24])
        assert [e["scored"] for e in model.info.server["endpoints"]] == [24, 0, 0]
        # Both come back: b as the same model, c serving another one under the name.
        back = [FakeServer(tiny, NAME, port=ports[0]), FakeServer(tiny, "another-model", port=ports[1])]
        for e in model.pool.endpoints[1:]:
            e.next_probe = 0.0  # due now rather than in probe_s seconds
        deadline = time.monotonic() + 60
        while any(e.state == "down" for e in model.pool.endpoints) and time.monotonic() < deadline:
            Engine(model).loglikelihood(requests[:3])  # a call probes what is due
            time.sleep(0.2)
        states = [e["state"] for e in model.info.server["endpoints"]]
        assert states == ["up", "up", "refused"], model.info.server["endpoints"]
        assert "does not serve model" in model.info.server["endpoints"][2]["reason"]
        Engine(model).loglikelihood(requests[24:])
        out = model.info.server["endpoints"]
        assert out[1]["readmitted"] == 1 and out[1]["scored"] > 0 and out[2]["scored"] == 0
    finally:
        for s in (a, *back):
            s.stop()


def run_audit(tmp_path: Path, data_dir: Path, urls: list[str], *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "audits/test_bbq.py",
        "--backend",
        "openai",
        *[x for u in urls for x in ("--base-url", u)],
        "--model",
        NAME,
        "--limit",
        "2",
        "--data-dir",
        str(data_dir),
        "--min-n",
        "1",
        "--results-dir",
        str(tmp_path / "results"),
        "--cache-dir",
        str(tmp_path / "cache"),
        "--bootstrap-resamples",
        "0",
        "-p",
        "no:cacheprovider",
        "-q",
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)


def run_folder(tmp_path: Path, n: int) -> Path:
    return sorted((tmp_path / "results").iterdir(), key=lambda p: p.stat().st_mtime)[n]


def results(tmp_path: Path, n: int) -> dict:
    return json.loads((run_folder(tmp_path, n) / "results.json").read_text())


def test_every_endpoint_gone_stops_with_exit_3_and_a_rerun_resumes_from_the_cache(tiny, tmp_path, data_dir):
    first = [FakeServer(tiny, NAME), FakeServer(tiny, NAME)]
    for s in first:  # 9 completions for the start-up check, then 2 scoring requests each
        s.die_after = 11
    try:
        proc = run_audit(tmp_path, data_dir, [s.url for s in first], "--max-retries", "1")
    finally:
        for s in first:
            s.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]
    assert "every endpoint of the pool is out" in out
    lost = results(tmp_path, 0)
    done = {c: o["requests"] for c, o in lost["benchmarks"]["bbq"].items() if o.get("requests")}
    assert lost["errors"] and done  # some categories scored before the servers died, some not
    cached = sum(r["computed"] for r in done.values())
    # Answers of a category that failed half-way are not stored (the engine stores a call's
    # results when it returns): they are the only work a rerun repeats.
    assert cached <= sum(e["scored"] for e in lost["model"]["server"]["endpoints"])
    assert {e["state"] for e in lost["model"]["server"]["endpoints"]} == {"down"}

    second = [FakeServer(tiny, NAME), FakeServer(tiny, NAME)]
    try:
        proc = run_audit(tmp_path, data_dir, [s.url for s in second], "-n", "2")
    finally:
        for s in second:
            s.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]  # every gate decided
    rerun = results(tmp_path, 1)
    stats = [o["requests"] for o in rerun["benchmarks"]["bbq"].values() if o.get("requests")]
    assert len(stats) == 11 and not rerun.get("errors")
    assert sum(s["from_cache"] for s in stats) == cached  # nothing computed twice
    assert sum(s["computed"] + s["from_cache"] for s in stats) == sum(s["distinct"] for s in stats)
    server = rerun["model"]["server"]
    # Both workers' counts, summed: BBQ's pooled gates keep the benchmark on one worker, so the
    # other worker may have scored nothing (then it opened no pool).
    assert server["pool"]["processes"] in (1, 2)
    assert sum(e["scored"] for e in server["endpoints"]) == sum(s["computed"] for s in stats)
    assert [e["base_url"] for e in server["endpoints"]] == [s.url for s in second]
    assert server["pool"]["groups_split"] == 0
    provenance = (run_folder(tmp_path, 1) / "report.md").read_text()
    assert all(f"server endpoint {s.url}: up;" in provenance for s in second)


def test_base_url_file_and_repeated_flags(tmp_path):
    from audit_harness.backends import base_urls

    listed = tmp_path / "urls.txt"
    listed.write_text("# replicas\nhttp://10.0.0.1:8000/v1\n\nhttp://10.0.0.2:8000/v1  # rack 2\n")
    assert base_urls(["http://a:1/v1", f"@{listed}"]) == (
        "http://a:1/v1",
        "http://10.0.0.1:8000/v1",
        "http://10.0.0.2:8000/v1",
    )
    assert base_urls([]) is None
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="lists no URL"):
        base_urls([f"@{empty}"])
    with pytest.raises(ConfigError, match="cannot read"):
        base_urls([f"@{tmp_path / 'missing.txt'}"])


def first_down(tiny, fault: str) -> tuple[FakeServer, FakeServer]:
    """Two fake servers of one model, the first not answering at start-up: ``hangs`` (it lists
    its model and tokenizes, but no completion comes back: a cold server compiling its kernels)
    or ``refuses`` (stopped: connections refused)."""
    a, b = FakeServer(tiny, NAME), FakeServer(tiny, NAME)
    if fault == "hangs":
        a.hang = True
    else:
        a.stop()
    return a, b


@pytest.mark.parametrize("fault", ["hangs", "refuses"])
def test_a_first_endpoint_that_does_not_answer_at_start_up_hands_the_reference_on(tiny, data_dir, fault):
    a, b = first_down(tiny, fault)
    try:
        # 20 s: the second server must answer within it on a busy machine (the first never does).
        model = connect([a.url, b.url], NAME, timeout=20)
        assert [e.state for e in model.pool.endpoints] == ["down", "up"]
        assert model.reference == 1 and model.info.server["base_url"] == b.url
        assert model.alignment.ok and model.info.server["alignment"]["ok"]
        out = model.info.server["endpoints"]
        reason = out[0]["reason"]
        # The reason says how often the failed request was retried, as the accounting counts it.
        if fault == "hangs":
            assert "POST" in reason and "ReadTimeout" in reason and "not retried" in reason
            assert out[0]["retries"] == 0
        else:
            assert "ConnectError" in reason and "after 1 retry;" in reason and out[0]["retries"] == 1
        assert out[0]["taken_out"] == 1
        requests = bbq_requests(data_dir, rows=4)
        values = Engine(model).loglikelihood(requests)
        assert max(abs(x - y) for x, y in zip(values, Engine(tiny).loglikelihood(requests))) < 1e-4
        out = model.info.server["endpoints"]
        assert out[0]["scored"] == 0 and out[1]["scored"] == len(requests)
    finally:
        a.stop()
        b.stop()


def test_no_endpoint_answering_at_start_up_names_each_one(tiny):
    a, b = first_down(tiny, "hangs")
    b.stop()
    try:
        with pytest.raises(ModelError, match="no endpoint of the pool answers the start-up checks") as err:
            connect([a.url, b.url], NAME, timeout=2, max_retries=0)
    finally:
        a.stop()
    assert f"{a.url.removesuffix('/v1')}/v1/completions: ReadTimeout" in str(err.value)
    assert f"{b.url}/models: ConnectError" in str(err.value)


def test_an_audit_whose_first_endpoint_hangs_runs_on_the_second_and_says_so(tiny, tmp_path, data_dir):
    a, b = first_down(tiny, "hangs")
    try:
        proc = run_audit(tmp_path, data_dir, [a.url, b.url], "--request-timeout", "20")
    finally:
        b.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out[-3000:]  # every gate decided: not exit 4
    run = results(tmp_path, 0)
    assert not run.get("errors")
    server = run["model"]["server"]
    assert server["base_url"] == b.url
    down, up = server["endpoints"]
    assert down["state"] == "down" and "ReadTimeout" in down["reason"] and down["scored"] == 0
    stats = [o["requests"] for o in run["benchmarks"]["bbq"].values() if o.get("requests")]
    assert up["state"] == "up" and up["scored"] == sum(s["computed"] for s in stats) > 0
    # The end-of-run notes name it (the warning at the time went to captured output).
    assert f"SERVER: endpoint {a.url} taken out 1 time(s), down at the end of the run: POST" in out

    # With the second endpoint gone too, nothing answers: an input error naming both.
    b.stop()
    try:
        proc = run_audit(tmp_path, data_dir, [a.url, b.url], "--request-timeout", "3", "--max-retries", "0")
    finally:
        a.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "no endpoint of the pool answers the start-up checks" in out
    assert a.url in out and b.url in out
