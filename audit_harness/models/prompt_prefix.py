"""A prompt prefix's key/value cache kept between prefills (``continuous.stream_greedy``): a later
batch of prompts that start with the prefix continues it (``HFCausalLM._tree_prefill``) instead of
computing it again."""

from __future__ import annotations

from typing import Sequence

import torch


class PromptPrefix:
    """The key/value cache of one prompt prefix, kept from a prefill so that later prompts that
    start with it continue it (``HFCausalLM._tree_prefill``) rather than computing it again.

    Args:
        ids: the prefix's token ids.
        layers: per decoder layer its (keys, values), each ``(1, kv heads, >= len(ids), head
            dim)``; the first ``len(ids)`` columns are the prefix's.
        length: how many leading tokens to use (at most ``len(ids)``; default all).
    """

    def __init__(
        self, ids: Sequence[int], layers: list[tuple[torch.Tensor, torch.Tensor]], length: int | None = None
    ):
        self.ids = tuple(ids)
        self.layers = layers
        self.length = len(self.ids) if length is None else length

    @classmethod
    def of_row(cls, cache, row: int, ids: Sequence[int], width: int) -> "PromptPrefix":
        """The prefix ``ids`` from row ``row`` of a left-padded prefill cache ``width`` columns
        wide whose row holds exactly ``ids`` (copied: the cache goes on changing)."""
        start = width - len(ids)
        return cls(
            ids,
            [
                (
                    layer.keys[row : row + 1, :, start:width].clone(),
                    layer.values[row : row + 1, :, start:width].clone(),
                )
                for layer in cache.layers
            ],
        )

    def shared_with(self, prompts: Sequence[Sequence[int]]) -> "PromptPrefix | None":
        """This prefix cut to what every one of ``prompts`` starts with and goes beyond (each
        needs a token of its own, whose logits pick its first new token); None when nothing is
        shared.

        Examples:
            >>> PromptPrefix([1, 2, 3, 4], []).shared_with([[1, 2, 3, 9], [1, 2, 5]]).length
            2
            >>> PromptPrefix([1, 2], []).shared_with([[1, 2]]).length  # [1, 2] needs its 2
            1
            >>> PromptPrefix([7], []).shared_with([[1, 2]]) is None
            True
        """
        k = min(self.length, min(len(p) for p in prompts) - 1)
        for p in prompts:
            j = 0
            while j < k and p[j] == self.ids[j]:
                j += 1
            k = j
        return PromptPrefix(self.ids, self.layers, k) if k > 0 else None

    def cache(self, device):
        """A fresh ``DynamicCache`` holding the first ``length`` columns (a forward appends to
        the cache it is given, so each use gets its own)."""
        from transformers.cache_utils import DynamicCache

        return DynamicCache(
            [(k[:, :, : self.length].to(device), v[:, :, : self.length].to(device)) for k, v in self.layers]
        )
