"""Request execution for every backend: dedupe, the result cache, the prefix tree, ordering,
token-budget batching (halved and retried on out-of-memory) and progress, for scores and (in
``generation``) for greedy generations. The session builds one ``Engine(backend, cache)`` and
benchmarks ask it, and only it, for scores and generations; a backend (``models.base.Backend``)
never sees the engine. A backend only runs forwards:

- ``forward_full(sequences, positions) -> [[logprob]]``: one forward over a batch of whole
  sequences (left-padded), log P(ids[p] | ids[:p]) at the given positions.
- ``forward_packed(rows) -> [[logprob]]`` (optional, ``can_pack``): one forward of prefix trees
  flattened into rows (tokens, parent index per token, position per token, queries as (column,
  target)) with tree attention: every prefix computed once, no key/value copies. Preferred.
- ``forward_segments(state, parent_rows, segments, queries) -> (state, [[logprob]])`` (optional,
  ``can_share``): one forward of token segments, each continuing row ``parent_rows[i]`` of
  ``state`` (None: from scratch), returning the log-probability of each query's target after
  ``segment[:offset + 1]``; the new state continues these rows (for models that cannot pack).

and declares ``batch_size``, ``token_budget``, ``logits_budget``, ``vocab_size``,
``max_length``, ``prefix_sharing``, ``can_pack``, ``can_share``, ``two_level_sharing``,
``order_by_prefix`` (full path in lexicographic order instead of longest first: an inference
server, ``models/openai_server.py``) and ``cache_key``, and tokenizes through ``encode_pairs``
(a whole call's requests at once: batched and deduplicated in-process, concurrent over a
network). ``models.base.Backend`` declares all of them with defaults; a backend that answers
whole requests itself (``runs_forwards`` False) gets its requests as they are.
Backend errors: ``BackendOutOfMemory`` (retry smaller), ``PrefixUnsupported`` (switch sharing
off for this model; rescore on the full path).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

from ..errors import ModelError
from ..models.base import Backend, GenerationRequest, ModelInfo, SentenceEncoding, check_token_positions
from ..models.errors import BackendOutOfMemory, PrefixUnsupported
from .cache import ResultCache, request_key
from .generation import Generation
from .pace import DEFAULT_TARGET_S, Pace
from .prefix_tree import PrefixTree, Segment, build_position_tree, build_tree
from .store import EngineStats, ResultStore, halving

if TYPE_CHECKING:
    from ..parsing.letters import LetterRead
    from .progress import ProgressTask

__all__ = ["BackendOutOfMemory", "Engine", "EngineStats", "PrefixUnsupported"]

#: Distinct requests scored per prefix tree: bounds the tree's memory and makes a crash lose at
#: most one chunk (requests are sorted first, so chunks rarely cut a shared prefix).
CHUNK_REQUESTS = 2048

#: Distinct requests by key: (context ids, continuation ids), or (sequence ids, positions).
_Pending = dict[bytes, tuple[tuple[int, ...], tuple[int, ...]]]
#: Hands (query ids, their values) back to the requests waiting on them (``Engine._run_tree``).
_Deliver = Callable[[list[int], list[float]], None]
#: A flattened subtree or packed row: tokens, parent index per token, position per token and
#: queries as (column, target, query id).
_Flat = tuple[list[int], list[int], list[int], list[tuple[int, int, int]]]
#: Takes (request indices, their values) of a batch of whole-sequence forwards (``Engine._full``).
_Done = Callable[[list[int], list[list[float]]], None]


class Engine:
    """Executes scoring requests on one backend (see module doc).

    Args:
        backend: the ``models.base.Backend`` that runs the forwards.
        cache: the persistent result cache, or None (a per-process memo still dedupes across
            calls, items and benchmarks).
        min_shared: shortest shared prefix given its own forward (``build_tree``).
        memo: keep every result of this process in memory too (dedupe across calls, items and
            benchmarks without a cache file). A bare model's own engine has none, so changing
            its settings between calls recomputes.
        forward_seconds: seconds of work one forward aims at (``engine.pace``): results are
            committed to the cache after each forward, so this bounds what an interruption
            loses; 0 sizes forwards by tokens only.
    """

    def __init__(
        self,
        backend: Backend,
        cache: ResultCache | None = None,
        min_shared: int = 4,
        memo: bool = False,
        forward_seconds: float = DEFAULT_TARGET_S,
    ):
        self.backend = backend
        self.cache = cache
        self.min_shared = min_shared
        self.scores = ResultStore(cache, "scores", memo)
        self.texts = ResultStore(cache, "texts", memo)
        self._results: dict[bytes, list[float]] = {}
        self._weight: dict[bytes, float] = {}
        self.stats = EngineStats()
        self.progress: ProgressTask | None = None  # while a category runs
        # A server answers each call as its own scheduler sees fit (and concurrently): calls
        # are shaped for its prefix cache, not paced by this process's throughput.
        self.pace = Pace(0 if backend.order_by_prefix else forward_seconds)

    def reset_stats(self) -> EngineStats:
        """Return the counters so far and start new ones."""
        old, self.stats = self.stats, EngineStats()
        return old

    # -- what benchmarks read of the backend -----------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        """The backend's ``ModelInfo`` (provenance)."""
        return self.backend.info

    @property
    def capabilities(self) -> frozenset[str]:
        """What the backend can compute (``models.base`` constants)."""
        return self.backend.capabilities

    @property
    def chat_template(self) -> str | None:
        """The chat template generation prompts are formatted with, or None."""
        return self.backend.chat_template

    def chat_prompt(self, user_message: str) -> str | None:
        """``user_message`` as one user turn through the chat template (None without one)."""
        return self.backend.chat_prompt(user_message)

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """``text`` tokenized as the backend scores a whole sentence (``SentenceEncoding``)."""
        return self.backend.encode_sentence(text)

    # -- public requests ---------------------------------------------------------------------------
    def score_choices(
        self, prompts: Sequence[str], choices: Sequence[Sequence[str]], delimiter: str = " "
    ) -> list[list[float]]:
        """Cloze multiple choice: the summed log-likelihood of ``delimiter + choice`` after each
        prompt, per item one value per choice (each item one progress unit).

        Raises:
            ValueError: prompts and choices differ in length, or an item has no choice.
        """
        if len(prompts) != len(choices):
            raise ValueError(f"{len(prompts)} prompts but {len(choices)} choice lists")
        flat: list[tuple[str, str]] = []
        weights: list[float] = []
        for i, (prompt, opts) in enumerate(zip(prompts, choices)):
            if not opts:
                raise ValueError(f"item {i} has no choices")
            flat.extend((prompt, delimiter + c) for c in opts)
            weights.extend([1.0 / len(opts)] * len(opts))
        scores = self.loglikelihood(flat, weights)
        out, pos = [], 0
        for opts in choices:
            out.append(scores[pos : pos + len(opts)])
            pos += len(opts)
        return out

    def score_positions(
        self, requests: Sequence[tuple[Sequence[int], Sequence[int]]], weights: Sequence[float] | None = None
    ) -> tuple[list[list[float]], int]:
        """``token_logprobs`` for every (token ids, positions) request, each distinct sequence
        computed once for the union of the positions asked of it (a sentence several pairs share
        is scored once). Returns (per request its values in its order, distinct sequences)."""
        needed: dict[tuple[int, ...], set[int]] = {}
        weight: dict[tuple[int, ...], float] = {}
        for n, (ids, positions) in enumerate(requests):
            key = tuple(ids)
            needed.setdefault(key, set()).update(positions)
            weight[key] = weight.get(key, 0.0) + (weights[n] if weights is not None else 0.0)
        sequences = list(needed)
        asked = [sorted(needed[s]) for s in sequences]
        values = self.token_logprobs(
            sequences, asked, [weight[s] for s in sequences] if weights is not None else None
        )
        table = {s: dict(zip(pos, vals)) for s, pos, vals in zip(sequences, asked, values)}
        return [[table[tuple(ids)][p] for p in positions] for ids, positions in requests], len(sequences)

    def loglikelihood(
        self, requests: Sequence[tuple[str, str]], weights: Sequence[float] | None = None
    ) -> list[float]:
        """Summed log-probability (natural log) of each continuation after its context (strings
        tokenized by the backend's ``encode_pair``). ``weights``: progress units per request
        (an item's share), default none."""
        self._require("loglikelihood")
        if not self.keyed_forwards:
            return self._strings_as_is(requests, weights)
        return self.loglikelihood_tokens(self.backend.encode_pairs(requests), weights)

    def prompt_loglikelihood(
        self, requests: Sequence[tuple[str, str]], weights: Sequence[float] | None = None
    ) -> list[float]:
        """Summed log-probability of each continuation right after its generation prompt, the
        prompt tokenized as ``generate`` reads it (the backend's ``encode_continuation``: no
        whitespace moves across the boundary). Backends that answer whole requests score the
        strings with their own ``loglikelihood``.

        Raises:
            ValueError: an empty prompt or continuation.
        """
        self._require("loglikelihood")
        if not self.keyed_forwards:
            return self._strings_as_is(requests, weights)
        encoded = [self.backend.encode_continuation(p, c) for p, c in requests]
        return self.loglikelihood_tokens(encoded, weights)

    def letter_logprobs(self, prompts: Sequence[str], letters: Sequence[Sequence[str]]) -> list[LetterRead]:
        """Per chat prompt, the first answer token read over its option ``letters``
        (``parsing.letters.LetterRead``): exact in process, a chat API's top candidates on a
        server (``engine.letters``). Each prompt is one progress unit.

        Raises:
            ModelError: the backend cannot be read so.
        """
        from .letters import read_letters

        self._require("letter_logprobs")
        return read_letters(self, prompts, letters)

    def _strings_as_is(
        self, requests: Sequence[tuple[str, str]], weights: Sequence[float] | None
    ) -> list[float]:
        """A backend that scores strings itself (a test double, a server without token ids):
        no token ids to key a cache on, so its own ``loglikelihood`` runs as is."""
        values = list(self.backend.loglikelihood(requests))
        self.stats.requests += len(requests)
        self.stats.computed += len(requests)
        if self.progress is not None and weights is not None:
            self.progress.advance(sum(weights))
        return values

    def loglikelihood_tokens(
        self, encoded: Sequence[tuple[Sequence[int], Sequence[int]]], weights: Sequence[float] | None = None
    ) -> list[float]:
        """``loglikelihood`` on (context ids, continuation ids).

        Raises:
            ValueError: an empty context or continuation, or a continuation that alone does not
                fit the model's window (longer sequences lose tokens from the left of the context).
            ModelError: the backend declares no ``cache_key`` to key its scores on.
        """
        m = self.backend
        for n, (ctx, cont) in enumerate(encoded):
            if not ctx or not cont:
                raise ValueError(
                    f"request {n}: empty context or continuation ids (the first "
                    "continuation token needs a context token to condition on)"
                )
            if len(cont) >= m.max_length:
                raise ValueError(
                    f"continuation of {len(cont)} tokens does not fit the model's {m.max_length}-token window"
                )
        # Too long for the window: read with the context's left cut off (``_compute_loglikelihood``).
        self.stats.truncated += len(
            {tuple(ctx) for ctx, cont in encoded if len(ctx) + len(cont) > m.max_length}
        )
        model_key = self._model_key()
        keys = [request_key(model_key, "ll", ctx, cont) for ctx, cont in encoded]
        first: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        todo = self._lookup(keys, first, weights)
        if todo:
            pending = {k: (tuple(encoded[first[k]][0]), tuple(encoded[first[k]][1])) for k in todo}
            self._compute_loglikelihood(pending, todo)
        return [self._results[k][0] for k in keys]

    def token_logprobs(
        self,
        sequences: Sequence[Sequence[int]],
        positions: Sequence[Sequence[int]],
        weights: Sequence[float] | None = None,
    ) -> list[list[float]]:
        """log P(ids[p] | context) at each requested position, each (sequence, positions) pair
        computed once (cache, memo). Backends that run forwards are batched here; others
        (masked LMs) get the misses in one ``token_logprobs`` call.

        Raises:
            ValueError: lengths differ, a sequence exceeds the window, or a position is outside
                ``[1, len(sequence))``.
            ModelError: a backend that runs forwards but declares no ``cache_key``.
        """
        self._require("token_logprobs")
        m = self.backend
        if len(sequences) != len(positions):
            raise ValueError(f"{len(sequences)} sequences but {len(positions)} position lists")
        if m.runs_forwards:
            check_token_positions(sequences, positions, m.max_length, first=1)
        elif m.cache_key is None:
            values = m.token_logprobs(sequences, positions)
            self.stats.requests += len(sequences)
            self.stats.computed += len(sequences)
            return values
        model_key = self._model_key()
        keys = [request_key(model_key, "tlp", list(s), list(p)) for s, p in zip(sequences, positions)]
        first: dict[bytes, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        todo = self._lookup(keys, first, weights)
        if todo:
            pending = {k: (tuple(sequences[first[k]]), tuple(positions[first[k]])) for k in todo}
            if m.runs_forwards:
                self._compute_positions(pending, todo)
            else:
                values = m.token_logprobs(
                    [list(pending[k][0]) for k in todo], [list(pending[k][1]) for k in todo]
                )
                self.stats.computed += len(todo)
                self._store(dict(zip(todo, values)), todo)
        return [list(self._results[k]) for k in keys]

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        weights: Sequence[float] | None = None,
        first_step: Sequence[Sequence[str]] | None = None,
    ) -> list[str]:
        """Greedy completion of each request (``engine.generation``: dedupe, cache, batches
        sorted so shared prompt prefixes run together). ``weights``: progress units per request,
        default 1 each (one item per generation). ``first_step``: per request, continuations
        whose log-likelihood after the prompt the generation's first step also stores (read
        back by ``loglikelihood`` from the memo or cache).

        Raises:
            ValueError: ``max_new_tokens < 1``, a prompt that encodes to no token, or a
                ``first_step`` of another length.
        """
        if self.backend.reads_top_candidates:
            # Letter log-probs come from the chat API's own candidates (``letter_logprobs``),
            # never from these scores: computing them would only cost echo requests.
            first_step = None
        return Generation(self, requests, weights, first_step).run()

    def has_score(self, key: bytes) -> bool:
        """Whether a score is already in this process's memo or the cache."""
        return self.scores.has(key)

    def put_scores(self, values: dict[bytes, list[float]]) -> None:
        """Keep scores computed outside a scoring call (a generation's first step)."""
        self.scores.save(values)

    def _require(self, capability: str) -> None:
        """A backend that can refuse scores after all (a server whose prompt log-probabilities
        failed the start-up alignment check) says so before anything is sent."""
        self.backend.require_scores(frozenset({capability}))

    @property
    def keyed_forwards(self) -> bool:
        """Whether the engine runs this backend's forwards itself, results keyed by its
        ``cache_key`` (else the backend answers whole requests, passed through as they are)."""
        return self.backend.runs_forwards and self.backend.cache_key is not None

    def _model_key(self) -> str:
        """The backend's ``cache_key``, the model part of every score's key.

        Raises:
            ModelError: the backend declares none. Its scores would be keyed on nothing that
                tells this model from another (the memo and the result cache would mix them), and
                a backend that runs forwards has no whole-request answer to fall back on.
        """
        key = self.backend.cache_key
        if key is None:
            raise ModelError(
                f"backend {type(self.backend).__name__} declares no cache_key: the engine cannot key "
                "its scores (a backend that runs forwards must say what decides them)"
            )
        return key

    # -- dedupe, cache, progress ---------------------------------------------------------------------

    def _lookup(
        self, keys: list[bytes], first: dict[bytes, int], weights: Sequence[float] | None
    ) -> list[bytes]:
        """Count the requests, answer what the memo and cache hold; returns the keys to compute."""
        self.stats.requests += len(keys)
        self.stats.distinct += len(first)
        self._weight = {}
        if weights is not None:
            for k, w in zip(keys, weights):
                self._weight[k] = self._weight.get(k, 0.0) + w
        self._results = dict(self.scores.lookup(first))  # type: ignore[arg-type]
        missing = [k for k in first if k not in self._results]
        self.stats.from_cache += len(first) - len(missing)
        missing_set = set(missing)
        self._advance([k for k in first if k not in missing_set])
        return missing

    def _advance(self, keys: Iterable[bytes]) -> None:
        if self.progress is not None and self._weight:
            self.progress.advance(sum(self._weight.get(k, 0.0) for k in keys))

    def _store(self, values: dict[bytes, list[float]], keys: Iterable[bytes]) -> None:
        self._results.update(values)
        self.scores.save(values)
        self._advance(keys)

    # -- log-likelihood execution ----------------------------------------------------------------------
    def _compute_loglikelihood(self, pending: _Pending, keys: list[bytes]) -> None:
        m = self.backend
        share = m.prefix_sharing and m.can_share
        fits = [k for k in keys if share and len(pending[k][0]) + len(pending[k][1]) <= m.max_length]
        fit_set = set(fits)
        full = [k for k in keys if k not in fit_set]
        # Lexicographic order puts requests with shared prefixes next to each other, so chunking
        # keeps what they share in one tree.
        fits.sort(key=lambda k: pending[k][0] + pending[k][1])
        for start in range(0, len(fits), CHUNK_REQUESTS):
            chunk = fits[start : start + CHUNK_REQUESTS]
            try:
                tree = build_tree(
                    [pending[k] for k in chunk], min_shared=self.min_shared, two_level=m.two_level_sharing
                )
                self._run_tree(chunk, tree)
            except PrefixUnsupported:
                m.disable_prefix_sharing()
                full += [k for k in fits[start:] if k not in self._results]
                break
        if full:
            seqs: list[list[int]] = []
            positions: list[Sequence[int]] = []
            for k in full:
                ctx, cont = pending[k]
                seq = list(ctx + cont)[-m.max_length :]
                seqs.append(seq)
                positions.append(range(len(seq) - len(cont), len(seq)))

            def summed(idx: list[int], values: list[list[float]]) -> None:
                ks = [full[i] for i in idx]
                self.stats.computed += len(ks)
                self._store({k: [float(sum(v))] for k, v in zip(ks, values)}, ks)

            self._full(seqs, positions, summed)

    def _compute_positions(self, pending: _Pending, keys: list[bytes]) -> None:
        """Per-token requests (sequence, positions) through the prefix tree where the backend
        can share prefixes (sentences that share a prefix feed it once, logits only at scored
        positions); otherwise, and for sliding-window models, one whole forward per sequence."""
        m = self.backend
        full = list(keys)
        if m.prefix_sharing and m.can_share and not m.two_level_sharing:
            fits = sorted(keys, key=lambda k: pending[k][0])
            full = []
            for start in range(0, len(fits), CHUNK_REQUESTS):
                chunk = fits[start : start + CHUNK_REQUESTS]
                try:
                    tree = build_position_tree([pending[k] for k in chunk], min_shared=self.min_shared)
                    self._run_tree(chunk, tree, summed=False)
                except PrefixUnsupported:
                    m.disable_prefix_sharing()
                    full = [k for k in fits[start:] if k not in self._results]
                    break
        if full:

            def as_is(idx: list[int], values: list[list[float]]) -> None:
                ks = [full[i] for i in idx]
                self.stats.computed += len(ks)
                self._store(dict(zip(ks, values)), ks)

            self._full([list(pending[k][0]) for k in full], [list(pending[k][1]) for k in full], as_is)

    def _run_tree(self, chunk: list[bytes], tree: PrefixTree, *, summed: bool = True) -> None:
        """Run ``tree`` (of the requests ``chunk``, in order) and store each request once all its
        queries are in: their sum (a continuation's log-likelihood) or, ``summed=False``, the
        values in the request's order (per-token log-probabilities)."""
        m = self.backend
        values = [0.0] * tree.n_queries
        known = [False] * tree.n_queries
        # Per query, the requests still waiting on it; a request is stored once all its queries are in.
        waiting: dict[int, list[int]] = {}
        left = [0] * len(chunk)
        for r, qids in enumerate(tree.request_queries):
            left[r] = len(qids)
            for q in qids:
                waiting.setdefault(q, []).append(r)

        def deliver(qids: list[int], vals: list[float]) -> None:
            done = []
            for q, v in zip(qids, vals):
                if known[q]:
                    continue
                known[q], values[q] = True, v
                for r in waiting.get(q, ()):
                    left[r] -= 1
                    if left[r] == 0:
                        done.append(r)
            if done:
                ks = [chunk[r] for r in done]
                self.stats.computed += len(ks)
                if summed:
                    out = {chunk[r]: [float(sum(values[q] for q in tree.request_queries[r]))] for r in done}
                else:
                    out = {chunk[r]: [float(values[q]) for q in tree.request_queries[r]] for r in done}
                self._store(out, ks)

        empty = [r for r, qids in enumerate(tree.request_queries) if not qids]
        if empty:  # a sequence asked for no position: nothing to wait for
            self.stats.computed += len(empty)
            self._store({chunk[r]: [] for r in empty}, [chunk[r] for r in empty])
        if m.can_pack:
            self._run_packed(tree, deliver)
            return
        roots = sorted(tree.roots, key=lambda s: -len(s.tokens))
        for batch in self._root_batches(roots):
            self._run_level(None, 0, [(-1, s) for s in batch], deliver)

    # -- packed trees (one row per subtree, tree attention) -------------------------------------------
    def _run_packed(self, tree: PrefixTree, deliver: _Deliver) -> None:
        """Each root's subtree flattened (split where it exceeds the backend's
        ``packed_row_tokens``), and the subtrees packed together into rows of about that many
        tokens: every token attends to its ancestors only, so a row computes every prefix of
        each of its subtrees at once, as if alone, with no key/value copies. Short rows packed
        together leave little padding, and a bounded row keeps attention, quadratic in the row,
        cheap. Rows are batched longest first by ``batch_size``, the token budget and the logits
        budget."""
        m = self.backend
        cap = min(m.token_budget, m.packed_row_tokens)
        rows = [r for root in tree.roots for r in _split(root, cap)]
        pieces = sorted((_flatten(r) for r in rows), key=lambda f: -len(f[0]))
        bins = sorted(_bins(pieces, cap), key=lambda b: -_size(b))
        flat = [_merge(b) for b in bins]
        left = sum(len(f[0]) for f in flat)
        start = 0
        while start < len(flat):
            n, width, queries = 1, len(flat[start][0]), len(flat[start][3])
            budget = self.pace.budget(m.token_budget)
            if left <= budget:
                tail = narrow_tail(m, bins[start:], budget)
                if tail is not None:
                    self._packed_batch(tail, deliver)
                    return
            while (
                start + n < len(flat)
                and n < m.batch_size
                and (n + 1) * width <= budget
                and (queries + len(flat[start + n][3])) * m.vocab_size <= m.logits_budget
            ):
                queries += len(flat[start + n][3])
                n += 1
            self._packed_batch(flat[start : start + n], deliver)
            left -= sum(len(f[0]) for f in flat[start : start + n])
            start += n

    def _packed_batch(self, batch: list[_Flat], deliver: _Deliver) -> None:
        halving(lambda rows: self._packed_forward(rows, deliver), batch, self.stats)

    def _packed_forward(self, batch: Sequence[_Flat], deliver: _Deliver) -> None:
        with self.pace.timed(len(batch) * max(len(t) for t, _, _, _ in batch)):
            vals = self.backend.forward_packed(
                [(t, p, d, [(c, tg) for c, tg, _ in q]) for t, p, d, q in batch]
            )
        self.stats.forwards += 1
        self.stats.tokens_forwarded += sum(len(t) for t, _, _, _ in batch)
        deliver([qid for _, _, _, q in batch for _, _, qid in q], [v for row in vals for v in row])

    def _root_batches(self, roots: list[Segment]) -> Iterator[list[Segment]]:
        m = self.backend
        positions = max(1, m.logits_budget // m.vocab_size)
        start = 0
        while start < len(roots):
            # Longest first, so the first root sets the padded width; one root over a budget
            # still goes alone.
            width = len(roots[start].tokens)
            n, logits = 1, _n_offsets(roots[start])
            while start + n < len(roots) and n < m.batch_size and (n + 1) * width <= m.token_budget:
                more = _n_offsets(roots[start + n])
                if logits + more > positions:
                    break
                logits += more
                n += 1
            yield roots[start : start + n]
            start += n

    def _child_batches(
        self, children: list[tuple[int, Segment]], width: int
    ) -> Iterator[list[tuple[int, Segment]]]:
        """Children (parent row, segment), longest first, cut where the token budget (copied
        state + inputs) or the logits budget is reached or where the segment length halves
        (padding a batch to its longest row would multiply the work of short ones)."""
        m = self.backend
        positions = max(1, m.logits_budget // m.vocab_size)
        children = sorted(children, key=lambda c: -len(c[1].tokens))
        cur: list[tuple[int, Segment]] = []
        n = 0
        for row, seg in children:
            k = len(seg.tokens)
            if cur and (
                (len(cur) + 1) * (width + n) > m.token_budget
                or (len(cur) + 1) * n > positions
                or (n >= 4 and 2 * k <= n)
            ):
                yield cur
                cur = []
            if not cur:
                n = k
            cur.append((row, seg))
        if cur:
            yield cur

    def _run_level(
        self, state: object, width: int, batch: Sequence[tuple[int, Segment]], deliver: _Deliver
    ) -> None:
        """Forward ``batch`` ((parent row, segment) pairs continuing ``state`` of padded width
        ``width``; roots, with no state, under row -1), deliver its queries, then recurse into
        its children."""

        def children(
            ran: tuple[object, list[Segment]],
        ) -> None:  # after the forward, outside its out-of-memory retry
            new_state, segs = ran
            new_width = width + max(len(s.tokens) for s in segs)
            below = [(row, c) for row, s in enumerate(segs) for c in s.children]
            for sub in self._child_batches(below, new_width):
                self._run_level(new_state, new_width, sub, deliver)

        halving(
            lambda part: self._level_forward(state, part, deliver), list(batch), self.stats, then=children
        )

    def _level_forward(
        self, state: object, batch: Sequence[tuple[int, Segment]], deliver: _Deliver
    ) -> tuple[object, list[Segment]]:
        rows = None if state is None else [r for r, _ in batch]
        segs = [s for _, s in batch]
        new_state, vals = self.backend.forward_segments(
            state, rows, [s.tokens for s in segs], [[(o, t) for o, t, _ in s.queries] for s in segs]
        )
        self.stats.forwards += 1
        self.stats.tokens_forwarded += sum(len(s.tokens) for s in segs)
        deliver([q for s in segs for _, _, q in s.queries], [v for row in vals for v in row])
        return new_state, segs

    # -- full-sequence path ----------------------------------------------------------------------------
    def _full(self, seqs: list[list[int]], positions: Sequence[Sequence[int]], done: _Done) -> None:
        """``forward_full`` over batches bounded by ``batch_size`` and the logits budget, longest
        first (similar lengths waste little padding; a too-large batch fails at once), handing
        each batch's values to ``done(indices, values)`` as it comes back, so its results reach
        the cache before the next batch runs: a crash or a pool whose every endpoint went away
        loses at most the batch in flight, and the rerun resumes after the last stored one."""
        m = self.backend
        nothing = [i for i in range(len(seqs)) if not len(positions[i])]
        if nothing:  # no position to score: an empty list of values, without a forward
            done(nothing, [[] for _ in nothing])
        todo = [i for i in range(len(seqs)) if len(positions[i])]
        if m.order_by_prefix:
            # A server pads nothing; sequences sharing a prefix go out together instead, where
            # its prefix cache can reuse it.
            todo.sort(key=lambda i: seqs[i])
        else:
            todo.sort(key=lambda i: -len(seqs[i]))
        start = 0
        while start < len(todo):
            idx = [todo[start]]
            keep = len(seqs[todo[start]]) - min(positions[todo[start]]) + 1
            width = len(seqs[todo[start]])
            budget = self.pace.budget(m.token_budget)
            for i in todo[start + 1 : start + m.batch_size]:
                k = max(keep, len(seqs[i]) - min(positions[i]) + 1)
                if (len(idx) + 1) * k * m.vocab_size > m.logits_budget:
                    break
                if (len(idx) + 1) * max(width, len(seqs[i])) > budget:
                    break
                width = max(width, len(seqs[i]))
                idx.append(i)
                keep = k
            self._full_batch(seqs, positions, idx, done)
            start += len(idx)

    def _full_batch(
        self, seqs: list[list[int]], positions: Sequence[Sequence[int]], idx: list[int], done: _Done
    ) -> None:
        halving(lambda part: self._full_forward(seqs, positions, part, done), idx, self.stats)

    def _full_forward(
        self, seqs: list[list[int]], positions: Sequence[Sequence[int]], idx: Sequence[int], done: _Done
    ) -> None:
        with self.pace.timed(len(idx) * max(len(seqs[i]) for i in idx)):
            values = self.backend.forward_full([seqs[i] for i in idx], [positions[i] for i in idx])
        self.stats.forwards += 1
        self.stats.tokens_forwarded += sum(len(seqs[i]) for i in idx)
        done(list(idx), values)


def narrow_tail(m: Backend, bins: list[list[_Flat]], budget: int) -> list[_Flat] | None:
    """The last rows of a tree as one forward of narrower rows, or None when that saves
    nothing. Rows are padded to the batch's longest, so a full row beside a nearly empty one
    (the end of every small call: a sequential round, a small category) costs two full rows;
    the same subtrees packed into rows of the narrowest width that fits them in one forward
    cost about their tokens (``m``: the backend, whose batch and logits budgets bound the rows)."""
    pieces = sorted((p for b in bins for p in b), key=lambda f: -len(f[0]))
    queries = sum(len(p[3]) for p in pieces)
    if queries * m.vocab_size > m.logits_budget:
        return None
    greedy = len(bins) * _size(bins[0]) if len(bins) <= m.batch_size else math.inf
    longest, cap = len(pieces[0][0]), _size(bins[0])
    best, best_cost = None, greedy
    for width in range(longest, cap + 1, max(1, (cap - longest) // 64)):
        packed = _bins(pieces, width)
        cost = len(packed) * max(_size(b) for b in packed)
        if len(packed) <= m.batch_size and cost <= budget and cost < best_cost:
            best, best_cost = packed, cost
    return None if best is None else [_merge(b) for b in best]


def _subtree_tokens(seg: Segment) -> int:
    return len(seg.tokens) + sum(_subtree_tokens(c) for c in seg.children)


def _split(seg: Segment, budget: int) -> list[Segment]:
    """``seg``'s subtree as rows of at most ``budget`` tokens where possible: a subtree too big
    for one row repeats its own tokens in each row, over groups of its children (a single
    segment longer than the budget still goes alone)."""
    if not seg.children or _subtree_tokens(seg) <= budget:
        return [seg]
    room = max(1, budget - len(seg.tokens))
    groups: list[list[Segment]] = [[]]
    used = 0
    for child in seg.children:
        for part in _split(child, room):
            size = _subtree_tokens(part)
            if groups[-1] and used + size > room:
                groups.append([])
                used = 0
            groups[-1].append(part)
            used += size
    # Queries of seg's own tokens would be the same in every copy: only the first asks them (an
    # output-head row and a log-softmax over the vocabulary each).
    return [Segment(seg.tokens, seg.depth, seg.queries if i == 0 else [], g) for i, g in enumerate(groups)]


def _flatten(root: Segment) -> _Flat:
    """(tokens, parent index per token (-1: none), position per token, queries as (column,
    target, query id)) of ``root``'s subtree in depth-first order."""
    tokens: list[int] = []
    parents: list[int] = []
    positions: list[int] = []
    queries: list[tuple[int, int, int]] = []
    stack = [(root, -1)]
    while stack:
        seg, parent = stack.pop()
        base = len(tokens)
        for k, tok in enumerate(seg.tokens):
            tokens.append(tok)
            parents.append(parent if k == 0 else base + k - 1)
            positions.append(seg.depth + k)
        queries.extend((base + o, t, q) for o, t, q in seg.queries)
        last = len(tokens) - 1
        stack.extend((c, last) for c in reversed(seg.children))
    return tokens, parents, positions, queries


def _bins(flat: list[_Flat], cap: int) -> list[list[_Flat]]:
    """Flattened subtrees (longest first) in rows of at most ``cap`` tokens, first fit (a subtree
    longer than ``cap`` keeps a row of its own)."""
    bins: list[list[_Flat]] = []
    room: list[int] = []
    for f in flat:
        size = len(f[0])
        for b, free in enumerate(room):
            if size <= free:
                bins[b].append(f)
                room[b] -= size
                break
        else:
            bins.append([f])
            room.append(cap - size)
    return bins


def _size(parts: list[_Flat]) -> int:
    return sum(len(p[0]) for p in parts)


def _merge(parts: list[_Flat]) -> _Flat:
    """One row of flattened subtrees: each keeps its own positions and parent links, offset by
    where it starts, so no token of one subtree sees another; query columns move with it."""
    if len(parts) == 1:
        return parts[0]
    tokens: list[int] = []
    parents: list[int] = []
    positions: list[int] = []
    queries: list[tuple[int, int, int]] = []
    for t, p, d, q in parts:
        base = len(tokens)
        tokens += t
        parents += [x + base if x >= 0 else -1 for x in p]
        positions += d
        queries += [(c + base, tg, qid) for c, tg, qid in q]
    return (tokens, parents, positions, queries)


def _n_offsets(seg: Segment) -> int:
    return len({o for o, _, _ in seg.queries})
