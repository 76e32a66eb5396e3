"""Side-by-side speed of multiple-choice log-likelihood scoring on real BBQ items, in one run:

  (a) our HF backend with prefix sharing (each distinct prompt runs once, its key/value cache
      scores all the item's choices),
  (b) our HF backend, full-sequence path (every prompt + choice from scratch),
  (c) lm-evaluation-harness 0.4.13 ``HFLM.loglikelihood`` on the same (context, continuation)
      strings, run in the lm-eval venv through ``perf/lmeval_loglikelihood.py``.

Requests are built as the audit builds them: ``BBQ.prompt(item)`` and ``" " + choice`` for the
3 options of a ``balanced_sample`` of each category. Each method gets one untimed warm-up call;
the reported time is the best of ``--repeats`` timed calls (lm-eval: one call, in its own
process). Also reported: max |score difference| between the three. Nothing is asserted: timings
on a shared CPU vary, so read ratios, not absolute seconds.

usage: python perf/bench_loglikelihood.py [--model smollm2-135m-instruct] [--per-category 12]
           [--categories Age Gender_identity Religion SES] [--batch-size 16] [--threads 0]
           [--repeats 1] [--seed 0] [--lmeval-python /work/lmeval-venv/bin/python]
           [--skip-lmeval] [--output bench.json]

Data: $AUDIT_DATA_DIR, else /work/shared/data. Exit status 0, or 2 when lm-eval fails (its
stderr tail is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from audit_harness.benchmarks import registry
from audit_harness.benchmarks.bbq_family import balanced_sample  # noqa: E402
from audit_harness.models.zoo import ZOO, load_model, materialize  # noqa: E402

DEFAULT_CATEGORIES = ("Age", "Gender_identity", "Religion", "SES")
DEFAULT_LMEVAL_PYTHON = "/work/lmeval-venv/bin/python"


def build_requests(data_dir: Path, categories, per_category: int, seed: int) -> tuple[list, int]:
    """(context, continuation) strings of BBQ items, 3 per item, and the number of items."""
    bbq = registry()["bbq"]
    requests, n_items = [], 0
    for category in categories:
        items = balanced_sample(bbq.load_category(data_dir, category).items, per_category, seed,
                                salt=category)
        n_items += len(items)
        for it in items:
            prompt = bbq.prompt(it)
            requests.extend((prompt, bbq.delimiter + c) for c in bbq.choices(it))
    return requests, n_items


def time_ours(model, requests, sharing: bool, repeats: int) -> tuple[float, list[float]]:
    model.prefix_sharing = sharing
    model.loglikelihood(requests[:2])  # warm-up (allocator, kernels), untimed
    best, scores = float("inf"), []
    for _ in range(repeats):
        t0 = time.perf_counter()
        scores = model.loglikelihood(requests)
        best = min(best, time.perf_counter() - t0)
    return best, scores


def time_lmeval(python: str, folder: Path, requests, batch_size: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-ll-") as tmp:
        req_path, out_path = Path(tmp) / "requests.json", Path(tmp) / "out.json"
        req_path.write_text(json.dumps(requests, ensure_ascii=False), encoding="utf-8")
        cmd = [python, str(REPO / "perf" / "lmeval_loglikelihood.py"), "--model", str(folder),
               "--requests", str(req_path), "--output", str(out_path),
               "--batch-size", str(batch_size), "--threads", str(threads)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("PYTHONPATH", None)  # keep our venv's packages out of the lm-eval interpreter
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        if proc.returncode != 0:
            print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
            print(f"lm-eval helper failed (rc {proc.returncode}): {' '.join(cmd)}", file=sys.stderr)
            sys.exit(2)
        return json.loads(out_path.read_text(encoding="utf-8"))


def max_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="zoo name or model folder")
    ap.add_argument("--categories", nargs="+", default=list(DEFAULT_CATEGORIES))
    ap.add_argument("--per-category", type=int, default=12, help="BBQ items per category")
    ap.add_argument("--batch-size", type=int, default=16, help="ours and lm-eval's batch_size")
    ap.add_argument("--threads", type=int, default=0, help="torch threads in both processes (0: default)")
    ap.add_argument("--repeats", type=int, default=1, help="timed calls of our two paths (best kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lmeval-python", default=DEFAULT_LMEVAL_PYTHON)
    ap.add_argument("--skip-lmeval", action="store_true")
    ap.add_argument("--output", help="write the results as JSON here")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    data_dir = Path(os.environ.get("AUDIT_DATA_DIR") or "/work/shared/data")
    folder = materialize(args.model) if args.model in ZOO else Path(args.model).resolve()
    requests, n_items = build_requests(data_dir, args.categories, args.per_category, args.seed)
    model = load_model(str(folder), device="cpu", dtype="float32", batch_size=args.batch_size)
    encoded = [model.encode_pair(c, x) for c, x in requests]
    n_tokens = sum(len(c) + len(x) for c, x in encoded)
    distinct = {tuple(c) for c, _ in encoded}
    fed_shared = sum(len(c) for c in distinct) + sum(len(x) - 1 for _, x in encoded)
    print(f"model {args.model} ({folder}); {n_items} BBQ items from {', '.join(args.categories)}: "
          f"{len(requests)} requests, {len(distinct)} distinct contexts, {n_tokens} tokens; "
          f"batch_size {args.batch_size}, torch threads {torch.get_num_threads()}", flush=True)

    rows = {}
    t, shared = time_ours(model, requests, True, args.repeats)
    rows["ours, prefix sharing"] = {"seconds": t, "tokens_fed": fed_shared, "scores": shared}
    t, full = time_ours(model, requests, False, args.repeats)
    rows["ours, full sequence"] = {"seconds": t, "tokens_fed": n_tokens, "scores": full}
    lm = None
    if not args.skip_lmeval:
        lm = time_lmeval(args.lmeval_python, folder, requests, args.batch_size, args.threads)
        # lm-eval feeds (context + continuation)[:-1]: one token less per request.
        rows[f"lm-eval {lm['lm_eval']} HFLM"] = {"seconds": lm["seconds"],
                                                 "tokens_fed": n_tokens - len(requests),
                                                 "scores": lm["scores"]}
    ref = rows[next(reversed(rows))]["seconds"] if lm else rows["ours, full sequence"]["seconds"]
    ref_name = "lm-eval" if lm else "full path"

    print(f"\n{'method':<28}{'requests':>9}{'tokens fed':>12}{'seconds':>10}{'req/s':>9}"
          f"{'speed-up vs ' + ref_name:>24}")
    for name, r in rows.items():
        r["requests_per_s"] = len(requests) / r["seconds"]
        r["speedup_vs_reference"] = ref / r["seconds"]
        print(f"{name:<28}{len(requests):>9}{r['tokens_fed']:>12}{r['seconds']:>10.2f}"
              f"{r['requests_per_s']:>9.2f}{r['speedup_vs_reference']:>23.2f}x")
    diffs = {"sharing_vs_full": max_diff(shared, full)}
    if lm:
        diffs["sharing_vs_lmeval"] = max_diff(shared, lm["scores"])
        diffs["full_vs_lmeval"] = max_diff(full, lm["scores"])
    print("\nmax |score difference| (nats): "
          + ", ".join(f"{k.replace('_', ' ')} {v:.2e}" for k, v in diffs.items()))

    if args.output:
        result = {
            "model": args.model, "folder": str(folder), "categories": args.categories,
            "per_category": args.per_category, "seed": args.seed, "items": n_items,
            "requests": len(requests), "distinct_contexts": len(distinct), "tokens": n_tokens,
            "batch_size": args.batch_size, "torch_threads": torch.get_num_threads(),
            "reference": ref_name, "max_abs_score_diff": diffs,
            "lm_eval_load_seconds": lm["load_seconds"] if lm else None,
            "methods": {k: {kk: vv for kk, vv in v.items() if kk != "scores"} for k, v in rows.items()},
            "scores": {k: v["scores"] for k, v in rows.items()},
            "requests_list": requests,
        }
        Path(args.output).write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
