"""Per-token scoring requests of many sentences, deduplicated: each distinct token sequence goes to
the model once, asking for the union of the positions any request needs (a sentence shared by
several pairs, as WinoQueer's counterfactuals are, is scored once), through the model's engine
(result cache, progress) for causal and masked LMs alike."""

from __future__ import annotations

from typing import Sequence

from ..models.base import LanguageModel


def score_positions(model: LanguageModel, requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                    weights: Sequence[float] | None = None) -> tuple[list[list[float]], int]:
    """``token_logprobs`` (``Engine.token_logprobs``) for every (token ids, positions) request,
    each distinct sequence computed once.

    Args:
        model: a model with the ``token_logprobs`` capability.
        requests: (ids, positions) pairs; positions may repeat across requests of one sequence.
        weights: progress units per request (a pair's two sentences: half an item each); a
            sequence shared by several requests carries their sum.
    Returns:
        (per request the log-probabilities at its positions in its order, the number of distinct
        sequences sent to the model).
    Raises:
        ValueError, ModelError: from the model (a position out of range; no such capability).
    """
    needed: dict[tuple[int, ...], set[int]] = {}
    weight: dict[tuple[int, ...], float] = {}
    for n, (ids, positions) in enumerate(requests):
        key = tuple(ids)
        needed.setdefault(key, set()).update(positions)
        weight[key] = weight.get(key, 0.0) + (weights[n] if weights is not None else 0.0)
    sequences = list(needed)
    asked = [sorted(needed[s]) for s in sequences]
    values = model.engine.token_logprobs(sequences, asked,
                                         [weight[s] for s in sequences] if weights is not None else None)
    table = {s: dict(zip(pos, vals)) for s, pos, vals in zip(sequences, asked, values)}
    return [[table[tuple(ids)][p] for p in positions] for ids, positions in requests], len(sequences)
