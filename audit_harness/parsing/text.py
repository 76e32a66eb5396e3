"""Text normal forms the answer parsers share: case, punctuation, width and articles folded away,
so that what a model writes and what an option says can be compared."""

from __future__ import annotations

import re
import unicodedata
from typing import Sequence

#: Articles that may stand before an option's text without changing it (en, es, ca).
ARTICLES = frozenset(
    {
        "the",
        "a",
        "an",
        "el",
        "la",
        "los",
        "las",
        "lo",
        "un",
        "una",
        "unos",
        "unas",
        "els",
        "les",
        "l",
        "uns",
        "unes",
        "en",
        "na",
    }
)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
#: Korean syllables or Chinese characters: scripts whose words are matched as substrings.
_SUBSTRING_SCRIPT = re.compile(r"[\uac00-\ud7a3\u3400-\u4dbf\u4e00-\u9fff]")


def visible(text: str) -> str:
    """``text`` in NFKC with its invisible format characters (Unicode category Cf: zero-width
    spaces and joiners, soft hyphens, byte-order marks) removed, so that ``"B\u200b"`` is ``"B"``.

    Examples
    --------
    >>> visible("B\u200b"), visible("\uff22")
    ('B', 'B')
    """
    text = unicodedata.normalize("NFKC", str(text))
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def normalize_text(text: str) -> str:
    """Case-, punctuation- and whitespace-insensitive form of ``text``: Unicode NFKC, lower case,
    every punctuation character (Unicode category P*) deleted, runs of whitespace collapsed to one
    space, stripped. ``"Can't be determined."`` -> ``"cant be determined"``.

    Examples
    --------
    >>> normalize_text("  Can't  be\\tdetermined. ")
    'cant be determined'
    """
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return " ".join(text.split())


def fold(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed (punctuation kept)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def words(text: str) -> list[str]:
    """``text`` as comparable words: NFKC, case-folded, punctuation and symbols as spaces (so
    ``"22-year-old"`` is three words, ``"l'home"`` two), articles kept.

    Examples
    --------
    >>> words("It was the 22-year-old.")
    ['it', 'was', 'the', '22', 'year', 'old']
    """
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = "".join(" " if unicodedata.category(ch)[0] in "PSZ" else ch for ch in text)
    return text.split()


def content_words(text: str) -> list[str]:
    """``words`` without articles: the part of an option's text a model must say.

    Examples
    --------
    >>> content_words("The grandson")
    ['grandson']
    """
    out = [w for w in words(text) if w not in ARTICLES]
    return out or words(text)


def has_hangul(text: str) -> bool:
    """Whether ``text`` holds Korean syllables (matched as substrings: particles attach to
    words, so whitespace does not delimit them)."""
    return bool(_HANGUL.search(text))


def matched_as_substring(text: str) -> bool:
    """Whether ``text`` holds Korean syllables or Chinese characters: written without spaces
    between words (Chinese) or with particles attached (Korean), so an option in these scripts
    is looked for as a substring, not as whole words.

    Examples
    --------
    >>> matched_as_substring("男生"), matched_as_substring("할머니"), matched_as_substring("The man")
    (True, True, False)
    """
    return bool(_SUBSTRING_SCRIPT.search(text))


def letter_tokens(text: str, letters: Sequence[str]) -> list[str]:
    """Letters of ``letters`` that stand alone in ``text`` (not inside a Latin word or number),
    upper-cased, in order of appearance."""
    alts = "".join(re.escape(l) for l in letters)
    return [
        m.upper()
        for m in re.findall(rf"(?<![A-Za-z0-9])([{alts}])(?![A-Za-z0-9])", text, flags=re.IGNORECASE)
    ]


def typo_close(written: str, target: str) -> bool:
    """Whether ``written`` is ``target`` with small typos: an optimal-string-alignment distance
    (insertions, deletions, substitutions, adjacent transpositions) of at most one per eight
    characters, and the same digits (numbers are never "typos": 22 is not 24)."""
    if re.sub(r"\D", "", written) != re.sub(r"\D", "", target) or len(target) < 4:
        return False
    limit = max(1, len(target) // 8)
    if abs(len(written) - len(target)) > limit:
        return False
    a, b = written, target
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[len(b)] <= limit
