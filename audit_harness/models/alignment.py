"""The start-up alignment check of a server's prompt log-probabilities.

A server can return prompt log-probabilities that do not belong to the tokens they are listed
with: llama.cpp's server shifts them by one position, others drop some. Summed over a
continuation they still look like plausible numbers, so the check tests the structure instead,
on a few fixed sentences, with two independent paths of the server itself:

1. echo the sentence's ids: every position after the first must have a finite value (and, where
   the server echoes token ids, vLLM, they must be the ids sent);
2. let the server generate the next token greedily after the sentence: the generation path
   reports that token's log-probability;
3. echo sentence + that token: the prompt path must report the same value at the last position
   (the continuation is known, scored with its context), and the same values as step 1 on the
   shared prefix (the context scored without the continuation).

A one-position shift moves a neighbour's value onto the last position, which step 3 catches (the
report says which neighbour matched). A random-weight model has no next-token structure, so
neighbours' values are alike and a shift can hide on it; check real models.

The endpoints of a pool (``pool.py``) each run the check; ``compare_replicas`` then holds every
endpoint's values against the reference endpoint's: another model, tokenizer or dtype behind one
replica shows there (one result cache must not mix their numbers).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import TypedDict

#: Fixed sentences: ordinary English with a predictable next token (the generated token's
#: probability then differs clearly from its neighbours').
SENTENCES = (
    "The capital of France is",
    "One, two, three, four, five,",
    "She opened the door and walked into the",
)

#: Largest |difference| in nats between the generation path and the prompt path for one token.
#: Both are one forward of the same weights; fp32 servers agree within 1e-4, bf16 ones within a
#: few hundredths, while a one-position shift moves the value by nats on a real model.
TOLERANCE = 0.25

#: Replicas of one deployment run the same forward and differ only by kernel and batch noise, which
#: each server shows itself between its two paths (``max_error``). Two replicas must agree on every
#: prompt log-probability of the sentences within twice the larger of the two servers' own
#: ``max_error``, and never need to agree closer than this floor in nats: fp32 servers agree
#: within 1e-4; SmolLM2-135M's bf16 values differ from its fp32 ones by up to 0.12 nats and its
#: fp16 ones by 0.023 on these sentences, so on a fp32 reference both are refused.
REPLICA_FLOOR = 0.01


class _Sentence(TypedDict):
    sentence: str


class SentenceCheck(_Sentence, total=False):
    """One sentence of an ``AlignmentReport``: what was measured, as far as the check got."""

    ids: list[int]
    skipped: str
    next_token: int
    generation_logprob: float
    prompt_logprob: float
    error: float
    prefix_error: float
    #: the values for the signature (``_check`` takes them out of the row).
    rounded: list[int]
    logprobs: list[float]


@dataclass
class AlignmentReport:
    """The outcome of ``check_alignment``.

    Attributes:
        ok: whether the prompt log-probabilities belong to their tokens.
        reason: why not (empty when ok).
        max_error: the largest |prompt path - generation path| over the sentences, nats (NaN
            when a step failed before it).
        sentences: per sentence, what was measured (ids, generated token, both values).
        signature: sha256 of the sentences' prompt log-probabilities rounded to 0.05 nats (part
            of the result cache key: it changes with the weights, dtype or kernels served).
    """

    ok: bool
    reason: str = ""
    max_error: float = float("nan")
    sentences: list[SentenceCheck] = field(default_factory=list)
    signature: str = ""

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        out["max_error"] = None if math.isnan(self.max_error) else self.max_error
        return out


def check_alignment(model, sentences=SENTENCES, tolerance: float = TOLERANCE) -> AlignmentReport:
    """Run the check (module doc) against ``model`` (an ``OpenAIServerModel``: ``echo``,
    ``next_token``, its tokenizer).

    Returns:
        the report; never raises for a misaligned server (that is a finding), nor for one that
        answers an echo request without prompt log-probabilities or refuses it (TGI's OpenAI
        routes, llama-server): that is a failed check too, so generation still runs against it.
    Raises:
        ServerUnavailable: the server could not be reached or stayed overloaded (not a finding
            about it: the run stops as for any connection failure).
    """
    from ..errors import ModelError
    from .server_client import ServerUnavailable

    try:
        return _check(model, sentences, tolerance)
    except ServerUnavailable:
        raise
    except ModelError as e:
        return AlignmentReport(False, f"the server cannot score prompts: {e}", float("nan"), [])


def _check(model, sentences, tolerance: float) -> AlignmentReport:
    worst = 0.0
    rows: list[SentenceCheck] = []
    rounded: list[int] = []
    for text in sentences:
        row: SentenceCheck = {"sentence": text}
        rows.append(row)
        failed = _check_sentence(model, text, tolerance, row)
        rounded += row.pop("rounded", [])
        if "error" in row:
            worst = max(worst, row["error"], row["prefix_error"])
        if failed:
            return AlignmentReport(False, failed, worst if "error" in row else float("nan"), rows)
    if not any("error" in r for r in rows):
        return AlignmentReport(
            False,
            "no sentence could be checked (the server's generated tokens could not be identified)",
            float("nan"),
            rows,
        )
    signature = hashlib.sha256(repr(rounded).encode()).hexdigest()[:16]
    return AlignmentReport(True, "", worst, rows, signature)


def _check_sentence(model, text: str, tolerance: float, row: SentenceCheck) -> str:
    """Check one sentence, filling its ``row`` of the report (and ``row["rounded"]``, its
    values for the signature); returns why it fails ('' when it passes or is skipped)."""
    ctx, cont = model.encode_pair("", text) if model.empty_prefix else ([], model.encode_text(text))
    ids = list(ctx) + list(cont)
    row["ids"] = ids
    first = model.echo([ids])[0]
    bad = _check_echo(first, ids)
    if bad:
        return f"{bad} (sentence {text!r})"
    token, gen_lp, gen_text = model.next_token(ids)
    if token is None:
        piece = model.encode_text(gen_text) if gen_text else []
        if len(piece) != 1:
            row["skipped"] = f"the generated text {gen_text!r} is not one token"
            return ""
        token = piece[0]
    second = model.echo([ids + [token]])[0]
    bad = _check_echo(second, ids + [token])
    if bad:
        return f"{bad} (sentence {text!r} + its next token)"
    k = len(ids)
    listed = second["logprobs"]
    prompt_lp = listed[k]
    err = abs(prompt_lp - gen_lp)
    prefix_err = max((abs(a - b) for a, b in zip(first["logprobs"][1:k], listed[1:k])), default=0.0)
    row.update(
        {
            "next_token": token,
            "generation_logprob": gen_lp,
            "prompt_logprob": prompt_lp,
            "error": err,
            "prefix_error": prefix_err,
        }
    )
    row["rounded"] = [round(v / 0.05) for v in listed[1 : k + 1]]
    # The sentence's own tokens only: replicas compare these (the greedy next token may
    # differ between two of them when its top two are nearly tied).
    row["logprobs"] = list(listed[1:k])
    if err > tolerance:
        return (
            f"after {text!r} the server generates token {token} with log-probability "
            f"{gen_lp:.4f}, but lists {prompt_lp:.4f} for that token at position {k} of the echoed "
            f"prompt (difference {err:.3f} > {tolerance} nats){_shift_hint(listed, k, gen_lp, tolerance)}"
        )
    if prefix_err > tolerance:
        return (
            f"the prompt log-probabilities of {text!r} change by {prefix_err:.3f} nats when one "
            "token is appended (a token's value must depend on its left context only)"
        )
    return ""


def _shift_hint(listed: list, k: int, gen_lp: float, tolerance: float) -> str:
    """When the generated token's log-probability is listed one position off (values shifted),
    a clause saying so; else ''."""
    neighbours = {
        d: abs(listed[k + d] - gen_lp)
        for d in (-1, 1)
        if 1 <= k + d < len(listed) and listed[k + d] is not None
    }
    shift = min(neighbours, key=neighbours.__getitem__) if neighbours else None
    if shift is None or neighbours[shift] > tolerance:
        return ""
    return (
        f"; it matches the value listed at position {k + shift} instead, so the values are "
        f"shifted by {'+' if shift > 0 else ''}{shift} position"
    )


def _check_echo(row: dict, ids: list[int]) -> str:
    """Why an echo answer is unusable for ``ids`` ('' when it is not)."""
    values = row["logprobs"]
    if len(values) < len(ids):
        return (
            f"the server returned {len(values)} prompt log-probabilities for a {len(ids)}-token "
            "prompt (missing values)"
        )
    if row["tokens"] is not None and row["tokens"][: len(ids)] != ids:
        return f"the server echoed token ids {row['tokens'][: len(ids)]} for the ids {ids} it was sent"
    missing = [p for p in range(1, len(ids)) if values[p] is None or not math.isfinite(values[p])]
    if missing:
        return f"no prompt log-probability at position(s) {missing[:5]}"
    if values[0] is not None:
        return (
            f"a log-probability ({values[0]:.4f}) for the first token, which has no left context: "
            "the values are shifted"
        )
    return ""


def compare_replicas(reference: AlignmentReport, other: AlignmentReport) -> str:
    """Why ``other`` (one endpoint's report) does not match ``reference`` (the reference
    endpoint's): a different outcome of the check, other token ids for the sentences, or a prompt
    log-probability further from the reference's than the servers' noise explains
    (``REPLICA_FLOOR``); '' when they match.
    """
    if other.ok != reference.ok:
        passed, failed = ("it", "the reference") if other.ok else ("the reference", "it")
        why = reference.reason if not reference.ok else other.reason
        return f"{passed} passes the alignment check and {failed} does not ({why})"
    pairs = [
        (a, b) for a, b in zip(reference.sentences, other.sentences) if "logprobs" in a and "logprobs" in b
    ]
    for a, b in zip(reference.sentences, other.sentences):
        if a.get("ids") != b.get("ids"):
            return f"it encodes {a['sentence']!r} as other token ids ({b.get('ids')} vs {a.get('ids')})"
    if not pairs:
        return ""  # neither could be measured (a failed check on both): nothing to compare
    noise = max((r.max_error for r in (reference, other) if not math.isnan(r.max_error)), default=0.0)
    allowed = max(REPLICA_FLOOR, 2 * noise)
    worst, where = 0.0, ""
    for a, b in pairs:
        for n, (x, y) in enumerate(zip(a["logprobs"], b["logprobs"])):
            if abs(x - y) > worst:
                worst, where = abs(x - y), f"token {n + 1} of {a['sentence']!r}"
    if worst > allowed:
        return (
            f"its prompt log-probabilities differ from the reference's by up to {worst:.4f} nats "
            f"({where}; allowed {allowed:.4f}: twice the servers' own path noise, at least "
            f"{REPLICA_FLOOR}): other weights or another dtype"
        )
    return ""
