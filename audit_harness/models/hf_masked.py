"""Hugging Face masked-LM backend (BERT, RoBERTa, ...): pseudo-log-likelihood terms, one masked
position per row, rows batched. A masked LM neither generates nor scores continuations, so it
serves the sentence-pair benchmarks (CrowS-Pairs, WinoQueer) only."""

from __future__ import annotations

from typing import Sequence

import torch

from .base import TOKEN_LOGPROBS, Backend, ModelInfo, SentenceEncoding, check_token_positions


class HFMaskedLM(Backend):
    """A ``transformers`` masked LM behind the suite's model interface.

    ``token_logprobs`` builds one row per (sequence, position) with that position replaced by the
    mask token and reads log softmax(logits[position])[true id] (CrowS-Pairs / WinoQueer
    ``metric.py``: "mask one token at a time"). Rows of one forward are right-padded to the same
    width; padding is masked out of attention, so a row's value does not depend on its batch.

    Args:
        model: a loaded ``...ForMaskedLM`` in eval mode, on its device and dtype.
        tokenizer: its tokenizer; it must have a mask token.
        info: provenance recorded in results (``kind="masked"``).
        batch_size: masked rows per forward pass.
    Raises:
        ValueError: batch_size < 1, or a tokenizer without a mask token.
    """

    capabilities = frozenset({TOKEN_LOGPROBS})

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = 16):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if tokenizer.mask_token_id is None:
            raise ValueError(f"tokenizer of {info.name!r} has no mask token: not a masked LM")
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self._mask = tokenizer.mask_token_id
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._mask
        self.max_length = int(getattr(model.config, "max_position_embeddings", 0) or 512)
        # Upstream lower-cases when the tokenizer says it is uncased (metric.py:
        # ``getattr(tokenizer, 'do_lower_case', False)``).
        self._lower = bool(getattr(tokenizer, "do_lower_case", False))

    @property
    def cache_key(self) -> str:
        """What besides the token ids decides a score (the engine's result cache): weights,
        dtype, device type, and that the values are masked-position (pseudo-log-likelihood)
        terms."""
        return f"{self.info.fingerprint}|{self.info.dtype}|{self.device.type}|masked"

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """The tokenizer's encoding with its special tokens (``[CLS] ... [SEP]``), lower-cased
        first when the tokenizer is uncased; special tokens are marked.

        Raises:
            ValueError: ``text`` has no token besides the special ones.
        """
        enc = self.tokenizer(
            text.lower() if self._lower else text, add_special_tokens=True, return_special_tokens_mask=True
        )
        ids, special = enc["input_ids"], [bool(x) for x in enc["special_tokens_mask"]]
        if all(special):
            raise ValueError(f"sentence {text!r} encodes to no token")
        return SentenceEncoding(tuple(ids), tuple(special))

    @torch.inference_mode()
    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """log P(ids[p] | ids with p masked) per requested position (see
        ``Backend.token_logprobs``).

        Raises:
            ValueError: lengths differ, a sequence exceeds the model's window, or a position is
                outside ``[0, len(sequence))``.
        """
        check_token_positions(sequences, positions, self.max_length)
        # (sequence, slot in its output, position)
        rows = [(n, slot, p) for n, pos in enumerate(positions) for slot, p in enumerate(pos)]
        out = [[0.0] * len(pos) for pos in positions]
        # Rows of one sequence have one length: sorting by length keeps padding small.
        rows.sort(key=lambda r: -len(sequences[r[0]]))
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            width = len(sequences[chunk[0][0]])
            ids = torch.full((len(chunk), width), self._pad, dtype=torch.long)
            attn = torch.zeros((len(chunk), width), dtype=torch.long)
            targets, where = [], []
            for r, (n, _, p) in enumerate(chunk):
                seq = list(sequences[n])
                targets.append(seq[p])
                seq[p] = self._mask
                ids[r, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                attn[r, : len(seq)] = 1
                where.append(p)
            logits = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).logits
            picked = logits[
                torch.arange(len(chunk), device=self.device), torch.tensor(where, device=self.device)
            ].float()
            lp = torch.log_softmax(picked, dim=-1)[
                torch.arange(len(chunk), device=self.device), torch.tensor(targets, device=self.device)
            ]
            for (n, slot, _), value in zip(chunk, lp.tolist()):
                out[n][slot] = value
        return out
