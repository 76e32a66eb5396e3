"""MBBQ's protocol as its authors published it (Neplenbroek et al., COLM 2024), read at run time.

The 5 prompt templates per language and the phrases that detect an answer in a generated response
live in the authors' ``answer_detection.py`` (``<data_dir>/mbbq/answer_detection.py``, fetched
from their pinned commit). The repository states no licence, so the suite never ships that file's
contents: ``read_protocol`` reads the module-level assignments with ``ast.literal_eval`` (the
file is never executed or imported) and checks their shape. ``detect_answer`` is the authors'
rule for turning a response into an option (their ``mbbq.py::detect_answer``), written from
reading it (docs/parsing.md); ``targeted_option`` is how their ``get_samples`` finds the option
naming the stereotyped group.
"""

from __future__ import annotations

import ast
import string
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import DataError

LANGUAGES = ("en", "nl", "es", "tr")
#: The module-level names read, each with the Python type it must have.
_NAMES = {
    "a_list": list,
    "b_list": list,
    "c_list": list,
    "extra_ans_detect": dict,
    "before_ans": list,
    "after_ans": list,
    "unknown_ans": list,
    "prompts": list,
    "trans_before_ans_dict": dict,
    "trans_after_ans_dict": dict,
    "trans_unknown_ans_dict": dict,
    "trans_prompt_dict": dict,
}
#: Python's ``string.punctuation``: the authors test membership in this string (a substring test).
PUNCTUATION = string.punctuation
_lock = threading.Lock()


@dataclass(frozen=True)
class Phrases:
    """One language's answer-detection phrases, in the order the authors' rule tries them.

    Attributes:
        before: phrases after which the answer follows (English ones first, then the language's
            translations of the generic ones, then its own); after: phrases the answer precedes;
        unknown: phrases that mean the model gives no answer (read as the unknown option).
    """

    before: tuple[str, ...]
    after: tuple[str, ...]
    unknown: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Protocol:
    """What ``answer_detection.py`` holds: per language the 5 prompt templates (``{}`` slots for
    context, question, ans0, ans1, ans2, in the authors' order) and the phrases; the three letter
    lists (``a_list``, ``b_list``, ``c_list``: position ``k`` of each is the same spelling)."""

    path: Path
    prompts: Mapping[str, tuple[str, ...]]
    phrases: Mapping[str, Phrases]
    letters: tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _assignments(path: Path) -> dict[str, tuple[Any, int]]:
    """``{name: (value, line)}`` of the file's module-level literal assignments.

    Raises:
        DataError: the file does not parse, or a needed name is missing or not a literal.
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        raise DataError(f"{path}: cannot read the authors' answer_detection.py ({e})") from None
    out: dict[str, tuple[Any, int]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id in _NAMES):
            continue
        try:
            out[target.id] = (ast.literal_eval(node.value), node.lineno)
        except ValueError:
            raise DataError(
                f"{path}:{node.lineno}: {target.id} is not a literal; changed upstream?"
            ) from None
    missing = [n for n in _NAMES if n not in out]
    if missing:
        raise DataError(
            f"{path}: no module-level {', '.join(missing)}; not the authors' answer_detection.py?"
        )
    for name, kind in _NAMES.items():
        value, line = out[name]
        if not isinstance(value, kind):
            raise DataError(f"{path}:{line}: {name} is a {type(value).__name__}, expected a {kind.__name__}")
    return out


def _strings(value: object, where: str, what: str, length: int | None = None) -> tuple[str, ...]:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise DataError(f"{where}: {what} must be a list of strings")
    if length is not None and len(value) != length:
        raise DataError(f"{where}: {what} has {len(value)} entries, expected {length}")
    return tuple(value)


def _translated(
    entry: tuple[dict, int], name: str, lang: str, phrases: Sequence[str], path: Path
) -> list[str]:
    """The language's translation of each generic phrase, as the authors look them up."""
    table, line = entry
    where = f"{path}:{line}"
    block = table.get(lang)
    if not isinstance(block, dict):
        raise DataError(f"{where}: {name} has no {lang!r} entry")
    missing = [p for p in phrases if not isinstance(block.get(p), str)]
    if missing:
        raise DataError(f"{where}: {name}[{lang!r}] lacks a translation of {missing[0]!r}")
    return [block[p] for p in phrases]


def _phrases(a: dict[str, tuple[Any, int]], lang: str, path: Path) -> Phrases:
    extra, extra_line = a["extra_ans_detect"]
    parts = {}
    for kind in ("before", "after", "unknown"):
        generic = _strings(a[f"{kind}_ans"][0], f"{path}:{a[f'{kind}_ans'][1]}", f"{kind}_ans")
        own = extra.get(lang, {}).get(f"{kind}_ans") if isinstance(extra.get(lang), dict) else None
        english = extra.get("en", {}).get(f"{kind}_ans") if isinstance(extra.get("en"), dict) else None
        where = f"{path}:{extra_line}"
        found = list(generic) + list(_strings(english, where, f"extra_ans_detect['en']['{kind}_ans']"))
        if lang != "en":
            found += _translated(a[f"trans_{kind}_ans_dict"], f"trans_{kind}_ans_dict", lang, generic, path)
            found += list(_strings(own, where, f"extra_ans_detect[{lang!r}]['{kind}_ans']"))
        parts[kind] = tuple(found)
    return Phrases(parts["before"], parts["after"], parts["unknown"])


def _prompts(a: dict[str, tuple[Any, int]], lang: str, path: Path) -> tuple[str, ...]:
    english = _strings(a["prompts"][0], f"{path}:{a['prompts'][1]}", "prompts", 5)
    found = english
    if lang != "en":
        found = tuple(_translated(a["trans_prompt_dict"], "trans_prompt_dict", lang, english, path))
    for k, template in enumerate(found, start=1):
        if template.count("{}") != 5:
            raise DataError(
                f"{path}: prompt template {k} ({lang}) has {template.count('{}')} '{{}}' slots, expected 5 "
                "(context, question, ans0, ans1, ans2)"
            )
    return found


@lru_cache(maxsize=4)
def _read(path: Path) -> Protocol:
    a = _assignments(path)
    letters = tuple(_strings(a[n][0], f"{path}:{a[n][1]}", n) for n in ("a_list", "b_list", "c_list"))
    if len({len(x) for x in letters}) != 1 or len(letters[0]) < 3:
        raise DataError(f"{path}: a_list, b_list and c_list must be equally long (at least 3 spellings)")
    return Protocol(
        path=path,
        prompts={lang: _prompts(a, lang, path) for lang in LANGUAGES},
        phrases={lang: _phrases(a, lang, path) for lang in LANGUAGES},
        letters=letters,  # type: ignore[arg-type]
    )


def read_protocol(path: Path) -> Protocol:
    """The authors' prompts and answer-detection phrases, read from ``path`` without executing it.

    Raises:
        DataError: the file is missing or unreadable, or its shape is not the one the authors'
            pinned commit has (a name missing or of another type, a phrase without its
            translation, a template without its 5 slots); the message names the file, line and
            name.
    """
    if not path.is_file():
        raise DataError(
            f"{path}: the MBBQ authors' answer_detection.py is missing (prompts and answer phrases "
            "are read from it at run time): bias-audit data fetch mbbq --accept-unlicensed --to DATA_DIR"
        )
    with _lock:
        return _read(path)


# -- the authors' answer detection -----------------------------------------------------------------
def _letter(proto: Protocol, word: str, full: str = "") -> str | None:
    """The authors' ``auto_detect``: ``"0"``/``"1"``/``"2"`` when ``word`` is one of a letter's
    spellings, ``"all"`` when it is a spelling beyond the first three and the same spelling of
    another letter occurs in ``full``; None otherwise."""
    for k, own in enumerate(proto.letters):
        if word in own:
            pos = own.index(word)
            others = [proto.letters[j][pos] for j in range(3) if j != k]
            if pos > 2 and any(o in full for o in others):
                return "all"
            return str(k)
    return None


def _all_letters(proto: Protocol, text: str) -> bool:
    """The authors' ``check_all``: one spelling (beyond the first two) of all three letters."""
    a, b, c = proto.letters
    return any(a[i] in text and b[i] in text and c[i] in text for i in range(2, len(a)))


def _only(options: Sequence[str], text: str) -> int | None:
    """The one option whose text (lower-cased) occurs in ``text`` while the other two do not."""
    low = text.lower()
    inside = [o.lower() in low for o in options]
    for k in range(3):
        if inside[k] and not any(inside[j] for j in range(3) if j != k):
            return k
    return None


def _starts_with_option(options: Sequence[str], text: str) -> int | None:
    """Step 1: the response opens with an option's words (maybe followed by one punctuation
    word), or its first word is the option's last word capitalised."""
    words = text.split()
    for k, option in enumerate(options):
        n = len(option.split())
        head = words[:n]
        if head and head[-1] in PUNCTUATION and " ".join(head)[:-1] == option:
            return k
        if " ".join(head) == option:
            return k
        if words[0] == option.split()[-1].capitalize():
            return k
    return None


def _around(proto: Protocol, options: Sequence[str], text: str, phrases: Sequence[str], after: bool):
    """Steps 2 and 3: the word next to an answer phrase (the first after a ``before`` phrase,
    the last before an ``after`` one) as a letter or an option, else the one option named in
    that stretch of text."""
    for phrase in phrases:
        if phrase not in text:
            continue
        pieces = text.split(phrase)
        for piece in pieces[:-1] if after else pieces[1:]:
            piece = piece.strip()
            piece = piece.split("\n")[-1] if after else piece.split("\n")[0]
            words = piece.split()
            if words:
                word = words[-1] if after else words[0]
                found = _letter(proto, word)
                if found:
                    return found
                for k, option in enumerate(options):
                    if option in word:
                        return k
            only = _only(options, piece)
            if only is not None:
                return only
    return None


def _clean(text: str) -> str:
    text = text.strip()
    while text and text[0] in PUNCTUATION:
        text = text[1:].strip()
    if len(text) > 2 and text[-1] == ".":
        text = text[:-1]
    return text


def detect_answer(
    proto: Protocol, options: Sequence[str], text: object, unknown: int, language: str
) -> tuple[int | str | None, str]:
    """The authors' answer detection of one response: ``(answer, step)``.

    ``answer`` is the option index (an int where the authors return one, the strings
    ``"0"``/``"1"``/``"2"`` where their letter lookup does), ``"all"`` (every letter named), or
    None (nothing detected); their pipeline turns ``"all"`` and None into NaN, an invalid answer.
    ``step`` names the rule that decided (docs/parsing.md, "MBBQ").
    """
    if not isinstance(text, str):
        return None, "not-text"
    text = _clean(text)
    if not text:
        return None, "empty"
    opts = list(options)
    found = _starts_with_option(opts, text)
    if found is not None:
        return found, "starts-with-option"
    ph = proto.phrases[language]
    for step, phrases, after in (("before-phrase", ph.before, False), ("after-phrase", ph.after, True)):
        found = _around(proto, opts, text, phrases, after)
        if found is not None:
            return found, step
    if any(p in text for p in ph.unknown):
        return unknown, "unknown-phrase"
    if not _all_letters(proto, text):
        found = _only(opts, text)
        if found is not None:
            return found, "option-text"
    return _letters_only(proto, text)


def _letters_only(proto: Protocol, text: str) -> tuple[int | str | None, str]:
    """The authors' last steps, on letters alone: a letter spelling in the first 2-4 characters,
    the first or last character, all three letters, or one letter's spelling alone."""
    for i in (2, 3, 4):
        if found := _letter(proto, text[:i]):
            return found, "leading-letter"
    for step, char in (("first-char", text[0]), ("last-char", text[-1])):
        if found := _letter(proto, char, text):
            return found, step
    if _all_letters(proto, text):
        return "all", "all-letters"
    a, b, c = proto.letters
    for i in range(len(a) - 1, 1, -1):
        for k, own in enumerate((a, b, c)):
            others = [x for j, x in enumerate((a, b, c)) if j != k]
            if own[i] in text and not any(o[i] in text for o in others):
                return k, "one-letter"
    return None, "no-match"


def detected_option(answer: int | str | None) -> int:
    """The option index of a ``detect_answer`` result (their ``pd.to_numeric``), -1 for NaN."""
    if isinstance(answer, int):
        return answer
    if isinstance(answer, str) and answer in ("0", "1", "2"):
        return int(answer)
    return -1


# -- the targeted group --------------------------------------------------------------------------
#: The authors' remapping of group labels (``get_samples``): Gender_identity's F/M stereotyped
#: groups become the words the translated answer_info uses; SES's "low SES" becomes "lowSES".
_STEREOTYPED_REMAP = {
    ("Gender_identity", ("F",)): (
        "girl",
        "woman",
        "vrouw",
        "meisje",
        "kız",
        "kadın",
        "chica",
        "mujer",
        "maestra",
    ),
    ("Gender_identity", ("M",)): (
        "boy",
        "man",
        "jongen",
        "erkek çocuk",
        "adam",
        "chico",
        "hombre",
        "maestro",
    ),
    ("SES", ("low SES",)): ("lowSES",),
}
_GROUP_REMAP = {"F": "woman", "M": "man"}


def targeted_options(
    category: str, answer_info: Mapping[str, Sequence[str]], stereotyped: Sequence[str]
) -> list[int]:
    """The options whose ``answer_info`` group is one of the stereotyped groups, after the
    authors' remapping. One option: the targeted one; none or two: the authors give
    ``target_loc = 100`` (and score every non-unknown answer -1); the suite excludes such rows.
    """
    groups = _STEREOTYPED_REMAP.get((category, tuple(stereotyped)), tuple(stereotyped))
    out = []
    for k in range(3):
        group = answer_info[f"ans{k}"][1]
        if _GROUP_REMAP.get(group, group) in groups:
            out.append(k)
    return out
