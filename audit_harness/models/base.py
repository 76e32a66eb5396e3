"""The ``Backend`` protocol: what a model backend tells the engine (capabilities, provenance and
fingerprint, tokenization) and the primitives it runs (``engine.executor``'s module doc lists
them: packed/tree forwards, whole-sequence forwards, token generation). A backend implements what
its model can do (a masked LM cannot generate) and says so in ``capabilities``; benchmarks declare
what they need, and the session refuses a mismatch with one clear message before anything is
scored. Backends never see the engine: the session builds ``Engine(backend, cache)`` and
benchmarks ask it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from ..errors import ModelError

#: Capability names (``Backend.capabilities``, ``Benchmark.requires``).
LOGLIKELIHOOD = "loglikelihood"
TOKEN_LOGPROBS = "token_logprobs"
GENERATE = "generate"


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
        kind: ``"causal"`` (next-token LM), ``"masked"`` (masked LM) or ``"replay"`` (saved outputs).
        server: for a model behind an inference server, what the server reported (URL without
            credentials, engine and version, served name, tokenizer used, the alignment check's
            outcome); None in process.
    """

    name: str
    source: str
    fingerprint: str
    dtype: str
    device: str
    n_parameters: int
    kind: str = "causal"
    server: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GenerationRequest:
    """One generation: greedy continuation of ``prompt``.

    Attributes:
        prompt: the full text the model continues (already chat-formatted where wanted, see
            ``Backend.chat_prompt``).
        max_new_tokens: at most this many new tokens (>= 1).
        stop: the output is cut before the first occurrence of any of these strings.
        item_id: the item that asked; lets a replay model answer from saved outputs.
    """

    prompt: str
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    item_id: str = ""


@dataclass(frozen=True)
class SentenceEncoding:
    """A whole sentence as the model scores it token by token.

    Attributes:
        ids: token ids. Causal LMs: a conditioning prefix (BOS, or the tokenizer's equivalent when
            it has none) + the sentence's tokens; masked LMs: the tokenizer's encoding with its
            special tokens (``[CLS] ... [SEP]``).
        special: per position, True for tokens the model added (BOS, CLS, SEP): they are never
            scored (docs/metrics.md §1.6 (d): upstream skips the first and last shared positions
            whether or not they are special; we skip exactly the special ones).
    """

    ids: tuple[int, ...]
    special: tuple[bool, ...]


def check_token_positions(
    sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]], max_length: int, first: int = 0
) -> None:
    """The one input check of every ``token_logprobs``: one position list per sequence, no
    sequence longer than the model's window, every position in ``[first, len(sequence))``
    (``first`` is 1 for causal LMs: position 0 has no left context).

    Raises:
        ValueError: naming the first sequence that fails and why.
    """
    if len(sequences) != len(positions):
        raise ValueError(f"{len(sequences)} sequences but {len(positions)} position lists")
    for n, (seq, pos) in enumerate(zip(sequences, positions)):
        if len(seq) > max_length:
            raise ValueError(f"sequence {n}: {len(seq)} tokens exceed the model's {max_length}-token window")
        bad = [p for p in pos if not first <= p < len(seq)]
        if bad:
            why = " (position 0 has no left context)" if first == 1 and bad[0] == 0 else ""
            raise ValueError(f"sequence {n}: position {bad[0]} is outside [{first}, {len(seq)}){why}")


class Backend:
    """A model backend. Implementations must be deterministic for a fixed input.

    A backend either implements the engine's primitives (``encode_pair``/``encode_pairs`` with
    ``forward_packed``/``forward_segments``/``forward_full``; ``encode_prompt`` with
    ``generate_tokens``), which the engine batches, caches and dedupes, or answers whole requests
    itself (``loglikelihood``, ``token_logprobs``, ``generate``: a masked LM's pseudo-log-
    likelihoods, saved outputs, a test double). The methods below are those whole-request
    answers; each raises ModelError naming the model and what it cannot do unless a subclass
    implements it.
    """

    info: ModelInfo
    capabilities: frozenset[str] = frozenset()

    def _unsupported(self, what: str) -> ModelError:
        kind = getattr(getattr(self, "info", None), "kind", "?")
        name = getattr(getattr(self, "info", None), "name", type(self).__name__)
        return ModelError(
            f"model {name!r} ({kind} LM) cannot compute {what}; it supports "
            f"{', '.join(sorted(self.capabilities)) or 'nothing'}"
        )

    def loglikelihood(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        """Summed log-probability (natural log, <= 0) of each continuation given its context.

        Args:
            requests: (context, continuation) string pairs; the continuation usually starts with
                the delimiter (e.g. a space). Only continuation tokens are scored.
        Returns:
            One float per request, in request order.
        Raises:
            ValueError: an empty continuation. ModelError: the model cannot score continuations.
        """
        raise self._unsupported("continuation log-likelihoods")

    def encode_sentence(self, text: str) -> SentenceEncoding:
        """``text`` tokenized for ``token_logprobs`` (see ``SentenceEncoding``).

        Raises:
            ModelError: the model cannot score sentences token by token.
        """
        raise self._unsupported("per-token log-probabilities")

    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Log-probability (natural log) of the token at each requested position.

        Causal LMs: log P(ids[p] | ids[:p]), every token conditioned on its whole left context (one
        forward per sequence). Masked LMs: log P(ids[p] | ids with position p masked), one masked
        row per position (pseudo-log-likelihood terms, Salazar et al. 2020; CrowS-Pairs metric.py).

        Args:
            sequences: token ids per sequence (``encode_sentence(...).ids``).
            positions: per sequence, the positions to score (causal: >= 1, as position 0 has no
                left context); may be empty.
        Returns:
            per sequence, one float per requested position, in the order given.
        Raises:
            ValueError: lengths differ, or a position is out of range. ModelError: unsupported.
        """
        raise self._unsupported("per-token log-probabilities")

    def generate(self, requests: Sequence[GenerationRequest]) -> list[str]:
        """Greedy completion of each request's prompt (the text after the prompt), cut before the
        first occurrence of any of its ``stop`` strings. One string per request, in order.

        Raises:
            ValueError: ``max_new_tokens < 1``. ModelError: the model cannot generate.
        """
        raise self._unsupported("generations")

    def chat_prompt(self, user_message: str) -> str | None:
        """``user_message`` as one user turn through the tokenizer's chat template, with the
        generation prompt appended; ``None`` when the model has no chat template."""
        return None

    #: ``--chat-template``: ``auto`` (the tokenizer's own), ``none``, or the text of a template
    #: file (``use_chat_template``).
    _template_choice: str = "auto"
    _template_text: str | None = None

    def use_chat_template(self, choice: str) -> None:
        """Format generation prompts with the model's own chat template (``"auto"``), with none
        (``"none"``: plain text), or with the Jinja template in file ``choice``.

        Raises:
            ModelError: the file cannot be read.
        """
        if choice in ("auto", "none"):
            self._template_choice, self._template_text = choice, None
            return
        from pathlib import Path

        try:
            text = Path(choice).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ModelError(f"--chat-template {choice}: cannot read it ({e})") from None
        self._template_choice, self._template_text = f"file:{choice}", text

    @property
    def chat_template_source(self) -> str:
        """Where the chat template comes from: ``model``, ``none`` or ``file:<path>``."""
        return "model" if self._template_choice == "auto" else self._template_choice

    def _chosen_template(self, own: object) -> str | None:
        """The template to use given the tokenizer's ``own`` (``use_chat_template``)."""
        if self._template_choice == "none":
            return None
        if self._template_text is not None:
            return self._template_text
        return own if isinstance(own, str) and own else None

    @property
    def chat_template(self) -> str | None:
        """The chat template text the model formats prompts with, or ``None``."""
        return None
