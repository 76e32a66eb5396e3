"""The small interface every model backend implements (HF causal LM now; masked LM and
OpenAI-compatible servers later): log-likelihood of continuations, and greedy generation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Sequence


@dataclass(frozen=True)
class ModelInfo:
    """What a results file records about the model.

    Attributes:
        name: the name the user passed (zoo name, folder or hub id).
        source: where the weights came from (package, folder, hub id).
        fingerprint: ``sha256:<hex>`` of the weight files (or of the state dict for built models).
        dtype: torch dtype name used for inference, e.g. ``"float32"``.
        device: ``"cpu"`` or ``"cuda:0"``.
        n_parameters: parameter count.
    """

    name: str
    source: str
    fingerprint: str
    dtype: str
    device: str
    n_parameters: int

    def to_dict(self) -> dict:
        return asdict(self)


class LanguageModel(ABC):
    """A scored language model. Implementations must be deterministic for a fixed input."""

    info: ModelInfo

    @abstractmethod
    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        """Summed log-probability (natural log, <= 0) of each continuation given its context.

        Args:
            requests: (context, continuation) string pairs; the continuation usually starts with
                the delimiter (e.g. a space). Only continuation tokens are scored.
        Returns:
            One float per request, in request order.
        Raises:
            ValueError: an empty continuation.
        """

    @abstractmethod
    def generate(self, prompts: Sequence[str], *, max_new_tokens: int,
                 stop: Sequence[str] = ()) -> list[str]:
        """Greedy completion of each prompt (the text after the prompt), cut before the first
        occurrence of any ``stop`` string. One string per prompt, in prompt order."""
