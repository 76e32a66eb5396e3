"""Against two real vLLM servers (CPU build, fp32, SmolLM2) as a pool of replicas: a BBQ audit
through both, one of them killed by its process id half-way, completes with the in-process run's
predictions, every sequence computed once in total across the two servers and the result cache,
and results.json names both endpoints with their counts. Marked ``server`` (``make
test-server``); the pool's logic is tested on fake servers in test_pool.py."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from vllm_runs import SERVED_NAME, VLLM_PYTHON, audit, need_vllm, records

from audit_harness.engine.cache import ResultCache

pytestmark = pytest.mark.server

#: Scoring requests (prompts) of ``audits/test_bbq.py --limit 8``: 11 categories x 8 items x 3
#: choices; the start-up check adds 9 per server (3 sentences: echo, next token, echo again).
SEQUENCES = 11 * 8 * 3
CHECK_REQUESTS = 9


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    """Two vLLM replicas of SmolLM2 started side by side, each worker on its own core when there
    are two (a worker bound to a core stalls beside another computing on it); stopped by their
    process ids."""
    need_vllm()
    from audit_harness.models.zoo import materialize
    from audit_harness.serving import free_port, start_vllm, wait_ready

    cores = sorted(os.sched_getaffinity(0))
    binds = [str(cores[0]), str(cores[-1])] if len(cores) > 1 else [None, None]
    ports: list[int] = []
    while len(ports) < 2:
        port = free_port()
        if port not in ports:
            ports.append(port)
    logs = tmp_path_factory.mktemp("vllm-pool")
    folder = materialize(SERVED_NAME)
    start = time.monotonic()
    servers = [
        start_vllm(VLLM_PYTHON, folder, SERVED_NAME, logs / f"server{i}.log", port=p, cpus=b, wait=False)
        for i, (p, b) in enumerate(zip(ports, binds))
    ]
    try:
        for s in servers:
            wait_ready(s)
        print(f"\ntwo vLLM servers up in {time.monotonic() - start:.0f} s (started side by side)")
        yield servers
    finally:
        for s in servers:
            s.stop()


def finished_requests(url: str) -> float | None:
    """Requests (prompts) the server finished, from its /metrics; None once it is gone."""
    try:
        text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_audit_through_two_replicas_survives_losing_one(in_process_run, two_servers, tmp_path, data_dir):
    first, second = two_servers
    base = [finished_requests(s.url) for s in two_servers]
    results, cache = tmp_path / "pool", tmp_path / "cache"
    start = time.monotonic()
    proc = audit(
        results,
        data_dir,
        ("audits/test_bbq.py",),
        "--backend",
        "openai",
        "--base-url",
        first.url,
        "--base-url",
        second.url,
        "--cache-dir",
        str(cache),
    )
    # Half-way (by the prompts both servers finished), the second replica dies.
    killed_at = None
    while proc.poll() is None:
        done = [finished_requests(s.url) for s in two_servers]
        if None not in done and sum(d - b for d, b in zip(done, base)) >= 2 * CHECK_REQUESTS + SEQUENCES / 2:
            killed_at = done[1] - base[1]
            second.kill()
            break
        time.sleep(0.3)
    out, _ = proc.communicate(timeout=3000)
    wall = time.monotonic() - start
    assert proc.returncode in (0, 1), out[-4000:]  # the run completes: every gate decided
    assert killed_at is not None, "the audit ended before the second server was killed"
    (run,) = list(results.iterdir())

    served, local = records(run), records(in_process_run, "bbq")
    assert served.keys() == local.keys() and len(served) == 8 * 11
    worst = max(
        abs(a - b) for k in served for a, b in zip(served[k]["loglikelihoods"], local[k]["loglikelihoods"])
    )
    differ = [k for k in served if served[k]["predicted_choice"] != local[k]["predicted_choice"]]
    document = json.loads((run / "results.json").read_text())
    stats = [c["requests"] for c in document["benchmarks"]["bbq"].values()]
    endpoints = document["model"]["server"]["endpoints"]
    print(
        f"\n{len(served)} items, {len(served) - len(differ)} identical predictions, max |dLL| {worst:.2e}; "
        f"audit {wall:.0f} s; second server killed after {killed_at:.0f} prompts"
    )
    for e in endpoints:
        print(
            f"  {e['base_url']}: {e['state']}, {e['requests']} requests, {e['scored']} scored, "
            f"{e['tokens']} tokens, {e['retries']} retries, {e['failures']} failures, {e['seconds']} s, "
            f"{e['groups']} groups"
        )
    assert not differ and worst < 1e-3

    # Both endpoints named, with their counts; the second one out, its lost requests re-sent.
    assert [e["base_url"] for e in endpoints] == [first.url, second.url]
    assert [e["state"] for e in endpoints] == ["up", "down"]
    assert endpoints[1]["failures"] >= 1 and endpoints[0]["failures"] == 0
    assert all(e["scored"] > 0 for e in endpoints)
    # Every sequence computed once: answered by exactly one server, stored once, none from a
    # cache (the run starts with an empty one) ...
    assert sum(s["distinct"] for s in stats) == sum(s["computed"] for s in stats) == SEQUENCES
    assert sum(e["scored"] for e in endpoints) == SEQUENCES
    assert len(ResultCache(cache)) == SEQUENCES
    # ... which the surviving server's own count confirms (its start-up check aside).
    assert finished_requests(first.url) - base[0] == endpoints[0]["scored"] + CHECK_REQUESTS
    # An item's three choices share a context: each item went to one server.
    pool = document["model"]["server"]["pool"]
    assert pool["groups"] == 8 * 11 and pool["groups_split"] == 0
    assert (Path(run) / "report.md").read_text().count("server endpoint http://127.0.0.1:") == 2
