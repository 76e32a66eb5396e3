"""Continuous batching for ``HFCausalLM``'s greedy decoding: a batch refilled with waiting
prompts as its rows finish, so the sequential decoding steps follow the mean answer length
rather than each batch's longest (on a CPU a step of 16 rows costs about what one row's does).

``stream_greedy`` decodes exactly as ``hf_decoding.GreedyDecoding.greedy`` (argmax of float32
logits, ``decode_step``; a row ended by ``row_end``: an end-of-sequence token kept, at
``max_new_tokens`` or at its first stop string), and prefills each refill as ``generate_tokens``
prefills a batch (``prefill``: the prompts' trie in one packed forward). A refill's rows are merged into
the running batch: key/value caches concatenated along the batch dimension after the narrower
side is left-padded along the sequence with zeros, its attention mask padded with zeros alike,
position ids per row. Every row thus sees exactly its own tokens at its own positions, the padding
masked; leading columns masked in every row are dropped. The values equal a row run alone up to
float rounding, as in any left-padded batch.

Prompts come sorted by token ids, so a refill shares most with the previous refill's last
prompt: the stream keeps that prompt's key/value cache (``hf.PromptPrefix``), and the next
refill's trie starts after the prefix all its prompts share with it. The chat preamble and a
prompt template's instruction are then computed once per stream rather than once per refill
(KoBBQ, 360 Qwen prompts in 40 refills: about 3,000 of 24,000 prompt tokens).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import torch

from .base import ScoreTokens, TokenPrompts
from .hf_decoding import GreedyDecoding, checked_stops, common_prefix, first_step_logprobs
from .prompt_prefix import PromptPrefix

#: What ``stream_greedy`` yields per finished row: (prompt index, text, tokens run since the
#: previous item, first-step log-probabilities or None, prompt forwards since the previous item).
Finished = tuple[int, str, int, "list[float] | None", int]


class StreamingDecoding(GreedyDecoding):
    """``GreedyDecoding`` with continuous batching: ``generate_stream`` decodes a whole list of
    prompts, refilling the batch as its rows finish (``stream_greedy``)."""

    #: Whether ``generate_stream`` refills a batch with waiting prompts as its rows finish
    #: (``stream_greedy``); off, the engine sends batches to ``generate_tokens``.
    continuous_batching = True

    @property
    def can_stream(self) -> bool:
        """Whether the engine may send a whole list of prompts to ``generate_stream``: continuous
        batching on, the backend's own decoding loop (``own_loop``), weights on a real device,
        and ``generate_tokens`` not replaced by a subclass (``_decodes``). A cache that turns out
        not to merge is found at the stream's first prefill, which then runs batch by batch."""
        return self.continuous_batching and self.device.type != "meta" and self._decodes() and self.own_loop()

    def generate_stream(
        self,
        prompts: TokenPrompts,
        max_new_tokens: int,
        score_tokens: ScoreTokens = None,
        stop: Sequence[Sequence[str]] | None = None,
        max_rows: int | None = None,
    ):
        """Greedy completions of ``prompts`` with at most ``max_rows`` (default ``batch_size``)
        decoded at once, the batch refilled with waiting prompts when half its rows have
        finished (``stream_greedy``); each text equals ``generate_tokens``'.

        Yields, as rows finish: (prompt index, text, tokens run since the previous item, its
        first-step log-probabilities of ``score_tokens`` or None, prompt forwards started since
        the previous item). The tokens and forwards summed over all items are the stream's.

        Raises:
            ValueError: as ``generate_tokens``, or ``max_rows < 1``. BackendOutOfMemory: CUDA ran
                out of memory (items already yielded stand; the engine runs the rest with fewer
                rows).
        """
        stops = checked_stops(prompts, max_new_tokens, stop)
        rows = self.batch_size if max_rows is None else max_rows
        if rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {rows}")
        self._prepare_decoding()
        return stream_greedy(self, prompts, max_new_tokens, stops, score_tokens, rows)


class DecodingRows:
    """The rows being decoded between two steps.

    Attributes:
        cache: key/value cache of the tokens fed so far (rows x heads x ``width`` x dim).
        mask: attention mask, ``width + 1`` columns (the last: the pending tokens).
        pos: (rows, 1) position id of each row's pending token.
        inp: (rows, 1) the pending tokens (chosen, not fed yet).
        index: the prompt index of each row.
        done: the rows that finished at the last step chosen.
    """

    def __init__(self, cache, mask, pos, inp, index: list[int]):
        self.cache, self.mask, self.pos, self.inp, self.index = cache, mask, pos, inp, index
        self.done: list[int] = []

    def select(self, keep: list[int]) -> None:
        rows = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
        self.cache.batch_select_indices(rows)
        self.mask, self.pos, self.inp = self.mask[rows], self.pos[rows], self.inp[rows]
        self.index = [self.index[r] for r in keep]

    def trim(self) -> None:
        """Drop the leading columns that every row masks (rows that needed them have left)."""
        lead = int(self.mask.any(0).int().argmax())
        if lead:
            self.mask = self.mask[:, lead:]
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[:, :, lead:], layer.values[:, :, lead:]

    def merge(self, other: "DecodingRows") -> None:
        """Append ``other``'s rows, the narrower side left-padded (zeros, masked)."""
        width = max(self.mask.shape[1], other.mask.shape[1])
        for a, b in zip(self.cache.layers, other.cache.layers):
            a.keys = torch.cat([_left(a.keys, width - 1, 2), _left(b.keys, width - 1, 2)], dim=0)
            a.values = torch.cat([_left(a.values, width - 1, 2), _left(b.values, width - 1, 2)], dim=0)
        self.mask = torch.cat([_left(self.mask, width, 1), _left(other.mask, width, 1)], dim=0)
        self.pos = torch.cat([self.pos, other.pos], dim=0)
        self.inp = torch.cat([self.inp, other.inp], dim=0)
        self.index = self.index + other.index


def _left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """``t`` left-padded with zeros to ``width`` along ``dim``."""
    missing = width - t.shape[dim]
    if not missing:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def refill_size(prompts: Sequence[Sequence[int]], start: int, free: int) -> int:
    """How many prompts from ``start`` a refill takes: up to ``free``, at least half of them,
    ending where the next prompt shares the shortest prefix with the last one taken (prompts
    come sorted, so a question's option orders stay in one prefill and its context runs once).

    Examples:
        >>> refill_size([[1, 2], [1, 2], [1, 3], [4], [4]], 0, 4)
        3
        >>> refill_size([[1], [2]], 1, 4), refill_size([[1], [1], [1]], 0, 2)
        (1, 2)
    """
    end = min(len(prompts), start + free)
    if end == len(prompts) or free < 2:
        return end - start
    return (
        min(
            range(start + (free + 1) // 2, end + 1),
            key=lambda j: (common_prefix(prompts[j - 1], prompts[j]), -j),
        )
        - start
    )


def mergeable(cache) -> bool:
    """Whether rows of ``cache`` can be selected, dropped column-wise and concatenated: every
    layer a plain full-attention ``DynamicLayer`` (keys and values only; a sliding window counts
    the tokens it has seen)."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return False
    layers = getattr(cache, "layers", None)
    return (
        bool(layers)
        and hasattr(cache, "batch_select_indices")
        and all(type(layer) is DynamicLayer for layer in layers)
    )


def stream_greedy(
    backend: GreedyDecoding,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stops: Sequence[tuple[str, ...]],
    score_tokens: Sequence[Sequence[int]] | None,
    max_rows: int,
) -> Iterator[Finished]:
    """Greedy completions of ``prompts`` (see the module doc), at most ``max_rows`` decoded at
    once; when at most half of them are left and prompts wait, the next waiting prompts (as
    many as rows are free, in order) are prefilled and merged. Yields ``Finished`` items as
    rows end. A model whose cache does not merge (found at the first prefill) runs batch by
    batch (``greedy``), each batch's rows yielded when it ends.

    Raises:
        BackendOutOfMemory: CUDA ran out of memory.
    """
    return _Stream(backend, prompts, max_new_tokens, stops, score_tokens).run(max_rows)


class _Stream:
    """One ``stream_greedy`` call: the prompts, the rows being decoded and what each finished
    row has produced so far."""

    def __init__(self, backend: GreedyDecoding, prompts, max_new_tokens: int, stops, score_tokens):
        self.backend, self.prompts, self.stops, self.score_tokens = backend, prompts, stops, score_tokens
        self.max_new_tokens = max_new_tokens
        self.ended = backend.row_end(max_new_tokens)
        self.tokens: dict[int, list[int]] = {}
        self.first: dict[int, list[float]] = {}
        self.run_tokens = self.prefills = 0  # since the last item yielded
        self.kept: PromptPrefix | None = None  # the cache of the last prompt prefilled

    @torch.inference_mode()
    def run(self, max_rows: int) -> Iterator[Finished]:
        live: DecodingRows | None = None
        nxt, n = 0, len(self.prompts)
        while nxt < n or live is not None:
            width = 0 if live is None else len(live.index)
            if nxt < n and width <= max_rows // 2:
                take = list(range(nxt, nxt + refill_size(self.prompts, nxt, max_rows - width)))
                nxt += len(take)
                state = self._prefill(take)
                if not mergeable(state[1]):
                    if live is not None:  # the first prefill's cache merged: the model's do
                        raise RuntimeError(f"a {type(state[1]).__name__} cache after a mergeable one")
                    yield from self._batch_by_batch(max_rows, take, state)
                    return
                fresh = DecodingRows(state[1], state[2], state[3], None, take)
                yield from self._choose(fresh, state[0])
                live = _joined(live, self._advance(fresh))
                continue
            assert live is not None
            mask = None if bool(live.mask.all()) else live.mask
            logits, live.cache = self.backend.decode_step(live.inp, mask, live.pos, live.cache)
            yield from self._choose(live, logits)
            live = self._advance(live)

    def _prefill(self, take: list[int]):
        """The prefill state of the prompts ``take`` (continuing the kept prefix where they
        share it); their first-step scores taken, and the cache of the last kept."""
        group = [list(self.prompts[i]) for i in take]
        past = self.kept.shared_with(group) if self.kept is not None else None
        state, forwarded = self.backend.prefill(group, past)
        self.run_tokens += forwarded
        self.prefills += 1
        logits, cache, mask = state[0], state[1], state[2]
        if not mergeable(cache):
            return state
        if self.score_tokens is not None:
            firsts = first_step_logprobs(logits, [self.score_tokens[i] for i in take])
            self.first.update(zip(take, firsts))
        for i in take:
            self.tokens[i] = []
        # The next refill's prompts come next in sorted order: they share the most with this
        # refill's last one, whose cache is kept when its row holds it whole (a tree prefill;
        # a split prefill has padding between its prefix and suffix).
        last = group[-1]
        if bool(mask[-1, mask.shape[1] - len(last) :].all()):
            self.kept = PromptPrefix.of_row(cache, len(take) - 1, last, mask.shape[1])
        return state

    def _item(self, i: int) -> Finished:
        """Row ``i``'s ``Finished`` item, with what was run since the previous item."""
        text = self.backend.tokenizer.decode(self.tokens.pop(i), skip_special_tokens=True)
        item = (i, text, self.run_tokens, self.first.pop(i, None), self.prefills)
        self.run_tokens = self.prefills = 0
        return item

    def _choose(self, rows: DecodingRows, logits) -> Iterator[Finished]:
        """Each row's next token (``greedy``'s step); yields the rows that finished and keeps
        their indices in ``rows.done``."""
        chosen = logits.argmax(-1)
        rows.done = []
        for r, t in enumerate(chosen.tolist()):
            i = rows.index[r]
            row = self.tokens[i]
            row.append(t)
            if self.ended(row, self.stops[i]):
                rows.done.append(r)
        self.run_tokens += len(rows.index)
        rows.inp = chosen.unsqueeze(-1)
        for r in rows.done:
            yield self._item(rows.index[r])

    @staticmethod
    def _advance(rows: DecodingRows) -> DecodingRows | None:
        """``rows`` without the finished ones, each left row's pending token appended."""
        if rows.done:
            gone = set(rows.done)
            keep = [r for r in range(len(rows.index)) if r not in gone]
            if not keep:
                return None
            rows.select(keep)
            rows.trim()
        rows.pos = rows.pos + 1
        rows.mask = torch.cat([rows.mask, rows.mask.new_ones((rows.mask.shape[0], 1))], dim=1)
        return rows

    def _batch_by_batch(self, max_rows: int, take: list[int], state) -> Iterator[Finished]:
        """The stream without merging: ``take``'s prefilled ``state`` decoded by ``greedy``,
        then the remaining prompts ``max_rows`` at a time through ``generate_tokens``."""
        backend, prompts, stops, score_tokens = self.backend, self.prompts, self.stops, self.score_tokens
        scores = None if score_tokens is None else [score_tokens[i] for i in take]
        toks, firsts = backend.greedy(state, self.max_new_tokens, [stops[i] for i in take], scores)
        self.run_tokens += sum(len(t) for t in toks)
        for r, i in enumerate(take):
            text = backend.tokenizer.decode(toks[r], skip_special_tokens=True)
            yield i, text, self.run_tokens, None if firsts is None else firsts[r], self.prefills
            self.run_tokens = self.prefills = 0
        for start in range(take[-1] + 1, len(prompts), max_rows):
            chunk = list(range(start, min(len(prompts), start + max_rows)))
            texts, forwarded, firsts = backend.generate_tokens(
                [list(prompts[i]) for i in chunk],
                self.max_new_tokens,
                None if score_tokens is None else [score_tokens[i] for i in chunk],
                stop=[list(stops[i]) for i in chunk],
            )
            for r, i in enumerate(chunk):
                yield (
                    i,
                    texts[r],
                    forwarded if r == 0 else 0,
                    None if firsts is None else firsts[r],
                    int(r == 0),
                )


def _joined(live: DecodingRows | None, fresh: DecodingRows | None) -> DecodingRows | None:
    """The running rows with a refill's merged in (either may be None: none left)."""
    if fresh is None:
        return live
    if live is None:
        return fresh
    live.merge(fresh)
    live.trim()
    return live
