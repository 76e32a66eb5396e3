"""Throughput of the server backend against a local vLLM at several concurrencies, next to the
in-process backend on the same items, measured side by side in one run.

    python perf/server_throughput.py --per-category 10                 # starts vLLM from .venv-vllm
    python perf/server_throughput.py --base-url http://127.0.0.1:8000/v1 --model NAME
    python perf/server_throughput.py --replicas 2 --concurrency 8      # one server vs a pool

Items: the first N rows of every BBQ category (3 choices each, the default protocol). Each
configuration scores them from scratch (no result cache), through the engine as an audit does.
Prints one row per configuration: wall time, requests/s (distinct scored sequences), items/s,
the vLLM prefix-cache hit rate of the scoring requests (from its /metrics; vLLM V1 does not even
look up the cache for a request that asks for prompt log-probabilities) next to a control that
sends the same prompts without asking for them, and the ratio to the in-process backend; then
predictions identical and the largest |dLL| between the two backends.

``--replicas N``: instead, one vLLM on every core against N replicas started side by side (each
worker on its own cores) as a pool, at the same total concurrency (``--concurrency`` is the
total: each replica gets its share), with the pool's accounting per endpoint: how the prefix
groups (an item's context) were spread, and how many went to more than one server.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def bbq_items(data_dir: Path, per_category: int):
    from audit_harness.benchmarks import registry

    bbq = registry()["bbq"]
    items = [it for c in bbq.categories for it in bbq.load_category(data_dir, c).items[:per_category]]
    requests = [(bbq.prompt(it), " " + ch) for it in items for ch in bbq.choices(it)]
    return items, requests


def prefix_counters(url: str) -> tuple[float, float] | None:
    """(prefix-cache queries, hits) in tokens from vLLM's /metrics, or None."""
    import httpx

    try:
        text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    except httpx.HTTPError:
        return None

    def total(name: str) -> float:
        return sum(float(v) for v in re.findall(rf"^vllm:{name}_total{{[^}}]*}} ([0-9.e+]+)$", text, re.M))

    return total("prefix_cache_queries"), total("prefix_cache_hits")


def timed(model, requests, engine_cls):
    engine = engine_cls(model)  # no cache, no memo: every sequence computed
    start = time.perf_counter()
    values = engine.loglikelihood(requests)
    return time.perf_counter() - start, values, engine.stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-category", type=int, default=10)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--base-url", help="an already running server (default: start vLLM from .venv-vllm)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--data-dir", default=os.environ.get("AUDIT_DATA_DIR") or str(REPO.parent / "shared" / "data")
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the in-process backend")
    ap.add_argument("--replicas", type=int, default=0, help="compare one server with a pool of N replicas")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from audit_harness.engine.executor import Engine
    from audit_harness.models import load_model
    from audit_harness.models.openai_server import connect

    torch.set_num_threads(args.threads)
    items, requests = bbq_items(Path(args.data_dir), args.per_category)
    if args.replicas:
        replicas(args, items, requests)
        return
    server = None
    if args.base_url is None:
        from audit_harness.models.zoo import materialize
        from audit_harness.serving import start_vllm

        t = time.perf_counter()
        server = start_vllm(
            REPO / ".venv-vllm" / "bin" / "python",
            materialize(args.model),
            args.model,
            Path("/tmp") / f"bias-audit-perf-vllm-{os.getpid()}.log",
            nice=0,
        )
        print(f"vLLM (CPU, fp32, --enforce-eager) up in {time.perf_counter() - t:.0f} s at {server.url}")
        args.base_url = server.url
    try:
        rows = []
        local = load_model(args.model, device="cpu", dtype="float32", batch_size=16)
        wall, ref, stats = timed(local, requests, Engine)
        rows.append(("in-process (prefix tree)", wall, stats.computed, "-", ref))
        local.prefix_sharing = False
        wall, _, stats = timed(local, requests, Engine)
        rows.append(("in-process (full sequences)", wall, stats.computed, "-", None))
        for c in (int(x) for x in args.concurrency.split(",")):
            model = connect(args.base_url, args.model, max_concurrency=c)
            model.encode_pairs(requests)  # tokenization is not what is measured
            before = prefix_counters(args.base_url)
            wall, values, stats = timed(model, requests, Engine)
            after = prefix_counters(args.base_url)
            rows.append((f"vLLM, concurrency {c}", wall, stats.computed, _hit_rate(before, after), values))
            model.pool.close()
        # The same prompts as plain 1-token generations, one request at a time: the prefix
        # cache may serve each request's shared context from the requests before it.
        model = connect(args.base_url, args.model, max_concurrency=1)
        rows.append(_control(model, requests, args.base_url))
        model.pool.close()
        base = rows[0][1]
        print(
            f"{len(items)} BBQ items ({args.per_category} per category), {len(requests)} choices; "
            f"in-process torch threads {args.threads}"
        )
        print("| backend | wall s | requests/s | items/s | prefix-cache hits | time vs in-process |")
        print("|---|---|---|---|---|---|")
        for name, wall, n, hit, _ in rows:
            print(
                f"| {name} | {wall:.1f} | {n / wall:.1f} | {len(items) / wall:.2f} | "
                f"{hit} | {wall / base:.2f}x |"
            )
        for name, _, _, _, values in rows[2:]:
            if values is None:
                continue
            same = sum(_argmax(values, i) == _argmax(ref, i) for i in range(len(items)))
            worst = max(abs(a - b) for a, b in zip(values, ref))
            print(f"{name}: predictions identical {same}/{len(items)}, max |dLL| {worst:.1e}")
    finally:
        if server is not None:
            server.stop()


def _hit_rate(before, after) -> str:
    if before is None or after is None:
        return "-"
    if after[0] <= before[0]:
        return "no lookups"  # the requests skipped reading the prefix cache
    return f"{(after[1] - before[1]) / (after[0] - before[0]):.0%}"


def _control(model, requests, url: str):
    """The same token-id prompts sent without asking for prompt log-probabilities (1 generated
    token each), in the same order and grouping: what the server's prefix cache does for
    prompts it may reuse, next to the scoring requests above."""
    seqs = sorted({tuple(a) + tuple(b) for a, b in model.encode_pairs(requests)})
    groups = [
        [list(s) for s in seqs[i : i + model.prompts_per_request]]
        for i in range(0, len(seqs), model.prompts_per_request)
    ]
    # A fresh cache salt: hits come only from prompts of this control sharing a context, not
    # from blocks the scoring requests above left in the cache.
    payload = {
        "model": model.served_name,
        "max_tokens": 1,
        "temperature": 0,
        "cache_salt": f"control-{os.getpid()}-{time.time_ns()}",
    }
    before = prefix_counters(url)
    start = time.perf_counter()
    model.pool.map(lambda c, g: c.post("/v1/completions", {**payload, "prompt": g}), groups)
    wall = time.perf_counter() - start
    after = prefix_counters(url)
    return (
        "vLLM, concurrency 1, same prompts without prompt log-probs (control)",
        wall,
        len(seqs),
        _hit_rate(before, after),
        None,
    )


def replicas(args, items, requests) -> None:
    """One server on every core, then ``args.replicas`` servers side by side, each on its share of
    the cores, as a pool: the same requests through the engine at the same total concurrency."""
    from audit_harness.engine.executor import Engine
    from audit_harness.models import load_model
    from audit_harness.models.openai_server import connect
    from audit_harness.models.zoo import materialize
    from audit_harness.serving import start_vllm, wait_ready

    python = REPO / ".venv-vllm" / "bin" / "python"
    folder = materialize(args.model)
    log = Path("/tmp") / f"bias-audit-perf-vllm-{os.getpid()}"
    total = int(args.concurrency.split(",")[-1])
    ref = Engine(load_model(args.model, device="cpu", dtype="float32", batch_size=16)).loglikelihood(requests)
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // args.replicas)
    spans = [cores[i * share : (i + 1) * share] or cores[-1:] for i in range(args.replicas)]
    binds = [str(c[0]) if len(c) == 1 else f"{c[0]}-{c[-1]}" for c in spans]
    rows = []
    for name, cpus, per in (
        ("one server, every core", [f"{cores[0]}-{cores[-1]}"], total),
        (f"{args.replicas} replicas as a pool", binds, max(1, total // args.replicas)),
    ):
        servers = [
            start_vllm(python, folder, args.model, Path(f"{log}-{i}.log"), cpus=c, wait=False)
            for i, c in enumerate(cpus)
        ]
        try:
            for s in servers:
                wait_ready(s)
            model = connect([s.url for s in servers], args.model, max_concurrency=per)
            model.encode_pairs(requests)  # tokenization is not what is measured
            wall, values, _ = timed(model, requests, Engine)
            rows.append((name, per, wall, values, model.info.server))
            model.pool.close()
        finally:
            for s in servers:
                s.stop()
    print(
        f"{len(items)} BBQ items ({args.per_category} per category), {len(requests)} choices, total concurrency {total}"
    )
    print(
        "| configuration | concurrency per endpoint | wall s | items/s | scored per endpoint | prefix groups per endpoint | groups split | predictions identical | max abs dLL |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, per, wall, values, server in rows:
        scored = " / ".join(str(e["scored"]) for e in server["endpoints"])
        groups = " / ".join(str(e["groups"]) for e in server["endpoints"])
        same = sum(_argmax(values, i) == _argmax(ref, i) for i in range(len(items)))
        worst = max(abs(a - b) for a, b in zip(values, ref))
        print(
            f"| {name} | {per} | {wall:.1f} | {len(items) / wall:.2f} | {scored} | {groups} | "
            f"{server['pool']['groups_split']} | {same}/{len(items)} | {worst:.1e} |"
        )


def _argmax(values, item: int, k: int = 3) -> int:
    part = values[item * k : (item + 1) * k]
    return max(range(k), key=part.__getitem__)


if __name__ == "__main__":
    main()
