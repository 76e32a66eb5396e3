"""The ``throughput`` part: an 8B-shaped Llama through the engine's packed path, tokens per
second, the fraction of the GPU's bf16 peak, and the full BBQ audit's projected time."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .common import LLAMA3_8B, PEAK_FRACTION_FLOOR, REPO, SMALL_LLAMA, THROUGHPUT_WARMUP_ITEMS, bf16_peak
from .context import Context, PartResult
from .models import bbq, bbq_category, build_model, make_backend


class _Timed:
    """The backend under the engine with each packed forward timed between two device syncs,
    and its tokens, padded tokens and scored positions counted."""

    def __init__(self, backend, sync: Callable[[], None]):
        self._backend = backend
        self._sync = sync
        self.forward_s = 0.0
        self.forwards = 0
        self.tokens = 0
        self.padded = 0
        self.queries = 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def forward_packed(self, rows):
        self._sync()
        t = time.perf_counter()
        out = self._backend.forward_packed(rows)
        self._sync()
        self.forward_s += time.perf_counter() - t
        self.forwards += 1
        self.tokens += sum(len(r[0]) for r in rows)
        self.padded += len(rows) * max(len(r[0]) for r in rows)
        self.queries += sum(len(r[3]) for r in rows)
        return out


class _Counting(_Timed):
    """The same backend with no forward at all: the token load of a plan, as the engine would
    pack and batch it."""

    def forward_packed(self, rows):
        self.forwards += 1
        self.tokens += sum(len(r[0]) for r in rows)
        self.padded += len(rows) * max(len(r[0]) for r in rows)
        self.queries += sum(len(r[3]) for r in rows)
        return [[0.0] * len(r[3]) for r in rows]


def throughput_items(data_dir: Path, fraction: float | None, per_category: int | None = None):
    """``{category: items}``: the first ``fraction`` of each BBQ category file (file order keeps
    an item's context variants together, so prefixes are shared as in the full run), or the
    first ``per_category`` items (the dry run)."""
    out = {}
    for cat in bbq().categories:
        items = bbq_category(data_dir, cat)
        n = per_category if per_category is not None else math.ceil(fraction * len(items))
        out[cat] = list(items[:n])
    return out


def count_plan(bench, backend, items_by_cat) -> dict[str, int]:
    """Tokens, padded tokens, scored positions and forwards the engine would run for these items
    on ``backend`` (its tokenizer, budgets and row size), without running the model."""
    from audit_harness.engine.executor import Engine

    counter = _Counting(backend, lambda: None)
    engine = Engine(counter)
    n = 0
    for items in items_by_cat.values():
        bench.evaluate(engine, items)
        n += len(items)
    return {
        "items": n,
        "tokens": counter.tokens,
        "padded_tokens": counter.padded,
        "queries": counter.queries,
        "forwards": counter.forwards,
    }


def count_category(job: tuple[str, str, str, dict, int | None]) -> dict[str, int]:
    """One BBQ category's plan counts (``count_plan``), in a worker process: (data dir, category,
    tokenizer dir, the timed model's config dims, items or None for all)."""
    data_dir, category, tokenizer_dir, dims, limit = job
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import AutoTokenizer, LlamaConfig

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    # A one-layer model of the same vocabulary and window: the plan depends on the tokenizer, the
    # vocabulary (through the logits budget), the window and the engine's budgets, not the layers.
    small = dict(hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1)
    config = LlamaConfig(**{**dims, **small, "num_key_value_heads": 1})
    backend = make_backend(build_model(config, "cpu", torch.float32), tok, "count")
    items = bbq_category(Path(data_dir), category)
    return count_plan(bbq(), backend, {category: items[:limit] if limit else items})


def start_count(ctx: Context, dims: dict, limit: int | None):
    """The full BBQ plan counted in worker processes, one job per category (tokenizing 175k
    requests and building their prefix trees is a minute of one core): returns (pool, futures)."""
    import concurrent.futures
    import multiprocessing

    workers = min(len(bbq().categories), max(1, (os.cpu_count() or 2) - 2))
    # spawn: a forked child of a process that touched CUDA cannot use it, and needs nothing here.
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    jobs = [(str(ctx.data_dir), c, str(ctx.tokenizer_dir), dims, limit) for c in bbq().categories]
    return pool, [pool.submit(count_category, j) for j in jobs], workers


def llama_flops(config, tokens: int, queries: int) -> tuple[float, float]:
    """(``2 N tokens`` with N every parameter, as a model-FLOPs utilisation is usually stated;
    the work actually asked: the decoder layers for every token forwarded, the output head only at
    scored positions, no embedding matmul)."""
    h, i, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    layer = h * h * 2 + h * kv * 2 + 3 * h * i  # q, o; k, v; gate, up, down
    head = h * config.vocab_size
    total = L * layer + head * (1 if config.tie_word_embeddings else 2)
    return 2.0 * total * tokens, 2.0 * L * layer * tokens + 2.0 * head * queries


def _build_and_count(ctx: Context, config, dims: dict, tok, sync: Callable[[], None]) -> dict[str, Any]:
    """The model built (timed), the timed items chosen, the engine warmed up on other items, and
    the full BBQ plan counted meanwhile in worker processes; ``backend`` None when it cannot pack."""
    import torch

    from audit_harness.engine.executor import Engine

    t_count = time.perf_counter()
    pool, futures, workers = start_count(ctx, dims, 4 if ctx.dry_run else None)
    try:
        t = time.perf_counter()
        model = build_model(config, ctx.device, torch.bfloat16)
        sync()
        build_s = time.perf_counter() - t
        n_params = sum(p.numel() for p in model.parameters())
        backend = make_backend(model, tok, "llama3-8b-shape-random" if not ctx.dry_run else "small-llama")
        if not backend.can_pack:
            return {"backend": None}
        bench = bbq()
        timed_items = throughput_items(ctx.data_dir, ctx.fraction, per_category=2 if ctx.dry_run else None)
        # Warm-up (CUDA context, kernels, allocator) on items after the timed ones.
        warm = [
            it
            for c in bench.categories
            for it in bbq_category(ctx.data_dir, c)[len(timed_items[c]) :][: THROUGHPUT_WARMUP_ITEMS // 8]
        ]
        bench.evaluate(Engine(_Timed(backend, sync)), warm)
        counts = [f.result() for f in futures]  # before timing: the counting takes CPU too
        count_s = time.perf_counter() - t_count
    finally:
        pool.shutdown(cancel_futures=True)
    return {
        "model": model,
        "backend": backend,
        "bench": bench,
        "timed_items": timed_items,
        "build_s": build_s,
        "n_params": n_params,
        "count_s": count_s,
        "workers": workers,
        "plan": {k: sum(c[k] for c in counts) for k in counts[0]},
    }


def _summary_lines(ctx: Context, config, built: dict, data: dict, timed: _Timed) -> list[str]:
    """What the part prints: the model, the timed run, its rates, the fraction of the bf16 peak
    and the full BBQ plan's projection (``data`` gains the peak fractions when the peak is known)."""
    name, peak, plan, wall = data["gpu"], data["peak_tflops"], data["full_plan"], data["timed"]["wall_s"]
    cuda = ctx.device.startswith("cuda")
    per_fwd = max(1, timed.forwards)
    lines = [
        f"{'Llama-3-8B' if not ctx.dry_run else 'small Llama (dry run)'} shape, random bf16 weights, "
        f"{built['n_params'] / 1e9:.2f}B parameters (vocabulary {config.vocab_size:,}; tokens from the "
        f"SmolLM2 tokenizer), built on {name} in {built['build_s']:.1f} s",
        f"timed: {data['timed']['items']:,} BBQ items ("
        + (f"the first {ctx.fraction:.0%} of each category" if not ctx.dry_run else "2 per category")
        + f"), {timed.tokens:,} tokens in {timed.forwards:,} forwards ({timed.tokens / per_fwd:,.0f} "
        f"tokens and {timed.queries / per_fwd:,.0f} scored positions a forward, padding "
        f"{1 - timed.tokens / max(1, timed.padded):.1%})"
        + (f", peak GPU memory {data['peak_memory_bytes'] / 2**30:.1f} GiB" if cuda else ""),
        f"{data['tokens_per_s']:,.0f} tokens/s over the wall time ({wall:.1f} s), "
        f"{data['tokens_per_s_forward']:,.0f} tokens/s "
        f"within forwards ({timed.forward_s:.1f} s; the rest is tokenizing, the prefix tree and "
        "packing on the CPU)",
    ]
    if peak:
        flops_2n, flops_work = llama_flops(config, timed.tokens, timed.queries)
        util_2n = flops_2n / wall / (peak * 1e12)
        util_fwd = flops_2n / timed.forward_s / (peak * 1e12)
        work_fwd = flops_work / timed.forward_s / (peak * 1e12)
        data.update(peak_fraction=util_2n, peak_fraction_forward=util_fwd, work_fraction_forward=work_fwd)
        lines.append(
            f"{name}, bf16 dense peak {peak:.0f} TFLOP/s: 2*N*tokens/s is {util_2n:.1%} of it over "
            f"the wall time, {util_fwd:.1%} within forwards (the work actually asked, the output "
            f"head at scored positions only: {work_fwd:.1%})"
        )
    elif cuda:
        lines.append(f"{name}: not in the bf16 peak table, no fraction of peak")
    lines.append(
        f"full BBQ plan ({plan['items']:,} items, counted through the engine by {built['workers']} worker(s) "
        f"in {built['count_s']:.0f} s): {plan['tokens']:,} tokens in {plan['forwards']:,} forwards -> "
        f"projected {data['projected_bbq_s'] / 60:.1f} min at the wall rate, "
        f"{data['projected_bbq_forward_s'] / 60:.1f} min were the CPU side hidden"
        + (" (dry run: CPU, tiny model, 4 items a category; not a projection)" if ctx.dry_run else "")
    )
    return lines


def part_throughput(ctx: Context) -> PartResult:
    """An 8B-shaped Llama in bf16 scores a fraction of BBQ through the engine's packed path, as an
    audit would (the HF backend's and the engine's defaults); the full BBQ plan is counted
    meanwhile in worker processes, and its time projected at the measured rate."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig

    from audit_harness.engine.executor import Engine

    tok = AutoTokenizer.from_pretrained(ctx.tokenizer_dir)
    dims = SMALL_LLAMA if ctx.dry_run else LLAMA3_8B
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config = LlamaConfig(**dims, **ids)
    cuda = ctx.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    built = _build_and_count(ctx, config, {**dims, **ids}, tok, sync)
    if built["backend"] is None:
        return PartResult("throughput", False, ["the backend cannot pack: not the path an audit takes"])
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    timed = _Timed(built["backend"], sync)
    engine = Engine(timed)
    n_items = sum(len(v) for v in built["timed_items"].values())
    sync()
    t = time.perf_counter()
    for items in built["timed_items"].values():
        built["bench"].evaluate(engine, items)
    sync()
    wall = time.perf_counter() - t
    tps_wall = timed.tokens / wall
    tps_fwd = timed.tokens / timed.forward_s if timed.forward_s else math.nan
    name = torch.cuda.get_device_name() if cuda else "cpu"
    plan = built["plan"]
    data: dict[str, Any] = {
        "gpu": name,
        "n_parameters": built["n_params"],
        "build_s": built["build_s"],
        "count_s": built["count_s"],
        "count_workers": built["workers"],
        "full_plan": plan,
        "timed": {
            "items": n_items,
            "fraction": None if ctx.dry_run else ctx.fraction,
            "tokens": timed.tokens,
            "padded_tokens": timed.padded,
            "queries": timed.queries,
            "forwards": timed.forwards,
            "wall_s": wall,
            "forward_s": timed.forward_s,
        },
        "tokens_per_s": tps_wall,
        "tokens_per_s_forward": tps_fwd,
        "peak_tflops": bf16_peak(name) if cuda else None,
        "projected_bbq_s": plan["tokens"] / tps_wall,
        "projected_bbq_forward_s": plan["tokens"] / tps_fwd if tps_fwd else math.nan,
        "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
    }
    lines = _summary_lines(ctx, config, built, data, timed)
    ok = math.isfinite(tps_wall) and tps_wall > 0 and timed.tokens > 0
    if data["peak_tflops"] and data["peak_fraction_forward"] < PEAK_FRACTION_FLOOR:
        ok = False
        lines.append(f"below the {PEAK_FRACTION_FLOOR:.0%} floor of peak within forwards")
    del built, timed, engine
    if cuda:
        torch.cuda.empty_cache()
    return PartResult("throughput", ok, lines, data)
