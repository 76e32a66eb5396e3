"""Letter log-probs: an option chosen from the first answer token's distribution over the option
letters (``--bbq-answer-mode letter``, KoBBQ's letter mode; docs/parsing.md, "Letter
log-probs").

A lettered prompt goes through the chat template; the model's first answer token is read, not
generated text. A token stands for letter ``L`` when its text is one of ``variants(L)``: ``L``,
`` L``, ``(L`` or `` (L`` (exactly; case as the prompt writes the letter). A letter's
log-probability is its best variant's (the maximum, not the log-sum-exp: a chat API reports only
its top candidates, and the best variant is the one it reports first, so the maximum is what
both readings can compute alike).

Two sources:

- exact (in process): every variant that is one token is scored (``exact_read``);
- top candidates (a chat API's ``top_logprobs``, or a saved read): ``candidates_read``. A letter
  none of whose variants is among the candidates gets the bound the candidates imply (the
  smallest log-probability listed: a token not listed has at most that); an item where no option
  letter is among them is invalid (``NO_LETTER``).

The chosen option is the letter of highest log-probability (the first on an exact tie; a letter
seen beats a bounded one it ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence, TypedDict

from typing_extensions import NotRequired

#: The invalid reason of an item where no option letter is among the candidates.
NO_LETTER = "no option letter among the top candidates"
#: The templates of a letter's token variants (``variants``).
VARIANT_FORMS = ("{}", " {}", "({}", " ({}")


def variants(letter: str) -> tuple[str, ...]:
    """The token texts that stand for ``letter``.

    Examples
    --------
    >>> variants("A")
    ('A', ' A', '(A', ' (A')
    """
    return tuple(f.format(letter) for f in VARIANT_FORMS)


def letter_of(token: str, letters: Sequence[str]) -> str | None:
    """The letter of ``letters`` that token text ``token`` stands for, or None.

    Examples
    --------
    >>> letter_of(" B", "ABC"), letter_of("(C", "ABC"), letter_of("Because", "ABC")
    ('B', 'C', None)
    """
    for letter in letters:
        if token in variants(letter):
            return letter
    return None


class LetterReadRecord(TypedDict):
    """A record's ``letter_read`` (``LetterRead.to_record``): each letter's log-probability
    (None: invalid), the ``[token text, log-probability]`` candidates read, whether the read was
    exact, and where they apply the bounded letters, the server's answer token and the invalid
    reason."""

    logprobs: dict[str, float] | None
    candidates: list[list[str | float]]
    exact: bool
    bounded: NotRequired[list[str]]
    answer_token: NotRequired[str]
    invalid_reason: NotRequired[str]


@dataclass(frozen=True)
class LetterRead:
    """One item read from its first answer token.

    Attributes:
        letters: the option letters, in option order.
        logprobs: per letter its log-probability (natural log; the bound where ``bounded``);
            None for every letter when no option letter was seen (``invalid_reason``).
        bounded: the letters given the bound because none of their variants was seen.
        candidates: what was read: ``[token text, log-probability]`` pairs (a chat API's top
            candidates, or in process every single-token variant scored).
        answer_token: the token the server generated (API reads), else None.
        exact: True when every variant was scored (in process), False for top candidates.
        invalid_reason: ``NO_LETTER`` when no option letter was seen, else None.
    """

    letters: tuple[str, ...]
    logprobs: tuple[float, ...] | None
    bounded: tuple[str, ...] = ()
    candidates: tuple[tuple[str, float], ...] = ()
    answer_token: str | None = None
    exact: bool = False
    invalid_reason: str | None = None

    @property
    def option(self) -> int:
        """The chosen option index (-1: invalid): the highest log-probability, the first on an
        exact tie, a letter seen before a bounded one."""
        if self.logprobs is None:
            return -1
        ranked = sorted(
            range(len(self.letters)),
            key=lambda k: (-self.logprobs[k], self.letters[k] in self.bounded, k),  # type: ignore[index]
        )
        return ranked[0]

    def to_record(self) -> LetterReadRecord:
        """The record's ``letter_read`` field (``from_saved`` reads it back)."""
        out: LetterReadRecord = {
            "logprobs": None if self.logprobs is None else dict(zip(self.letters, self.logprobs)),
            "candidates": [list(c) for c in self.candidates],
            "exact": self.exact,
        }
        if self.bounded:
            out["bounded"] = list(self.bounded)
        if self.answer_token is not None:
            out["answer_token"] = self.answer_token
        if self.invalid_reason:
            out["invalid_reason"] = self.invalid_reason
        return out


def candidates_read(
    candidates: Sequence[tuple[str, float]], letters: Sequence[str], answer_token: str | None = None
) -> LetterRead:
    """The read of a top-candidate list (``[(token text, log-probability)]``, any order): each
    letter's best variant among them, the bound (the smallest listed value) for a letter not
    among them; invalid (``NO_LETTER``) when no option letter is listed.

    Examples
    --------
    >>> r = candidates_read([("B", -0.1), (" A", -2.5), ("The", -3.0)], "ABC")
    >>> r.logprobs, r.bounded, r.option
    ((-2.5, -0.1, -3.0), ('C',), 1)
    >>> candidates_read([("The", -0.2)], "ABC").invalid_reason
    'no option letter among the top candidates'
    """
    letters = tuple(letters)
    cands = tuple((str(t), float(v)) for t, v in candidates)
    best: dict[str, float] = {}
    for token, value in cands:
        letter = letter_of(token, letters)
        if letter is not None and math.isfinite(value):
            best[letter] = max(value, best.get(letter, -math.inf))
    if not best:
        return LetterRead(letters, None, (), cands, answer_token, False, NO_LETTER)
    bound = min(v for _, v in cands if math.isfinite(v))
    bounded = tuple(x for x in letters if x not in best)
    values = tuple(best.get(x, bound) for x in letters)
    return LetterRead(letters, values, bounded, cands, answer_token, False)


def exact_read(variant_logprobs: Mapping[str, Mapping[str, float]], letters: Sequence[str]) -> LetterRead:
    """The exact read: ``{letter: {variant text: log-probability}}`` of every variant that is one
    token (in process). A letter with no single-token variant makes the item invalid (never seen
    with ASCII letters).
    """
    letters = tuple(letters)
    cands = tuple((v, float(lp)) for x in letters for v, lp in (variant_logprobs.get(x) or {}).items())
    if any(not variant_logprobs.get(x) for x in letters):
        missing = [x for x in letters if not variant_logprobs.get(x)]
        why = f"no variant of letter {missing[0]!r} is one token"
        return LetterRead(letters, None, (), cands, None, True, why)
    values = tuple(max(variant_logprobs[x].values()) for x in letters)
    return LetterRead(letters, values, (), cands, None, True)


def from_saved(value: object, letters: Sequence[str], where: str) -> LetterRead:
    """A saved letter read: a record's ``letter_read`` (``{"logprobs": {...}, "candidates":
    [...]}``: its candidates are read again, or its logprobs where it lists none) or a plain
    ``{letter: log-probability}`` mapping (read as top candidates).

    Raises:
        ValueError: naming ``where``: not a mapping, or a value that is not a number.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: {value!r} is not a letter log-prob mapping ({{'A': -0.1, ...}})")
    answer = value.get("answer_token") if isinstance(value.get("answer_token"), str) else None
    listed = value.get("candidates") or []  # falsy: the logprobs or the mapping below
    if "logprobs" in value and not listed:
        listed = list((value.get("logprobs") or {}).items())
    elif "logprobs" not in value:
        listed = list(value.items())
    try:
        pairs = [(str(t), float(v)) for t, v in listed]
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r}: every log-probability must be a number") from None
    read = candidates_read(pairs, letters, answer)
    if value.get("exact") is True and read.logprobs is not None and not read.bounded:
        return LetterRead(read.letters, read.logprobs, (), read.candidates, answer, True)
    return read
