"""What an answer is parsed against (``Choices``: the options as the prompt showed them) and what
parsing gives (``Parsed``: an option, or invalid with a reason)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

#: Why an output names no option.
REASONS = ("empty", "refusal", "several_options", "no_match", "negated")


@dataclass(frozen=True)
class Choices:
    """An item's answer options as the model saw them.

    Attributes
    ----------
    texts : tuple of str
        The option texts in label order (the first is labelled ``letters[0]``).
    letters : tuple of str
        The labels (``("A", "B", "C")``; KoBBQ prompts 3-4 use ``a``/``b``/``c``); empty when the
        prompt letters no option (true/false).
    aliases : tuple of (str, int)
        Further texts that name an option: the benchmark's phrasings of the unknown answer (BBQ's
        10, EsBBQ's and CaBBQ's 9, ...), each with the option it names.
    unknown : int or None
        The position of the unknown option, when there is one.
    """

    texts: tuple[str, ...]
    letters: tuple[str, ...] = ("A", "B", "C")
    aliases: tuple[tuple[str, int], ...] = ()
    unknown: int | None = None

    def __post_init__(self):
        if self.letters and len(self.letters) != len(self.texts):
            raise ValueError(f"{len(self.letters)} letters for {len(self.texts)} options")
        for text, option in self.aliases:
            if not 0 <= option < len(self.texts):
                raise ValueError(f"alias {text!r} names option {option}, outside the options")

    def forms(self, aliases: bool = True) -> list[tuple[int, str]]:
        """(option, text) for every way of naming an option: its own text, then its aliases."""
        own = [(i, t) for i, t in enumerate(self.texts) if t.strip()]
        return own + [(o, t) for t, o in self.aliases if t.strip()] if aliases else own


class Parsed(NamedTuple):
    """What a parser read in one output.

    Attributes
    ----------
    option : int
        The option's position in ``Choices.texts``, or -1 when the output names none (invalid).
    how : str
        ``index``, ``letter``, ``text``, ``fallback`` (the BBQ R script's fallback) or
        ``invalid``.
    rule : str
        The rule that decided (each profile documents its rules), recorded per record.
    reason : str or None
        When invalid, one of ``REASONS``.
    """

    option: int
    how: str
    rule: str
    reason: str | None = None
