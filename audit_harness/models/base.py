"""The ``Backend`` contract: what a model backend tells the engine (capabilities, provenance and
fingerprint, tokenization), the primitives it runs (packed/tree forwards, whole-sequence
forwards, token generation) and the flags that say which of them it has. Every optional ability
is a method with a default next to the whole-request calls, and every flag a class attribute with
a default (inspect_ai's ``ModelAPI`` shape): the engine calls them and never asks whether they
exist. A backend implements what its model can do (a masked LM cannot generate) and says so in
``capabilities``; benchmarks declare what they need, and the session refuses a mismatch with one
clear message before anything is scored. Backends never see the engine: the session builds
``Engine(backend, cache)`` and benchmarks ask it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterator, Sequence

from ..errors import ModelError

#: Capability names (``Backend.capabilities``, ``Benchmark.requires``).
LOGLIKELIHOOD = "loglikelihood"
TOKEN_LOGPROBS = "token_logprobs"
GENERATE = "generate"
#: The first answer token's log-probabilities over option letters after the chat template
#: (``Engine.letter_logprobs``): exact in process, a chat API's top candidates on a server.
LETTER_LOGPROBS = "letter_logprobs"


#: One row of packed prefix trees (``Backend.forward_packed``): tokens, parent index per token
#: (-1: none), position id per token, and the queries as (column, target).
PackedRow = tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[tuple[int, int]]]
#: A batch of prompts as token ids, one list a prompt.
TokenPrompts = list[list[int]]
#: Per prompt, the tokens whose log-probability as the first new token a generation also returns.
ScoreTokens = Sequence[Sequence[int]] | None
#: ``Backend.generate_tokens``' answer: the texts, the tokens run, and per prompt the first-step
#: log-probabilities of its ``ScoreTokens`` (None without them).
Generations = tuple[list[str], int, list[list[float]] | None]


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
    server: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
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
class FirstTokenTop:
    """What a chat API said of the first answer token after one user turn
    (``Backend.first_token_top``).

    Attributes:
        answer_token: the token it generated (greedy), as text.
        candidates: its ``top_logprobs``: ``(token text, log-probability)`` pairs, best first.
    """

    answer_token: str | None
    candidates: tuple[tuple[str, float], ...]


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

    A backend either runs the engine's primitives, which the engine batches, caches and dedupes
    (``runs_forwards``: ``encode_pair``/``encode_pairs``/``encode_continuation`` with
    ``forward_full`` and, where ``can_pack``/``can_share``, ``forward_packed``/
    ``forward_segments``; ``runs_generation``: ``encode_prompt`` with ``generate_tokens``, and
    ``generate_stream`` where ``can_stream``), or answers whole requests itself
    (``loglikelihood``, ``token_logprobs``, ``generate``: a masked LM's pseudo-log-likelihoods,
    saved outputs, a test double). Each method raises ModelError naming the model and what it
    cannot do unless a subclass implements it; each flag's default is what a backend that
    answers whole requests has.
    """

    info: ModelInfo
    capabilities: frozenset[str] = frozenset()

    # -- what the engine reads: flags and sizes, with the defaults of a whole-request backend ----------
    #: What besides the token ids decides a score or a text (weights, dtype, device...): the
    #: result cache's key. None: nothing to key on, so the engine passes requests through as is.
    cache_key: str | None = None
    #: The engine scores strings through this backend's tokenization (``encode_pair``,
    #: ``encode_continuation``) and forwards (``forward_full``, ...); False: its own
    #: ``loglikelihood`` and ``token_logprobs`` answer whole requests.
    runs_forwards: bool = False
    #: The engine generates through ``encode_prompt`` and ``generate_tokens``; False: its own
    #: ``generate`` answers whole requests.
    runs_generation: bool = False
    #: ``generate_tokens`` takes ``stop`` and may end a row as soon as its text holds one of its
    #: stop strings (never earlier).
    stops_early: bool = False
    #: The engine may send a whole list of prompts to ``generate_stream`` (continuous batching).
    can_stream: bool = False
    #: ``forward_packed`` runs prefix trees packed into rows (tree attention).
    can_pack: bool = False
    #: ``forward_segments`` continues a key/value state (prefix sharing level by level).
    can_share: bool = False
    #: Share prefixes at all (the user's switch; ``can_share`` says whether the model can).
    prefix_sharing: bool = False
    #: Share whole contexts only (sliding-window layers need states free of padding holes).
    two_level_sharing: bool = False
    #: Send sequences in lexicographic order rather than longest first (a server's prefix cache
    #: reuses what adjacent requests share; it pads nothing).
    order_by_prefix: bool = False
    #: Sequences (or top-level segments, packed rows) per forward.
    batch_size: int = 1
    #: Upper bound on the tokens (rows x padded width) of one forward.
    token_budget: int = 1 << 62
    #: Upper bound on the logit elements (positions x ``vocab_size``) of one forward.
    logits_budget: int = 1 << 62
    #: Output vocabulary (sizes logits against ``logits_budget``; 1 where logits stay remote).
    vocab_size: int = 1
    #: The model's window in tokens.
    max_length: int = 1 << 62
    #: The first answer token is seen only through a chat API's top candidates
    #: (``first_token_top``); False: the engine scores every letter variant exactly.
    reads_top_candidates: bool = False

    @property
    def packed_row_tokens(self) -> int:
        """Tokens per packed row (``forward_packed``); default the token budget."""
        return self.token_budget

    def require_scores(self, needed: frozenset[str]) -> None:
        """Raise when the backend cannot be trusted with the scoring capabilities in ``needed``
        after all (a server that failed its start-up alignment check). Default: nothing to
        refuse."""

    def disable_prefix_sharing(self) -> None:
        """Switch prefix sharing off for good: a forward raised ``PrefixUnsupported`` (the
        model's cache turned out not to be reusable). Default: a backend that never raises it."""

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

    # -- primitives the engine runs (``runs_forwards``, ``runs_generation``) ------------------------
    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of (context, continuation) under ``tokenization.encode_pair``'s boundary rule.

        Raises:
            ValueError: the continuation is empty or encodes to no token. ModelError: unsupported.
        """
        raise self._unsupported("continuation log-likelihoods")

    def encode_pairs(self, requests: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``encode_pair`` of every request (a backend may tokenize them at once: batched, or
        concurrently over a network).

        Raises:
            ValueError: as ``encode_pair``.
        """
        return [self.encode_pair(c, x) for c, x in requests]

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a generation prompt, as the model reads it (BOS when the tokenizer adds
        one and the prompt does not start with it, then ``prompt``).

        Raises:
            ModelError: the model does not generate from token ids.
        """
        raise self._unsupported("generations")

    def encode_continuation(self, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
        """(prompt ids exactly as ``encode_prompt`` reads them, continuation ids as the next
        tokens): the tokens of ``prompt + continuation`` after the prompt's, or the continuation
        encoded alone when the two merge across the boundary. Unlike ``encode_pair``, no
        whitespace moves: a chat prompt ending with the assistant turn's opening
        (``"assistant\n"``) stays whole, so a letter is scored from the distribution the first
        generated token is drawn from.

        Raises:
            ValueError: an empty prompt or continuation.
        """
        if not prompt or not continuation:
            raise ValueError("encode_continuation needs a non-empty prompt and continuation")
        ids = self.encode_prompt(prompt)
        whole = self.encode_prompt(prompt + continuation)
        if len(whole) > len(ids) and whole[: len(ids)] == ids:
            return ids, whole[len(ids) :]
        return ids, self.encode_text(continuation)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens.

        Raises:
            ModelError: the model has no tokenizer of its own.
        """
        raise self._unsupported("token ids")

    def forward_full(self, seqs: list[list[int]], positions: Sequence[Sequence[int]]) -> list[list[float]]:
        """One forward over whole sequences: log P(ids[p] | ids[:p]) at each sequence's
        ``positions`` (``runs_forwards``).

        Raises:
            BackendOutOfMemory: the batch does not fit (the engine halves it).
        """
        raise self._unsupported("per-token log-probabilities")

    def forward_packed(self, rows: Sequence[PackedRow]) -> list[list[float]]:
        """One forward of prefix trees flattened into rows (tokens, parent index per token,
        position per token, queries as (column, target)) with tree attention; per row the
        log-probability of each query's target (``can_pack``)."""
        raise self._unsupported("packed forwards")

    def forward_segments(
        self,
        state: object,
        parent_rows: Sequence[int] | None,
        segments: list[list[int]],
        queries: list[list[tuple[int, int]]],
    ) -> tuple[object, list[list[float]]]:
        """One forward of token segments, each continuing row ``parent_rows[i]`` of ``state``
        (None: from scratch): (the new state, per segment the log-probability of each query's
        target after ``segment[:offset + 1]``) (``can_share``).

        Raises:
            PrefixUnsupported: the model's state cannot be continued.
        """
        raise self._unsupported("prefix-sharing forwards")

    def generate_tokens(
        self, prompts: TokenPrompts, max_new_tokens: int, score_tokens: ScoreTokens = None
    ) -> Generations:
        """Greedy completions of a batch of token-id prompts (``engine.generation``'s module doc):
        (the text after each prompt, not cut at any stop string; the tokens run; with
        ``score_tokens``, per prompt the log-probability of each as the first new token). A
        backend with ``stops_early`` also takes ``stop`` (per prompt, its stop strings).

        Raises:
            ValueError: ``max_new_tokens < 1``. BackendOutOfMemory: the batch does not fit.
        """
        raise self._unsupported("generations")

    def generate_stream(
        self,
        prompts: TokenPrompts,
        max_new_tokens: int,
        score_tokens: ScoreTokens = None,
        stop: Sequence[Sequence[str]] | None = None,
        max_rows: int | None = None,
    ) -> Iterator[tuple[int, str, int, list[float] | None, int]]:
        """``generate_tokens`` of a whole list with continuous batching (``can_stream``): yields
        (prompt index, text, tokens run since the previous item, first-step log-probabilities or
        None, prompt forwards since the previous item) as rows finish."""
        raise self._unsupported("streamed generations")

    def first_token_top(self, prompts: Sequence[str]) -> list[FirstTokenTop]:
        """Per prompt (made by ``chat_prompt``), the first answer token's top candidates as a chat
        API reports them (``reads_top_candidates``).

        Raises:
            ModelError: the model cannot be read so.
        """
        raise self._unsupported("a chat API's first-token log-probabilities")

    def letter_read_info(self) -> dict[str, object] | None:
        """How letter log-probs are read from this model, for the results (API reads: the
        endpoint's model name and the ``top_logprobs`` used); None in process (exact)."""
        return None

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
