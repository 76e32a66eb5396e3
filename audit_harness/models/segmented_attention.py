"""Attention of packed rows one block of a prefix tree at a time, on CPU.

A packed row (``HFCausalLM.forward_packed``) holds several prefix trees side by side, none of
which attends to another, and inside a tree a token attends only to itself and its ancestors.
SDPA over the whole row still computes the score of every pair of tokens and masks away the
rest: with rows of 512 tokens and trees of 20 to 500, most of the attention matrix, its softmax
included. On CPU that was about an eighth of a SmolLM2-135M forward. Here attention runs per
block of at most ``QUERY_BLOCK`` consecutive tokens of one tree (``blocks``), against only the
keys that block's mask lets through: the block's own tokens and their ancestors, gathered. Every
value is the same (a masked score's weight is exactly 0 either way); on EsBBQ's trees the blocks
compute about 0.3 of the scores of whole trees (ancestors alone would be 0.2).

``routed`` registers ``segmented_sdpa`` with transformers' ``AttentionInterface`` and, for the
duration of one forward, routes a model that uses SDPA through it; that forward passes
``packed_segments`` (``blocks``' output). Every other forward (generation, a key/value cache
being continued) runs SDPA as the model always does. Positions outside every block (a row's
padding) get zeros: nothing attends to them and nothing reads them.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

#: The name the attention function is registered under.
NAME = "bias_audit_segmented_sdpa"


#: Queries per block. Smaller blocks gather fewer keys each but call SDPA more often. Attention
#: seconds on three EsBBQ categories (SmolLM2-135M, 2 CPU threads, 2026-12-05): blocks of 16,
#: 32, 64 and 128 queries took 7.9, 5.4, 4.8 and 5.4 s; whole trees took 8.1 s.
QUERY_BLOCK = 64


@dataclass(frozen=True)
class Block:
    """Queries ``start:end`` of packed row ``row``, the row columns they may attend to
    (``keys``: ``slice`` when contiguous, else a sorted index tensor) and their additive mask
    (1 x 1 x queries x keys)."""

    row: int
    start: int
    end: int
    keys: slice | torch.Tensor
    mask: torch.Tensor


def segmented_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    packed_segments: Sequence[Block] | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, per ``Block`` when ``packed_segments`` is given (query, key,
    value: batch x heads x tokens x head size; the output: batch x tokens x heads x head size,
    as SDPA's). A block carries its own mask, the row mask's block at its keys."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if packed_segments is None or attention_mask is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    batch, heads, tokens, size = query.shape
    out = query.new_zeros(batch, tokens, heads, size)
    for b in packed_segments:
        part, _ = sdpa_attention_forward(
            module,
            query[b.row : b.row + 1, :, b.start : b.end],
            key[b.row : b.row + 1, :, b.keys],
            value[b.row : b.row + 1, :, b.keys],
            b.mask,
            **kwargs,
        )
        out[b.row : b.row + 1, b.start : b.end] = part
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
    # transformers reads the attention function from this field at every forward and offers no
    # public way to set it for a block and restore it (``set_attn_implementation`` re-dispatches
    # every sub-module and checks the name against its own list).
    config = model.config
    before = config._attn_implementation_internal  # noqa: SLF001
    config._attn_implementation_internal = NAME  # noqa: SLF001
    try:
        yield
    finally:
        config._attn_implementation_internal = before  # noqa: SLF001


def blocks(
    rows: Sequence[tuple[Sequence[int], Sequence[int], object, object]],
    allowed,
    dtype: torch.dtype,
    size: int | None = None,
) -> list[Block]:
    """The ``Block``s of packed rows: each tree (from a token without a parent, -1, to the next
    one or the row's end) cut into runs of at most ``size`` tokens (default ``QUERY_BLOCK``),
    each with the columns its tokens may attend to (their ancestors and themselves) and its mask,
    both read from ``allowed`` (rows x width x width, True where a query may attend to a key).

    Examples
    --------
    >>> import numpy as np
    >>> parents = [-1, 0, 1, 1, 0, 4, -1]  # 0 -> 1 -> {2, 3}, 0 -> 4 -> 5; a second tree: 6
    >>> allowed = np.zeros((1, 7, 7), dtype=bool)
    >>> for i, p in enumerate(parents):
    ...     allowed[0, i] = allowed[0, p] if p >= 0 else False
    ...     allowed[0, i, i] = True
    >>> bs = blocks([(parents, parents, None, None)], allowed, torch.float32, size=2)
    >>> [(b.start, b.end, b.keys) for b in bs]
    [(0, 2, slice(0, 2, None)), (2, 4, slice(0, 4, None)), (4, 6, tensor([0, 4, 5])), (6, 7, slice(6, 7, None))]
    >>> bs[2].mask == 0  # token 4 sees 0 and itself, token 5 sees 0, 4 and itself
    tensor([[[[ True,  True, False],
              [ True,  True,  True]]]])
    """
    size = size or QUERY_BLOCK
    out = []
    low = torch.finfo(dtype).min
    for r, (tokens, parents, _, _) in enumerate(rows):
        roots = [i for i, p in enumerate(parents) if p < 0] + [len(tokens)]
        for a, b in zip(roots[:-1], roots[1:]):
            for start in range(a, b, size):
                end = min(b, start + size)
                # ``allowed`` already holds each token's ancestors (and itself): a block's keys
                # are the columns any of its rows may attend to.
                cols = np.flatnonzero(allowed[r, start:end].any(axis=0)).tolist()
                keys = (
                    slice(cols[0], cols[-1] + 1)
                    if cols[-1] - cols[0] + 1 == len(cols)
                    else torch.tensor(cols, dtype=torch.long)
                )
                block = torch.from_numpy(allowed[r, start:end][:, cols])
                mask = torch.zeros(block.shape, dtype=dtype).masked_fill_(~block, low)
                out.append(Block(r, start, end, keys, mask[None, None]))
    return out
