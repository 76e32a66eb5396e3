"""Side-by-side check of our EsBBQ/CaBBQ audit against lm-evaluation-harness 0.4.13.

For one model and a small balanced subset of rows, run (a) our ``EsBBQ.evaluate`` +
``bias_metrics`` and (b) lm-eval's own ``esbbq``/``cabbq`` task config (its ``_*_common_yaml``,
included unchanged, pointed at a JSONL of exactly those rows; offline), then compare per item the
prompt and the 11 continuations, the 11 log-likelihoods, the predicted answer ``min(argmax, 2)``,
and the four metrics per category and for the group (lm-eval's size-weighted mean).

Exit status: 0 all predictions and metrics equal; 1 a prediction, metric or prompt mismatch;
2 lm-eval could not be run. Log-likelihood differences are reported, not gated (fp32 kernels
with different padding differ by ~1e-5 nats).

Rows whose ``question_type`` our data check flags are dropped from the subset (and listed): we
leave them out of the metrics on purpose, lm-eval keeps them, so they cannot be compared.

usage: python perf/compare_lmeval_esbbq.py [--model gemma-3-270m] [--benchmark esbbq|cabbq]
           [--categories Religion SpanishRegion] [--per-category 12] [--seed 0]
           [--lmeval-bin /work/lmeval-venv/bin/lm_eval] [--workdir DIR] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from audit_harness.benchmarks.bbq_family import balanced_sample  # noqa: E402
from audit_harness.benchmarks.esbbq import BENCHMARKS, CONSISTENT_FIELD  # noqa: E402
from bias_metrics.bbq_family import compute, size_weighted_mean  # noqa: E402

METRICS = ("acc_ambig", "acc_disambig", "bias_score_ambig", "bias_score_disambig")
DEFAULT_LMEVAL_BIN = "/work/lmeval-venv/bin/lm_eval"
# CSV -> Hugging Face hub schema (BSC-LT/EsBBQ), as in /work/lmeval_recipe/csv_to_hub_jsonl.py:
# lm-eval's utils index doc["answer_info"]["ansK"] and test `group in doc["stereotyped_groups"]`,
# which is a substring test if the list is left as its string literal.
LIST_COLS = ("stereotyped_groups", "source")
INT_COLS = ("instance_id", "template_id", "label")


def hub_record(row: dict[str, str]) -> dict:
    """One CSV row in the hub JSONL schema (answer_info dict of lists, typed ints/bools/lists)."""
    out: dict = {}
    for k, v in row.items():
        if k.startswith("answer_info."):
            out.setdefault("answer_info", {})[k.split(".", 1)[1]] = ast.literal_eval(v)
        elif k in LIST_COLS:
            out[k] = ast.literal_eval(v)
        elif k in INT_COLS:
            out[k] = int(v)
        elif k == "proper_nouns_only":
            out[k] = {"True": True, "False": False}[v]
        else:
            out[k] = v
    order = list(dict.fromkeys("answer_info" if c.startswith("answer_info.") else c for c in row))
    return {k: out[k] for k in order}


def snake(category: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", category).lower()


def same(a: float, b: float, tol: float = 1e-12) -> bool:
    """Equal within ``tol``, NaN equal to NaN (both sides return NaN for an empty group)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol


def fmt(x: float) -> str:
    return "nan" if math.isnan(x) else f"{x:+.6f}"


def lmeval_tasks_dir(lmeval_bin: Path) -> Path:
    python = lmeval_bin.parent / "python"
    out = subprocess.run([str(python), "-c", "import os, lm_eval.tasks as t; "
                          "print(os.path.dirname(t.__file__))"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def write_tasks(workdir: Path, bench, subsets: dict, data_dir: Path, tasks_dir: Path) -> tuple[str, dict]:
    """JSONL of the chosen rows and task yamls (lm-eval's common yaml included unchanged)."""
    tdir = workdir / "tasks"
    tdir.mkdir(parents=True, exist_ok=True)
    common = tasks_dir / bench.name / f"_{bench.name}_common_yaml"
    if not common.is_file():
        raise SystemExit(f"lm-eval task config not found: {common}")
    group = f"cmp_{bench.name}"
    names = {}
    for category, items in subsets.items():
        want = {it.extra["instance_id"] for it in items}
        with open(bench.category_file(data_dir, category), encoding="utf-8", newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(r["instance_id"]) in want]
        jsonl = tdir / f"{snake(category)}.jsonl"
        with open(jsonl, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(hub_record(r), ensure_ascii=False) + "\n")
        task = f"{group}_{snake(category)}"
        names[category] = task
        (tdir / f"{task}.yaml").write_text(
            f"include: {common}\ntask: {task}\ndataset_path: json\ndataset_name: null\n"
            f"dataset_kwargs:\n  data_files:\n    test: {jsonl.resolve()}\n", encoding="utf-8")
    agg = "".join(f"  - metric: {m}\n    weight_by_size: true\n" for m in METRICS)
    (tdir / f"{group}.yaml").write_text(
        f"group: {group}\ntask:\n" + "".join(f"  - {t}\n" for t in names.values())
        + f"aggregate_metric_list:\n{agg}metadata:\n  version: 1.0\n", encoding="utf-8")
    return group, names


def run_lmeval(lmeval_bin: Path, folder: Path, group: str, workdir: Path, batch_size: int) -> Path:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(workdir / "hf_home"), "TOKENIZERS_PARALLELISM": "false"}
    out = workdir / "out"
    cmd = [str(lmeval_bin), "--model", "hf", "--model_args", f"pretrained={folder},dtype=float32",
           "--device", "cpu", "--batch_size", str(batch_size), "--tasks", group,
           "--include_path", str(workdir / "tasks"), "--log_samples", "--output_path", str(out)]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=workdir)
    (workdir / "lm_eval.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
        print(f"lm_eval failed (rc {proc.returncode}); log: {workdir / 'lm_eval.log'}", file=sys.stderr)
        sys.exit(2)
    return out


def read_lmeval(out: Path, group: str, names: dict) -> tuple[dict, dict]:
    (results_file,) = sorted(out.rglob("results_*.json"))[-1:]
    results = json.loads(results_file.read_text(encoding="utf-8"))["results"]
    samples = {}
    for category, task in names.items():
        pat = re.compile(rf"samples_{re.escape(task)}_\d{{4}}-\d\d-\d\dT.*\.jsonl$")
        files = [p for p in out.rglob("samples_*.jsonl") if pat.search(p.name)]
        if len(files) != 1:
            raise SystemExit(f"expected one samples file for {task}, found {files}")
        samples[category] = [json.loads(line) for line in files[0].open(encoding="utf-8")]
    return results, samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gemma-3-270m", help="zoo name or local transformers folder")
    ap.add_argument("--benchmark", default="esbbq", choices=sorted(BENCHMARKS))
    ap.add_argument("--categories", nargs="+", default=["Religion", "SpanishRegion"])
    ap.add_argument("--per-category", type=int, default=12,
                    help="balanced_sample size per category (= the audit's --limit)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir",
                    default=os.environ.get("AUDIT_DATA_DIR") or str(REPO.parent / "shared" / "data"))
    ap.add_argument("--lmeval-bin", default=os.environ.get("LMEVAL_BIN", DEFAULT_LMEVAL_BIN))
    ap.add_argument("--batch-size", type=int, default=1, help="lm-eval batch size (its default: 1)")
    ap.add_argument("--workdir", help="keep lm-eval inputs/outputs here (default: a temp dir)")
    ap.add_argument("--json-out", help="write the comparison summary as JSON")
    ap.add_argument("--show-items", action="store_true", help="print one line per item")
    args = ap.parse_args(argv)

    from audit_harness.models.zoo import ZOO, load_model, materialize

    lmeval_bin = Path(args.lmeval_bin)
    if not lmeval_bin.is_file():
        print(f"lm_eval not found at {lmeval_bin} (set --lmeval-bin or LMEVAL_BIN)", file=sys.stderr)
        return 2
    bench = BENCHMARKS[args.benchmark]
    data_dir = Path(args.data_dir).resolve()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"cmp_{bench.name}_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)

    subsets, dropped = {}, []
    for category in args.categories:
        data = bench.load_category(data_dir, category)
        # Same salt as audit_harness/session.py, so `--per-category N --seed S` compares exactly
        # the items that `pytest audits --limit N --seed S` scores.
        items = balanced_sample(data.items, args.per_category, args.seed,
                                salt=f"{bench.name}/{category}")
        dropped += [it.item_id for it in items if not it.extra[CONSISTENT_FIELD]]
        items = [it for it in items if it.extra[CONSISTENT_FIELD]]
        if not any(it.context_condition == "ambig" for it in items):
            # lm-eval's acc_ambig_agg divides by the ambiguous count without a guard.
            raise SystemExit(f"{category}: the subset has no ambiguous row; raise --per-category")
        subsets[category] = items
    n_items = sum(len(v) for v in subsets.values())
    print(f"{bench.protocol.dataset}: {n_items} items from {', '.join(subsets)} "
          f"(balanced_sample {args.per_category}/category, seed {args.seed}); workdir {workdir}")
    if dropped:
        print(f"dropped (question_type inconsistent, not comparable by design): {dropped}")

    folder = materialize(args.model) if args.model in ZOO else Path(args.model).resolve()
    t0 = time.perf_counter()
    model = load_model(str(folder) if args.model not in ZOO else args.model, device="cpu",
                       dtype="float32", batch_size=16)
    ours = {c: bench.evaluate(model, items) for c, items in subsets.items()}
    t_ours = time.perf_counter() - t0
    del model

    tasks_dir = lmeval_tasks_dir(lmeval_bin)
    group, names = write_tasks(workdir, bench, subsets, data_dir, tasks_dir)
    t0 = time.perf_counter()
    out = run_lmeval(lmeval_bin, folder, group, workdir, args.batch_size)
    t_lmeval = time.perf_counter() - t0
    results, samples = read_lmeval(out, group, names)

    # --- per item -------------------------------------------------------------------------------
    failures: list[str] = []
    item_rows, max_diff, pred_mismatch, choice_mismatch, protocol_mismatch = [], 0.0, 0, 0, 0
    min_margin = math.inf
    for category, items in subsets.items():
        theirs = {s["doc"]["instance_id"]: s for s in samples[category]}
        if sorted(theirs) != sorted(it.extra["instance_id"] for it in items):
            failures.append(f"{category}: lm-eval scored other rows than ours")
            continue
        for it, rec in zip(items, ours[category]):
            s = theirs[it.extra["instance_id"]]
            args_ = [s["arguments"][f"gen_args_{k}"] for k in range(len(s["arguments"]))]
            if ([a["arg_0"] for a in args_] != [bench.prompt(it)] * len(rec["choices"])
                    or [a["arg_1"] for a in args_] != [" " + c for c in rec["choices"]]):
                protocol_mismatch += 1
                failures.append(f"{it.item_id}: lm-eval's prompt/continuations differ from ours")
            lls = [float(r[0]) for r in s["filtered_resps"]]
            diff = float(np.max(np.abs(np.array(lls) - np.array(rec["loglikelihoods"]))))
            max_diff = max(max_diff, diff)
            their_choice = int(np.argmax(lls))
            their_pred = min(their_choice, 2)
            # Margin between the best choice and the best one standing for another option: a
            # prediction is robust to the implementations' loglik noise when this exceeds it.
            runner_up = max(ll for k, ll in enumerate(lls) if min(k, 2) != their_pred)
            min_margin = min(min_margin, lls[their_choice] - runner_up)
            choice_mismatch += their_choice != rec["predicted_choice"]
            if their_pred != rec["predicted"]:
                pred_mismatch += 1
                failures.append(f"{it.item_id}: predicted {rec['predicted']} (ours) vs "
                                f"{their_pred} (lm-eval)")
            item_rows.append((it.item_id, it.context_condition, it.polarity, it.gold,
                              rec["predicted"], their_pred, diff))

    # --- metrics --------------------------------------------------------------------------------
    per_cat = {c: compute(bench.metric_records(ours[c]), "esbbq", n_resamples=0) for c in subsets}
    sizes = {c: len(ours[c]) for c in subsets}
    table = []
    for category in subsets:
        r = results[names[category]]
        for m in METRICS:
            table.append((category, m, per_cat[category][m].value, float(r[f"{m},none"])))
    for m in METRICS:
        table.append((f"{group} (size-weighted)", m, size_weighted_mean(per_cat, sizes, m).value,
                      float(results[group][f"{m},none"])))
    metric_mismatch = 0
    for where, m, a, b in table:
        if not same(a, b):
            metric_mismatch += 1
            failures.append(f"{where} {m}: {fmt(a)} (ours) vs {fmt(b)} (lm-eval)")

    # --- report ---------------------------------------------------------------------------------
    if args.show_items:
        print(f"\n{'item':28} {'cond':9} {'pol':7} gold ours lm-eval max|dll|")
        for row in item_rows:
            print(f"{row[0]:28} {row[1]:9} {row[2]:7} {row[3]:>4} {row[4]:>4} {row[5]:>7} {row[6]:.2e}")
    print(f"\n{'category':34} {'metric':20} {'ours':>10} {'lm-eval':>10}  equal")
    for where, m, a, b in table:
        print(f"{where:34} {m:20} {fmt(a):>10} {fmt(b):>10}  {'yes' if same(a, b) else 'NO'}")
    print(f"\nitems {len(item_rows)}  max |loglik diff| {max_diff:.3e}  prediction mismatches "
          f"{pred_mismatch}  argmax-choice mismatches {choice_mismatch}  prompt mismatches "
          f"{protocol_mismatch}  metric mismatches {metric_mismatch}  min decision margin "
          f"{min_margin:.3e}")
    print(f"time: ours {t_ours:.1f} s, lm-eval {t_lmeval:.1f} s (incl. start-up)")
    summary = {
        "benchmark": bench.name, "model": args.model, "categories": list(subsets),
        "per_category": args.per_category, "seed": args.seed, "items": len(item_rows),
        "dropped_inconsistent": dropped, "max_loglik_diff": max_diff, "min_decision_margin": min_margin,
        "prediction_mismatches": pred_mismatch, "choice_mismatches": choice_mismatch,
        "prompt_mismatches": protocol_mismatch, "metric_mismatches": metric_mismatch,
        "metrics": [{"where": w, "metric": m, "ours": None if math.isnan(a) else a,
                     "lmeval": None if math.isnan(b) else b} for w, m, a, b in table],
        "failures": failures, "workdir": str(workdir),
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if failures:
        print("\nMISMATCH:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("OK: predictions and metrics equal lm-eval's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
