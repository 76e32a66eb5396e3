"""Greedy generation side by side with lm-evaluation-harness 0.4.13, in one invocation: the same
KoBBQ prompts (chosen and rendered by ``audit_harness.benchmarks.kobbq``, as
``pytest audits/test_kobbq.py --limit N`` chooses and renders them: the rows of ``--limit`` per
category, every prompt template and option order, the model's chat template) through

- ours: ``KoBBQ.evaluate`` over the engine and the HF backend, generate mode (the path of
  ``pytest audits/test_kobbq.py``), an empty result cache;
- lm-eval: its ``generate_until`` on its ``hf`` backend, from a local task whose documents are
  our chat-formatted prompts (``doc_to_text: "{{prompt}}"``), greedy, the same
  ``max_gen_toks``, its default stop (the end-of-sequence text);
- optionally vLLM (CPU build, ``.venv-vllm``) through our ``--backend openai`` client, started
  by ``audit_harness.serving.start_vllm`` on 127.0.0.1: the same ``KoBBQ.evaluate`` path.

Same model (fp32, CPU), torch threads and batch size for ours and lm-eval; each in its own
process (start-up and model load included), timed by wall clock, with CPU seconds and the load
average while it ran (``compare_lmeval.timed``). Ours runs before and after lm-eval (fresh
caches) and its wall time is the mean of the two. vLLM runs in its own server process on every
core (as in perf/server_throughput.py); its row is the client's wall time of ``evaluate`` on a
started server (start-up reported apart).

Checked, not assumed: the token ids each side fed the model are identical (ours: the backend's
``encode_prompt``; lm-eval's: its ``HFLM.tok_batch_encode`` of the context its samples log, run
untimed afterwards), and the generated texts are compared exactly (ours before parsing, lm-eval's
``resps``). Tokens per second = generated tokens / wall seconds, where generated tokens are each
side's output texts re-encoded by the model's tokenizer (so equal outputs count alike).

Prints a table, the identical outputs n/n, the wall ratio and each side's tokens per second,
ending with ``speedup <x>x, outputs identical <k>/<n>``.

usage: python perf/compare_generation.py [--model qwen2.5-coder-0.5b-instruct]
           [--categories age,disability_status] [--limit 12] [--batch-size 16] [--threads 2]
           [--data-dir DIR] [--workdir DIR] [--json-out FILE] [--no-vllm] [--profile]

Exit status 0; 1 when a token input differs or an output is missing; 2 when lm-eval cannot run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_lmeval import CPU, LOADS, lmeval_env, lmeval_python, run_lmeval_cli, run_our_side  # noqa: E402
from comparison import comparison_parser, dispatch, our_engine, our_side_command, our_side_parser, profiled  # noqa: E402

VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


# -- the comparison (pure) ---------------------------------------------------------------------------
def compare_outputs(ours: dict[str, str], theirs: dict[str, str]) -> tuple[int, int, list[str]]:
    """(identical, compared, differing ids): exact equality of the texts of every id in ``ours``;
    an id missing from ``theirs`` counts as differing.

    Examples:
        >>> compare_outputs({"a": "A", "b": "B"}, {"a": "A", "b": "B."})
        (1, 2, ['b'])
    """
    differing = [k for k in ours if theirs.get(k) != ours[k]]
    return len(ours) - len(differing), len(ours), differing


def compare_token_inputs(ours: dict[str, list[int]], theirs: dict[str, list[int]]) -> list[str]:
    """The ids whose token input differs (or is missing from ``theirs``)."""
    return [k for k in ours if list(theirs.get(k, ())) != list(ours[k])]


def result_line(speedup: float, identical: int, n: int) -> str:
    """The last line printed.

    Examples:
        >>> result_line(3.456, 359, 360)
        'speedup 3.46x, outputs identical 359/360'
    """
    return f"speedup {speedup:.2f}x, outputs identical {identical}/{n}"


# -- the items and prompts ---------------------------------------------------------------------------
def kobbq_items(data_dir: Path, categories: list[str], limit: int, seed: int = 0):
    """Generate-mode KoBBQ items as an audit with ``--limit`` selects them (same salt)."""
    from audit_harness.benchmarks import registry

    kobbq = registry()["kobbq"].configure(answer_mode="generate")
    items = []
    for c in categories:
        data = kobbq.load_category(data_dir, c)
        items += kobbq.select(data.items, limit, seed, salt=f"kobbq/{c}")
    return kobbq, items


# -- our side (a child process of this script) --------------------------------------------------------
def ours_main(argv: list[str]) -> None:
    """``--_ours OUT``: KoBBQ.evaluate over our engine, the outputs and token inputs to OUT."""
    ap = our_side_parser()
    ap.add_argument("--categories", required=True)
    ap.add_argument("--limit", type=int, required=True)
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    torch, model, engine = our_engine(a)
    t_loaded = time.perf_counter()
    kobbq, items = kobbq_items(Path(a.data_dir), a.categories.split(","), a.limit)
    with profiled(a.profile, "tottime", 30):
        t0 = time.perf_counter()
        records = kobbq.evaluate(engine, items)
        t_done = time.perf_counter()
    prompts = [kobbq.model_input(engine, it)[0] for it in items]  # what evaluate generated from
    out = {
        "items": {
            it.item_id: {"output": r.raw_prediction, "prompt": p, "ids": model.encode_prompt(p)}
            for it, r, p in zip(items, records, prompts)
        },
        "max_new_tokens": kobbq.max_new_tokens,
        "stats": engine.stats.to_dict(),
        "seconds": {"startup_and_load": t_loaded - t_start, "generation": t_done - t0},
        "threads": torch.get_num_threads(),
    }
    Path(a.out).write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")


def run_ours(args, workdir: Path, tag: str):
    out = workdir / f"ours_{tag}.json"
    selection = ["--categories", ",".join(args.categories), "--limit", str(args.limit)]
    profile = ["--profile"] if args.profile and tag == "before" else []
    cmd = our_side_command(Path(__file__), out, args, workdir / f"cache_{tag}", selection + profile)
    return run_our_side(cmd, out, args.threads, workdir, tag)


# -- lm-eval side -------------------------------------------------------------------------------------
def write_task(workdir: Path, prompts: dict[str, str], max_new_tokens: int) -> str:
    """A generate_until task over our prompts, already chat-formatted: the context is the
    document's ``prompt`` as is (no description, no few-shot), greedy, ``max_gen_toks`` as
    ours, no stop string but lm-eval's own end-of-sequence one."""
    tdir = workdir / "tasks"
    tdir.mkdir(parents=True, exist_ok=True)
    rows = tdir / "prompts.jsonl"
    with open(rows, "w", encoding="utf-8") as f:
        for item_id, prompt in prompts.items():
            f.write(json.dumps({"id": item_id, "prompt": prompt, "target": ""}, ensure_ascii=False) + "\n")
    task = "cmp_generation_kobbq"
    (tdir / f"{task}.yaml").write_text(
        "\n".join(
            [
                f"task: {task}",
                "dataset_path: json",
                "dataset_name: null",
                "dataset_kwargs:",
                "  data_files:",
                f"    test: {rows.resolve()}",
                "test_split: test",
                "output_type: generate_until",
                'doc_to_text: "{{prompt}}"',
                'doc_to_target: "{{target}}"',
                'target_delimiter: ""',
                "num_fewshot: 0",
                "generation_kwargs:",
                "  until: []",
                f"  max_gen_toks: {max_new_tokens}",
                "  do_sample: false",
                "  temperature: 0.0",
                "metric_list:",
                "  - metric: exact_match",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return task


def run_lmeval(python: Path, folder: Path, task: str, workdir: Path, args) -> tuple[list[dict], float, int]:
    docs, _, seconds, rss = run_lmeval_cli(python, folder, task, workdir, args)
    return docs, seconds, rss


#: Run in the lm-eval interpreter, untimed: lm-eval's own encoding of each logged context.
_LMEVAL_TOKENS = """
import json, sys
from lm_eval.models.huggingface import HFLM
lm = HFLM(pretrained=sys.argv[1], device="cpu", dtype="float32", batch_size=1)
contexts = json.load(open(sys.argv[2], encoding="utf-8"))
out = {}
for key, ctx in contexts.items():
    ids, mask = lm.tok_batch_encode([ctx])
    out[key] = [int(t) for t, m in zip(ids[0].tolist(), mask[0].tolist()) if m]
json.dump(out, open(sys.argv[3], "w"))
"""


def lmeval_token_inputs(python: Path, folder: Path, contexts: dict[str, str], workdir: Path, threads: int):
    src, dst = workdir / "lmeval_contexts.json", workdir / "lmeval_token_ids.json"
    src.write_text(json.dumps(contexts, ensure_ascii=False), encoding="utf-8")
    subprocess.run(
        [str(python), "-c", _LMEVAL_TOKENS, str(folder), str(src), str(dst)],
        env=lmeval_env(workdir, threads),
        cwd=workdir,
        check=True,
        capture_output=True,
    )
    return json.loads(dst.read_text())


# -- vLLM side ----------------------------------------------------------------------------------------
def run_vllm(args, folder: Path, workdir: Path) -> dict | None:
    """KoBBQ.evaluate through our openai backend against a vLLM started here, or None (with
    the reason printed) when ``.venv-vllm`` is missing or the server does not start."""
    if not VLLM_PYTHON.is_file():
        print(f"vLLM row skipped: {VLLM_PYTHON.relative_to(REPO)} is missing (make setup-server installs it)")
        return None
    from audit_harness.engine.executor import Engine
    from audit_harness.models.openai_server import connect
    from audit_harness.serving import start_vllm

    t = time.perf_counter()
    try:
        server = start_vllm(VLLM_PYTHON, folder, args.model, workdir / "vllm.log")
    except RuntimeError as e:
        print(f"vLLM row skipped: the server did not start: {str(e).splitlines()[0]}")
        return None
    startup = time.perf_counter() - t
    try:
        model = connect(server.url, args.model, max_concurrency=args.batch_size)
        kobbq, items = kobbq_items(args.data_dir, args.categories, args.limit)
        engine = Engine(model)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        records = kobbq.evaluate(engine, items)
        wall = time.perf_counter() - t0
        load = (load + os.getloadavg()[0]) / 2
        outputs = {it.item_id: r.raw_prediction for it, r in zip(items, records)}
        close = getattr(getattr(model, "client", model), "close", None)
        if close is not None:
            close()
    finally:
        server.stop()
    return {"outputs": outputs, "wall": wall, "startup": startup, "load": load}


# -- main ---------------------------------------------------------------------------------------------
def generated_tokens(folder: Path, texts) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    return sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)


def parse_args(argv: list[str]):
    ap = comparison_parser(
        __doc__,
        "qwen2.5-coder-0.5b-instruct",
        "torch threads, ours and lm-eval",
        "cProfile of our first run (in its log)",
    )
    ap.add_argument("--categories", default="age,disability_status", help="KoBBQ categories, comma-separated")
    ap.add_argument("--limit", type=int, default=12, help="test rows per category (x 5 templates x 3 orders)")
    ap.add_argument("--no-vllm", action="store_true", help="leave out the vLLM row")
    args = ap.parse_args(argv)
    args.data_dir = Path(args.data_dir).resolve()
    args.categories = args.categories.split(",")
    return args


def run_sides(args, workdir: Path, python: Path, folder: Path) -> dict:
    """Ours, lm-eval and ours again (their outputs, times and peak memory), lm-eval's token
    inputs, the comparisons, and the vLLM row unless ``--no-vllm``."""
    before, t_before, rss_before = run_ours(args, workdir, "before")
    prompts = {k: v["prompt"] for k, v in before["items"].items()}
    task = write_task(workdir, prompts, before["max_new_tokens"])
    docs, t_lm, rss_lm = run_lmeval(python, folder, task, workdir, args)
    after, t_after, _ = run_ours(args, workdir, "after")
    theirs = {d["doc"]["id"]: d for d in docs}
    contexts = {k: d["arguments"]["gen_args_0"]["arg_0"] for k, d in theirs.items()}
    their_ids = lmeval_token_inputs(python, folder, contexts, workdir, args.threads)
    ours_out = {k: v["output"] for k, v in before["items"].items()}
    lm_out = {k: d["resps"][0][0] for k, d in theirs.items()}
    # Kept on disk before the vLLM row runs, which a server or client failure may cut short.
    (workdir / "timings.json").write_text(
        json.dumps(
            {
                "wall": {"ours_before": t_before, "lmeval": t_lm, "ours_after": t_after},
                "cpu": CPU,
                "load": LOADS,
            }
        )
    )
    try:
        vllm = None if args.no_vllm else run_vllm(args, folder, workdir)
    except Exception as e:  # the comparison with lm-eval stands without this row
        print(f"vLLM row failed: {type(e).__name__}: {e}")
        vllm = None
    return {
        "before": before,
        "after": after,
        "t_before": t_before,
        "t_after": t_after,
        "t_lm": t_lm,
        "rss_before": rss_before,
        "rss_lm": rss_lm,
        "ours_out": ours_out,
        "lm_out": lm_out,
        "token_diff": compare_token_inputs({k: v["ids"] for k, v in before["items"].items()}, their_ids),
        "vllm": vllm,
    }


def print_table(run: dict, tokens: dict[str, int]) -> None:
    """Each side's wall and CPU seconds, load, generated tokens and tokens per second."""
    rows = [
        (
            "ours (before lm-eval)",
            run["t_before"],
            CPU.get("ours_before"),
            LOADS.get("ours_before"),
            tokens["ours"],
        ),
        ("lm-eval 0.4.13", run["t_lm"], CPU.get("lm_eval"), LOADS.get("lm_eval"), tokens["lm-eval"]),
        (
            "ours (after lm-eval)",
            run["t_after"],
            CPU.get("ours_after"),
            LOADS.get("ours_after"),
            tokens["ours"],
        ),
    ]
    if run["vllm"] is not None:
        rows.append(("vLLM (client wall)", run["vllm"]["wall"], None, run["vllm"]["load"], tokens["vllm"]))
    print(f"\n{'side':<24}{'wall s':>9}{'CPU s':>9}{'load':>6}{'gen tokens':>12}{'tokens/s':>10}")
    for name, wall, cpu, load, tok in rows:
        cpu_s = f"{cpu:>9.1f}" if cpu is not None else f"{'-':>9}"
        load_s = f"{load:>6.1f}" if load is not None else f"{'-':>6}"
        print(f"{name:<24}{wall:>9.1f}{cpu_s}{load_s}{tok:>12}{tok / wall:>10.2f}")


def print_findings(run: dict, tokens: dict[str, int], identical: int, differing: list[str]) -> None:
    """Our engine's counts, the identical token inputs and outputs, the vLLM row and the ratios."""
    before, after, ours_out, lm_out, vllm = (
        run["before"],
        run["after"],
        run["ours_out"],
        run["lm_out"],
        run["vllm"],
    )
    n = len(ours_out)
    t_ours = (run["t_before"] + run["t_after"]) / 2
    same_twice, _, _ = compare_outputs(ours_out, {k: v["output"] for k, v in after["items"].items()})
    st = before["stats"]
    print(
        f"ours: {n} generations, {st['forwards']} prompt forwards (batches or refills), {st['tokens_forwarded']} tokens forwarded; "
        f"start-up+load {before['seconds']['startup_and_load']:.1f} s, generation "
        f"{before['seconds']['generation']:.1f} s (after lm-eval: {after['seconds']['generation']:.1f} s); "
        f"the two runs' outputs identical {same_twice}/{n}"
    )
    print(f"token inputs identical (ours vs lm-eval): {n - len(run['token_diff'])}/{n}")
    print(f"outputs identical (ours vs lm-eval): {identical}/{n}")
    for k in differing[:5]:
        print(f"  {k}: ours {ours_out[k]!r} lm-eval {lm_out.get(k)!r}")
    if vllm is not None:
        v_same, _, _ = compare_outputs(ours_out, vllm["outputs"])
        print(
            f"vLLM: server start-up {vllm['startup']:.0f} s (untimed); outputs identical with ours "
            f"{v_same}/{n}; wall ours/vLLM {t_ours / vllm['wall']:.2f}x"
        )
    print(
        f"wall ratio lm-eval/ours {run['t_lm'] / t_ours:.2f}x (ours: mean of the runs before and after); "
        f"tokens/s ours {tokens['ours'] / t_ours:.2f}, lm-eval {tokens['lm-eval'] / run['t_lm']:.2f}"
    )


def compare(argv: list[str]) -> int:
    """The comparison: run every side, print the table and the findings, write the summary."""
    args = parse_args(argv)
    from audit_harness.models.zoo import materialize

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="cmp_generation_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    python = lmeval_python()
    folder = materialize(args.model)
    print(
        f"kobbq generate mode: {', '.join(args.categories)}, --limit {args.limit}; model {args.model}; "
        f"fp32 CPU, {args.threads} threads, batch size {args.batch_size}; load {os.getloadavg()[0]:.1f}; "
        f"workdir {workdir}",
        flush=True,
    )
    run = run_sides(args, workdir, python, folder)
    ours_out, lm_out, vllm = run["ours_out"], run["lm_out"], run["vllm"]
    identical, n, differing = compare_outputs(ours_out, lm_out)
    tokens = {
        "ours": generated_tokens(folder, ours_out.values()),
        "lm-eval": generated_tokens(folder, lm_out.values()),
    }
    if vllm is not None:
        tokens["vllm"] = generated_tokens(folder, vllm["outputs"].values())
    print_table(run, tokens)
    print_findings(run, tokens, identical, differing)
    t_ours = (run["t_before"] + run["t_after"]) / 2
    speedup = run["t_lm"] / t_ours
    summary = {
        "model": args.model,
        "categories": args.categories,
        "limit": args.limit,
        "generations": n,
        "identical": identical,
        "token_inputs_differing": len(run["token_diff"]),
        "seconds": {
            "ours": t_ours,
            "ours_before": run["t_before"],
            "ours_after": run["t_after"],
            "lmeval": run["t_lm"],
        },
        "ours_inner": [run["before"]["seconds"], run["after"]["seconds"]],
        "cpu_seconds": dict(CPU),
        "load_average": dict(LOADS),
        "peak_rss_bytes": {"ours": run["rss_before"], "lmeval": run["rss_lm"]},
        "generated_tokens": tokens,
        "vllm": None if vllm is None else {k: vllm[k] for k in ("wall", "startup", "load")},
        "workdir": str(workdir),
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(result_line(speedup, identical, n))
    return 1 if run["token_diff"] or len(lm_out) < n else 0


def main(argv: list[str] | None = None) -> int:
    return dispatch(argv, ours_main, compare)


if __name__ == "__main__":
    sys.exit(main())
