"""Hugging Face causal-LM backend: batched continuation log-likelihoods, per-token log-probabilities
of whole sequences, and greedy generation."""

from __future__ import annotations

import copy
import inspect
from typing import Sequence

import torch

from .base import (GENERATE, LOGLIKELIHOOD, TOKEN_LOGPROBS, GenerationRequest, LanguageModel,
                   ModelInfo, SentenceEncoding)


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available else cpu; ``cpu``/``cuda``/``cuda:N`` as given.

    Raises:
        ValueError: ``cuda`` asked for on a machine without CUDA, or an unknown device string.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device} asked for, but torch sees no CUDA device")
        return torch.device(device)
    if device == "cpu":
        return torch.device("cpu")
    raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {device!r}")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` -> bfloat16 on CUDA, float32 on CPU (option scoring is decided by small
    log-likelihood differences, and bf16 moves a 12-token sentence by up to 0.4 nats on CPU).

    Raises:
        ValueError: an unknown dtype name.
    """
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in names:
        raise ValueError(f"--dtype must be auto or one of {sorted(names)}, got {dtype!r}")
    return names[dtype]


class HFCausalLM(LanguageModel):
    """A ``transformers`` causal LM behind the suite's model interface.

    Tokenization boundary (as lm-evaluation-harness, so numbers are comparable): trailing
    whitespace of the context moves to the continuation; the context is encoded on its own, and the
    continuation tokens are the tokens of ``context + continuation`` after the context's tokens. If
    that whole encoding does not start with the context's tokens (a merge across the boundary),
    the continuation is encoded on its own instead, so the context is never re-tokenized and only
    continuation tokens are ever scored. A BOS token is prepended when the tokenizer adds one by
    default (Gemma); an empty context is replaced by BOS (or EOS when there is no BOS).

    Scoring paths of ``loglikelihood_tokens``:

    - prefix sharing (default): requests are grouped by identical context ids; each distinct
      context is run once with a key/value cache, and all its continuations are scored against
      copies of that cache (the choices of a multiple-choice item share their prompt).
    - full sequence: every (context + continuation) runs from scratch, left-padded. Used when
      ``prefix_sharing=False``, for requests longer than the window (they are left-truncated, so
      their context is no longer shared), and for models whose forward takes no cache or
      position ids, or returns a cache that cannot be batch-indexed (recurrent/linear layers).

    Both give the same numbers up to float rounding (~2e-5 nats per request in fp32, SmolLM2).

    Args:
        model: a loaded ``PreTrainedModel`` in eval mode, already on its device and dtype.
        tokenizer: its tokenizer.
        info: provenance recorded in results.
        batch_size: sequences per forward pass (full path), distinct contexts per context forward
            (prefix sharing).
        prefix_sharing: run each distinct context once and reuse its key/value cache.
        token_budget: upper bound on ``rows x (context width + continuation width)`` of one
            forward pass of the prefix-sharing path, which bounds the copied key/value cache
            (bytes per token = 2 x layers x kv heads x head dim x dtype size).
        logits_budget: upper bound on the number of logit elements (``positions x vocab``) one
            continuation forward may produce; a 262k vocabulary makes this the binding limit.
    Raises:
        ValueError: batch_size, token_budget or logits_budget < 1.
    """

    capabilities = frozenset({LOGLIKELIHOOD, TOKEN_LOGPROBS, GENERATE})

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = 16, *,
                 prefix_sharing: bool = True, token_budget: int = 8192,
                 logits_budget: int = 1 << 26):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if token_budget < 1 or logits_budget < 1:
            raise ValueError(f"token_budget and logits_budget must be >= 1, got "
                             f"{token_budget} and {logits_budget}")
        self.prefix_sharing = prefix_sharing
        self.token_budget = token_budget
        self.logits_budget = logits_budget
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        probe = tokenizer("a")["input_ids"]
        plain = tokenizer("a", add_special_tokens=False)["input_ids"]
        self._bos = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None
                     and probe[: len(probe) - len(plain)] == [tokenizer.bos_token_id] else [])
        prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if prefix is None:
            raise ValueError("tokenizer has neither a BOS nor an EOS token to condition on")
        self._empty_prefix = [prefix]
        pad = tokenizer.pad_token_id
        self._pad = pad if pad is not None else prefix
        cfg = model.config
        self.max_length = int(getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0)
                              or 2048)
        params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in params
        # transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name is a deprecated
        # alias until 5.40); a forward with neither, or without position_ids, cannot continue a
        # left-padded context, so such models always take the full path.
        self._cache_arg = next((n for n in ("cache", "past_key_values") if n in params), None)
        self._can_share = (self._cache_arg is not None and "position_ids" in params
                           and not getattr(cfg, "is_encoder_decoder", False))
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self._vocab = int(getattr(text_cfg, "vocab_size", 0) or 1 << 18)

    # -- tokenization ----------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of (context, continuation) following the boundary rule in the class doc.

        Raises:
            ValueError: the continuation is empty or encodes to no token.
        """
        if not continuation:
            raise ValueError("empty continuation: nothing to score")
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        ctx = self._bos + self._encode(context) if context else []
        whole = self._bos + self._encode(context + continuation) if context else []
        if ctx and len(whole) > len(ctx) and whole[: len(ctx)] == ctx:
            cont = whole[len(ctx):]
        else:
            cont = self._encode(continuation)
        if not ctx:
            ctx = list(self._empty_prefix)
        if not cont:
            raise ValueError(f"continuation {continuation!r} encodes to no token")
        return ctx, cont

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """BOS (or, without one, the tokenizer's EOS, as for an empty context) + the tokens of
        ``text``; only the prefix is marked special. WinoQueer ``metric_autoregressive.py``
        encodes ``bos_token + sentence`` the same way.

        Raises:
            ValueError: ``text`` encodes to no token.
        """
        ids = self._encode(text)
        if not ids:
            raise ValueError(f"sentence {text!r} encodes to no token")
        prefix = list(self._empty_prefix)
        return SentenceEncoding(tuple(prefix + ids), tuple([True] * len(prefix) + [False] * len(ids)))

    # -- scoring ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        encoded = [self.encode_pair(c, x) for c, x in requests]
        return self.loglikelihood_tokens(encoded)

    @torch.inference_mode()
    def loglikelihood_tokens(self, encoded: Sequence[tuple[list[int], list[int]]]) -> list[float]:
        """``loglikelihood`` on pre-tokenized (context ids, continuation ids) pairs.

        Args:
            encoded: (context ids, continuation ids) per request, as ``encode_pair`` returns them;
                both non-empty (condition an empty context on BOS, as ``encode_pair`` does).
        Returns:
            one summed natural-log probability (<= 0) per request, in request order.
        Raises:
            ValueError: an empty context or continuation, or a continuation that alone does not
                fit the model's window. Longer sequences lose tokens from the left of the context.
        """
        for n, (ctx, cont) in enumerate(encoded):
            if not ctx or not cont:
                raise ValueError(f"request {n}: empty context or continuation ids (the first "
                                 "continuation token needs a context token to condition on)")
            if len(cont) >= self.max_length:
                raise ValueError(f"continuation of {len(cont)} tokens does not fit the model's "
                                 f"{self.max_length}-token window")
        out = [0.0] * len(encoded)
        full = list(range(len(encoded)))
        if self.prefix_sharing and self._can_share:
            fits = [i for i in full if len(encoded[i][0]) + len(encoded[i][1]) <= self.max_length]
            done = self._loglikelihood_shared(encoded, fits, out)
            full = [i for i in full if i not in done]
        if full:
            self._loglikelihood_full(encoded, full, out)
        return out

    # full-sequence path ---------------------------------------------------------------------------
    def _loglikelihood_full(self, encoded, indices: list[int], out: list[float]) -> None:
        seqs, positions = [], []
        for i in indices:
            seq = (encoded[i][0] + encoded[i][1])[-self.max_length:]
            seqs.append(seq)
            positions.append(range(len(seq) - len(encoded[i][1]), len(seq)))
        for i, lps in zip(indices, self._token_logprobs_batched(seqs, positions)):
            out[i] = float(sum(lps))

    @torch.inference_mode()
    def token_logprobs(self, sequences: Sequence[Sequence[int]],
                       positions: Sequence[Sequence[int]]) -> list[list[float]]:
        """log P(ids[p] | ids[:p]) at each requested position, one forward per sequence (batched,
        left-padded; see ``LanguageModel.token_logprobs``).

        Raises:
            ValueError: lengths of ``sequences`` and ``positions`` differ, a sequence is longer
                than the model's window, or a position is outside ``[1, len(sequence))``.
        """
        if len(sequences) != len(positions):
            raise ValueError(f"{len(sequences)} sequences but {len(positions)} position lists")
        for n, (seq, pos) in enumerate(zip(sequences, positions)):
            if len(seq) > self.max_length:
                raise ValueError(f"sequence {n}: {len(seq)} tokens exceed the model's "
                                 f"{self.max_length}-token window")
            bad = [p for p in pos if not 1 <= p < len(seq)]
            if bad:
                raise ValueError(f"sequence {n}: position {bad[0]} is outside [1, {len(seq)}) "
                                 "(position 0 has no left context)")
        return self._token_logprobs_batched([list(s) for s in sequences], positions)

    def _token_logprobs_batched(self, seqs: list[list[int]], positions) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in seqs]
        todo = [i for i in range(len(seqs)) if len(positions[i])]
        # Longest first: batches of similar length waste little padding, and a too-large batch
        # fails on the first forward rather than at the end.
        todo.sort(key=lambda i: -len(seqs[i]))
        start = 0
        while start < len(todo):
            idx = [todo[start]]
            width = len(seqs[todo[start]])
            keep = width - min(positions[todo[start]]) + 1
            for i in todo[start + 1:start + self.batch_size]:
                k = max(keep, len(seqs[i]) - min(positions[i]) + 1)
                if (len(idx) + 1) * k * self._vocab > self.logits_budget:
                    break
                idx.append(i)
                keep = k
            for i, lps in zip(idx, self._score_rows([seqs[i] for i in idx], [positions[i] for i in idx])):
                out[i] = lps
            start += len(idx)
        return out

    def _score_rows(self, seqs: list[list[int]], positions) -> list[list[float]]:
        """One left-padded forward over ``seqs``; the log-probabilities at ``positions`` (sequence
        coordinates). Logits are kept only from the earliest position any row needs: left padding
        puts every sequence's end at the right edge, so that is a suffix of every row."""
        ids, mask, position_ids = self._left_pad(seqs)
        width = ids.shape[1]
        pads = [width - len(s) for s in seqs]
        keep = max(width - (pad + min(pos)) + 1 for pad, pos in zip(pads, positions))
        kwargs = {"logits_to_keep": keep} if self._keeps_logits else {}
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                            use_cache=False, **kwargs).logits[:, -keep:, :]
        # logits[:, j] predicts padded position width - keep + j + 1.
        token_lp = _token_logprobs(logits[:, :-1, :], ids[:, width - keep + 1:])
        first = width - keep + 1
        rows = token_lp.tolist()
        return [[rows[r][pad + p - first] for p in pos] for r, (pad, pos) in enumerate(zip(pads, positions))]

    def _left_pad(self, seqs: Sequence[list[int]]):
        """(ids, attention mask, position ids) of ``seqs`` left-padded to one width, on the
        model's device; positions count real tokens only, so padding never shifts them."""
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, seq in enumerate(seqs):
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        return tuple(t.to(self.device) for t in (ids, mask, position_ids))

    # prefix-sharing path --------------------------------------------------------------------------
    def _loglikelihood_shared(self, encoded, indices: list[int], out: list[float]) -> set[int]:
        """Score ``indices`` by running each distinct context once; returns the indices done
        (all of them, or none when the model's cache turns out not to be batch-indexable, in
        which case prefix sharing is switched off for this model)."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in indices:
            groups.setdefault(tuple(encoded[i][0]), []).append(i)
        # Longest context first: similar widths share a batch (little padding), and the
        # largest batch runs first, so a memory error shows at once.
        contexts = sorted(groups, key=len, reverse=True)
        positions = max(1, self.logits_budget // self._vocab)
        done: set[int] = set()
        chunk: list[tuple[int, ...]] = []
        rows = longest = 0  # continuation rows of the chunk, and their padded width
        for ctx in contexts + [None]:  # None: flush the last chunk
            if ctx is not None:
                conts = [len(encoded[i][1]) - 1 for i in groups[ctx] if len(encoded[i][1]) > 1]
                width = len(chunk[0]) if chunk else len(ctx)
                c_rows, c_longest = rows + len(conts), max([longest, *conts])
                # Close the chunk when one more context would overflow the context batch or make
                # its continuations need more than one forward; a single context over budget
                # still goes alone (its continuations are then split, see _score_context_chunk).
                over = (len(chunk) >= self.batch_size or (len(chunk) + 1) * width > self.token_budget
                        or c_rows * (width + c_longest) > self.token_budget
                        or c_rows * c_longest > positions)
            if chunk and (ctx is None or over):
                if not self._score_context_chunk(encoded, chunk, groups, positions, out):
                    self._can_share = False
                    return set()
                done.update(i for c in chunk for i in groups[c])
                chunk, c_rows, c_longest = [], len(conts), max(conts, default=0)
            if ctx is not None:
                chunk.append(ctx)
                rows, longest = c_rows, c_longest
        return done

    def _score_context_chunk(self, encoded, chunk, groups, positions: int, out: list[float]) -> bool:
        """One context forward (with cache) for ``chunk``, then continuation forwards for all its
        requests. Returns False, scoring nothing, if the returned cache cannot be reused."""
        ids, mask, position_ids = self._left_pad(chunk)
        width = ids.shape[1]
        # logits_to_keep=1: only the last context position's logits are needed (they score the
        # first continuation token); the cache carries everything else.
        kwargs = {"logits_to_keep": 1} if self._keeps_logits else {}
        res = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                         use_cache=True, **kwargs)
        cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
        if not _batch_indexable(cache):
            return False
        last = res.logits[:, -1, :].float()
        del res
        last_lp = last - torch.logsumexp(last, dim=-1, keepdim=True)  # (n_ctx, vocab)
        ctx_lens = torch.tensor([len(c) for c in chunk], dtype=torch.long, device=self.device)

        pairs = [(i, row) for row, ctx in enumerate(chunk) for i in groups[ctx]]
        # One gather and one device->host copy for all first tokens (a sync per request is slow
        # on CUDA).
        first = last_lp[torch.tensor([r for _, r in pairs], device=self.device),
                        torch.tensor([encoded[i][1][0] for i, _ in pairs], device=self.device)]
        for (i, _), value in zip(pairs, first.tolist()):
            out[i] = value
        # (request index, context row) of continuations of 2+ tokens
        multi = [(i, row) for i, row in pairs if len(encoded[i][1]) > 1]
        if not multi:
            return True
        # Longest continuation first, cut into sub-batches of similar length: continuations are
        # short and many (BBQ: 1-8 tokens), so padding all rows to the longest would multiply the
        # work (and the (rows, width, vocab) logits) several times; a new sub-batch starts where
        # the length halves. Each sub-batch is also bounded by the token budget (copied cache +
        # inputs) and the logits budget.
        multi.sort(key=lambda t: -len(encoded[t[0]][1]))
        batches, cur, n = [], [], 0
        for item in multi:
            m = len(encoded[item[0]][1]) - 1  # tokens this request feeds
            # n: fed tokens of the sub-batch's first (longest) continuation = its padded width.
            if cur and ((len(cur) + 1) * (width + n) > self.token_budget
                        or (len(cur) + 1) * n > positions or (n >= 4 and 2 * m <= n)):
                batches.append(cur)
                cur = []
            if not cur:
                n = m
            cur.append(item)
        batches.append(cur)
        for b, sub in enumerate(batches):
            # batch_select_indices rebinds each layer's tensors to the selected rows; the cache is
            # only consumed in place by the last sub-batch, earlier ones work on a copy.
            sub_cache = cache if b == len(batches) - 1 else copy.deepcopy(cache)
            self._score_continuations(encoded, sub, sub_cache, mask, ctx_lens, out)
        return True

    def _score_continuations(self, encoded, sub, cache, ctx_mask, ctx_lens, out) -> None:
        """Add the log-probabilities of continuation tokens 2..n to ``out`` for requests ``sub``
        ((request index, context row) pairs), feeding tokens 1..n-1 after their context's cache."""
        rows = torch.tensor([r for _, r in sub], dtype=torch.long, device=self.device)
        cache.batch_select_indices(rows)
        n = max(len(encoded[i][1]) for i, _ in sub) - 1
        ids = torch.full((len(sub), n), self._pad, dtype=torch.long)
        targets = torch.zeros((len(sub), n), dtype=torch.long)
        cmask = torch.zeros((len(sub), n), dtype=torch.long)
        for row, (i, _) in enumerate(sub):
            cont = encoded[i][1]
            # Right padding: a continuation's real tokens sit right after its context's cache,
            # and the padding after them is never attended to by a real token.
            ids[row, :len(cont) - 1] = torch.tensor(cont[:-1], dtype=torch.long)
            targets[row, :len(cont) - 1] = torch.tensor(cont[1:], dtype=torch.long)
            cmask[row, :len(cont) - 1] = 1
        ids, targets, cmask = (t.to(self.device) for t in (ids, targets, cmask))
        attention_mask = torch.cat([ctx_mask.index_select(0, rows), cmask], dim=1)
        position_ids = ctx_lens.index_select(0, rows).unsqueeze(1) + torch.arange(n, device=self.device)
        logits = self.model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=True, **{self._cache_arg: cache}).logits
        token_lp = _token_logprobs(logits, targets).masked_fill(cmask == 0, 0.0)
        for row, value in enumerate(token_lp.sum(-1).tolist()):
            out[sub[row][0]] += value

    # -- generation ------------------------------------------------------------------------------
    def _encode_prompt(self, prompt: str) -> list[int]:
        # A chat-formatted prompt may already start with the BOS text (Gemma's template writes
        # "<bos>"); prepending it again would condition on two.
        bos_text = self.tokenizer.bos_token
        if self._bos and bos_text and prompt.startswith(bos_text):
            return self._encode(prompt)
        return self._bos + self._encode(prompt)

    @torch.inference_mode()
    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Greedy generation, batched (left-padded) over requests with the same
        ``max_new_tokens``; see ``LanguageModel.generate``."""
        for r in requests:
            if r.max_new_tokens < 1:
                raise ValueError(f"max_new_tokens must be >= 1, got {r.max_new_tokens}")
        out = [""] * len(requests)
        by_budget: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            by_budget.setdefault(r.max_new_tokens, []).append(i)
        for max_new, indices in by_budget.items():
            for start in range(0, len(indices), self.batch_size):
                idx = indices[start:start + self.batch_size]
                chunk = [self._encode_prompt(requests[i].prompt) for i in idx]
                ids, mask, _ = self._left_pad(chunk)
                width = ids.shape[1]
                gen = self.model.generate(input_ids=ids, attention_mask=mask,
                                          max_new_tokens=max_new, do_sample=False,
                                          pad_token_id=self._pad)
                for row, i in enumerate(idx):
                    text = self.tokenizer.decode(gen[row, width:], skip_special_tokens=True)
                    out[i] = _cut_at_stop(text, requests[i].stop)
        return out

    def chat_prompt(self, user_message: str) -> str | None:
        if not self.chat_template:
            return None
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user_message}],
                                                  tokenize=False, add_generation_prompt=True)

    @property
    def chat_template(self) -> str | None:
        template = getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) and template else None


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        if s and (pos := text.find(s)) != -1:
            cut = min(cut, pos)
    return text[:cut]


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] in float32. logits (batch, seq, vocab), targets (batch, seq)
    -> (batch, seq). logit - logsumexp avoids a second (batch, seq, vocab) tensor."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def _batch_indexable(cache) -> bool:
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
    return (isinstance(cache, Cache) and bool(layers)
            and all(isinstance(l, DynamicLayer) and not isinstance(l, _Linear) for l in layers))
