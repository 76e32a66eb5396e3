"""Cloze multiple choice: score each choice as a continuation of the item's prompt (through the
model's engine: shared prefixes, cache, progress)."""

from __future__ import annotations

from typing import Sequence

from ..models.base import LanguageModel


def score_choices(model: LanguageModel, prompts: Sequence[str], choices: Sequence[Sequence[str]],
                  delimiter: str = " ") -> list[list[float]]:
    """Summed log-likelihood of ``delimiter + choice`` after each prompt.

    Args:
        model: any ``LanguageModel``.
        prompts: one prompt per item.
        choices: per item, its choice strings (any number, at least one).
        delimiter: put between prompt and choice (lm-eval's ``target_delimiter``, a space).
    Returns:
        per item, one log-likelihood (natural log) per choice, in choice order.
    Raises:
        ValueError: prompts and choices differ in length, or an item has no choice.
    """
    if len(prompts) != len(choices):
        raise ValueError(f"{len(prompts)} prompts but {len(choices)} choice lists")
    flat: list[tuple[str, str]] = []
    weights: list[float] = []  # progress: each item counts 1, spread over its choices
    for i, (prompt, opts) in enumerate(zip(prompts, choices)):
        if not opts:
            raise ValueError(f"item {i} has no choices")
        flat.extend((prompt, delimiter + c) for c in opts)
        weights.extend([1.0 / len(opts)] * len(opts))
    scores = model.engine.loglikelihood(flat, weights)
    out, pos = [], 0
    for opts in choices:
        out.append(scores[pos:pos + len(opts)])
        pos += len(opts)
    return out
