"""Hugging Face causal-LM backend: batched continuation log-likelihoods and greedy generation."""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from .base import LanguageModel, ModelInfo


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

    Args:
        model: a loaded ``PreTrainedModel`` in eval mode, already on its device and dtype.
        tokenizer: its tokenizer.
        info: provenance recorded in results.
        batch_size: sequences per forward pass.
    """

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = 16):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
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
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

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

    # -- scoring ---------------------------------------------------------------------------------
    @torch.inference_mode()
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        encoded = [self.encode_pair(c, x) for c, x in requests]
        return self.loglikelihood_tokens(encoded)

    @torch.inference_mode()
    def loglikelihood_tokens(self, encoded: Sequence[tuple[list[int], list[int]]]) -> list[float]:
        """``loglikelihood`` on pre-tokenized (context ids, continuation ids) pairs.

        Sequences longer than the model's context window lose tokens from the left of the context.
        Raises ValueError when a continuation alone does not fit the window.
        """
        seqs: list[tuple[list[int], int]] = []
        for ctx, cont in encoded:
            if len(cont) >= self.max_length:
                raise ValueError(f"continuation of {len(cont)} tokens does not fit the model's "
                                 f"{self.max_length}-token window")
            seq = (ctx + cont)[-self.max_length:]
            seqs.append((seq, len(cont)))
        # Longest first: batches of similar length waste little padding, and a too-large batch
        # fails on the first forward rather than at the end.
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i][0]))
        out = [0.0] * len(seqs)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            for i, value in zip(idx, self._score_batch([seqs[i] for i in idx])):
                out[i] = value
        return out

    def _score_batch(self, batch: list[tuple[list[int], int]]) -> list[float]:
        width = max(len(s) for s, _ in batch)
        k = max(c for _, c in batch)
        ids = torch.full((len(batch), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        # Left padding puts every continuation at the end, so only the last k+1 positions'
        # logits are needed: a (batch, k, vocab) tensor instead of (batch, width, vocab).
        for row, (seq, _) in enumerate(batch):
            ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
            mask[row, width - len(seq):] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        ids, mask, position_ids = (t.to(self.device) for t in (ids, mask, position_ids))
        kwargs = {"logits_to_keep": k + 1} if self._keeps_logits else {}
        logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                            use_cache=False, **kwargs).logits
        logits = logits[:, -(k + 1):-1, :].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        targets = ids[:, width - k:]
        token_lp = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return [float(token_lp[row, k - c:].sum()) for row, (_, c) in enumerate(batch)]

    # -- generation ------------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = [self._bos + self._encode(p) for p in prompts[start:start + self.batch_size]]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), self._pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, seq in enumerate(chunk):
                ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
                mask[row, width - len(seq):] = 1
            gen = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                      max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self._pad)
            for row in range(len(chunk)):
                text = self.tokenizer.decode(gen[row, width:], skip_special_tokens=True)
                out.append(_cut_at_stop(text, stop))
        return out


def _cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cut = len(text)
    for s in stop:
        if s and (pos := text.find(s)) != -1:
            cut = min(cut, pos)
    return text[:cut]
