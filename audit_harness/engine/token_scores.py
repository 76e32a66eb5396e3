"""Per-token scoring requests of many sentences, deduplicated: each distinct token sequence goes to
the model once, asking for the union of the positions any request needs (a sentence shared by
several pairs, as WinoQueer's counterfactuals are, is scored once)."""

from __future__ import annotations

from typing import Sequence

from ..models.base import LanguageModel


def score_positions(model: LanguageModel, requests: Sequence[tuple[Sequence[int], Sequence[int]]]
                    ) -> tuple[list[list[float]], int]:
    """``model.token_logprobs`` for every (token ids, positions) request, each distinct sequence
    computed once.

    Args:
        model: a model with the ``token_logprobs`` capability.
        requests: (ids, positions) pairs; positions may repeat across requests of one sequence.
    Returns:
        (per request the log-probabilities at its positions in its order, the number of distinct
        sequences sent to the model).
    Raises:
        ValueError, ModelError: from the model (a position out of range; no such capability).
    """
    needed: dict[tuple[int, ...], set[int]] = {}
    for ids, positions in requests:
        needed.setdefault(tuple(ids), set()).update(positions)
    sequences = list(needed)
    asked = [sorted(needed[s]) for s in sequences]
    values = model.token_logprobs(sequences, asked)
    table = {s: dict(zip(pos, vals)) for s, pos, vals in zip(sequences, asked, values)}
    return [[table[tuple(ids)][p] for p in positions] for ids, positions in requests], len(sequences)
