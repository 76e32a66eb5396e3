"""Attention of packed rows one subtree at a time, on CPU.

A packed row (``HFCausalLM.forward_packed``) holds several prefix trees side by side, none of
which attends to another. SDPA over the whole row still computes the scores of every pair of
tokens and masks away those across trees: with rows of 512 tokens and trees of 20 to 260, most
of the attention matrix, its softmax included. On CPU that is about an eighth of a SmolLM2-135M
forward. Run per tree, on the tree's own block of the mask, attention computes only what the
mask lets through, and every value is the same (a masked score's weight is exactly 0 either way).

``routed`` registers ``segmented_sdpa`` with transformers' ``AttentionInterface`` and, for the
duration of one forward, routes a model that uses SDPA through it; that forward passes
``packed_segments`` (``(row, start, end)`` per tree). Every other forward (generation, a
key/value cache being continued) runs SDPA as the model always does. Positions outside every
segment (a row's padding) get zeros: nothing attends to them and nothing reads them.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

#: The name the attention function is registered under.
NAME = "bias_audit_segmented_sdpa"


def segmented_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    packed_segments: Sequence[tuple[int, int, int]] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, per ``(row, start, end)`` block when ``packed_segments`` is
    given (query, key, value: batch x heads x tokens x head size; the output: batch x tokens x
    heads x head size, as SDPA's)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packed_segments is None or attention_mask is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    batch, heads, tokens, size = query.shape
    out = query.new_zeros(batch, tokens, heads, size)
    for row, start, end in packed_segments:
        part, _ = sdpa_attention_forward(
            module,
            query[row : row + 1, :, start:end],
            key[row : row + 1, :, start:end],
            value[row : row + 1, :, start:end],
            attention_mask[row : row + 1, :, start:end, start:end],
            **kwargs,
        )
        out[row : row + 1, start:end] = part
    return out, None


def can_route(model) -> bool:
    """Whether ``model`` runs SDPA through transformers' attention interface (so ``routed`` can
    run it per tree); registers ``segmented_sdpa`` and its mask format (SDPA's) once."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa" or not hasattr(
        config, "_attn_implementation_internal"
    ):
        return False
    if getattr(model, "_can_set_attn_implementation", lambda: False)() is False:
        return False
    AttentionInterface.register(NAME, segmented_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return True


@contextmanager
def routed(model) -> Iterator[None]:
    """Within the block, ``model``'s attention is ``segmented_sdpa`` (``can_route`` must hold)."""
    config = model.config
    before = config._attn_implementation_internal
    config._attn_implementation_internal = NAME
    try:
        yield
    finally:
        config._attn_implementation_internal = before


def segments(
    rows: Sequence[tuple[Sequence[int], Sequence[int], object, object]],
) -> list[tuple[int, int, int]]:
    """``(row, start, end)`` of every tree in packed rows: a tree starts at a token without a
    parent (-1) and runs to the next one or to the row's last token.

    Examples
    --------
    >>> segments([([5, 6, 7, 8], [-1, 0, -1, 2], None, None), ([9], [-1], None, None)])
    [(0, 0, 2), (0, 2, 4), (1, 0, 1)]
    """
    out = []
    for r, (tokens, parents, _, _) in enumerate(rows):
        starts = [i for i, p in enumerate(parents) if p < 0] + [len(tokens)]
        out += [(r, a, b) for a, b in zip(starts[:-1], starts[1:])]
    return out
