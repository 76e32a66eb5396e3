"""Side by side with lm-evaluation-harness 0.4.13, in one invocation: our engine and lm-eval on the
same model (fp32, CPU, same torch threads and batch size), the same items (the first N rows of
every category file) and the same prompts and choices (lm-eval's ``bbq`` task for BBQ, i.e. our
``--bbq-protocol lmeval``; the authors' ``esbbq`` protocol for EsBBQ, which lm-eval uses unchanged;
lm-eval's ``crows_pairs_english`` for CrowS-Pairs, i.e. our ``--pairs-protocol lmeval``: every pair
of the file unless ``--per-category N`` takes the first N of each bias type).

Each side runs as its own process (start-up and model load included), timed by wall clock, with
its peak resident memory and CPU seconds from ``os.wait4`` and the load average seen while it ran.
Ours runs cold (an empty result cache), warm (the same cache again), and cold once more after
lm-eval (a fresh cache): our wall time is the mean of the two cold runs, so a load that moves
during the long lm-eval run does not favour either side. Printed: wall time, CPU time, load,
items/s, tokens forwarded and peak memory of each side, the ratios, identical predictions (argmax choice per item) and the largest per-choice
log-likelihood difference, ending with the line
``speedup <x>x, memory <y>x, predictions identical <k>/<n>, max |dLL| <d>``. A prediction is the
argmax choice (BBQ, EsBBQ), or for CrowS-Pairs which sentence of the pair lm-eval's
``pct_stereotype`` says is more likely (``sent_more`` strictly higher); for CrowS-Pairs the line
before it compares lm-eval's ``pct_stereotype`` with our ``bias_score``.

lm-eval is installed on first use from the package registry into ``.venv-lmeval`` in the repo
(git-ignored): ``pip install "lm_eval[hf]==0.4.13" torch==2.13.0``. It reads our rows offline: a
task that includes lm-eval's own task yaml unchanged, pointed at a JSONL of exactly those rows
(for CrowS-Pairs, our pinned CSV's rows with the fields of the hub dataset lm-eval reads).
A timing on a shared machine varies: read the ratios of one invocation, and note the load.

usage: python perf/compare_lmeval.py --benchmark {bbq,esbbq,crows_pairs} [--per-category N|all]
           [--model smollm2-135m-instruct] [--batch-size 16] [--threads 2] [--data-dir DIR]
           [--workdir DIR] [--json-out FILE] [--profile]

Exit status 0; 1 when a prediction or a prompt/choice differs (or, for CrowS-Pairs, the
pct_stereotype); 2 when lm-eval cannot run.
"""

from __future__ import annotations

import ast
import csv
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from comparison import comparison_parser, dispatch, our_engine, our_side_command, our_side_parser, profiled  # noqa: E402

LMEVAL_VENV = REPO / ".venv-lmeval"
LMEVAL_PIP = ["lm_eval[hf]==0.4.13", "torch==2.13.0"]
# EsBBQ CSV -> the Hugging Face hub schema (BSC-LT/EsBBQ) that lm-eval's utils read:
# ``doc["answer_info"]["ansK"]`` and ``group in doc["stereotyped_groups"]`` need real lists.
LIST_COLS = ("stereotyped_groups", "source")
INT_COLS = ("instance_id", "template_id", "label")
#: lm-eval's task config per benchmark, relative to its ``lm_eval/tasks`` folder.
TASK_YAML = {
    "bbq": "bbq/bbq_multiple_choice.yaml",
    "esbbq": "esbbq/_esbbq_common_yaml",
    "crows_pairs": "crows_pairs/crows_pairs_english.yaml",
}
#: The CrowS-Pairs fields of the hub dataset lm-eval's task reads (``jannalu/crows_pairs_multilingual``,
#: english); ``doc_to_choice`` uses the two sentences, the per-bias-type tasks ``bias_type``.
CROWS_FIELDS = (
    "sent_more",
    "sent_less",
    "stereo_antistereo",
    "bias_type",
    "annotations",
    "anon_writer",
    "anon_annotators",
)


# -- lm-eval side ------------------------------------------------------------------------------------
def lmeval_python() -> Path:
    """The lm-eval interpreter, installing it into ``.venv-lmeval`` when absent."""
    python = LMEVAL_VENV / "bin" / "python"
    if (
        python.is_file()
        and subprocess.run([str(python), "-c", "import lm_eval"], capture_output=True).returncode == 0
    ):
        return python
    print(f"installing {' '.join(LMEVAL_PIP)} into {LMEVAL_VENV} (one time, ~1-2 min)", flush=True)
    venv.create(LMEVAL_VENV, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *LMEVAL_PIP], check=True)
    return python


def hub_record(row: dict[str, str]) -> dict:
    """One EsBBQ CSV row in the hub JSONL schema (answer_info dict of lists, typed fields)."""
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
    return out


def crows_record(row: dict[str, str]) -> dict:
    """One CrowS-Pairs CSV row as a row of the hub dataset lm-eval reads: its fields as they are
    (strings), the unnamed index column as ``id`` (to join lm-eval's samples to our pairs)."""
    return {"id": int(row[""]), **{k: row[k] for k in CROWS_FIELDS}}


def first_rows(benchmark: str, data_dir: Path, bench, n: int | None) -> dict[str, list[dict]]:
    """The first ``n`` rows (None: all) of every category file, as lm-eval's dataset rows; for
    CrowS-Pairs, one file, the first ``n`` pairs of each bias type."""
    out: dict[str, list[dict]] = {}
    if benchmark == "crows_pairs":
        from audit_harness.benchmarks.crows_pairs import FILE

        with open(data_dir / FILE, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                rows = out.setdefault(r["bias_type"], [])
                if n is None or len(rows) < n:
                    rows.append(crows_record(r))
        return out
    for category in bench.categories:
        if benchmark == "bbq":
            path = data_dir / "bbq" / "data" / f"{category}.jsonl"
            with open(path, encoding="utf-8") as f:
                out[category] = [json.loads(line) for line in itertools.islice(f, n)]
        else:
            with open(bench.category_file(data_dir, category), encoding="utf-8", newline="") as f:
                out[category] = [hub_record(r) for r in itertools.islice(csv.DictReader(f), n)]
    return out


def row_key(benchmark: str, category: str, row: dict) -> str:
    """Our item id of an lm-eval dataset row (CrowS-Pairs: the row index, as our records)."""
    if benchmark == "crows_pairs":
        return str(row["id"])
    return f"{category}-{row['example_id'] if benchmark == 'bbq' else row['instance_id']}"


def lmeval_prediction(benchmark: str, sample: dict) -> int:
    """lm-eval's prediction in one of its logged samples: for CrowS-Pairs, 0 when its
    ``pct_stereotype`` is 1 (``sent_more``'s log-likelihood strictly higher) else 1; otherwise
    the argmax over the choices' log-likelihoods (the first on a tie, as ``acc``)."""
    if benchmark == "crows_pairs":
        return 0 if sample["pct_stereotype"] == 1.0 else 1
    lls = [float(r[0]) for r in sample["filtered_resps"]]
    return max(range(len(lls)), key=lls.__getitem__)


def our_prediction(benchmark: str, lls: list[float]) -> int:
    """Our prediction in the same terms: CrowS-Pairs, 0 when ``score_more > score_less`` (a
    stereotyped outcome, what ``bias_score`` counts) else 1; otherwise the first argmax."""
    if benchmark == "crows_pairs":
        return 0 if lls[0] > lls[1] else 1
    return max(range(len(lls)), key=lls.__getitem__)


def write_task(workdir: Path, benchmark: str, rows: dict[str, list[dict]], tasks_dir: Path) -> str:
    """One lm-eval task over all chosen rows: lm-eval's task yaml included unchanged, the data
    a local JSONL."""
    tdir = workdir / "tasks"
    tdir.mkdir(parents=True, exist_ok=True)
    base = tasks_dir / TASK_YAML[benchmark]
    if not base.is_file():
        raise SystemExit(f"lm-eval task config not found: {base}")
    jsonl = tdir / "rows.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for cat_rows in rows.values():
            for r in cat_rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    task = f"cmp_{benchmark}"
    (tdir / f"{task}.yaml").write_text(
        f"include: {base}\ntask: {task}\ntag: []\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {jsonl.resolve()}\n",
        encoding="utf-8",
    )
    return task


#: Load average seen during each timed child (1-minute average, sampled every 5 s), so a ratio
#: measured on a shared machine says what each side competed with.
LOADS: dict[str, float] = {}
#: CPU seconds (user + system) of each timed child.
CPU: dict[str, float] = {}


def timed(cmd: list[str], env: dict, cwd: Path, log: Path) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, return code) of one child process; its mean load
    average and CPU seconds go to ``LOADS`` / ``CPU`` under the log's stem."""
    t0 = time.perf_counter()
    samples = [os.getloadavg()[0]]
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.5)
            if time.perf_counter() - t0 >= 5 * len(samples):
                samples.append(os.getloadavg()[0])
    proc.returncode = os.waitstatus_to_exitcode(status)
    LOADS[log.stem] = sum(samples) / len(samples)
    CPU[log.stem] = usage.ru_utime + usage.ru_stime
    return time.perf_counter() - t0, usage.ru_maxrss * 1024, proc.returncode


def run_our_side(cmd: list[str], out: Path, threads: int, workdir: Path, tag: str) -> tuple[dict, float, int]:
    """Run our side's child process (offline, ``threads`` OpenMP threads), timed; exit if it fails.

    Returns the JSON it wrote to ``out``, the wall seconds and the peak RSS."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
    }
    seconds, rss, rc = timed(cmd, env, REPO, workdir / f"ours_{tag}.log")
    if rc != 0:
        print((workdir / f"ours_{tag}.log").read_text(encoding="utf-8")[-4000:], file=sys.stderr)
        raise SystemExit(f"our run failed (rc {rc})")
    return json.loads(out.read_text(encoding="utf-8")), seconds, rss


def lmeval_env(workdir: Path, threads: int) -> dict:
    """The lm-eval interpreter's environment: offline, its own HF home, ``threads`` OpenMP threads."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(workdir / "hf_home"),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": str(threads),
    }
    env.pop("PYTHONPATH", None)  # keep our packages out of the lm-eval interpreter
    return env


def run_lmeval_cli(
    python: Path, folder: Path, task: str, workdir: Path, args
) -> tuple[list[dict], Path, float, int]:
    """Run ``lm_eval`` on ``task`` (fp32, CPU, ``args.batch_size``), timed; exit 2 if it fails.

    Returns its logged samples, its output folder, the wall seconds and the peak RSS."""
    out = workdir / "lmeval_out"
    cmd = [
        str(python),
        "-m",
        "lm_eval",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={folder},dtype=float32",
        "--device",
        "cpu",
        "--batch_size",
        str(args.batch_size),
        "--tasks",
        task,
        "--include_path",
        str(workdir / "tasks"),
        "--log_samples",
        "--output_path",
        str(out),
    ]
    seconds, rss, rc = timed(cmd, lmeval_env(workdir, args.threads), workdir, workdir / "lm_eval.log")
    if rc != 0:
        print((workdir / "lm_eval.log").read_text(encoding="utf-8")[-4000:], file=sys.stderr)
        print(f"lm_eval failed (rc {rc}); log {workdir / 'lm_eval.log'}", file=sys.stderr)
        sys.exit(2)
    (samples,) = [p for p in out.rglob(f"samples_{task}_*.jsonl")][-1:]
    return [json.loads(line) for line in samples.open(encoding="utf-8")], out, seconds, rss


def run_lmeval(python: Path, folder: Path, task: str, workdir: Path, args) -> tuple[dict, float, int]:
    docs, out, seconds, rss = run_lmeval_cli(python, folder, task, workdir, args)
    (results,) = [p for p in out.rglob("results_*.json")][-1:]
    aggregate = json.loads(results.read_text(encoding="utf-8"))["results"][task]
    return {"docs": docs, "results": aggregate}, seconds, rss


# -- our side (a child process of this script) --------------------------------------------------------
def ours_main(argv: list[str]) -> None:
    """``--_ours``: score the chosen items with our engine and write the result JSON."""
    ap = our_side_parser()
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--keys", required=True, help="JSON list of row keys to score")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    sys.path.insert(0, str(REPO))
    from audit_harness.benchmarks import MetricSettings, registry

    torch, model, engine = our_engine(a)
    bench = registry()[a.benchmark]
    if a.benchmark in ("bbq", "crows_pairs"):
        bench = bench.configure(protocol="lmeval")
    keys = set(json.loads(Path(a.keys).read_text()))
    t_loaded = time.perf_counter()
    items = []
    # CrowS-Pairs' categories share its pairs: ``overall`` holds each of them once.
    categories = ["overall"] if a.benchmark == "crows_pairs" else bench.categories
    for category in categories:
        for it in bench.load_category(Path(a.data_dir), category).items:
            key = it.item_id if a.benchmark != "esbbq" else f"{category}-{it.extra['instance_id']}"
            if key in keys:
                items.append((key, it))
    with profiled(a.profile, "cumulative", 25):
        t0 = time.perf_counter()
        records = bench.evaluate(engine, [it for _, it in items])
        t_scored = time.perf_counter()
    if a.benchmark == "crows_pairs":
        # lm-eval's request per sentence: ("", sentence), no delimiter.
        mine = {
            k: {"lls": [r.score_more, r.score_less], "choices": [r.sent_more, r.sent_less], "prompt": ""}
            for (k, _), r in zip(items, records)
        }
        delimiter = ""
        metrics = bench.metrics(records, MetricSettings(n_resamples=0))
        extra = {"bias_score": metrics["bias_score"].value, "n_scored": metrics["bias_score"].n}
    else:
        mine = {
            k: {"lls": r.loglikelihoods, "choices": r.choices, "prompt": bench.prompt(it)}
            for (k, it), r in zip(items, records)
        }
        delimiter, extra = bench.delimiter, {}
    for item in mine.values():
        item["choice"] = our_prediction(a.benchmark, item["lls"])
    out = {
        "items": mine,
        "delimiter": delimiter,
        "stats": engine.stats.to_dict(),
        "requests": sum(len(item["choices"]) for item in mine.values()),
        "seconds": {"startup_and_load": t_loaded - t_start, "scoring": t_scored - t0},
        "threads": torch.get_num_threads(),
        **extra,
    }
    Path(a.out).write_text(json.dumps(out), encoding="utf-8")


def run_ours(args, folder: Path, keys_path: Path, workdir: Path, cache_dir: Path, tag: str):
    out = workdir / f"ours_{tag}.json"
    selection = ["--benchmark", args.benchmark, "--keys", str(keys_path)]
    profile = ["--profile"] if args.profile and tag == "cold" else []
    cmd = our_side_command(Path(__file__), out, args, cache_dir, selection + profile)
    return run_our_side(cmd, out, args.threads, workdir, tag)


def plain_tokens(folder: Path, ours: dict) -> int:
    """Tokens one forward per request feeds, ``len(context + continuation) - 1`` summed over
    every (prompt, choice) of our items, tokenized by our boundary rule (what lm-eval feeds).
    Counted here, untimed: it is bookkeeping for the lm-eval side, not part of our run."""
    from transformers import AutoTokenizer

    from audit_harness.models.tokenization import encode_pair, special_ids

    tok = AutoTokenizer.from_pretrained(str(folder))
    bos, empty = special_ids(tok)

    def encode(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    return sum(
        len(c) + len(x) - 1
        for item in ours["items"].values()
        for choice in item["choices"]
        for c, x in [encode_pair(encode, item["prompt"], ours["delimiter"] + choice, bos, empty)]
    )


# -- comparison ------------------------------------------------------------------------------------
def parse_args(argv: list[str]):
    ap = comparison_parser(
        __doc__,
        "smollm2-135m-instruct",
        "torch threads, both sides",
        "cProfile of our cold scoring (in its log)",
    )
    ap.add_argument("--benchmark", choices=sorted(TASK_YAML), required=True)
    ap.add_argument(
        "--per-category",
        type=lambda v: None if v == "all" else int(v),
        default="all",
        help="first N rows of every category (crows_pairs: of every bias type), or all; "
        "required for bbq and esbbq",
    )
    args = ap.parse_args(argv)
    if args.per_category is None and args.benchmark != "crows_pairs":
        # Every BBQ row through lm-eval is days of CPU time: ask for it explicitly.
        ap.error(f"--benchmark {args.benchmark} needs --per-category N")
    args.data_dir = Path(args.data_dir).resolve()
    return args


def match_items(args, rows: dict[str, list[dict]], lm: dict, cold: dict) -> tuple[int, int, int, float]:
    """(items compared, identical predictions, items whose prompt or choices differ from
    lm-eval's, the largest per-choice log-likelihood difference) of our cold run and lm-eval's
    samples."""
    if args.benchmark == "crows_pairs":
        theirs = {row_key(args.benchmark, "", d["doc"]): d for d in lm["docs"]}
    else:
        # The rows' own category field may be spelled unlike the file name: map back to the file.
        id_field = "example_id" if args.benchmark == "bbq" else "instance_id"
        file_of = {(r["category"], r[id_field]): c for c, rs in rows.items() for r in rs}
        theirs = {
            row_key(args.benchmark, file_of[(d["doc"]["category"], d["doc"][id_field])], d["doc"]): d
            for d in lm["docs"]
        }
    n = identical = protocol_diff = 0
    max_dll = 0.0
    for key, mine in cold["items"].items():
        d = theirs.get(key)
        if d is None:
            continue
        n += 1
        arg_list = [d["arguments"][f"gen_args_{k}"] for k in range(len(d["arguments"]))]
        if [a["arg_0"] for a in arg_list] != [mine["prompt"]] * len(mine["choices"]) or [
            a["arg_1"] for a in arg_list
        ] != [cold["delimiter"] + c for c in mine["choices"]]:
            protocol_diff += 1
            continue
        lls = [float(r[0]) for r in d["filtered_resps"]]
        max_dll = max(max_dll, max(abs(a - b) for a, b in zip(lls, mine["lls"])))
        identical += lmeval_prediction(args.benchmark, d) == mine["choice"]
    return n, identical, protocol_diff, max_dll


def print_table(runs: dict, lm_tokens: int, n_items: int) -> None:
    """Each side's wall and CPU seconds, load, items per second, tokens forwarded and peak
    memory, our engine's counts, and the ratios."""
    cold, warm, t_warm = runs["cold"], runs["warm"], runs["t_warm"]
    t_cold = (runs["t_before"] + runs["t_after"]) / 2
    table = [
        (
            "ours (cold, before)",
            "ours_cold",
            runs["t_before"],
            cold["stats"]["tokens_forwarded"],
            runs["rss_cold"],
        ),
        ("ours (warm cache)", "ours_warm", t_warm, warm["stats"]["tokens_forwarded"], runs["rss_warm"]),
        ("lm-eval 0.4.13", "lm_eval", runs["t_lm"], lm_tokens, runs["rss_lm"]),
        ("ours (cold, after)", "ours_cold_after", runs["t_after"], cold["stats"]["tokens_forwarded"], None),
    ]
    print(
        f"\n{'side':<22}{'wall s':>9}{'CPU s':>9}{'load':>6}{'items/s':>9}{'tokens fwd':>12}{'peak MiB':>10}"
    )
    for name, tag, t, tok, rss in table:
        mib = f"{rss / 2**20:>10.0f}" if rss else f"{'-':>10}"
        print(
            f"{name:<22}{t:>9.1f}{CPU.get(tag, float('nan')):>9.1f}{LOADS.get(tag, float('nan')):>6.1f}"
            f"{n_items / t:>9.2f}{tok:>12}{mib}"
        )
    print(
        f"ours: {cold['requests']} requests, {cold['stats']['distinct']} distinct, "
        f"{cold['stats']['forwards']} forwards; cold: start-up+load {cold['seconds']['startup_and_load']:.1f} s, "
        f"scoring {cold['seconds']['scoring']:.1f} s; warm: scoring {warm['seconds']['scoring']:.2f} s "
        f"({warm['stats']['from_cache']} of {warm['stats']['distinct']} from the cache, "
        f"{100 * warm['seconds']['scoring'] / max(cold['seconds']['scoring'], 1e-9):.1f}% of cold scoring, "
        f"{100 * t_warm / t_cold:.0f}% of cold wall)"
    )
    cpu_ours = (CPU.get("ours_cold", 0.0) + CPU.get("ours_cold_after", 0.0)) / 2
    print(
        f"ratios: wall {runs['t_lm'] / t_cold:.2f}x (ours: mean of the cold runs before and after lm-eval), "
        f"CPU {CPU.get('lm_eval', 0.0) / max(cpu_ours, 1e-9):.2f}x, tokens {lm_tokens / max(cold['stats']['tokens_forwarded'], 1):.2f}x, "
        f"peak memory ours/lm-eval {runs['rss_cold'] / runs['rss_lm']:.2f}"
    )


def crows_pct(lm: dict, cold: dict) -> dict:
    """lm-eval's ``pct_stereotype`` beside our ``bias_score``, printed, and whether they agree."""
    pct = {"lmeval": lm["results"]["pct_stereotype,none"], "ours_bias_score": cold["bias_score"]}
    # Ours is 100 * k / n, lm-eval's a mean of 0/1 floats: equal up to rounding when k agrees.
    pct["equal"] = abs(pct["lmeval"] * 100 - pct["ours_bias_score"]) < 1e-9
    print(
        f"pct_stereotype: lm-eval {pct['lmeval']:.6f} over {len(lm['docs'])} pairs, ours bias_score "
        f"{pct['ours_bias_score']:.4f} over {cold['n_scored']} ({'equal' if pct['equal'] else 'DIFFERENT'})"
    )
    return pct


def prepare(args, workdir: Path, python: Path) -> tuple[dict[str, list[dict]], Path, str]:
    """The chosen rows per category, the file of their keys for our side, and lm-eval's task
    over exactly those rows."""
    from audit_harness.benchmarks import registry

    bench = registry()[args.benchmark]
    tasks_dir = Path(
        subprocess.run(
            [str(python), "-c", "import os, lm_eval.tasks as t; print(os.path.dirname(t.__file__))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    rows = first_rows(args.benchmark, args.data_dir, bench, args.per_category)
    keys = [row_key(args.benchmark, c, r) for c, rs in rows.items() for r in rs]
    keys_path = workdir / "keys.json"
    keys_path.write_text(json.dumps(keys))
    return rows, keys_path, write_task(workdir, args.benchmark, rows, tasks_dir)


def run_sides(args, folder: Path, workdir: Path, python: Path, task: str) -> dict:
    """Our cold, warm, lm-eval's and our second cold run (on the keys ``prepare`` wrote): their
    outputs, times and peak memory."""
    keys_path = workdir / "keys.json"
    cache_dir = workdir / "cache"
    cold, t_before, rss_cold = run_ours(args, folder, keys_path, workdir, cache_dir, "cold")
    warm, t_warm, rss_warm = run_ours(args, folder, keys_path, workdir, cache_dir, "warm")
    lm, t_lm, rss_lm = run_lmeval(python, folder, task, workdir, args)
    # A second cold run right after lm-eval (fresh cache): on a shared machine the load moves
    # during a long lm-eval run, so our time is the mean of one run before and one after it.
    _, t_after, _ = run_ours(args, folder, keys_path, workdir, workdir / "cache_after", "cold_after")
    return {
        "cold": cold,
        "warm": warm,
        "lm": lm,
        "t_before": t_before,
        "t_warm": t_warm,
        "t_lm": t_lm,
        "t_after": t_after,
        "rss_cold": rss_cold,
        "rss_warm": rss_warm,
        "rss_lm": rss_lm,
    }


def compare(argv: list[str]) -> int:
    """The comparison: run every side, print the table and the findings, write the summary."""
    args = parse_args(argv)
    sys.path.insert(0, str(REPO))
    from audit_harness.models.zoo import materialize

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix=f"cmp_{args.benchmark}_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    python = lmeval_python()
    rows, keys_path, task = prepare(args, workdir, python)
    folder = materialize(args.model)
    which = "every row" if args.per_category is None else f"first {args.per_category} rows"
    print(
        f"{args.benchmark}: {which} of {len(rows)} categories ({len(json.loads(keys_path.read_text()))} rows); "
        f"model {args.model}; fp32 CPU, {args.threads} threads, batch size {args.batch_size}; "
        f"load {os.getloadavg()[0]:.1f}; workdir {workdir}",
        flush=True,
    )
    runs = run_sides(args, folder, workdir, python, task)
    cold, lm = runs["cold"], runs["lm"]
    t_cold = (runs["t_before"] + runs["t_after"]) / 2
    n, identical, protocol_diff, max_dll = match_items(args, rows, lm, cold)
    lm_tokens = plain_tokens(folder, cold)  # lm-eval feeds (context + continuation)[:-1] per request
    n_items = len(cold["items"])
    print_table(runs, lm_tokens, n_items)
    if protocol_diff:
        print(f"{protocol_diff} items with a different prompt or choices than lm-eval's", file=sys.stderr)
    pct = crows_pct(lm, cold) if args.benchmark == "crows_pairs" else None
    if n != n_items:
        print(f"{n_items - n} of our items missing from lm-eval's samples", file=sys.stderr)
    summary = {
        "benchmark": args.benchmark,
        "per_category": args.per_category,
        "items": n_items,
        "compared": n,
        "identical": identical,
        "max_abs_dll": max_dll,
        "seconds": {
            "ours_cold": t_cold,
            "ours_cold_before": runs["t_before"],
            "ours_cold_after": runs["t_after"],
            "ours_warm": runs["t_warm"],
            "lmeval": runs["t_lm"],
            "ours_inner": cold["seconds"],
            "ours_warm_inner": runs["warm"]["seconds"],
        },
        "cpu_seconds": dict(CPU),
        "load_average": dict(LOADS),
        "peak_rss_bytes": {
            "ours_cold": runs["rss_cold"],
            "ours_warm": runs["rss_warm"],
            "lmeval": runs["rss_lm"],
        },
        "tokens": {"ours": cold["stats"]["tokens_forwarded"], "lmeval": lm_tokens},
        "protocol_mismatches": protocol_diff,
        "pct_stereotype": pct,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "workdir": str(workdir),
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(
        f"speedup {runs['t_lm'] / t_cold:.2f}x, memory {runs['rss_cold'] / runs['rss_lm']:.2f}x, predictions identical "
        f"{identical}/{n_items}, max |dLL| {max_dll:.2e}"
    )
    return 0 if identical == n_items and not protocol_diff and (pct is None or pct["equal"]) else 1


def main(argv: list[str] | None = None) -> int:
    return dispatch(argv, ours_main, compare)


if __name__ == "__main__":
    sys.exit(main())
