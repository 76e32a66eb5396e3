"""Measure the throughput ``--plan`` turns token counts into time with (``audit_harness.planning.
MEASURED``): forward tokens/s of the packed scoring path and decode tokens/s of greedy generation,
for one model on this machine, through the real engine and benchmarks on real rows.

- forward: BBQ (loglikelihood) items, the first ``--bbq-items`` of every category's ``--limit``
  sample; tokens the engine forwarded / seconds spent inside ``forward_packed``.
- decode: KoBBQ generation batches (prompts as the benchmark builds them): each batch the engine
  sends is run twice, once for 1 new token and once for ``max_new_tokens``; decode tokens/s =
  (new tokens of the second - of the first) / (its seconds - the first's). The first run also
  gives the prompt (prefill) tokens/s of generation.

Each rate is given per second of wall time and per second of this process's CPU time (all its
threads): on a machine shared with other jobs the wall rates are what the run got, and the CPU
rates times the thread count what it would get alone (if its threads scale).

Prints one JSON object: the rates and the conditions (CPU, threads, dtype, batch size, load
average before and after, library versions). Copy them into ``MEASURED`` when they change.

usage: python perf/plan_rates.py [--model smollm2-135m-instruct] [--threads 2] [--batch-size 16]
           [--bbq-items 8] [--kobbq-rows 1] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure_forward(model, bbq, data_dir, n_per_category: int) -> dict:
    """Tokens the engine forwarded scoring ``n_per_category`` BBQ items of every category, with
    the wall and CPU seconds spent inside ``forward_packed``."""
    from audit_harness.engine.executor import Engine

    timed = {"seconds": 0.0, "cpu": 0.0}
    real_packed = model.forward_packed

    def packed(rows):
        start, cpu = time.perf_counter(), time.process_time()
        out = real_packed(rows)
        timed["seconds"] += time.perf_counter() - start
        timed["cpu"] += time.process_time() - cpu
        return out

    model.forward_packed = packed
    engine = Engine(model, cache=None, forward_seconds=0)
    n_items = 0
    for category in bbq.categories:
        data = bbq.load_category(data_dir, category)
        items = bbq.select(data.items, n_per_category, 0, salt=f"bbq/{category}")
        bbq.evaluate(engine, items)
        n_items += len(items)
    model.forward_packed = real_packed
    return {"tokens": engine.stats.tokens_forwarded, "items": n_items, **timed}


def measure_decode(model, kobbq, data_dir, rows: int) -> tuple[dict, str]:
    """The prefill and decode tokens, wall and CPU seconds of KoBBQ generation batches as the
    engine sends them, each run for 1 and for ``max_new_tokens`` new tokens; and the category."""
    from audit_harness.engine.executor import Engine

    sums = {"prefill_tokens": 0, "decode_tokens": 0, "rows": 0}
    for key in ("prefill_s", "prefill_cpu", "decode_s", "decode_cpu"):
        sums[key] = 0.0
    real_generate = model.generate_tokens

    def generate(prompts, max_new_tokens, score_tokens=None):
        start, cpu = time.perf_counter(), time.process_time()
        _, one, _ = real_generate(prompts, 1)
        first, first_cpu = time.perf_counter() - start, time.process_time() - cpu
        start, cpu = time.perf_counter(), time.process_time()
        out = real_generate(prompts, max_new_tokens, score_tokens)
        whole, whole_cpu = time.perf_counter() - start, time.process_time() - cpu
        sums["rows"] += len(prompts)
        sums["prefill_tokens"] += one - len(prompts)
        sums["prefill_s"] += first
        sums["prefill_cpu"] += first_cpu
        sums["decode_tokens"] += out[1] - one
        sums["decode_s"] += whole - first
        sums["decode_cpu"] += whole_cpu - first_cpu
        return out

    model.generate_tokens = generate
    # The engine streams greedy generations through generate_stream (continuous batching) when a
    # backend can; the two-run measure above needs whole batches, so the stream is switched off:
    # a batch keeps rows that have ended, so these rates bound the stream's from below.
    model.continuous_batching = False
    engine = Engine(model, cache=None, forward_seconds=0)
    category = kobbq.categories[0]
    data = kobbq.load_category(data_dir, category)
    items = kobbq.select(data.items, rows, 0, salt=f"kobbq/{category}")
    kobbq.evaluate(engine, items)
    return sums, category


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--bbq-items", type=int, default=8, help="items per BBQ category")
    ap.add_argument("--kobbq-rows", type=int, default=1, help="KoBBQ test rows (x 15 prompts)")
    ap.add_argument("--data-dir", default=os.environ.get("AUDIT_DATA_DIR"))
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import transformers

    from audit_harness.benchmarks import registry
    from audit_harness.data import resolve_data_dir
    from audit_harness.models import load_model

    data_dir = resolve_data_dir(args.data_dir)
    load_before = os.getloadavg()
    model = load_model(args.model, device="cpu", dtype="float32", batch_size=args.batch_size)
    benchmarks = registry()
    fwd = measure_forward(model, benchmarks["bbq"], data_dir, args.bbq_items)
    print(
        f"forward: {fwd['tokens']} tokens in {fwd['seconds']:.1f} s ({fwd['cpu']:.1f} CPU s)",
        file=sys.stderr,
        flush=True,
    )
    sums, category = measure_decode(model, benchmarks["kobbq"], data_dir, args.kobbq_rows)
    load_after = os.getloadavg()

    print(
        json.dumps(
            {
                "model": args.model,
                "parameters": model.info.n_parameters,
                "forward_tokens_per_s": round(fwd["tokens"] / fwd["seconds"], 1),
                "decode_tokens_per_s": round(sums["decode_tokens"] / sums["decode_s"], 1),
                "prefill_tokens_per_s": round(sums["prefill_tokens"] / sums["prefill_s"], 1),
                # Per second of this process's CPU time (all its threads): what a machine shared
                # with other jobs still measures of the model's own speed.
                "forward_tokens_per_cpu_s": round(fwd["tokens"] / fwd["cpu"], 1),
                "decode_tokens_per_cpu_s": round(sums["decode_tokens"] / sums["decode_cpu"], 1),
                "prefill_tokens_per_cpu_s": round(sums["prefill_tokens"] / sums["prefill_cpu"], 1),
                "measured_on": {
                    "forward": f"{fwd['items']} BBQ items, {fwd['tokens']} tokens forwarded in "
                    f"{fwd['seconds']:.1f} s of forward_packed",
                    "decode": f"{sums['rows']} KoBBQ generations ({category}), "
                    f"{sums['decode_tokens']} decode tokens in {sums['decode_s']:.1f} s",
                },
                "conditions": {
                    "cpu": cpu_name(),
                    "cores": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(),
                    "dtype": "float32",
                    "device": "cpu",
                    "batch_size": args.batch_size,
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in load_after],
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "date": time.strftime("%Y-%m-%d"),
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
