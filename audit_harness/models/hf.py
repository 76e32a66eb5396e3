"""Hugging Face causal-LM backend: the forwards behind continuation log-likelihoods and per-token
log-probabilities (the engine schedules them), and greedy generation."""

from __future__ import annotations

import copy
import inspect
from typing import Sequence

import torch

from . import decode_linear, segmented_attention
from .base import GENERATE, LOGLIKELIHOOD, TOKEN_LOGPROBS, Backend, ModelInfo, SentenceEncoding
from .prompt_prefix import PromptPrefix
from .tokenization import encode_pair, special_ids, texts_to_encode


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
    names = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in names:
        raise ValueError(f"--dtype must be auto or one of {sorted(names)}, got {dtype!r}")
    return names[dtype]


class HFCausalLM(Backend):
    """A ``transformers`` causal LM behind the suite's model interface.

    Tokenization boundary: ``tokenization.encode_pair`` (as lm-evaluation-harness, so numbers
    are comparable; a server backend applies the same rule). A BOS token is prepended when the
    tokenizer adds one by default (Gemma); an empty context is replaced by BOS (or EOS when there
    is no BOS).

    Scoring requests go through the engine (``audit_harness.engine.executor.Engine``: prefix
    tree, batching, cache); this class only runs forwards:

    - ``forward_segments``: segments of the engine's prefix tree, each continuing a row of a
      previous forward's key/value cache (shared prefixes run once). Not available
      (``can_share`` False) for models whose forward takes no cache or position ids, or returns a
      cache that cannot be batch-indexed (recurrent/linear layers); sliding-window models share
      whole contexts only (``two_level_sharing``).
    - ``forward_full``: whole sequences from scratch, left-padded: ``prefix_sharing=False``,
      requests longer than the window (left-truncated), ``token_logprobs``.

    Both give the same numbers up to float rounding (~2e-5 nats per request in fp32, SmolLM2).

    Args:
        model: a loaded ``PreTrainedModel`` in eval mode, already on its device and dtype.
        tokenizer: its tokenizer.
        info: provenance recorded in results.
        batch_size: sequences per forward pass (full path), top-level segments per forward
            (prefix sharing).
        prefix_sharing: run each shared prefix once.
        packing: with prefix sharing, run each prefix tree as one packed row with tree attention
            (``forward_packed``) rather than level by level over copied key/value caches
            (``forward_segments``); off, or unavailable (sliding windows), the latter.
        token_budget: upper bound on ``rows x (state width + segment width)`` of one forward of
            the prefix-sharing path, which bounds the copied key/value cache
            (bytes per token = 2 x layers x kv heads x head dim x dtype size).
        logits_budget: upper bound on the number of logit elements (``positions x vocab``) one
            forward may produce; a 262k vocabulary makes this the binding limit.
    Raises:
        ValueError: batch_size, token_budget or logits_budget < 1.
    """

    capabilities = frozenset({LOGLIKELIHOOD, TOKEN_LOGPROBS, GENERATE})

    def __init__(
        self,
        model,
        tokenizer,
        info: ModelInfo,
        batch_size: int = 16,
        *,
        prefix_sharing: bool = True,
        packing: bool = True,
        token_budget: int = 8192,
        logits_budget: int = 1 << 26,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if token_budget < 1 or logits_budget < 1:
            raise ValueError(
                f"token_budget and logits_budget must be >= 1, got {token_budget} and {logits_budget}"
            )
        self.prefix_sharing = prefix_sharing
        self.token_budget = token_budget
        self.logits_budget = logits_budget
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.batch_size = batch_size
        #: Decoding forwards run by ``generate_tokens`` and ``generate_stream`` (one per step
        #: after the prompt forward), a counter for tests and profiles.
        self.decode_steps = 0
        self.device = next(model.parameters()).device
        self._bos, self._empty_prefix = special_ids(tokenizer)
        pad = tokenizer.pad_token_id
        self._pad = pad if pad is not None else self._empty_prefix[0]
        cfg = model.config
        self.max_length = int(
            getattr(cfg, "max_position_embeddings", 0) or getattr(cfg, "n_positions", 0) or 2048
        )
        params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in params
        # transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name is a deprecated
        # alias until 5.40); a forward with neither, or without position_ids, cannot continue a
        # left-padded context, so such models always take the full path.
        self._cache_arg = next((n for n in ("cache", "past_key_values") if n in params), None)
        self._can_share = (
            self._cache_arg is not None
            and "position_ids" in params
            and not getattr(cfg, "is_encoder_decoder", False)
        )
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self._vocab = int(getattr(text_cfg, "vocab_size", 0) or 1 << 18)
        self._softcap = getattr(text_cfg, "final_logit_softcapping", None)
        # Packing needs a decoder that takes a custom 4-D mask and position ids, an output head,
        # and full attention everywhere (a custom mask bypasses sliding windows).
        self.packing = packing
        self._can_pack = (
            self._can_share
            and hasattr(model, "base_model")
            and model.get_output_embeddings() is not None
            and "position_ids" in inspect.signature(model.base_model.forward).parameters
        )
        layer_types = getattr(text_cfg, "layer_types", None) or ()
        self._sliding = any("sliding" in str(t) or "chunked" in str(t) for t in layer_types) or (
            not layer_types
            and getattr(text_cfg, "sliding_window", None) is not None
            and getattr(text_cfg, "use_sliding_window", True) is not False
        )
        self._can_pack = self._can_pack and not self._sliding
        # Per-tree attention in packed rows: on CPU it skips the masked scores between trees; on
        # a GPU one masked kernel over the row beats hundreds of small ones.
        self._per_tree = self._can_pack and self.device.type == "cpu" and segmented_attention.can_route(model)

    # -- tokenization ----------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of (context, continuation) following the boundary rule in the class doc
        (``tokenization.encode_pair``).

        Raises:
            ValueError: the continuation is empty or encodes to no token.
        """
        return encode_pair(self._encode, context, continuation, self._bos, self._empty_prefix)

    def encode_pairs(self, requests: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``[encode_pair(c, x) for c, x in requests]``, with each distinct string tokenized once
        and all of them in one batched tokenizer call: a multiple-choice item's choices share
        its context (12 in lm-eval's BBQ protocol), and a warm-cache run is mostly this.

        Raises:
            ValueError: as ``encode_pair``.
        """
        texts = list(dict.fromkeys(t for c, x in requests for t in texts_to_encode(c, x)))
        known = (
            dict(zip(texts, self.tokenizer(texts, add_special_tokens=False)["input_ids"])) if texts else {}
        )

        def encode(text: str) -> list[int]:
            ids = known.get(text)
            return list(ids) if ids is not None else self._encode(text)

        return [encode_pair(encode, c, x, self._bos, self._empty_prefix) for c, x in requests]

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

    #: Tokens per packed row (``forward_packed``): the engine packs prefix trees into rows of
    #: about this size, so padding stays small and attention, quadratic in the row, stays cheap
    #: (BBQ in lm-eval's protocol rows reached 2,600 tokens unpacked and bounded).
    packed_row_tokens = 512

    # -- engine-facing properties -------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def can_share(self) -> bool:
        """Whether ``forward_segments`` can continue a key/value state (see the class doc)."""
        return self._can_share

    def disable_prefix_sharing(self) -> None:
        """Called by the engine when a returned cache turned out not to be reusable."""
        self._can_share = False

    @property
    def two_level_sharing(self) -> bool:
        """Sliding-window layers count cache slots, not real tokens: their state must stay free
        of padding holes, which only the context -> continuation tree guarantees."""
        return self._sliding

    @property
    def cache_key(self) -> str:
        """What besides the token ids decides a score: weights, dtype, device type."""
        return f"{self.info.fingerprint}|{self.info.dtype}|{self.device.type}"

    # -- forwards ---------------------------------------------------------------------------------
    def _forward(self, **kwargs):
        try:
            return self.model(**kwargs)
        except torch.OutOfMemoryError as e:
            from .errors import BackendOutOfMemory

            raise BackendOutOfMemory(str(e)) from None

    @torch.inference_mode()
    def forward_full(self, seqs: list[list[int]], positions) -> list[list[float]]:
        """One left-padded forward over ``seqs``; the log-probabilities at ``positions`` (sequence
        coordinates). Logits are kept only from the earliest position any row needs: left padding
        puts every sequence's end at the right edge, so that is a suffix of every row."""
        ids, mask, position_ids = self._left_pad(seqs)
        width = ids.shape[1]
        pads = [width - len(s) for s in seqs]
        keep = max(width - (pad + min(pos)) + 1 for pad, pos in zip(pads, positions))
        kwargs = {"logits_to_keep": keep} if self._keeps_logits else {}
        logits = self._forward(
            input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False, **kwargs
        ).logits[:, -keep:, :]
        # logits[:, j] predicts padded position width - keep + j + 1.
        token_lp = _token_logprobs(logits[:, :-1, :], ids[:, width - keep + 1 :])
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
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq) :] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        return tuple(t.to(self.device) for t in (ids, mask, position_ids))

    @torch.inference_mode()
    def forward_segments(
        self, state, parent_rows, segments: list[list[int]], queries: list[list[tuple[int, int]]]
    ):
        """One forward of ``segments`` (the engine's prefix tree), each continuing row
        ``parent_rows[i]`` of ``state`` (None: from scratch, left-padded); returns (the state of
        these rows, per segment the log-probability of each query's target after
        ``segment[:offset + 1]``). Logits are computed only at queried columns and
        log-softmaxed there in float32.

        A state is (key/value cache, attention mask, real lengths). Continuations are right-padded
        after their parent's padded width: the padding sits between a row's real tokens, masked,
        with explicit position ids, so values do not depend on the batch (full-attention layers;
        sliding-window models get ``two_level_sharing``, where no real token follows a hole).

        Raises:
            PrefixUnsupported: the returned cache cannot be batch-indexed (recurrent or linear
                layers, legacy tuples). BackendOutOfMemory: CUDA ran out of memory.
        """
        from .errors import PrefixUnsupported

        n = len(segments)
        lens = torch.tensor([len(s) for s in segments], dtype=torch.long)
        if state is None:
            ids, mask, position_ids = self._left_pad(segments)
            width = ids.shape[1]
            cols = [[width - len(seg) + o for o, _ in q] for seg, q in zip(segments, queries)]
            kwargs = {}
            lengths = lens.to(self.device)
        else:
            cache, parent_mask, parent_lens = state
            rows = torch.tensor(parent_rows, dtype=torch.long, device=self.device)
            # A shallow copy whose layers are rebound to the selected rows (advanced indexing makes
            # new tensors), so the parent state stays intact for its other children.
            cache = copy.copy(cache)
            cache.layers = [copy.copy(layer) for layer in cache.layers]
            cache.batch_select_indices(rows)
            width = max(len(s) for s in segments)
            ids = torch.full((n, width), self._pad, dtype=torch.long)
            seg_mask = torch.zeros((n, width), dtype=torch.long)
            for r, seg in enumerate(segments):
                ids[r, : len(seg)] = torch.tensor(seg, dtype=torch.long)
                seg_mask[r, : len(seg)] = 1
            ids, seg_mask = ids.to(self.device), seg_mask.to(self.device)
            mask = torch.cat([parent_mask.index_select(0, rows), seg_mask], dim=1)
            base = parent_lens.index_select(0, rows)
            position_ids = base.unsqueeze(1) + torch.arange(width, device=self.device)
            cols = [[o for o, _ in q] for q in queries]
            kwargs = {self._cache_arg: cache}
            lengths = base + lens.to(self.device)
        keep = sorted({c for row in cols for c in row})
        if self._keeps_logits and keep:
            kwargs["logits_to_keep"] = torch.tensor(keep, dtype=torch.long, device=self.device)
        res = self._forward(
            input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **kwargs
        )
        new_cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
        if not _batch_indexable(new_cache):
            raise PrefixUnsupported(f"{type(new_cache).__name__} cache cannot be batch-indexed")
        out: list[list[float]] = [[] for _ in segments]
        if keep:
            col_of = {c: j for j, c in enumerate(keep)} if self._keeps_logits else {c: c for c in keep}
            q_rows = [r for r, row in enumerate(cols) for _ in row]
            q_cols = [col_of[c] for row in cols for c in row]
            targets = [t for q in queries for _, t in q]
            logits = res.logits[
                torch.tensor(q_rows, device=self.device), torch.tensor(q_cols, device=self.device)
            ].float()
            del res
            picked = logits.gather(-1, torch.tensor(targets, device=self.device).unsqueeze(-1)).squeeze(-1)
            values = (picked - torch.logsumexp(logits, dim=-1)).tolist()
            pos = 0
            for r, row in enumerate(cols):
                out[r] = values[pos : pos + len(row)]
                pos += len(row)
        return (new_cache, mask, lengths), out

    @property
    def can_pack(self) -> bool:
        """Whether the engine may use ``forward_packed`` (``packing`` on, a full-attention model
        whose decoder takes a 4-D mask and position ids)."""
        return self.packing and self._can_pack

    @torch.inference_mode()
    def forward_packed(self, rows) -> list[list[float]]:
        """One forward of packed prefix trees. Each row is (tokens, parent index per token (-1:
        none), position id per token, queries as (column, target)): token i attends to itself
        and its ancestors only (a 4-D additive mask), at position id = its depth, so every
        prefix in the row is computed as if alone; no key/value cache is kept. On CPU attention
        runs per block of a tree against the block's ancestors only (``segmented_attention``),
        skipping masked scores. Hidden states are gathered at the queried columns only, then the output head and a float32 log-softmax,
        once per column however many targets are asked there.

        Returns:
            per row, the log-probability of each query's target.
        Raises:
            BackendOutOfMemory: CUDA ran out of memory.
        """
        import numpy as np

        n, width = len(rows), max(len(r[0]) for r in rows)
        ids = torch.full((n, width), self._pad, dtype=torch.long)
        pos = torch.zeros((n, width), dtype=torch.long)
        allowed = np.zeros((n, width, width), dtype=bool)
        for r, (tokens, parents, positions, _) in enumerate(rows):
            ids[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            pos[r, : len(tokens)] = torch.tensor(positions, dtype=torch.long)
            a = allowed[r]
            for i, p in enumerate(parents):  # parents precede children (depth-first order)
                if p >= 0:
                    a[i] = a[p]
                a[i, i] = True
            for i in range(len(tokens), width):  # padding sees itself: no all-masked row
                a[i, i] = True
        dtype = self.model.dtype
        mask = torch.zeros((n, 1, width, width), dtype=dtype)
        mask.masked_fill_(~torch.from_numpy(allowed).unsqueeze(1), torch.finfo(dtype).min)
        ids, pos, mask = ids.to(self.device), pos.to(self.device), mask.to(self.device)
        # Queries at one column differ only in their target (a branch of the tree: the choices'
        # first tokens after a prompt): the output head and the log-softmax run once per column.
        at: dict[tuple[int, int], int] = {}
        which = [at.setdefault((r, c), len(at)) for r, row in enumerate(rows) for c, _ in row[3]]
        try:
            if self._per_tree:
                with segmented_attention.routed(self.model):
                    hidden = self.model.base_model(
                        input_ids=ids,
                        attention_mask=mask,
                        position_ids=pos,
                        use_cache=False,
                        packed_segments=segmented_attention.blocks(rows, allowed, dtype),
                    ).last_hidden_state
            else:
                hidden = self.model.base_model(
                    input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False
                ).last_hidden_state
            q_rows = torch.tensor([r for r, _ in at], device=self.device)
            q_cols = torch.tensor([c for _, c in at], device=self.device)
            logits = self.model.get_output_embeddings()(hidden[q_rows, q_cols]).float()
        except torch.OutOfMemoryError as e:
            from .errors import BackendOutOfMemory

            raise BackendOutOfMemory(str(e)) from None
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        index = torch.tensor(which, device=self.device)
        targets = torch.tensor([t for row in rows for _, t in row[3]], device=self.device)
        values = (logits[index, targets] - torch.logsumexp(logits, dim=-1)[index]).tolist()
        out, k = [], 0
        for row in rows:
            out.append(values[k : k + len(row[3])])
            k += len(row[3])
        return out

    # -- generation ------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a generation prompt: BOS (when the tokenizer adds one) + ``prompt``."""
        # A chat-formatted prompt may already start with the BOS text (Gemma's template writes
        # "<bos>"); prepending it again would condition on two.
        bos_text = self.tokenizer.bos_token
        if self._bos and bos_text and prompt.startswith(bos_text):
            return self._encode(prompt)
        return self._bos + self._encode(prompt)

    def encode_continuation(self, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
        """(prompt ids exactly as ``generate`` reads them, continuation ids as the next tokens):
        the tokens of ``prompt + continuation`` after the prompt's, or the continuation encoded
        alone when the two merge across the boundary. Unlike ``encode_pair``, no whitespace moves:
        a chat prompt ending with the assistant turn's opening (``"assistant\n"``) stays whole,
        so a letter is scored from the distribution the first generated token is drawn from.

        Raises:
            ValueError: an empty prompt or continuation.
        """
        if not prompt or not continuation:
            raise ValueError("encode_continuation needs a non-empty prompt and continuation")
        ids = self.encode_prompt(prompt)
        whole = self.encode_prompt(prompt + continuation)
        if len(whole) > len(ids) and whole[: len(ids)] == ids:
            return ids, whole[len(ids) :]
        return ids, self._encode(continuation)

    def generate_tokens(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        score_tokens: Sequence[Sequence[int]] | None = None,
        stop: Sequence[Sequence[str]] | None = None,
    ) -> tuple[list[str], int, list[list[float]] | None]:
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

        The decoding loop is this class's own (``_greedy``): plain greedy decoding as
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
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(not p for p in prompts):
            raise ValueError("an empty prompt: generation needs at least one token to condition on")
        if stop is not None and len(stop) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(stop)} stop lists")

        stops = [tuple(s for s in row if s) for row in stop] if stop is not None else [()] * len(prompts)
        self._prepare_decoding()
        if self._own_loop():
            state, forwarded = self._prefill_state(prompts)
            tokens, first = self._greedy(state, max_new_tokens, stops, score_tokens)
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

    #: Whether ``generate_stream`` refills a batch with waiting prompts as its rows finish
    #: (``continuous.stream_greedy``); off, the engine sends batches to ``generate_tokens``.
    continuous_batching = True

    @property
    def can_stream(self) -> bool:
        """Whether the engine may send a whole list of prompts to ``generate_stream``: continuous
        batching on, the backend's own decoding loop (``_own_loop``), weights on a real device,
        and ``generate_tokens`` not replaced by a subclass (a counting double decodes nothing).
        A cache that turns out not to merge is found at the stream's first prefill, which then
        runs batch by batch."""
        return (
            self.continuous_batching
            and self.device.type != "meta"
            and type(self).generate_tokens is HFCausalLM.generate_tokens
            and self._own_loop()
        )

    def generate_stream(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        score_tokens: Sequence[Sequence[int]] | None = None,
        stop: Sequence[Sequence[str]] | None = None,
        max_rows: int | None = None,
    ):
        """Greedy completions of ``prompts`` with at most ``max_rows`` (default ``batch_size``)
        decoded at once, the batch refilled with waiting prompts when half its rows have
        finished (``continuous.stream_greedy``); each text equals ``generate_tokens``'.

        Yields, as rows finish: (prompt index, text, tokens run since the previous item, its
        first-step log-probabilities of ``score_tokens`` or None, prompt forwards started since
        the previous item). The tokens and forwards summed over all items are the stream's.

        Raises:
            ValueError: as ``generate_tokens``, or ``max_rows < 1``. BackendOutOfMemory: CUDA ran
                out of memory (items already yielded stand; the engine runs the rest with fewer
                rows).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(not p for p in prompts):
            raise ValueError("an empty prompt: generation needs at least one token to condition on")
        if stop is not None and len(stop) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(stop)} stop lists")
        rows = self.batch_size if max_rows is None else max_rows
        if rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {rows}")
        from .continuous import stream_greedy

        stops = [tuple(s for s in row if s) for row in stop] if stop is not None else [()] * len(prompts)
        self._prepare_decoding()
        return stream_greedy(self, prompts, max_new_tokens, stops, score_tokens, rows)

    def _prefill_state(self, prompts: list[list[int]], past: PromptPrefix | None = None):
        """(``_greedy``'s starting state, tokens run) of a batch: the prompt trie in one packed
        forward (``_tree_prefill``) when it applies, continuing ``past`` (the key/value cache of
        a prefix every prompt starts with, kept from an earlier prefill) when given, else a
        left-padded forward whose shared prefixes (``share_groups``) run once."""
        from .errors import PrefixUnsupported

        if self._tree_prefill_ok(prompts, past):
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

    def _own_loop(self) -> bool:
        """Whether ``_greedy`` decodes like ``generate`` for this model: a forward that takes a
        cache and position ids, and a generation config that adds nothing to plain argmax."""
        return (
            self._cache_arg is not None
            and not getattr(self.model.config, "is_encoder_decoder", False)
            and "position_ids" in inspect.signature(self.model.forward).parameters
            and plain_greedy(self.model.generation_config)
        )

    def _eos(self) -> frozenset[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            return frozenset()
        return frozenset([eos] if isinstance(eos, int) else (int(e) for e in eos))

    def _stopped(self, tokens: list[int], stops: tuple[str, ...]) -> bool:
        """Whether the text of ``tokens`` contains one of ``stops``. A token that ends inside a
        multi-byte character decodes to U+FFFD, which a later token replaces: it is left out, so
        a row never stops on text its next token would change."""
        text = self.tokenizer.decode(tokens, skip_special_tokens=True).rstrip("\ufffd")
        return any(s in text for s in stops)

    #: Most tokens a generation batch's prompts may hold, once each, for ``_tree_prefill``: the
    #: packed row attends over all of them, so its attention grows with the square of this.
    tree_prefill_tokens = 2048

    def _tree_prefill_ok(self, prompts, past: PromptPrefix | None = None) -> bool:
        cut = past.length if past is not None else 0
        return (
            self.prefix_sharing
            and self._can_share
            and self.can_pack
            and (len(prompts) > 1 or cut > 0)
            and len(_trie([p[cut:] for p in prompts])[0]) <= self.tree_prefill_tokens
        )

    @torch.inference_mode()
    def _tree_prefill(self, prompts: list[list[int]], past: PromptPrefix | None = None):
        """``_greedy``'s starting state from one packed forward of the batch's prompt trie: every
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
        import numpy as np

        from .errors import PrefixUnsupported

        cut = 0 if past is None else past.length
        if cut and any(len(p) <= cut or p[:cut] != list(past.ids[:cut]) for p in prompts):
            raise ValueError("a prompt does not go beyond the prefix whose cache it continues")
        tokens, parents, paths = _trie([p[cut:] for p in prompts])
        n, width = len(tokens), max(len(p) for p in prompts)
        allowed = np.zeros((n, n), dtype=bool)
        depth = [0] * n
        for i, p in enumerate(parents):  # parents precede children
            if p >= 0:
                allowed[i] = allowed[p]
                depth[i] = depth[p] + 1
            allowed[i, i] = True
        dtype = self.model.dtype
        mask4 = torch.zeros((1, 1, n, cut + n), dtype=dtype)  # every token sees the past columns
        mask4[..., cut:].masked_fill_(~torch.from_numpy(allowed), torch.finfo(dtype).min)
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
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        del out
        if not _batch_indexable(cache):
            raise PrefixUnsupported(f"{type(cache).__name__} cache cannot be batch-indexed")
        # Row r of the new cache holds the past columns and the packed columns of prompt r's
        # path, left-padded (the padding columns copy column 0 and are masked).
        gather = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, path in enumerate(paths):
            gather[r, width - len(path) - cut :] = torch.tensor(list(range(cut)) + [cut + c for c in path])
            mask[r, width - len(path) - cut :] = 1
        gather, mask = gather.to(self.device), mask.to(self.device)
        for layer in cache.layers:
            layer.keys = layer.keys[0][:, gather].transpose(0, 1).contiguous()
            layer.values = layer.values[0][:, gather].transpose(0, 1).contiguous()
        pos = torch.tensor([[len(p) - 1] for p in prompts], dtype=torch.long, device=self.device)
        return (logits, cache, mask, pos, True), n

    def _base_cache_arg(self) -> str:
        """The name under which ``base_model``'s forward takes a cache (``cache`` in
        transformers 5, ``past_key_values`` before)."""
        params = inspect.signature(self.model.base_model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    @torch.inference_mode()
    def _padded_prefill(self, ids, mask, cache):
        """``_greedy``'s starting state from a forward of left-padded ``ids`` (``mask`` its
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
        cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
        return logits, cache, mask, pos[:, -1:], padded

    @torch.inference_mode()
    def _greedy(self, state, max_new_tokens: int, stops, score_tokens):
        """(new token ids per row, first-step log-probabilities of ``score_tokens`` or None):
        greedy decoding from a prefill ``state`` (logits after each row's prompt, its cache,
        attention mask, last position id, whether the mask has padding).

        Each step feeds one token per live row at its row's next position, as ``generate``
        does, the mask dropped when it has no padding, argmax in float32. A row is finished at
        an end-of-sequence token (kept, as ``generate`` keeps it), at ``max_new_tokens``, or at
        one of its stop strings. Finished rows are dropped from the batch and from the cache; a
        cache whose rows cannot be selected keeps them, fed padding, their output ignored.
        """
        eos = self._eos()
        logits, cache, mask, pos, padded = state
        live = list(range(logits.shape[0]))  # the prompt of each batch row; -1: finished, kept
        tokens: list[list[int]] = [[] for _ in live]
        first = None
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        selectable = None
        inp = None
        for step in range(max_new_tokens):
            if step:
                extra[self._cache_arg] = cache
                res = self._forward(
                    input_ids=inp,
                    attention_mask=mask if padded else None,
                    position_ids=pos,
                    use_cache=True,
                    **extra,
                )
                logits = res.logits[:, -1, :].float()
                cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
                del res
                self.decode_steps += 1
            if step == 0 and score_tokens is not None:
                # The model's own forward has applied any final soft-capping already.
                logp = torch.log_softmax(logits, dim=-1)
                first = [[float(logp[r, t]) for t in toks] for r, toks in enumerate(score_tokens)]
            chosen = logits.argmax(-1)
            finished = set()
            for row, t in enumerate(chosen.tolist()):
                i = live[row]
                if i < 0:
                    continue
                tokens[i].append(t)
                if (
                    t in eos
                    or len(tokens[i]) >= max_new_tokens
                    or (stops[i] and self._stopped(tokens[i], stops[i]))
                ):
                    finished.add(row)
            if finished:
                if selectable is None:
                    selectable = _batch_indexable(cache)
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
        """``_greedy``'s result through transformers' ``generate`` (its logits processors
        applied), stop strings checked by a stopping criterion after each step."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        width = ids.shape[1]
        backend = self

        class StopStrings(StoppingCriteria):
            def __call__(self, input_ids, scores, **_):
                return torch.tensor(
                    [
                        bool(s) and backend._stopped(input_ids[r, width:].tolist(), s)
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
            logp = torch.log_softmax(out.logits[0].float(), dim=-1)
            first = [[float(logp[r, t]) for t in toks] for r, toks in enumerate(score_tokens)]
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
        cache = getattr(res, "cache", None) or getattr(res, "past_key_values", None)
        del res
        if not _batch_indexable(cache):
            raise PrefixUnsupported(f"{type(cache).__name__} cache cannot be batch-indexed")
        rows = torch.tensor(row_group, dtype=torch.long, device=self.device)
        cache.batch_select_indices(rows)
        s_ids, s_mask, _ = self._left_pad(suffixes)
        ids = torch.cat([p_ids.index_select(0, rows), s_ids], dim=1)
        mask = torch.cat([p_mask.index_select(0, rows), s_mask], dim=1)
        forwarded = sum(lengths) + sum(len(s) for s in suffixes)
        return ids, mask, {self._cache_arg: cache}, forwarded

    def chat_prompt(self, user_message: str) -> str | None:
        template = self.chat_template
        if not template:
            return None
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user_message}],
            chat_template=template,
            tokenize=False,
            add_generation_prompt=True,
        )

    @property
    def chat_template(self) -> str | None:
        return self._chosen_template(getattr(self.tokenizer, "chat_template", None))


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] in float32. logits (batch, seq, vocab), targets (batch, seq)
    -> (batch, seq). logit - logsumexp avoids a second (batch, seq, vocab) tensor."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


#: Generation-config fields with which transformers' ``generate`` adds a logits processor (or
#: another search) to greedy decoding, and the values that add none. ``_greedy`` implements plain
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


def _trie(prompts: Sequence[Sequence[int]]) -> tuple[list[int], list[int], list[list[int]]]:
    """The prompts as one prefix tree in depth-first order: (token per node, parent per node
    (-1: a root), per prompt the node of each of its tokens).

    Examples:
        >>> _trie([[1, 2, 3], [1, 2, 4], [5]])
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

    def lcp(a: Sequence[int], b: Sequence[int]) -> int:
        k = 0
        for x, y in zip(a, b):
            if x != y:
                break
            k += 1
        return k

    neighbour = [lcp(prompts[order[j]], prompts[order[j + 1]]) for j in range(n - 1)]

    def cut(threshold: int) -> list[tuple[int, list[int]]]:
        runs, run = [], [order[0]]
        for j in range(n - 1):
            if neighbour[j] >= threshold:
                run.append(order[j + 1])
            else:
                runs.append(run)
                run = [order[j + 1]]
        runs.append(run)
        out = []
        for members in runs:
            shared = min(
                [lcp(prompts[members[0]], prompts[i]) for i in members[1:]]
                + [len(prompts[i]) - 1 for i in members]
            )
            if len(members) > 1 and shared >= min_shared:
                out.append((shared, sorted(members)))
            else:
                out += [(len(prompts[i]) - 1, [i]) for i in members]
        return out

    def work(groups) -> int:
        longest_prefix = max(length for length, _ in groups)
        longest_suffix = max(len(prompts[i]) - length for length, m in groups for i in m)
        return len(groups) * longest_prefix + n * longest_suffix

    best, best_work = whole, n * max(len(p) for p in prompts)
    for threshold in sorted({t for t in neighbour if t >= min_shared}):
        groups = cut(threshold)
        if len(groups) < n and (w := work(groups)) < best_work:
            best, best_work = groups, w
    return sorted(best, key=lambda g: g[1][0])


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
    return (
        isinstance(cache, Cache)
        and bool(layers)
        and all(isinstance(l, DynamicLayer) and not isinstance(l, _Linear) for l in layers)
    )
