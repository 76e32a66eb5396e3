"""The scoring engine (audit_harness/engine/): the prefix tree, exactness against the plain
one-forward-per-request computation on real BBQ rows, invariance to batch size, request order and
cache hits, out-of-memory halving, the result cache (crash resume, concurrent writers) and
progress output.

Tolerances state the engine's contract, 1e-4 nats per request in fp32 (sums of up to ~40 token
log-probabilities; the last digits differ between AVX2 and AVX-512 machines), never the digits
one CPU happened to produce.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_models import reference_loglikelihood
from test_prefix_sharing import _tiny

from audit_harness.benchmarks import registry
from audit_harness.engine.cache import ResultCache, request_key
from audit_harness.engine.executor import BackendOutOfMemory, Engine, _bins, _size, narrow_tail
from audit_harness.engine.prefix_tree import build_position_tree, build_tree
from audit_harness.engine.progress import Progress, progress_mode
from audit_harness.errors import ModelError
from audit_harness.models import load_model

REPO = Path(__file__).resolve().parents[1]


def bbq_requests(data_dir, protocol: str, categories=("Age", "Religion"), rows: int = 4):
    """(items, per-item choices, flat (prompt, " " + choice) requests) of the first rows of each
    category file: consecutive rows share contexts (ambiguous context = prefix of the
    disambiguated one) and questions."""
    bbq = registry()["bbq"].configure(protocol=protocol)
    items = [it for c in categories for it in bbq.load_category(data_dir, c).items[:rows]]
    choices = [bbq.choices(it) for it in items]
    flat = [(bbq.prompt(it), " " + c) for it, ch in zip(items, choices) for c in ch]
    return bbq, items, choices, flat


def reference(model, requests):
    return [reference_loglikelihood(model, c, x) for c, x in requests]


def predictions(scores, choices):
    out, pos = [], 0
    for ch in choices:
        part = scores[pos : pos + len(ch)]
        out.append(max(range(len(ch)), key=part.__getitem__))
        pos += len(ch)
    return out


@pytest.fixture(scope="module")
def gpt2():
    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="module")
def llama(gpt2):
    return _tiny("llama", gpt2.tokenizer, gpt2.info)


# -- prefix tree -----------------------------------------------------------------------------------
def test_tree_feeds_each_shared_prefix_once():
    ctx_a, ctx_d = [1, 2, 3, 4, 5, 6], [7, 8, 9, 14, 15]
    q1, q2 = [10, 11], [12, 13]
    requests = [(ctx + q, [20 + k, 30]) for ctx in (ctx_a, ctx_a + ctx_d) for q in (q1, q2) for k in range(3)]
    tree = build_tree(requests)
    # ctx_a once, ctx_d once, each question once per context, each 2-token continuation's
    # first token once per (context, question, choice).
    assert tree.tokens() == len(ctx_a) + len(ctx_d) + 4 * 2 + 12 * 1
    assert build_tree(requests, two_level=True).tokens() == 2 * (8 + 13) + 12
    # Every query sits on exactly one segment.
    seen, stack = [], list(tree.roots)
    while stack:
        s = stack.pop()
        seen += [q for _, _, q in s.queries]
        stack += s.children
    assert sorted(seen) == list(range(tree.n_queries))
    assert all(len(q) == 2 for q in tree.request_queries)


def test_short_shared_prefixes_are_fed_again_and_contexts_stay_whole():
    requests = [([1, 2, 3], [4]), ([1, 2, 5], [6]), ([1, 2, 5], [7])]
    tree = build_tree(requests, min_shared=4)
    assert sorted(len(r.tokens) for r in tree.roots) == [3, 3]  # [1, 2] is fed twice
    assert tree.n_queries == 3
    with pytest.raises(ValueError, match="empty context"):
        build_tree([([], [1])])


def test_position_tree_feeds_shared_prefixes_once_and_stops_at_the_last_scored_token():
    # Two sentences sharing "1 2 3 4", scored at their own positions; tokens after the last
    # scored position are never fed.
    a, b = [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 4, 8, 9]
    tree = build_position_tree([(a, [2, 3, 6]), (b, [2, 3, 6]), (a, [7]), (b, [])])
    # Shared 0..4, then a's "5 6" (a[:7] covers a[:6]) and b's "8"; a's 7 and b's 9 never.
    assert tree.tokens() == 5 + 2 + 1
    assert tree.request_queries[3] == []
    # Positions 2 and 3 are the same queries in both sentences (same prefix, same target).
    assert tree.request_queries[0][:2] == tree.request_queries[1][:2]
    assert tree.request_queries[0][2] != tree.request_queries[1][2]
    assert tree.n_queries == 5
    with pytest.raises(ValueError, match="position 0 is outside"):
        build_position_tree([(a, [0])])


# -- exactness -------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["default", "lmeval"])
def test_real_rows_equal_one_forward_per_request(gpt2, llama, data_dir, protocol):
    _, items, choices, flat = bbq_requests(data_dir, protocol)
    for model in (gpt2, llama):
        expected = reference(model, flat)
        plain_tokens = sum(len(c) + len(x) - 1 for c, x in (model.encode_pair(*r) for r in flat))
        for packing in (True, False):  # packed tree attention; levels over copied caches
            model.packing = packing
            engine = Engine(model)
            got = engine.loglikelihood(flat)
            model.packing = True
            assert got == pytest.approx(expected, abs=1e-4)
            assert predictions(got, choices) == predictions(expected, choices)
            # Contexts shared across items and choices: far fewer tokens than lm-eval's way.
            assert engine.stats.tokens_forwarded < plain_tokens / 4


def test_packed_rows_split_at_the_token_budget(gpt2, data_dir, monkeypatch):
    _, _, _, flat = bbq_requests(data_dir, "lmeval", categories=("Age",), rows=4)
    asked: list[int] = []  # queries per forward: each an output-head row and a log-softmax
    real = gpt2.forward_packed
    monkeypatch.setattr(
        gpt2, "forward_packed", lambda rows: asked.append(sum(len(r[3]) for r in rows)) or real(rows)
    )
    whole = Engine(gpt2).loglikelihood(flat)
    queries = sum(asked)
    asked.clear()
    monkeypatch.setattr(gpt2, "token_budget", 40)  # below one BBQ subtree: its prefix repeats in rows
    engine = Engine(gpt2)
    assert engine.loglikelihood(flat) == pytest.approx(whole, abs=1e-4)
    assert engine.stats.forwards > 1
    # A repeated prefix is fed again but its own queries are asked once, in its first copy.
    assert sum(asked) == queries


def test_subtrees_packed_into_one_row_score_as_if_alone(gpt2, llama, data_dir, monkeypatch):
    # Several items' subtrees share a row (each attends only within itself, positions from its
    # own depth): the values equal one row per subtree, and the rows are fuller.
    _, _, _, flat = bbq_requests(data_dir, "lmeval", categories=("Age", "Religion"), rows=4)
    for model in (gpt2, llama):
        seen: list[list[int]] = []
        real = model.forward_packed

        def record(rows, real=real, seen=seen):
            seen.append([len(r[0]) for r in rows])
            return real(rows)

        monkeypatch.setattr(model, "forward_packed", record)
        monkeypatch.setattr(model, "packed_row_tokens", 1)  # nothing fits together: one per row
        alone = Engine(model).loglikelihood(flat)
        n_alone = sum(len(s) for s in seen)
        seen.clear()
        monkeypatch.setattr(model, "packed_row_tokens", 4096)
        packed = Engine(model).loglikelihood(flat)
        assert packed == pytest.approx(alone, abs=1e-4)
        assert sum(len(s) for s in seen) < n_alone and max(max(s) for s in seen) <= 4096
        monkeypatch.undo()


def test_the_last_forward_packs_narrower_rows_rather_than_pad_a_nearly_empty_one():
    # Subtree sizes of one sequential BBQ round (SmolLM2, 20 items): first fit into rows of 512
    # gives rows of 508, 491 and 48 tokens, and a forward pads every row to its longest (1,524
    # tokens computed for 1,047). The last forward takes the narrowest rows that hold them.
    sizes = [150, 120, 96, 94, 85, 80, 77, 53, 48, 39, 37, 34, 32, 27, 27, 25, 23]
    pieces = [([1] * k, [-1] * k, list(range(k)), [(k - 1, 0, i)]) for i, k in enumerate(sizes)]
    backend = SimpleNamespace(batch_size=16, vocab_size=10, logits_budget=1 << 20, token_budget=8192)
    first_fit = _bins(pieces, 512)
    assert sorted(_size(b) for b in first_fit) == [48, 491, 508]
    rows = narrow_tail(backend, sorted(first_fit, key=lambda b: -_size(b)), budget=1536)
    widths = [len(r[0]) for r in rows]
    assert sum(widths) == sum(sizes) and len(rows) * max(widths) <= 1.05 * sum(sizes)
    # Every subtree is in exactly one row, its query column moved with it.
    assert sorted(q[2] for r in rows for q in r[3]) == list(range(len(sizes)))
    # Nothing narrower fits the budget, or nothing is saved: the rows stay as they are.
    assert narrow_tail(backend, sorted(first_fit, key=lambda b: -_size(b)), budget=900) is None
    assert narrow_tail(backend, [pieces[:3]], budget=1536) is None


def test_narrower_last_rows_score_as_the_whole_row(gpt2, data_dir, monkeypatch):
    _, _, _, flat = bbq_requests(data_dir, "lmeval", categories=("Age", "Religion"), rows=6)
    shapes: list[tuple[int, int]] = []
    real = gpt2.forward_packed

    def record(rows):
        shapes.append((len(rows), max(len(r[0]) for r in rows)))
        return real(rows)

    monkeypatch.setattr(gpt2, "forward_packed", record)
    monkeypatch.setattr(gpt2, "packed_row_tokens", 4096)
    whole = Engine(gpt2, forward_seconds=0).loglikelihood(flat)
    ((_, tokens),) = shapes  # one row holds the call
    shapes.clear()
    monkeypatch.setattr(gpt2, "packed_row_tokens", int(0.7 * tokens))
    assert Engine(gpt2, forward_seconds=0).loglikelihood(flat) == pytest.approx(whole, abs=1e-4)
    # One forward, of rows narrower than first fit's fullest (819 of these 1,248 tokens in GPT-2's
    # tokens; the narrow rows hold 718, as the subtrees are 530, 429 and 289 tokens).
    ((rows, width),) = shapes
    assert rows == 2 and width <= 0.6 * tokens


@pytest.mark.parametrize("query_block", [64, 8])
def test_per_tree_attention_equals_attention_over_the_whole_row(
    gpt2, llama, data_dir, monkeypatch, query_block
):
    # On CPU the packed rows' attention runs per block of a prefix tree against the block's
    # ancestors (segmented_attention): the same values as SDPA over the whole masked row, rows
    # of unequal length (padding) included. Blocks of 8 split the trees, so some blocks gather
    # keys that are not contiguous.
    from transformers import AttentionInterface

    from audit_harness.models import segmented_attention

    _, _, choices, flat = bbq_requests(data_dir, "lmeval", categories=("Age", "Religion", "SES"), rows=4)
    for model in (gpt2, llama):
        assert model.per_tree
        monkeypatch.setattr(segmented_attention, "QUERY_BLOCK", query_block)
        blocks: list[int] = []
        gathered: list[bool] = []
        real = segmented_attention.segmented_sdpa

        def spy(*args, packed_segments=None, blocks=blocks, gathered=gathered, real=real, **kwargs):
            blocks.append(len(packed_segments or ()))
            gathered.extend(not isinstance(b.keys, slice) for b in packed_segments or ())
            return real(*args, packed_segments=packed_segments, **kwargs)

        AttentionInterface.register(segmented_attention.NAME, spy)
        monkeypatch.setattr(model, "packed_row_tokens", 160)  # several rows, several trees per row
        per_tree = Engine(model, forward_seconds=0).loglikelihood(flat)
        assert blocks and min(blocks) >= 1 and max(blocks) >= 2  # every layer, per tree
        if query_block == 8:
            assert any(gathered)  # the choices' branches: keys skip the sibling choices
        AttentionInterface.register(segmented_attention.NAME, real)
        monkeypatch.setattr(model, "per_tree", False)
        whole = Engine(model, forward_seconds=0).loglikelihood(flat)
        assert per_tree == pytest.approx(whole, abs=1e-4)  # the engine's exactness contract
        assert predictions(per_tree, choices) == predictions(whole, choices)
        # Generation and cache continuation never see the per-tree function: SDPA as always.
        assert model.model.config._attn_implementation == "sdpa"  # noqa: SLF001 - transformers has no public reader
        monkeypatch.undo()


def test_invariant_to_batch_size_order_and_cache(gpt2, data_dir, tmp_path):
    _, _, choices, flat = bbq_requests(data_dir, "lmeval")
    base = Engine(gpt2).loglikelihood(flat)
    saved = gpt2.batch_size, gpt2.token_budget
    try:
        for batch_size, token_budget in [(1, 8192), (5, 200)]:
            gpt2.batch_size, gpt2.token_budget = batch_size, token_budget
            assert Engine(gpt2).loglikelihood(flat) == pytest.approx(base, abs=1e-4)
    finally:
        gpt2.batch_size, gpt2.token_budget = saved
    perm = torch.randperm(len(flat), generator=torch.Generator().manual_seed(1)).tolist()
    shuffled = Engine(gpt2).loglikelihood([flat[i] for i in perm])
    assert [shuffled[perm.index(i)] for i in range(len(flat))] == pytest.approx(base, abs=1e-4)
    cold = Engine(gpt2, cache=ResultCache(tmp_path))
    first = cold.loglikelihood(flat)
    warm = Engine(gpt2, cache=ResultCache(tmp_path))
    assert warm.loglikelihood(flat) == first  # bit for bit
    assert warm.stats.computed == 0 and warm.stats.from_cache == warm.stats.distinct
    assert predictions(first, choices) == predictions(base, choices)


def test_duplicates_are_computed_once_and_token_logprobs_are_cached(gpt2, tmp_path):
    engine = Engine(gpt2, cache=ResultCache(tmp_path), memo=True)
    reqs = [("Answer:", " A"), ("Answer: ", "A"), ("Answer:", " B"), ("Answer:", " A")]
    a = engine.loglikelihood(reqs)
    assert a[0] == a[1] == a[3] and engine.stats.distinct == 2 and engine.stats.computed == 2
    enc = gpt2.encode_sentence("The grandfather and the grandson.")
    positions = list(range(1, len(enc.ids)))
    first = engine.token_logprobs([enc.ids, enc.ids], [positions, positions])
    assert first[0] == first[1]
    again = Engine(gpt2, cache=ResultCache(tmp_path)).token_logprobs([enc.ids], [positions])
    assert again[0] == first[0]


def test_out_of_memory_halves_the_batch(gpt2, monkeypatch):
    # Distinct first words: six separate trees, so a batch holds several rows.
    reqs = [
        (f"{w} is the context here", f" choice {j}")
        for w in ("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot")
        for j in range(3)
    ]
    expected = Engine(gpt2).loglikelihood(reqs)
    real_segments, real_full = gpt2.forward_segments, gpt2.forward_full

    def small_segments(state, rows, segments, queries):
        if len(segments) > 2:
            raise BackendOutOfMemory("CUDA out of memory (simulated)")
        return real_segments(state, rows, segments, queries)

    def small_full(seqs, positions):
        if len(seqs) > 2:
            raise BackendOutOfMemory("CUDA out of memory (simulated)")
        return real_full(seqs, positions)

    real_packed = gpt2.forward_packed

    def small_packed(rows):
        if len(rows) > 1:
            raise BackendOutOfMemory("CUDA out of memory (simulated)")
        return real_packed(rows)

    monkeypatch.setattr(gpt2, "forward_packed", small_packed)
    monkeypatch.setattr(gpt2, "packed_row_tokens", 8)  # one row per subtree: several rows to halve
    monkeypatch.setattr(gpt2, "forward_segments", small_segments)
    monkeypatch.setattr(gpt2, "forward_full", small_full)
    for packing in (True, False):
        gpt2.packing = packing
        engine = Engine(gpt2)
        assert engine.loglikelihood(reqs) == pytest.approx(expected, abs=1e-4)
        assert engine.stats.oom_retries > 0
    gpt2.packing = True
    gpt2.prefix_sharing = False
    try:
        full = Engine(gpt2)
        assert full.loglikelihood(reqs) == pytest.approx(expected, abs=1e-4)
        assert full.stats.oom_retries > 0
    finally:
        gpt2.prefix_sharing = True


# -- result cache ------------------------------------------------------------------------------------
CRASHING_RUN = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from audit_harness.engine.cache import ResultCache
    from audit_harness.engine.executor import Engine
    from audit_harness.models import load_model
    from test_engine import bbq_requests
    from pathlib import Path
    kill_after = int(sys.argv[1])
    model = load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)
    model.batch_size, model.token_budget = 1, 100  # many forwards (trees split into rows)
    engine = Engine(model, cache=ResultCache(sys.argv[2]))
    real, calls = model.forward_packed, [0]
    def forward(*a, **k):
        calls[0] += 1
        if kill_after and calls[0] > kill_after:
            print(json.dumps(engine.stats.to_dict()), flush=True)
            os._exit(9)  # a crash: no cleanup, no flush beyond what the engine committed
        return real(*a, **k)
    model.forward_packed = forward
    _, _, _, flat = bbq_requests(Path(sys.argv[3]), "lmeval")
    engine.loglikelihood(flat)
    print(json.dumps(engine.stats.to_dict()), flush=True)
""")


def test_killed_run_resumes_computing_only_what_is_missing(tmp_path, data_dir):
    import json

    script = tmp_path / "run.py"
    script.write_text(CRASHING_RUN.format(repo=str(REPO), tests=str(REPO / "tests")))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    def run(kill_after: int):
        proc = subprocess.run(
            [sys.executable, str(script), str(kill_after), str(tmp_path / "cache"), str(data_dir)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])

    rc, killed = run(3)
    assert rc == 9 and 0 < killed["computed"] < killed["distinct"]
    rc, resumed = run(0)
    assert rc == 0
    assert resumed["from_cache"] == killed["computed"]
    assert killed["computed"] + resumed["computed"] == resumed["distinct"]  # each request once


def _writer(folder: str, worker: int, n: int) -> None:
    cache = ResultCache(folder)
    for start in range(0, n, 10):
        cache.put_many(
            {request_key("m", "ll", [worker, i], [1]): [float(i)] for i in range(start, start + 10)}
        )
        cache.get_many([request_key("m", "ll", [1 - worker, i], [1]) for i in range(start, start + 10)])


def test_two_processes_write_one_cache(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 200)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = ResultCache(tmp_path)
    assert len(cache) == 400
    got = cache.get_many([request_key("m", "ll", [1, 7], [1])])
    assert list(got.values()) == [[7.0]]


# -- progress ----------------------------------------------------------------------------------------
def test_progress_lines_in_ci_and_quiet():
    assert progress_mode(quiet=False, env={"CI": "true"}) == "lines"
    assert progress_mode(quiet=True, env={"CI": "true"}) == "off"
    assert progress_mode(quiet=False, env={}, worker="gw1") == "lines"
    out = io.StringIO()
    with Progress("lines", stream=out, interval=0.0, prefix="[gw1] ").task("bbq/Age", 4) as task:
        for _ in range(8):
            task.advance(0.5)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[gw1] bbq/Age: 0/4 items") and "items/s" in lines[0]
    assert lines[-1].startswith("[gw1] bbq/Age: 4/4 items (100%)") and "done in" in lines[-1]
    # The caller's terminal gets to end its open line (pytest's outcome letters) before each one.
    calls = []
    with Progress("lines", stream=io.StringIO(), interval=0.0, line_start=lambda: calls.append(1)).task(
        "bbq/Age", 4
    ) as task:
        task.advance(2)
        task.advance(2)
    assert len(calls) == 2  # the progress line and the closing one (a done category says so once)
    # A task closed before its total (a sequential category that stopped early) says so.
    early = io.StringIO()
    with Progress("lines", stream=early, interval=0.0).task("bbq/Age", 4) as task:
        task.advance(1)
    assert early.getvalue().splitlines()[-1].startswith("bbq/Age: 1/4 items (25%)")
    assert "stopped early, done in" in early.getvalue().splitlines()[-1]
    # A full category whose items came in thirds (three requests each) sums to 3.9999...: done.
    full = io.StringIO()
    with Progress("lines", stream=full, interval=0.0).task("bbq/Age", 120) as task:
        for _ in range(360):
            task.advance(1 / 3)
    assert full.getvalue().splitlines()[-1].endswith(" s") and "stopped early" not in full.getvalue()
    silent = io.StringIO()
    with Progress("off", stream=silent).task("bbq/Age", 4) as task:
        task.advance(4)
    assert silent.getvalue() == ""


def test_run_progress_counts_categories_items_and_time_left():
    out = io.StringIO()
    progress = Progress("lines", stream=out, interval=0.0)
    progress.expect({"bbq/Age": 4, "bbq/Religion": 6, "bbq/SES": 10})
    with progress.task("bbq/Age", 4) as task:
        task.advance(4)
    with progress.task("bbq/Religion", 6) as task:  # a sequential category that stopped early
        task.advance(2)
    run = [line for line in out.getvalue().splitlines() if line.startswith("run: ")]
    assert run[0].startswith("run: category 2 of 3, 4/20 items (20%), ")  # Age closed, Religion next
    # The items a category that stopped early did not score are no longer work left.
    assert run[-1].startswith("run: category 3 of 3, 6/16 items (38%), ") and " ETA " in run[-1]
    with progress.task("bbq/SES", 10) as task:
        task.advance(10)
    assert out.getvalue().splitlines()[-1].startswith("run: 3 of 3 categories, 16/16 items (100%), ")
    # One category: its own line says it all; with -q nothing.
    one = Progress("lines", stream=io.StringIO(), interval=0.0)
    one.expect({"bbq/Age": 4})
    assert one.run is None
    quiet = io.StringIO()
    off = Progress("off", stream=quiet, interval=0.0)
    off.expect({"bbq/Age": 4, "bbq/SES": 4})
    with off.task("bbq/Age", 4) as task:
        task.advance(4)
    assert quiet.getvalue() == ""
    # On a terminal the run's position is the bar's postfix.
    bar = Progress("bar", stream=io.StringIO(), delay=0.0)
    bar.expect({"bbq/Age": 4, "bbq/SES": 4})
    with bar.task("bbq/Age", 4) as task:
        task.advance(4)
        assert "run 1/2, 4/8 items (50%)" in str(task.bar)


def test_progress_lines_agree_on_items_percentages_and_the_time_left():
    # Issue 48: "run: ... 114/160 items ... ETA 1 min 07 s" beside "mbbq/Age_nl: 37/80 items
    # (46%) ... ETA 111 s" (two ETAs for the same work, taken at different moments),
    # "cbbq/religion: 2/8 items (21%)", and "8/8 items (100%), ETA 0 s" before "done in".
    out = io.StringIO()
    progress = Progress("lines", stream=out, interval=0.0)
    progress.expect({"mbbq/Age_en": 8, "mbbq/Age_nl": 8})
    for label in ("mbbq/Age_en", "mbbq/Age_nl"):
        with progress.task(label, 8) as task:
            for _ in range(24):
                task.advance(1 / 3)  # an item's three requests
    line = re.compile(r"^(?P<label>mbbq/Age_\w\w): (?P<n>\d+)/8 items \((?P<pct>\d+)%\)(?P<rest>.*)$")
    run_part = re.compile(
        r"run: category (\d) of 2, (?P<n>\d+)/16 items \((?P<pct>\d+)%\), [0-9.]+ items/s, ETA "
    )
    during = 0
    for text in out.getvalue().splitlines():
        assert text.count("ETA") <= 1, text  # one time left per line
        m = line.match(text)
        if m is None:
            assert text.startswith("run: "), text
            continue
        n, pct = int(m["n"]), int(m["pct"])
        assert pct == round(100 * n / 8), text  # the percentage is of the items shown
        if "done in" in m["rest"]:
            assert n == 8 and "ETA" not in text, text
            continue
        assert n < 8, text  # a done category says so once, in its closing line
        r = run_part.search(m["rest"])
        assert r, text
        # The run's count at the same moment: the closed categories' items plus this one's.
        before = 8 if m["label"] == "mbbq/Age_nl" else 0
        assert int(r["n"]) == before + n and int(r["pct"]) == round(100 * (before + n) / 16), text
        during += 1
    assert during >= 10
    closing = [t for t in out.getvalue().splitlines() if "done in" in t]
    assert [t.split(":")[0] for t in closing] == ["mbbq/Age_en", "mbbq/Age_nl", "run"]
    assert closing[-1].startswith("run: 2 of 2 categories, 16/16 items (100%), ")


def test_a_short_run_on_a_terminal_shows_its_bar_with_whole_items():
    # tqdm shows nothing when the last update comes before its delay: a short category on a
    # terminal showed no bar. The bar counts whole items, and its ETA is the run's alone.
    stream = io.StringIO()
    bar = Progress("bar", stream=stream)
    bar.expect({"cbbq/religion": 8, "cbbq/age": 8})
    with bar.task("cbbq/religion", 8) as task:
        for _ in range(5):
            task.advance(1 / 3)
        assert task.bar.n == 1
    shown = stream.getvalue()
    assert "cbbq/religion" in shown and "1/8 items" in shown and "12%" in shown, shown
    assert "<" not in shown.split("items [")[-1], shown  # no second ETA beside the run's


def test_progress_lines_start_on_a_line_of_their_own_in_a_run(tmp_path, data_dir):
    # Under CI, stdout and stderr often go to one log: a progress line (stderr) landed after
    # pytest's row of outcome letters (stdout, buffered), as in "FFFF...bbq/Religion: 8/8 items".
    cmd = [sys.executable, "-m", "pytest", "audits/test_bbq.py", "--model", "tiny-random-gpt2"]
    cmd += ["--data-dir", str(data_dir), "--limit", "8", "--min-n", "1", "-k", "Age or Religion"]
    cmd += [
        "--results-dir",
        str(tmp_path / "r"),
        "--cache-dir",
        str(tmp_path / "c"),
        "-p",
        "no:cacheprovider",
    ]
    env = dict(
        os.environ, CI="true", BIAS_AUDIT_PROGRESS_INTERVAL="0", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO)
    )
    proc = subprocess.run(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=env
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    progress = [line for line in proc.stdout.splitlines() if " items (" in line and "items/s" in line]
    categories = [line for line in progress if not line.startswith("run: ")]
    closing = [line for line in categories if "done in" in line]
    # Each category closes with one line (its 8 items may come in one batch, and a done
    # category is said once: no "100%, ETA 0 s" line before it).
    assert [line.split(":")[0] for line in closing] == ["bbq/Age", "bbq/Religion"], proc.stdout[-3000:]
    assert all(line.startswith(("bbq/Age: ", "bbq/Religion: ")) for line in categories), progress
    # A category line while it runs carries the whole run's position at the same moment (k of N
    # categories, items of the run's total, the measured rate and the one ETA); a run line
    # follows a category and one closes the run; plain lines (no carriage return).
    assert "\r" not in proc.stdout, proc.stdout[-3000:]
    during = re.compile(r"run: category ([12]) of 2, (\d+)/16 items \(\d+%\), [0-9.]+ items/s, ETA \d+ s$")
    assert all(during.search(line) for line in categories if "done in" not in line), progress
    run = [line for line in progress if line.startswith("run: ")]
    assert run and all(during.match(line) for line in run[:-1]), run
    assert re.match(
        r"^run: 2 of 2 categories, 16/16 items \(100%\), [0-9.]+ items/s, done in \d+ s$", run[-1]
    )


@pytest.mark.parametrize(
    "benchmark, category", [("crows_pairs", "religion"), ("winoqueer", "masc_femm_name")]
)
def test_pair_scores_through_the_tree_equal_one_forward_per_sentence(
    gpt2, llama, data_dir, benchmark, category
):
    """Sentence pairs on real rows: the prefix tree (packed rows, and levels over copied caches)
    gives each sentence's score within the engine's 1e-4 nats of one whole forward per sentence,
    and the same pair outcomes (up to pairs whose score is within 1e-4 of a rounding boundary
    at 3 decimals, where the last digits of a CPU decide)."""
    bench = registry()[benchmark]
    items = bench.load_category(data_dir, category).items[:24]
    for model in (gpt2, llama):
        model.prefix_sharing = False
        try:
            plain_engine = Engine(model)
            plain = bench.evaluate(plain_engine, items)
        finally:
            model.prefix_sharing = True
        for packing in (True, False):
            model.packing = packing
            try:
                engine = Engine(model)
                tree = bench.evaluate(engine, items)
            finally:
                model.packing = True
            assert engine.stats.tokens_forwarded < plain_engine.stats.tokens_forwarded
            for p, t in zip(plain, tree):
                assert (t.score_more, t.score_less) == (
                    pytest.approx(p.score_more, abs=1e-4),
                    pytest.approx(p.score_less, abs=1e-4),
                )
                near = any(abs((v * 1000) % 1 - 0.5) < 0.1 for v in (p.score_more, p.score_less))
                assert t.outcome == p.outcome or near


def test_full_sequence_batches_reach_the_cache_before_a_later_batch_fails(gpt2, tmp_path, monkeypatch):
    """The whole-sequence path (servers, models that cannot share prefixes) stores each batch as
    it returns: a backend that dies on the third batch (every endpoint of a pool gone) leaves
    the first two in the cache, and the rerun computes only the rest, each request once."""
    reqs = [
        (f"{w} is the context here", f" choice {j}") for w in ("Alpha", "Bravo", "Charlie") for j in range(3)
    ]
    real_full, calls = gpt2.forward_full, [0]

    def dies_on_the_third(seqs, positions):
        calls[0] += 1
        if calls[0] == 3:
            raise ModelError("every endpoint of the pool went away (simulated)")
        return real_full(seqs, positions)

    monkeypatch.setattr(gpt2, "prefix_sharing", False)
    monkeypatch.setattr(gpt2, "batch_size", 2)
    monkeypatch.setattr(gpt2, "forward_full", dies_on_the_third)
    engine = Engine(gpt2, cache=ResultCache(tmp_path))
    with pytest.raises(ModelError, match="went away"):
        engine.loglikelihood(reqs)
    assert engine.stats.computed == 4  # two batches of two, stored before the third failed
    monkeypatch.setattr(gpt2, "forward_full", real_full)
    again = Engine(gpt2, cache=ResultCache(tmp_path))
    values = again.loglikelihood(reqs)
    assert (again.stats.from_cache, again.stats.computed) == (4, len(reqs) - 4)
    assert values == pytest.approx(Engine(gpt2).loglikelihood(reqs), abs=1e-4)


def test_a_forward_running_backend_without_a_cache_key_is_refused_not_keyed_on_none():
    """Keys built from the text "None" would be shared by every such model in the memo and the
    result cache: the engine names the backend and refuses instead."""
    from audit_harness.models.base import Backend

    class Keyless(Backend):
        runs_forwards = True
        max_length = 64

    engine = Engine(Keyless())
    with pytest.raises(ModelError, match="Keyless declares no cache_key"):
        engine.loglikelihood_tokens([([1, 2], [3])])
    with pytest.raises(ModelError, match="Keyless declares no cache_key"):
        engine.token_logprobs([[1, 2, 3]], [[1, 2]])
