"""Answer parsing: a model's text (or a saved prediction) -> an option, or invalid with a reason.

One entry point, ``parse_answer``, used by every generate-mode benchmark and by ``bias-audit
score``, under one of two profiles (``docs/parsing.md``):

- ``authors``: each benchmark's published post-processing, exactly (``authors``: KoBBQ's
  ``raw2prediction``, the BBQ R script's text matching, KGQuiz's first word), for reproducing
  papers;
- ``robust``: what chat models write (``robust``), for benchmarks whose authors published no
  parser of generated answers.

Each benchmark declares its default profile and which authors' rule it has; ``--answer-parsing``
overrides it, and the run also reports every metric under the other profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, TypedDict

from .authors import (
    MATCH_KINDS,
    MATCH_MODES,
    OOC_REASONS,
    AnswerMatch,
    ParsedAnswer,
    bbq_reference_clean,
    match_answer,
    match_leading_label,
    match_prediction,
    parse_cbbq,
    parse_choice,
)
from .choices import REASONS, Choices, Parsed
from .cues import refusal_reason
from .negation import read_epistemic, read_negation, settle
from .robust import parse_robust
from .text import normalize_text, visible

if TYPE_CHECKING:
    from bias_metrics.records import AnswerClass

#: The parsing profiles.
PROFILES = ("authors", "robust")
#: The authors' rules a benchmark may name (``parse_answer(authors=...)``).
AUTHORS_RULES = ("bbq-reference", "exact", "kobbq", "first-word", "cbbq")

__all__ = [
    "AUTHORS_RULES",
    "MATCH_KINDS",
    "MATCH_MODES",
    "OOC_REASONS",
    "PROFILES",
    "REASONS",
    "AnswerMatch",
    "Choices",
    "OtherParse",
    "ParseFields",
    "Parsed",
    "ParsedAnswer",
    "bbq_reference_clean",
    "invalid_reason",
    "match_answer",
    "match_leading_label",
    "match_prediction",
    "normalize_text",
    "other_profile",
    "parse_answer",
    "parse_fields",
    "parse_choice",
    "parse_robust",
    "read_epistemic",
    "read_negation",
]


def other_profile(profile: str) -> str:
    """The profile a run reports its parse sensitivity under: the one it did not use."""
    return "robust" if profile == "authors" else "authors"


class OtherParse(TypedDict):
    """A record's ``other_parse``: its output as the other profile reads it."""

    answer_parsing: str
    predicted: int
    predicted_class: str
    parse_rule: str
    invalid_reason: str | None


class ParseFields(TypedDict):
    """The record fields of one parsed output (``parse_fields``)."""

    match: str
    parse_rule: str
    invalid_reason: str | None
    answer_parsing: str
    other_parse: OtherParse


def parse_fields(
    got: Parsed, alt: Parsed, profile: str, answer_class: Callable[[int], AnswerClass]
) -> ParseFields:
    """The record fields of one parsed output: how ``got`` was read under the run's ``profile``,
    and ``alt``, the other profile's reading of the same text (the parse sensitivity).
    ``answer_class`` maps an option to its class (biased / counter-biased / unknown)."""
    return {
        "match": got.how,
        "parse_rule": got.rule,
        "invalid_reason": got.reason,
        "answer_parsing": profile,
        "other_parse": {
            "answer_parsing": other_profile(profile),
            "predicted": alt.option,
            "predicted_class": answer_class(alt.option).value,
            "parse_rule": alt.rule,
            "invalid_reason": alt.reason,
        },
    }


def invalid_reason(output: object, choices: Choices) -> str:
    """Why ``output`` names no option, as both profiles report it: ``empty``, ``refusal``,
    ``several_options`` (two option texts or two letters) or ``no_match``."""
    import re

    from .robust import _mentions

    if output is None or not str(output).strip():
        return "empty"
    text = str(output)
    upper = "".join(re.escape(l.upper()) for l in choices.letters)
    letters = set(re.findall(rf"(?<![A-Za-z0-9])([{upper}])(?![A-Za-z0-9])", text))
    if len(_mentions(text, choices)) > 1 or len(letters) > 1:
        return "several_options"
    if refusal_reason(text):
        return "refusal"
    return "no_match"


def parse_answer(
    output: object,
    choices: Choices,
    profile: str = "robust",
    authors: str = "exact",
    labels: Mapping[str, int] | None = None,
) -> Parsed:
    """The option ``output`` names under ``profile``, or invalid with a reason.

    Parameters
    ----------
    output : str, int or None
        The model's text; a saved 0-based option index (``bias-audit score`` reads numbers with
        ``--index-base`` first; ``-1`` is no answer); ``None`` for no output.
    choices : Choices
        The options as the prompt showed them.
    profile : {"authors", "robust"}
    authors : {"bbq-reference", "exact", "kobbq", "first-word", "cbbq"}
        The benchmark's published rule, used under ``authors``: the BBQ R script's matching
        (``bbq-reference``), exact option text or letter (``exact``, where no parser was
        published), KoBBQ's ``raw2prediction`` (``kobbq``), or the first word (``first-word``,
        KGQuiz true/false, with ``labels`` mapping lower-case words to options), or CBBQ's
        letter test (``cbbq``: ``authors.parse_cbbq``).

    Returns
    -------
    Parsed

    Raises
    ------
    ValueError
        An unknown profile or rule, or an option index outside the options.
    TypeError
        An output of another type (a boolean, a list).

    Examples
    --------
    >>> c = Choices(("The grandfather", "The grandson", "Can't be determined"), unknown=2)
    >>> parse_answer("ANSWER: $B$", c).option
    1
    >>> parse_answer("Answer: B", c, "authors", "bbq-reference").option  # the R script cannot
    -1
    """
    if profile not in PROFILES:
        raise ValueError(f"answer parsing profile must be one of {', '.join(PROFILES)}, got {profile!r}")
    if authors not in AUTHORS_RULES:
        raise ValueError(f"authors' rule must be one of {', '.join(AUTHORS_RULES)}, got {authors!r}")
    if isinstance(output, bool) or not (output is None or isinstance(output, (str, int, float))):
        raise TypeError(f"an answer is text or an option index, got {type(output).__name__} {output!r}")
    if not isinstance(output, str) and output is not None:  # a saved option index
        found = match_answer(output, choices.texts)
        reason = None if found.option >= 0 else "empty"
        return Parsed(found.option, found.how, "index", reason)
    if profile == "robust" and output is not None:
        output = visible(output)  # "B\u200b" is B; the authors' rules see what they would see
    return settle(output, choices, _by_profile(output, choices, profile, authors, labels), profile)


def _by_profile(output, choices: Choices, profile: str, authors: str, labels) -> Parsed:
    """The reading of text ``output`` by the profile's own rules, before ``settle``."""
    if profile == "robust":
        return parse_robust(output, choices)
    if authors == "kobbq":
        got = parse_choice(output, choices.texts, choices.letters)
        return Parsed(got.option, got.how, got.rule, got.reason)
    if authors == "cbbq":  # CBBQ's evaluate_*.py letter test, letters standing alone
        option, reason = parse_cbbq(output)
        if reason == "no_match" and refusal_reason(output):
            reason = "refusal"  # the reason is the suite's, the same under both profiles
        return Parsed(option, "letter" if option >= 0 else "invalid", "cbbq", reason)
    if authors == "first-word":
        label = match_leading_label(output, labels or {})
        if label is None:
            return Parsed(-1, "invalid", "first-word", invalid_reason(output, choices))
        return Parsed(label, "text", "first-word")
    found = match_answer(
        output, choices.texts, match=authors, extra_choices=[(t, o) for t, o in choices.aliases]
    )
    if found.option < 0:
        return Parsed(-1, "invalid", authors, invalid_reason(output, choices))
    return Parsed(found.option, found.how, f"{authors}:{found.how}")
