"""Helper of ``bench_loglikelihood.py``, run with the lm-eval venv's python (never imported by
the suite): time lm-evaluation-harness's ``HFLM.loglikelihood`` on given requests.

usage: /work/lmeval-venv/bin/python perf/lmeval_loglikelihood.py --model FOLDER
           --requests REQUESTS.json --output OUT.json [--batch-size 16] [--threads N]

REQUESTS.json: ``[[context, continuation], ...]``. OUT.json: ``{"seconds": wall time of the
timed call, "load_seconds", "scores": [loglik per request], "is_greedy": [...], "lm_eval": version,
"batch_size", "threads"}``. One untimed warm-up call on the first two requests runs first, as in
the caller's timing of our backend.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="transformers model folder")
    ap.add_argument("--requests", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    if args.threads:
        torch.set_num_threads(args.threads)
    with open(args.requests, encoding="utf-8") as f:
        pairs = [tuple(p) for p in json.load(f)]
    t0 = time.perf_counter()
    lm = HFLM(pretrained=args.model, dtype="float32", device="cpu", batch_size=args.batch_size)
    load_seconds = time.perf_counter() - t0

    def instances(reqs):
        # Instance(request_type, doc, arguments, idx): arguments is the (context, continuation)
        # tuple that HFLM.loglikelihood reads through ``.args``.
        return [Instance("loglikelihood", {}, (c, x), i) for i, (c, x) in enumerate(reqs)]

    lm.loglikelihood(instances(pairs[:2]), disable_tqdm=True)  # warm-up, untimed
    t0 = time.perf_counter()
    res = lm.loglikelihood(instances(pairs), disable_tqdm=True)
    seconds = time.perf_counter() - t0
    out = {"seconds": seconds, "load_seconds": load_seconds,
           "scores": [float(r[0]) for r in res], "is_greedy": [bool(r[1]) for r in res],
           "lm_eval": importlib.metadata.version("lm_eval"), "batch_size": args.batch_size,
           "threads": torch.get_num_threads()}
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
