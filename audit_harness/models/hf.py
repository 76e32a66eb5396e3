"""Hugging Face causal-LM backend: tokenization and the forwards behind continuation
log-likelihoods and per-token log-probabilities (the engine schedules them); greedy generation is
``hf_decoding``'s, continuous batching ``continuous``'s."""

from __future__ import annotations

import copy
import inspect
from typing import Sequence

import torch

from . import segmented_attention
from .base import (
    GENERATE,
    LETTER_LOGPROBS,
    LOGLIKELIHOOD,
    TOKEN_LOGPROBS,
    Backend,
    ModelInfo,
    SentenceEncoding,
)
from .continuous import StreamingDecoding
from .hf_decoding import ancestor_mask, batch_indexable, returned_cache
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


class HFCausalLM(StreamingDecoding, Backend):
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
    Generation is ``hf_decoding.GreedyDecoding``'s (``generate_tokens``) and
    ``continuous.StreamingDecoding``'s (``generate_stream``).

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

    # Letter log-probs are next-token log-likelihoods of the letters' single-token variants.
    capabilities = frozenset({LOGLIKELIHOOD, TOKEN_LOGPROBS, GENERATE, LETTER_LOGPROBS})
    runs_forwards = True
    runs_generation = True

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
        self.packing = packing
        self._read_architecture(model)

    def _read_architecture(self, model) -> None:
        """What the model's config and forward signature allow: its window, vocabulary and
        soft-capping, whether its forward can continue a cache (``can_share``), take a packed
        row (``can_pack``), and whether it has sliding-window layers."""
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
        layer_types = getattr(text_cfg, "layer_types", None) or ()
        self._sliding = any("sliding" in str(t) or "chunked" in str(t) for t in layer_types) or (
            not layer_types
            and getattr(text_cfg, "sliding_window", None) is not None
            and getattr(text_cfg, "use_sliding_window", True) is not False
        )
        # Packing needs a decoder that takes a custom 4-D mask and position ids, an output head,
        # and full attention everywhere (a custom mask bypasses sliding windows).
        self._can_pack = (
            self._can_share
            and not self._sliding
            and hasattr(model, "base_model")
            and model.get_output_embeddings() is not None
            and "position_ids" in inspect.signature(model.base_model.forward).parameters
        )
        #: Per-tree attention in packed rows: on CPU it skips the masked scores between trees;
        #: on a GPU one masked kernel over the row beats hundreds of small ones.
        self.per_tree = self._can_pack and self.device.type == "cpu" and segmented_attention.can_route(model)

    # -- tokenization ----------------------------------------------------------------------------
    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of (context, continuation) following the boundary rule in the class doc
        (``tokenization.encode_pair``).

        Raises:
            ValueError: the continuation is empty or encodes to no token.
        """
        return encode_pair(self.encode_text, context, continuation, self._bos, self._empty_prefix)

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
            return list(ids) if ids is not None else self.encode_text(text)

        return [encode_pair(encode, c, x, self._bos, self._empty_prefix) for c, x in requests]

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """BOS (or, without one, the tokenizer's EOS, as for an empty context) + the tokens of
        ``text``; only the prefix is marked special. WinoQueer ``metric_autoregressive.py``
        encodes ``bos_token + sentence`` the same way.

        Raises:
            ValueError: ``text`` encodes to no token.
        """
        ids = self.encode_text(text)
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

        lens = torch.tensor([len(s) for s in segments], dtype=torch.long).to(self.device)
        if state is None:
            ids, mask, position_ids = self._left_pad(segments)
            width = ids.shape[1]
            cols = [[width - len(seg) + o for o, _ in q] for seg, q in zip(segments, queries)]
            kwargs = {}
            lengths = lens
        else:
            ids, mask, position_ids, cache, base = self._continuation_inputs(state, parent_rows, segments)
            cols = [[o for o, _ in q] for q in queries]
            kwargs = {self._cache_arg: cache}
            lengths = base + lens
        keep = sorted({c for row in cols for c in row})
        if self._keeps_logits and keep:
            kwargs["logits_to_keep"] = torch.tensor(keep, dtype=torch.long, device=self.device)
        res = self._forward(
            input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **kwargs
        )
        new_cache = returned_cache(res)
        if not batch_indexable(new_cache):
            raise PrefixUnsupported(f"{type(new_cache).__name__} cache cannot be batch-indexed")
        if not keep:
            return (new_cache, mask, lengths), [[] for _ in segments]
        col_of = {c: j for j, c in enumerate(keep)} if self._keeps_logits else {c: c for c in keep}
        q_rows = [r for r, row in enumerate(cols) for _ in row]
        q_cols = [col_of[c] for row in cols for c in row]
        logits = res.logits[
            torch.tensor(q_rows, device=self.device), torch.tensor(q_cols, device=self.device)
        ]
        del res
        targets = torch.tensor([t for q in queries for _, t in q], device=self.device)
        values = _token_logprobs(logits, targets).tolist()
        return (new_cache, mask, lengths), _per_row(values, [len(row) for row in cols])

    def _continuation_inputs(self, state, parent_rows, segments: list[list[int]]):
        """(input ids, attention mask, position ids, cache, parent lengths) of ``segments``
        continuing rows ``parent_rows`` of ``state``, right-padded after the parent's width."""
        cache, parent_mask, parent_lens = state
        rows = torch.tensor(parent_rows, dtype=torch.long, device=self.device)
        # A shallow copy whose layers are rebound to the selected rows (advanced indexing makes
        # new tensors), so the parent state stays intact for its other children.
        cache = copy.copy(cache)
        cache.layers = [copy.copy(layer) for layer in cache.layers]
        cache.batch_select_indices(rows)
        width = max(len(s) for s in segments)
        ids = torch.full((len(segments), width), self._pad, dtype=torch.long)
        seg_mask = torch.zeros((len(segments), width), dtype=torch.long)
        for r, seg in enumerate(segments):
            ids[r, : len(seg)] = torch.tensor(seg, dtype=torch.long)
            seg_mask[r, : len(seg)] = 1
        ids, seg_mask = ids.to(self.device), seg_mask.to(self.device)
        mask = torch.cat([parent_mask.index_select(0, rows), seg_mask], dim=1)
        base = parent_lens.index_select(0, rows)
        position_ids = base.unsqueeze(1) + torch.arange(width, device=self.device)
        return ids, mask, position_ids, cache, base

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
        for r, (tokens, _, positions, _) in enumerate(rows):
            ids[r, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            pos[r, : len(tokens)] = torch.tensor(positions, dtype=torch.long)
        allowed = np.stack([ancestor_mask(parents, width) for _, parents, _, _ in rows])
        dtype = self.model.dtype
        mask = torch.zeros((n, 1, width, width), dtype=dtype)
        mask.masked_fill_(~torch.from_numpy(allowed).unsqueeze(1), torch.finfo(dtype).min)
        ids, pos, mask = ids.to(self.device), pos.to(self.device), mask.to(self.device)
        # Queries at one column differ only in their target (a branch of the tree: the choices'
        # first tokens after a prompt): the output head and the log-softmax run once per column.
        at: dict[tuple[int, int], int] = {}
        which = [at.setdefault((r, c), len(at)) for r, row in enumerate(rows) for c, _ in row[3]]
        try:
            if self.per_tree:
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
        return _per_row(values, [len(row[3]) for row in rows])

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a generation prompt: BOS (when the tokenizer adds one) + ``prompt``."""
        # A chat-formatted prompt may already start with the BOS text (Gemma's template writes
        # "<bos>"); prepending it again would condition on two.
        bos_text = self.tokenizer.bos_token
        if self._bos and bos_text and prompt.startswith(bos_text):
            return self.encode_text(prompt)
        return self._bos + self.encode_text(prompt)

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


def _per_row(values: list[float], counts: list[int]) -> list[list[float]]:
    """``values`` cut into consecutive rows of ``counts`` values.

    Examples:
        >>> _per_row([1.0, 2.0, 3.0], [2, 0, 1])
        [[1.0, 2.0], [], [3.0]]
    """
    out, k = [], 0
    for n in counts:
        out.append(values[k : k + n])
        k += n
    return out


def _token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] in float32. logits (batch, seq, vocab), targets (batch, seq)
    -> (batch, seq). logit - logsumexp avoids a second (batch, seq, vocab) tensor."""
    logits = logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
