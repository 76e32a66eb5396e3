"""Greedy decoding for ``HFCausalLM`` (``hf.py`` runs the scoring forwards; this module the
generations): a batch's prompts prefilled once (the prompt trie in one packed forward, or shared
prefixes run once), then plain argmax steps with finished rows leaving the batch; a model whose
generation config adds a logits processor decodes through transformers' ``generate``.
``continuous.StreamingDecoding`` drives the same prefill and steps (``prefill``, ``decode_step``,
``greedy``) to refill a batch as its rows finish."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from . import decode_linear
from .base import Generations, ScoreTokens, TokenPrompts
from .prompt_prefix import PromptPrefix


class GreedyDecoding:
    """``HFCausalLM``'s generation half (a mixin: it decodes with the host's model, tokenizer,
    device and forward)."""

    def generate_tokens(
        self,
        prompts: TokenPrompts,
        max_new_tokens: int,
        score_tokens: ScoreTokens = None,
        stop: Sequence[Sequence[str]] | None = None,
    ) -> Generations:
        """Greedy completions of a batch of token-id prompts (left-padded): the decoded text
        after each prompt (special tokens skipped), the tokens run, and, when ``score_tokens``
        is given, per prompt the float32 log-probability of each of its ``score_tokens`` as the
        first token after the prompt (from the same forward that picks the first new token).

        A row stops at an end-of-sequence token, after ``max_new_tokens``, or, with ``stop``
        (per prompt, strings), as soon as its decoded text contains one of its stop strings;
        the text is returned uncut (the caller cuts it), so a text holding none of its stop
        strings is the whole generation. Finished rows leave the batch (their key/value rows
        are dropped), and the batch ends when every row has finished.

        Prompts that share a long prefix (``share_groups``) run it once: the prefix's key/value
        cache is computed per group, copied to the group's rows, and each row continues from it
        with its own suffix. The padding between prefix and suffix is masked, and position ids
        come from the mask, so each row sees the same tokens at the same positions as alone
        (equal up to float rounding). Sliding-window models and models whose cache cannot be
        batch-indexed run every prompt whole.

        The decoding loop is this class's own (``greedy``): plain greedy decoding as
        transformers' ``generate(do_sample=False, num_beams=1)`` does it, without its per-step
        bookkeeping and with finished rows removed. A model whose generation config adds a
        logits processor to greedy decoding (``repetition_penalty``, ``min_new_tokens``, ...;
        ``plain_greedy``) or whose forward takes no cache goes through ``generate`` itself,
        with the stop strings as a stopping criterion.

        Raises:
            ValueError: ``max_new_tokens < 1``, an empty prompt, or ``stop`` of another length
                than ``prompts``. BackendOutOfMemory: CUDA ran out of memory (the engine halves
                the batch).
        """
        stops = checked_stops(prompts, max_new_tokens, stop)
        self._prepare_decoding()
        if self.own_loop():
            state, forwarded = self.prefill(prompts)
            tokens, first = self.greedy(state, max_new_tokens, stops, score_tokens)
        else:
            ids, mask, kwargs, forwarded = self._prompt_inputs(prompts)
            tokens, first = self._generate_hf(ids, mask, kwargs, max_new_tokens, stops, score_tokens)
        texts = [self.tokenizer.decode(row, skip_special_tokens=True) for row in tokens]
        return texts, forwarded + sum(len(row) for row in tokens), first

    #: Whether decoding steps on the CPU (float32) run the linear layers' few-row products
    #: through oneDNN (``decode_linear``: 1.5-2x faster than sgemm there, with a second copy of
    #: the weights, made at the first generation).
    onednn_decoding = True

    def _prepare_decoding(self) -> None:
        if self.onednn_decoding and decode_linear.applies(self.model):
            decode_linear.enable(self.model)

    def _decodes(self) -> bool:
        """Whether ``generate_tokens`` is this class's own, not replaced by a subclass (the
        planning backend's counting double decodes nothing, and takes no stop strings)."""
        return type(self).generate_tokens is GreedyDecoding.generate_tokens

    @property
    def stops_early(self) -> bool:
        """``generate_tokens`` ends a row at its first stop string (``Backend.stops_early``)."""
        return self._decodes()

    def prefill(self, prompts: list[list[int]], past: PromptPrefix | None = None):
        """(``greedy``'s starting state, tokens run) of a batch: the prompt trie in one packed
        forward (``_tree_prefill``) when it applies, continuing ``past`` (the key/value cache of
        a prefix every prompt starts with, kept from an earlier prefill) when given, else a
        left-padded forward whose shared prefixes (``share_groups``) run once."""
        from .errors import PrefixUnsupported

        if self.tree_prefill_ok(prompts, past):
            try:
                return self._tree_prefill(prompts, past)
            except PrefixUnsupported:
                self.disable_prefix_sharing()
        ids, mask, kwargs, forwarded = self._prompt_inputs(prompts)
        return self._padded_prefill(ids, mask, kwargs.get(self._cache_arg)), forwarded

    def _prompt_inputs(self, prompts: list[list[int]]):
        """(input ids, attention mask, generate kwargs, tokens run) of a left-padded batch, a
        shared prefix per ``share_groups`` group already run into the kwargs' cache."""
        from .errors import PrefixUnsupported

        groups = (
            share_groups(prompts)
            if self.prefix_sharing and self._can_share and not self._sliding
            else [(0, list(range(len(prompts))))]
        )
        if groups[0][0]:
            try:
                return self._shared_prefix_inputs(prompts, groups)
            except PrefixUnsupported:
                self.disable_prefix_sharing()
        ids, mask, _ = self._left_pad(prompts)
        return ids, mask, {}, sum(len(p) for p in prompts)

    def own_loop(self) -> bool:
        """Whether ``greedy`` decodes like ``generate`` for this model: a forward that takes a
        cache and position ids, and a generation config that adds nothing to plain argmax."""
        return (
            self._cache_arg is not None
            and not getattr(self.model.config, "is_encoder_decoder", False)
            and "position_ids" in inspect.signature(self.model.forward).parameters
            and plain_greedy(self.model.generation_config)
        )

    def eos_ids(self) -> frozenset[int]:
        """The end-of-sequence token ids of the model's generation config."""
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            return frozenset()
        return frozenset([eos] if isinstance(eos, int) else (int(e) for e in eos))

    def stopped(self, tokens: list[int], stops: tuple[str, ...]) -> bool:
        """Whether the text of ``tokens`` contains one of ``stops``. A token that ends inside a
        multi-byte character decodes to U+FFFD, which a later token replaces: it is left out, so
        a row never stops on text its next token would change."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).rstrip("\ufffd")
        return any(s in text for s in stops)

    def row_end(self, max_new_tokens: int) -> RowEnd:
        """The rule that ends a decoded row (``RowEnd``) for this model and budget."""
        return RowEnd(self.eos_ids(), max_new_tokens, self.stopped)

    def decode_step(self, inp, mask, pos, cache):
        """One decoding forward: the pending tokens ``inp`` (rows, 1) at positions ``pos``,
        continuing ``cache``, ``mask`` the attention mask (None when it has no padding).
        Returns (float32 logits of each row's next token, the cache).

        Raises:
            BackendOutOfMemory: CUDA ran out of memory.
        """
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        res = self._forward(
            input_ids=inp,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **extra,
            **{self._cache_arg: cache},
        )
        logits = res.logits[:, -1, :].float()
        cache = returned_cache(res)
        del res
        self.decode_steps += 1
        return logits, cache

    #: Most tokens a generation batch's prompts may hold, once each, for ``_tree_prefill``: the
    #: packed row attends over all of them, so its attention grows with the square of this.
    tree_prefill_tokens = 2048

    def tree_prefill_ok(self, prompts, past: PromptPrefix | None = None) -> bool:
        cut = past.length if past is not None else 0
        return (
            self.prefix_sharing
            and self._can_share
            and self.can_pack
            and (len(prompts) > 1 or cut > 0)
            and len(prompt_trie([p[cut:] for p in prompts])[0]) <= self.tree_prefill_tokens
        )

    @torch.inference_mode()
    def _tree_prefill(self, prompts: list[list[int]], past: PromptPrefix | None = None):
        """``greedy``'s starting state from one packed forward of the batch's prompt trie: every
        distinct prompt prefix runs once (the instruction all prompts share, then each context,
        then each prompt's own end), token i attending to its ancestors only (a 4-D mask, as in
        ``forward_packed``) at position id = its depth. Each prompt's key/value cache is then
        gathered from the packed row along its path, left-padded, so decoding continues as after
        a left-padded prompt forward; no padding is computed. Returns (state, tokens run).

        With ``past`` (the cache of the first ``past.length`` tokens, which every prompt starts
        with and goes beyond), only the trie of the rest runs, its tokens attending to those
        columns as well, at positions after them: a prefix computed once for an earlier batch
        (the chat preamble, a prompt template's instruction) is not computed again.

        Raises:
            PrefixUnsupported: the model's cache cannot be batch-indexed.
        """
        from .errors import PrefixUnsupported

        cut = 0 if past is None else past.length
        if cut and any(len(p) <= cut or p[:cut] != list(past.ids[:cut]) for p in prompts):
            raise ValueError("a prompt does not go beyond the prefix whose cache it continues")
        tokens, parents, paths = prompt_trie([p[cut:] for p in prompts])
        n, width = len(tokens), max(len(p) for p in prompts)
        mask4, depth = _trie_mask(parents, cut, self.model.dtype)
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([[cut + d for d in depth]], dtype=torch.long, device=self.device)
        last = torch.tensor([path[-1] for path in paths], device=self.device)
        extra = {}
        if cut:
            extra[self._base_cache_arg()] = past.cache(self.device)
        try:
            out = self.model.base_model(
                input_ids=ids, attention_mask=mask4.to(self.device), position_ids=pos, use_cache=True, **extra
            )
            logits = self.model.get_output_embeddings()(out.last_hidden_state[0, last]).float()
        except torch.OutOfMemoryError as e:
            from .errors import BackendOutOfMemory

            raise BackendOutOfMemory(str(e)) from None
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        cache = returned_cache(out)
        del out
        if not batch_indexable(cache):
            raise PrefixUnsupported(f"{type(cache).__name__} cache cannot be batch-indexed")
        mask = _gather_paths(cache, paths, cut, width)
        pos = torch.tensor([[len(p) - 1] for p in prompts], dtype=torch.long, device=self.device)
        return (logits, cache, mask, pos, True), n

    def _base_cache_arg(self) -> str:
        """The name under which ``base_model``'s forward takes a cache (``cache`` in
        transformers 5, ``past_key_values`` before)."""
        params = inspect.signature(self.model.base_model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    @torch.inference_mode()
    def _padded_prefill(self, ids, mask, cache):
        """``greedy``'s starting state from a forward of left-padded ``ids`` (``mask`` its
        attention mask) as ``generate`` builds it: position ids from the mask (padding at 0), the
        mask dropped when it has no padding, logits of the last position only, continuing
        ``cache`` when given (it holds the first columns of ``ids``: a shared prefix)."""
        past = 0 if cache is None else cache.get_seq_length()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
        padded = not bool(mask.all())
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        if cache is not None:
            extra[self._cache_arg] = cache
        res = self._forward(
            input_ids=ids[:, past:],
            attention_mask=mask if padded else None,
            position_ids=pos,
            use_cache=True,
            **extra,
        )
        logits = res.logits[:, -1, :].float()
        cache = returned_cache(res)
        return logits, cache, mask, pos[:, -1:], padded

    @torch.inference_mode()
    def greedy(self, state, max_new_tokens: int, stops, score_tokens):
        """(new token ids per row, first-step log-probabilities of ``score_tokens`` or None):
        greedy decoding from a prefill ``state`` (logits after each row's prompt, its cache,
        attention mask, last position id, whether the mask has padding).

        Each step feeds one token per live row at its row's next position, as ``generate``
        does, the mask dropped when it has no padding, argmax in float32. A row is finished at
        an end-of-sequence token (kept, as ``generate`` keeps it), at ``max_new_tokens``, or at
        one of its stop strings. Finished rows are dropped from the batch and from the cache; a
        cache whose rows cannot be selected keeps them, fed padding, their output ignored.
        """
        ended = self.row_end(max_new_tokens)
        logits, cache, mask, pos, padded = state
        live = list(range(logits.shape[0]))  # the prompt of each batch row; -1: finished, kept
        tokens: list[list[int]] = [[] for _ in live]
        # The model's own forward has applied any final soft-capping already.
        first = None if score_tokens is None else first_step_logprobs(logits, score_tokens)
        selectable = inp = None
        for step in range(max_new_tokens):
            if step:
                logits, cache = self.decode_step(inp, mask if padded else None, pos, cache)
            chosen = logits.argmax(-1)
            finished = set()
            for row, t in enumerate(chosen.tolist()):
                i = live[row]
                if i >= 0:
                    tokens[i].append(t)
                    if ended(tokens[i], stops[i]):
                        finished.add(row)
            if finished:
                if selectable is None:
                    selectable = batch_indexable(cache)
                if selectable:
                    keep = [row for row in range(len(live)) if row not in finished]
                    if not keep:
                        break
                    rows = torch.tensor(keep, dtype=torch.long, device=self.device)
                    cache.batch_select_indices(rows)
                    chosen, mask, pos = chosen[rows], mask[rows], pos[rows]
                    live = [live[row] for row in keep]
                else:
                    live = [-1 if row in finished else i for row, i in enumerate(live)]
                    if all(i < 0 for i in live):
                        break
            if any(i < 0 for i in live):
                dead = torch.tensor([i < 0 for i in live], device=self.device)
                chosen = chosen.masked_fill(dead, self._pad)
            inp = chosen.unsqueeze(-1)
            pos = pos + 1
            if padded:
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        return tokens, first

    def _generate_hf(self, ids, mask, kwargs: dict, max_new_tokens: int, stops, score_tokens):
        """``greedy``'s result through transformers' ``generate`` (its logits processors
        applied), stop strings checked by a stopping criterion after each step."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        width = ids.shape[1]
        backend = self

        class StopStrings(StoppingCriteria):
            def __call__(self, input_ids, scores, **_):
                return torch.tensor(
                    [
                        bool(s) and backend.stopped(input_ids[r, width:].tolist(), s)
                        for r, s in enumerate(stops)
                    ],
                    dtype=torch.bool,
                    device=input_ids.device,
                )

        kwargs = dict(kwargs)
        if any(stops):
            kwargs["stopping_criteria"] = StoppingCriteriaList([StopStrings()])
        if score_tokens is not None:
            # Raw logits of each step (``scores`` would be after logits processors).
            kwargs.update(return_dict_in_generate=True, output_logits=True)
        try:
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                pad_token_id=self._pad,
                **kwargs,
            )
        except torch.OutOfMemoryError as e:
            from .errors import BackendOutOfMemory

            raise BackendOutOfMemory(str(e)) from None
        first = None
        gen = out
        if score_tokens is not None:
            gen = out.sequences
            first = first_step_logprobs(out.logits[0].float(), score_tokens)
        return [row.tolist() for row in gen[:, width:]], first

    def _shared_prefix_inputs(self, prompts: list[list[int]], groups):
        """(input ids, attention mask, generate kwargs with the copied prefix cache, tokens run)
        for ``groups`` of (shared prefix length, prompt indices). Layout per row: its group's
        prefix left-padded to the longest prefix, then its own suffix left-padded to the longest
        suffix; the prefix forward runs one row per group."""
        from .errors import PrefixUnsupported

        row_group = [0] * len(prompts)
        prefixes = []
        for g, (length, members) in enumerate(groups):
            for i in members:
                row_group[i] = g
            prefixes.append(prompts[members[0]][:length])
        lengths = [len(p) for p in prefixes]
        suffixes = [prompts[i][lengths[row_group[i]] :] for i in range(len(prompts))]
        p_ids, p_mask, p_pos = self._left_pad(prefixes)
        res = self._forward(
            input_ids=p_ids,
            attention_mask=p_mask,
            position_ids=p_pos,
            use_cache=True,
            **({"logits_to_keep": 1} if self._keeps_logits else {}),
        )
        cache = returned_cache(res)
        del res
        if not batch_indexable(cache):
            raise PrefixUnsupported(f"{type(cache).__name__} cache cannot be batch-indexed")
        rows = torch.tensor(row_group, dtype=torch.long, device=self.device)
        cache.batch_select_indices(rows)
        s_ids, s_mask, _ = self._left_pad(suffixes)
        ids = torch.cat([p_ids.index_select(0, rows), s_ids], dim=1)
        mask = torch.cat([p_mask.index_select(0, rows), s_mask], dim=1)
        forwarded = sum(lengths) + sum(len(s) for s in suffixes)
        return ids, mask, {self._cache_arg: cache}, forwarded


#: Generation-config fields with which transformers' ``generate`` adds a logits processor (or
#: another search) to greedy decoding, and the values that add none. ``greedy`` implements plain
#: argmax only, so a model with any other value decodes through ``generate`` itself.
_NEUTRAL_GREEDY = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "forced_decoder_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,),
    "guidance_scale": (None, 1.0),
    "watermarking_config": (None,),
    "penalty_alpha": (None,),
    "dola_layers": (None,),
    "assistant_model": (None,),
    "prompt_lookup_num_tokens": (None,),
}


def plain_greedy(config) -> bool:
    """Whether greedy ``generate`` with this generation config is a plain argmax per step (no
    logits processor, no contrastive or assisted search).

    Examples:
        >>> from transformers import GenerationConfig
        >>> plain_greedy(GenerationConfig(eos_token_id=2)), plain_greedy(GenerationConfig(repetition_penalty=1.1))
        (True, False)
    """
    return all(getattr(config, k, None) in neutral for k, neutral in _NEUTRAL_GREEDY.items())


def prompt_trie(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[list[int]]]:
    """The prompts as one prefix tree in depth-first order: (token per node, parent per node
    (-1: a root), per prompt the node of each of its tokens).

    Examples:
        >>> prompt_trie([[1, 2, 3], [1, 2, 4], [5]])
        ([1, 2, 3, 4, 5], [-1, 0, 1, 1, -1], [[0, 1, 2], [0, 1, 3], [4]])
    """
    children: list[dict[int, int]] = [{}]  # node 0: a virtual root
    tok, par, ends = [-1], [0], []
    for p in prompts:
        node = 0
        for t in p:
            nxt = children[node].get(t)
            if nxt is None:
                nxt = children[node][t] = len(tok)
                children.append({})
                tok.append(t)
                par.append(node)
            node = nxt
        ends.append(node)
    order, stack = [], list(reversed(children[0].values()))
    while stack:  # depth first, children in first-seen order
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node].values()))
    index = {node: i for i, node in enumerate(order)}
    paths = []
    for end in ends:
        path, node = [], end
        while node:
            path.append(index[node])
            node = par[node]
        paths.append(path[::-1])
    return [tok[v] for v in order], [index[par[v]] if par[v] else -1 for v in order], paths


def share_groups(prompts: Sequence[Sequence[int]], min_shared: int = 16) -> list[tuple[int, list[int]]]:
    """Prompts of one batch cut into groups that run a shared prefix once: (prefix length,
    member indices), every index in exactly one group, groups in order of their first member.

    The groups are runs of the prompts sorted by token ids whose neighbours share at least
    ``T`` tokens, with the cut-off ``T`` chosen among the neighbours' common-prefix lengths to
    minimise the padded work of ``HFCausalLM.generate_tokens``: one prefix row per group at the
    longest prefix, plus every row at the longest suffix. A group's prefix is its members' common
    prefix, at most the shortest member minus one (each row needs a suffix token); a prompt
    that shares less than ``min_shared`` tokens is a group of its own, its prefix all but its
    last token. ``[(0, all indices)]`` means no split pays off (or a prompt is a single token):
    run the prompts whole.

    Examples:
        >>> share_groups([[1, 2, 3, 4, 9], [1, 2, 3, 4, 8], [7, 7, 7, 7, 7]], min_shared=2)
        [(4, [0, 1]), (4, [2])]
        >>> share_groups([[1, 2], [3, 4]])
        [(0, [0, 1])]
    """
    n = len(prompts)
    whole = [(0, list(range(n)))]
    if n < 2 or min(len(p) for p in prompts) < 2:
        return whole
    order = sorted(range(n), key=lambda i: tuple(prompts[i]))
    neighbour = [common_prefix(prompts[order[j]], prompts[order[j + 1]]) for j in range(n - 1)]

    def work(groups) -> int:
        longest_prefix = max(length for length, _ in groups)
        longest_suffix = max(len(prompts[i]) - length for length, m in groups for i in m)
        return len(groups) * longest_prefix + n * longest_suffix

    best, best_work = whole, n * max(len(p) for p in prompts)
    for threshold in sorted({t for t in neighbour if t >= min_shared}):
        groups = _groups_at(prompts, order, neighbour, threshold, min_shared)
        if len(groups) < n and (w := work(groups)) < best_work:
            best, best_work = groups, w
    return sorted(best, key=lambda g: g[1][0])


def batch_indexable(cache) -> bool:
    """True when ``cache`` is a transformers ``Cache`` whose layers are plain (or sliding-window)
    key/value layers, so selecting batch rows selects whole per-sequence states. Recurrent or
    linear-attention layers keep extra state ``batch_select_indices`` does not cover, and legacy
    tuple caches have no such method: those models take the full path."""
    try:
        from transformers.cache_utils import Cache, DynamicLayer
    except ImportError:
        return False
    try:
        from transformers.cache_utils import LinearAttentionCacheLayerMixin as _Linear
    except ImportError:
        _Linear = ()
    layers = getattr(cache, "layers", None)
    return (
        isinstance(cache, Cache)
        and bool(layers)
        and all(isinstance(l, DynamicLayer) and not isinstance(l, _Linear) for l in layers)
    )


def _groups_at(prompts, order: list[int], neighbour: list[int], threshold: int, min_shared: int):
    """``share_groups``' groups for one cut-off: runs of the sorted prompts (``order``) whose
    neighbours share at least ``threshold`` tokens (``neighbour[j]``: between ``order[j]`` and
    ``order[j + 1]``), each run one group when its members share ``min_shared`` tokens, else a
    group per member."""
    runs, run = [], [order[0]]
    for j in range(len(order) - 1):
        if neighbour[j] >= threshold:
            run.append(order[j + 1])
        else:
            runs.append(run)
            run = [order[j + 1]]
    runs.append(run)
    out = []
    for members in runs:
        shared = min(
            [common_prefix(prompts[members[0]], prompts[i]) for i in members[1:]]
            + [len(prompts[i]) - 1 for i in members]
        )
        if len(members) > 1 and shared >= min_shared:
            out.append((shared, sorted(members)))
        else:
            out += [(len(prompts[i]) - 1, [i]) for i in members]
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share.

    Examples:
        >>> common_prefix([1, 2, 3], [1, 2, 4]), common_prefix([1], [2])
        (2, 0)
    """
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def checked_stops(prompts, max_new_tokens: int, stop) -> list[tuple[str, ...]]:
    """Per prompt its non-empty stop strings, after the input checks every decoding entry makes.

    Raises:
        ValueError: ``max_new_tokens < 1``, an empty prompt, or ``stop`` of another length than
            ``prompts``.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if any(not p for p in prompts):
        raise ValueError("an empty prompt: generation needs at least one token to condition on")
    if stop is not None and len(stop) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(stop)} stop lists")
    return [tuple(s for s in row if s) for row in stop] if stop is not None else [()] * len(prompts)


@dataclass(frozen=True)
class RowEnd:
    """When a decoded row is finished: at an end-of-sequence token (kept, as ``generate`` keeps
    it), at ``max_new_tokens``, or once its text holds one of its stop strings (``stopped``)."""

    eos: frozenset[int]
    max_new_tokens: int
    stopped: Callable[[list[int], tuple[str, ...]], bool]

    def __call__(self, row: list[int], stops: tuple[str, ...]) -> bool:
        """Whether ``row`` (its new tokens, the last just chosen) is finished."""
        return (
            row[-1] in self.eos or len(row) >= self.max_new_tokens or bool(stops and self.stopped(row, stops))
        )


def first_step_logprobs(logits: torch.Tensor, score_tokens: Sequence[Sequence[int]]) -> list[list[float]]:
    """Per row, the log-probability of each of its ``score_tokens`` under the next-token
    ``logits`` (rows x vocabulary, float32)."""
    logp = torch.log_softmax(logits, dim=-1)
    return [[float(logp[r, t]) for t in toks] for r, toks in enumerate(score_tokens)]


def returned_cache(res):
    """The key/value cache a forward returned (``cache`` in transformers 5, ``past_key_values``
    before)."""
    return getattr(res, "cache", None) or getattr(res, "past_key_values", None)


def _trie_mask(parents: list[int], cut: int, dtype) -> tuple[torch.Tensor, list[int]]:
    """(the additive 4-D attention mask of a packed prompt trie, each node's depth): node i sees
    itself, its ancestors and the ``cut`` columns of a kept prefix before the trie."""
    n = len(parents)
    allowed = ancestor_mask(parents, n)
    depth = [0] * n
    for i, p in enumerate(parents):  # parents precede children
        if p >= 0:
            depth[i] = depth[p] + 1
    mask4 = torch.zeros((1, 1, n, cut + n), dtype=dtype)  # every token sees the past columns
    mask4[..., cut:].masked_fill_(~torch.from_numpy(allowed), torch.finfo(dtype).min)
    return mask4, depth


def ancestor_mask(parents: Sequence[int], width: int) -> np.ndarray:
    """(``width`` x ``width``) booleans of a flattened tree: token i sees itself and its
    ancestors (``parents[i]``, -1 for a root; parents precede children, as in depth-first
    order); the padding after the tree's tokens sees only itself, so no row is all masked.

    Examples:
        >>> ancestor_mask([-1, 0, 0], 4).astype(int).tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 1]]
    """
    allowed = np.zeros((width, width), dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            allowed[i] = allowed[p]
        allowed[i, i] = True
    for i in range(len(parents), width):
        allowed[i, i] = True
    return allowed


def _gather_paths(cache, paths: list[list[int]], cut: int, width: int) -> torch.Tensor:
    """Rebuild a packed trie forward's ``cache`` (one row) as one row per prompt: row r holds
    the ``cut`` past columns and the packed columns of prompt r's path, left-padded to
    ``width`` (the padding columns copy column 0 and are masked). Returns the attention mask."""
    device = cache.layers[0].keys.device
    gather = torch.zeros((len(paths), width), dtype=torch.long)
    mask = torch.zeros((len(paths), width), dtype=torch.long)
    for r, path in enumerate(paths):
        gather[r, width - len(path) - cut :] = torch.tensor(list(range(cut)) + [cut + c for c in path])
        mask[r, width - len(path) - cut :] = 1
    gather, mask = gather.to(device), mask.to(device)
    for layer in cache.layers:
        layer.keys = layer.keys[0][:, gather].transpose(0, 1).contiguous()
        layer.values = layer.values[0][:, gather].transpose(0, 1).contiguous()
    return mask
