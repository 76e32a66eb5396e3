"""The replay backend: a "model" whose generations are outputs saved elsewhere (an API model,
another harness, an old log), so scoring them is an ordinary audit run: the same records, gates,
results.json, JUnit and reports (``--backend replay``; ``bias-audit score`` is its alias)."""

from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import ModelError
from .base import GENERATE, Backend, GenerationRequest, ModelInfo


class ReplayModel(Backend):
    """Answers each generation request with the output saved for its ``item_id``.

    Args:
        outputs: ``{item id: saved output}`` (text, or a 0-based option index once the join has
            read digits with ``--index-base``).
        info: provenance (``kind="replay"``; the fingerprint is the predictions file's sha256).
    """

    capabilities = frozenset({GENERATE})

    def __init__(self, outputs: Mapping[str, str | int], info: ModelInfo):
        self.outputs = dict(outputs)
        self.info = info

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str | int]:  # type: ignore[override]
        """The saved output of each request's item, in order.

        Raises:
            ModelError: a request for an item the predictions file does not answer (the session
                asks only for items the join found, so this is a bug, named as such).
        """
        missing = [r.item_id for r in requests if r.item_id not in self.outputs]
        if missing:
            raise ModelError(
                f"the predictions file has no output for {missing[0]!r} "
                f"({len(missing)} item(s) asked without one)"
            )
        return [self.outputs[r.item_id] for r in requests]
