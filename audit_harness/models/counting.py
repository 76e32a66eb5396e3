"""The planning backend (``--plan``, a dry run): the audited model's tokenizer and config, and no
weights. It is the in-process backend itself (``hf.HFCausalLM``, ``hf_masked.HFMaskedLM``) built
on a model whose parameters live on PyTorch's ``meta`` device, so tokenization, chat formatting,
the window, the packing and prefix-sharing decisions are the real backend's own code. Only the
forwards differ: they return placeholder values (0.0 log-probabilities, empty generations) and
count what a real run would feed the model. The engine above it runs unchanged, so its counters
(``EngineStats``: requests, distinct, tokens forwarded, forwards) are what a real run's are.

Nothing these forwards return is a score: a plan reports counts only."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ModelError
from .base import Generations, ModelInfo, ScoreTokens, TokenPrompts, check_token_positions
from .hf import HFCausalLM
from .hf_decoding import prompt_trie, share_groups
from .hf_masked import HFMaskedLM
from .prompt_prefix import PromptPrefix

#: What every planned log-probability is: a placeholder, never a measurement.
PLACEHOLDER = 0.0
#: ``ModelInfo.fingerprint`` of a plan: no weight file was read, so there is nothing to hash.
NO_WEIGHTS = "none (plan: weights not loaded)"


@dataclass
class PlanCounts:
    """What the planning backend counted since the last ``take_counts``.

    Attributes:
        generations: generations run (distinct prompts; the engine dedupes before).
        generation_prompt_tokens: prompt tokens the generation forwards feed, a prefix shared
            within a batch once (as ``HFCausalLM.generate_tokens``).
        tokens_to_generate: ``max_new_tokens`` per generation: an upper bound, as a generation
            stops early when every row of its batch has ended.
        prompt_tokens_whole: every generation request's prompt tokens, duplicates included
            (what a harness without dedupe or prefix sharing feeds).
        masked_tokens: a masked LM's tokens, one row per scored position (the engine does not
            count them: the masked backend batches its own rows).
        masked_forwards: the forwards of those rows.
    """

    generations: int = 0
    generation_prompt_tokens: int = 0
    tokens_to_generate: int = 0
    prompt_tokens_whole: int = 0
    masked_tokens: int = 0
    masked_forwards: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class _Counting:
    """The counters both planning backends keep."""

    counts: PlanCounts

    def take_counts(self) -> PlanCounts:
        """The counts so far; the next start from zero."""
        old, self.counts = self.counts, PlanCounts()
        return old

    @property
    def cache_key(self) -> str:
        # Placeholders must never meet real scores: a plan's engine has no result cache, and
        # its key could not be mistaken for a model's anyway.
        return f"plan|{self.info.name}"


#: The key/value "state" planned segment forwards hand back: the engine only passes it on.
_NO_STATE = ("plan", "no key/value state")


class PlanCausalLM(_Counting, HFCausalLM):
    """``HFCausalLM`` on a meta-device model: real tokenization and capabilities, counting
    forwards (see module doc).

    Args:
        as ``HFCausalLM`` (``model`` with parameters on the meta device).
    """

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = 16):
        super().__init__(model, tokenizer, info, batch_size)
        self.counts = PlanCounts()
        self._inside_continuation = False
        #: The last prompt of the previous generation batch, whose cache a real stream keeps
        #: for the next refill (``continuous.stream_greedy``).
        self._kept: list[int] | None = None

    def take_counts(self) -> PlanCounts:
        """As ``_Counting.take_counts``; the kept prompt goes too: a category's generations are
        one stream, which starts with no cache kept."""
        self._kept = None
        return super().take_counts()

    def forward_full(self, seqs: list[list[int]], positions) -> list[list[float]]:
        return [[PLACEHOLDER] * len(p) for p in positions]

    def forward_packed(self, rows) -> list[list[float]]:
        return [[PLACEHOLDER] * len(row[3]) for row in rows]

    def forward_segments(self, state, parent_rows, segments, queries):
        return _NO_STATE, [[PLACEHOLDER] * len(q) for q in queries]

    def encode_prompt(self, prompt: str) -> list[int]:
        ids = super().encode_prompt(prompt)
        # The engine encodes each generation request's prompt once; encode_continuation's own
        # calls are a scored continuation's, counted where it is scored.
        if not self._inside_continuation:
            self.counts.prompt_tokens_whole += len(ids)
        return ids

    def encode_continuation(self, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
        self._inside_continuation = True
        try:
            return super().encode_continuation(prompt, continuation)
        finally:
            self._inside_continuation = False

    def generate_tokens(
        self, prompts: TokenPrompts, max_new_tokens: int, score_tokens: ScoreTokens = None
    ) -> Generations:
        """Empty texts, and the tokens ``HFCausalLM.generate_tokens`` would run with every row
        generating ``max_new_tokens`` (its upper bound): the same prompt forward (the batch's
        prompt trie when ``_tree_prefill`` applies, else the ``share_groups`` split), so a
        prefix shared within the batch counts once; with the trie, the prefix every prompt of
        the batch shares with the previous batch's last prompt is not counted again, as a
        stream continues the cache it kept (``continuous.stream_greedy``). Assumes the model's
        key/value cache can be batch-indexed (true of the full-attention transformers models; a
        model whose cache cannot be runs every prompt whole, which only a real forward finds
        out).

        Raises:
            ValueError: ``max_new_tokens < 1`` or an empty prompt.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(not p for p in prompts):
            raise ValueError("an empty prompt: generation needs at least one token to condition on")
        groups = (
            share_groups(prompts)
            if self.prefix_sharing and self._can_share and not self._sliding
            else [(0, list(range(len(prompts))))]
        )
        kept = PromptPrefix(self._kept, []).shared_with(prompts) if self._kept else None
        cut = kept.length if kept is not None else 0
        if self.own_loop() and self.tree_prefill_ok(prompts, kept):
            prompt_tokens = len(prompt_trie([p[cut:] for p in prompts])[0])
            self._kept = list(prompts[-1])
        elif groups[0][0]:
            prompt_tokens = sum(length for length, _ in groups) + sum(
                len(prompts[i]) - length for length, members in groups for i in members
            )
        else:
            prompt_tokens = sum(len(p) for p in prompts)
            self._kept = list(prompts[-1])
        new = len(prompts) * max_new_tokens
        self.counts.generations += len(prompts)
        self.counts.generation_prompt_tokens += prompt_tokens
        self.counts.tokens_to_generate += new
        firsts = None if score_tokens is None else [[PLACEHOLDER] * len(t) for t in score_tokens]
        return [""] * len(prompts), prompt_tokens + new, firsts


class PlanMaskedLM(_Counting, HFMaskedLM):
    """``HFMaskedLM`` on a meta-device model: real tokenization, counted masked rows."""

    def __init__(self, model, tokenizer, info: ModelInfo, batch_size: int = 16):
        super().__init__(model, tokenizer, info, batch_size)
        self.counts = PlanCounts()

    def token_logprobs(
        self, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Placeholders; counts one row of ``len(sequence)`` tokens per scored position, in
        forwards of ``batch_size`` rows (as ``HFMaskedLM.token_logprobs``).

        Raises:
            ValueError: as ``HFMaskedLM.token_logprobs``.
        """
        check_token_positions(sequences, positions, self.max_length)
        rows = 0
        for seq, pos in zip(sequences, positions):
            rows += len(pos)
            self.counts.masked_tokens += len(seq) * len(pos)
        self.counts.masked_forwards += -(-rows // self.batch_size)
        return [[PLACEHOLDER] * len(p) for p in positions]


class PlanEmbedder:
    """A stand-in for the sentence-embedding model (KGQuiz's semantic match) in a plan: no
    weights, one fixed unit vector per text, and a count of the texts a run would embed."""

    name = "none (plan: no embedding model loaded)"
    fingerprint = NO_WEIGHTS

    def __init__(self):
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[:, 0] = 1.0
        return out

    def take_texts(self) -> int:
        """Texts embedded since the last call."""
        old, self.texts = self.texts, 0
        return old


def _target(name: str) -> tuple[str, dict, str, str | None]:
    """(folder or hub id, ``from_pretrained`` keywords, source, kind when known) of ``name``,
    reading no weights: a zoo model's converted folder when there is one, else its GGUF file
    (config and tokenizer are in its header; nothing is dequantized)."""
    from .zoo import ZOO, cache_dir, materialize

    if name in ZOO:
        entry = ZOO[name]
        source = f"zoo:{name} ({entry.description})"
        folder = cache_dir() / "models" / name
        if (folder / "config.json").is_file():
            return str(folder), {}, source, entry.kind
        if entry.gguf is not None:
            gguf = entry.gguf()
            return str(gguf.parent), {"gguf_file": gguf.name}, source, entry.kind
        # Built from a config by the zoo (the tests' random models): no weights to load.
        return str(materialize(name)), {}, source, entry.kind
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve()), {}, f"folder:{path.resolve()}", None
    if "/" in name:
        return name, {}, f"hub:{name}", None
    raise ModelError(
        f"unknown model {name!r}: known zoo models are {', '.join(sorted(ZOO))} "
        "(or pass a local transformers folder or a hub id such as org/name)"
    )


def load_plan_model(
    name: str | None = None, *, device: str = "auto", dtype: str = "auto", batch_size: int = 16
):
    """The planning backend of model ``name``: its config and tokenizer, no weights (a folder
    with only ``config.json`` and the tokenizer files is enough).

    Args:
        as ``zoo.load_model``.
    Returns:
        a ``PlanCausalLM``, or a ``PlanMaskedLM`` when the config names a masked-LM head; its
        ``info.n_parameters`` is counted on the meta device, from the config alone.
    Raises:
        ModelError: an unknown name, a missing package, or a config or tokenizer that cannot be
            read.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from .hf import resolve_device, resolve_dtype
    from .zoo import DEFAULT_MODEL, model_kind

    hf_logging.disable_progress_bar()
    name = name or DEFAULT_MODEL
    target, kwargs, source, kind = _target(name)
    try:
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
    except ValueError as e:
        raise ModelError(str(e)) from None
    try:
        kind = kind or model_kind(target)
        config = AutoConfig.from_pretrained(target, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(target, **kwargs)
        auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
        # Parameters on the meta device have shapes and no storage: the architecture, its
        # forward signature and its parameter count, with nothing allocated or read.
        with torch.device("meta"):
            model = auto.from_config(config, dtype=torch_dtype).eval()
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot plan model {name!r}: {' '.join(str(e).split())[:300]}") from e
    info = ModelInfo(
        name=name,
        source=f"{source} (config and tokenizer only)",
        fingerprint=NO_WEIGHTS,
        dtype=str(torch_dtype).removeprefix("torch."),
        device=str(dev),
        n_parameters=sum(p.numel() for p in model.parameters()),
        kind=kind,
    )
    cls = PlanMaskedLM if kind == "masked" else PlanCausalLM
    return cls(model, tokenizer, info, batch_size=batch_size)
