"""Continuous batching for ``HFCausalLM``'s greedy decoding: a batch refilled with waiting
prompts as its rows finish, so the sequential decoding steps follow the mean answer length
rather than each batch's longest (on a CPU a step of 16 rows costs about what one row's does).

``stream_greedy`` decodes exactly as ``HFCausalLM._greedy`` (argmax of float32 logits, an
end-of-sequence token kept, a row ended at ``max_new_tokens`` or at its first stop string by
``_stopped``), and prefills each refill as ``generate_tokens`` prefills a batch
(``_prefill_state``: the prompts' trie in one packed forward). A refill's rows are merged into
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

from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from .prompt_prefix import PromptPrefix

if TYPE_CHECKING:
    from .hf import HFCausalLM

#: What ``stream_greedy`` yields per finished row: (prompt index, text, tokens run since the
#: previous item, first-step log-probabilities or None, prompt forwards since the previous item).
Finished = tuple[int, str, int, "list[float] | None", int]


class _Rows:
    """The rows being decoded between two steps.

    Attributes:
        cache: key/value cache of the tokens fed so far (rows x heads x ``width`` x dim).
        mask: attention mask, ``width + 1`` columns (the last: the pending tokens).
        pos: (rows, 1) position id of each row's pending token.
        inp: (rows, 1) the pending tokens (chosen, not fed yet).
        index: the prompt index of each row.
    """

    def __init__(self, cache, mask, pos, inp, index: list[int]):
        self.cache, self.mask, self.pos, self.inp, self.index = cache, mask, pos, inp, index

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

    def merge(self, other: "_Rows") -> None:
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

    def shared(j: int) -> int:
        k = 0
        for a, b in zip(prompts[j - 1], prompts[j]):
            if a != b:
                break
            k += 1
        return k

    return min(range(start + (free + 1) // 2, end + 1), key=lambda j: (shared(j), -j)) - start


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


@torch.inference_mode()
def stream_greedy(
    backend: "HFCausalLM",
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
    batch (``_greedy``), each batch's rows yielded when it ends.

    Raises:
        BackendOutOfMemory: CUDA ran out of memory.
    """
    eos = backend._eos()
    decode = backend.tokenizer.decode
    extra = {"logits_to_keep": 1} if backend._keeps_logits else {}
    n = len(prompts)
    tokens: dict[int, list[int]] = {}
    first: dict[int, list[float]] = {}
    run = [0, 0]  # tokens run and prompt forwards since the last item yielded

    def item(i: int) -> Finished:
        out = (i, decode(tokens.pop(i), skip_special_tokens=True), run[0], first.pop(i, None), run[1])
        run[0] = run[1] = 0
        return out

    def choose(rows: _Rows, logits) -> list[int]:
        """Each row's next token (``_greedy``'s step); the rows that finished."""
        chosen = logits.argmax(-1)
        done = []
        for r, t in enumerate(chosen.tolist()):
            i = rows.index[r]
            row = tokens[i]
            row.append(t)
            if t in eos or len(row) >= max_new_tokens or (stops[i] and backend._stopped(row, stops[i])):
                done.append(r)
        run[0] += len(rows.index)
        rows.inp = chosen.unsqueeze(-1)
        return done

    def advance(rows: _Rows, done: list[int]) -> _Rows | None:
        """``rows`` without the ``done`` ones, each left row's pending token appended."""
        if done:
            gone = set(done)
            keep = [r for r in range(len(rows.index)) if r not in gone]
            if not keep:
                return None
            rows.select(keep)
            rows.trim()
        rows.pos = rows.pos + 1
        rows.mask = torch.cat([rows.mask, rows.mask.new_ones((rows.mask.shape[0], 1))], dim=1)
        return rows

    live: _Rows | None = None
    kept: PromptPrefix | None = None  # the cache of the last prompt prefilled
    nxt = 0
    while nxt < n or live is not None:
        width = 0 if live is None else len(live.index)
        if nxt < n and width <= max_rows // 2:
            take = list(range(nxt, nxt + refill_size(prompts, nxt, max_rows - width)))
            nxt += len(take)
            group = [list(prompts[i]) for i in take]
            past = kept.shared_with(group) if kept is not None else None
            state, forwarded = backend._prefill_state(group, past)
            run[0] += forwarded
            run[1] += 1
            logits, cache, mask, pos, _ = state
            if not mergeable(cache):
                if live is not None:  # the first prefill's cache merged: the model's do
                    raise RuntimeError(f"a {type(cache).__name__} cache after a mergeable one")
                yield from _batch_by_batch(
                    backend, prompts, max_new_tokens, stops, score_tokens, max_rows, take, state, run
                )
                return
            if score_tokens is not None:
                logp = torch.log_softmax(logits, dim=-1)
                for r, i in enumerate(take):
                    first[i] = [float(logp[r, t]) for t in score_tokens[i]]
            for i in take:
                tokens[i] = []
            # The next refill's prompts come next in sorted order: they share the most with this
            # refill's last one, whose cache is kept when its row holds it whole (a tree prefill;
            # a split prefill has padding between its prefix and suffix).
            last = group[-1]
            if bool(mask[-1, mask.shape[1] - len(last) :].all()):
                kept = PromptPrefix.of_row(cache, len(take) - 1, last, mask.shape[1])
            fresh = _Rows(cache, mask, pos, None, take)
            done = choose(fresh, logits)
            for r in done:
                yield item(fresh.index[r])
            fresh = advance(fresh, done)
            if fresh is not None:
                if live is None:
                    live = fresh
                else:
                    live.merge(fresh)
                    live.trim()
            continue
        assert live is not None
        res = backend._forward(
            input_ids=live.inp,
            attention_mask=None if bool(live.mask.all()) else live.mask,
            position_ids=live.pos,
            use_cache=True,
            **{**extra, backend._cache_arg: live.cache},
        )
        logits = res.logits[:, -1, :].float()
        live.cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
        del res
        backend.decode_steps += 1
        done = choose(live, logits)
        for r in done:
            yield item(live.index[r])
        live = advance(live, done)


def _batch_by_batch(backend, prompts, max_new_tokens, stops, score_tokens, max_rows, take, state, run):
    """The stream without merging: ``take``'s prefilled ``state`` decoded by ``_greedy``, then
    the remaining prompts ``max_rows`` at a time through ``generate_tokens``."""
    scores = None if score_tokens is None else [score_tokens[i] for i in take]
    toks, firsts = backend._greedy(state, max_new_tokens, [stops[i] for i in take], scores)
    run[0] += sum(len(t) for t in toks)
    for r, i in enumerate(take):
        text = backend.tokenizer.decode(toks[r], skip_special_tokens=True)
        yield i, text, run[0], None if firsts is None else firsts[r], run[1]
        run[0] = run[1] = 0
    for start in range(take[-1] + 1, len(prompts), max_rows):
        chunk = list(range(start, min(len(prompts), start + max_rows)))
        texts, forwarded, firsts = backend.generate_tokens(
            [list(prompts[i]) for i in chunk],
            max_new_tokens,
            None if score_tokens is None else [score_tokens[i] for i in chunk],
            stop=[list(stops[i]) for i in chunk],
        )
        for r, i in enumerate(chunk):
            yield i, texts[r], forwarded if r == 0 else 0, None if firsts is None else firsts[r], int(r == 0)
