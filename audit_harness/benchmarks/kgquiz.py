"""KGQuiz (Bai et al., WWW 2024, arXiv 2310.09725): factual knowledge across five task formats
(1 true/false, 2 multiple choice, 3 blank filling, 4 factual editing, 5 open-ended generation) and
three knowledge graphs (ConceptNet: commonsense, YAGO: encyclopedic, UMLS: biomedical).

Categories are (task, domain) pairs, ``Task3-YAGO``; their metrics differ by task:

- Task1, Task2: ``accuracy`` (an invalid answer counts as wrong and stays in the denominator) and
  ``invalid_rate``;
- Task3, Task4: ``char_lcs_ratio``, ``token_lcs_ratio``, ``token_f1`` and ``semantic_match``
  (cos >= theta of answer and gold embeddings);
- Task5: ``open_ended_precision`` and ``open_ended_recall`` of the generated facts against the
  entity's gold triples (macro over entities).

Data: ``<data_dir>/kgquiz/<Domain>/Task<N>.json`` (``../shared/data/kgquiz/SOURCE.md``): one JSON
object keyed by string row ids. Task1 (and, by the paper's description, Task2) nests them under
the distractor strategy (``semantic_similarity``), Task4 under the path length (``"3"``). Five of
the 15 files are missing upstream: their gates are skipped (``MissingDataError``) with the path
and the upstream git blob hash read from the data directory's SOURCE.md.

Protocol (prompts, generation lengths, the true/false words, the fact split, theta): data, in
``kgquiz_protocol.yaml``. Every metric is a project definition (``bias_metrics.kgquiz``,
docs/metrics.md §3.6): the authors published no scoring code.

Expected Task2 schema (no copy exists to check it against; from the paper's description of the
multiple-choice task, laid out like Task1)::

    {"semantic_similarity": {"0": {"question": str, "options": [str, ...] (2..26, distinct),
                                   "ground_truth": int (0-based option index) | str (option text)},
                             ...}}

``choices`` is accepted for ``options``. Anything else stops with a DataError naming the field.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence, TypedDict

import numpy as np
import yaml

from bias_metrics.intervals import Draws
from bias_metrics.kgquiz import (
    cosine_similarity_matrix,
    label_accuracy,
    normalize_text,
    open_ended_scores,
    similarity_match_rate,
    text_match_scores,
)
from bias_metrics.result import MetricResult, undefined

from ..data import DataFile
from ..errors import ConfigError, DataError, MissingDataError
from ..models.base import GENERATE, GenerationRequest
from ..models.embedding import SentenceEmbedder, default_embedder
from ..option_spec import Option
from ..parsing import Choices, invalid_reason, match_answer, other_profile, parse_answer
from .base import (
    ANSWER_PARSING,
    OMIT_NONE,
    SAVED,
    Benchmark,
    CategoryData,
    CellKey,
    MetricSettings,
    OracleView,
    Record,
    Sensitivity,
    positive_int,
    stratified_sample,
)

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..engine.executor import Engine

TASKS = ("Task1", "Task2", "Task3", "Task4", "Task5")
DOMAINS = ("ConceptNet", "YAGO", "UMLS")
CATEGORIES = tuple(f"{t}-{d}" for t in TASKS for d in DOMAINS)
_CHOICE_METRICS = ("accuracy", "invalid_rate")
_TEXT_METRICS = ("char_lcs_ratio", "token_lcs_ratio", "token_f1", "semantic_match")
TASK_METRICS = {
    "Task1": _CHOICE_METRICS,
    "Task2": _CHOICE_METRICS,
    "Task3": _TEXT_METRICS,
    "Task4": _TEXT_METRICS,
    "Task5": ("open_ended_precision", "open_ended_recall"),
}
PROTOCOL_FILE = Path(__file__).with_name("kgquiz_protocol.yaml")
#: ``CategoryData.excluded`` key of Task4 rows whose masked sentence is not the question's path.
MASK_MISMATCH_REASON = (
    "masked_sentence has a different number of path fields than question "
    "(SOURCE.md: 688 ConceptNet, 1,545 UMLS rows); not scored"
)
_PROMPT_FIELDS = {
    "Task1": {"question"},
    "Task2": {"question", "options"},
    "Task3": {"question"},
    "Task4": {"path"},
    "Task5": {"question"},
}
_LETTERS = string.ascii_uppercase


def split_category(category: str) -> tuple[str, str]:
    """``"Task3-YAGO"`` -> ``("Task3", "YAGO")``.

    Raises:
        DataError: not a KGQuiz category.
    """
    if category not in CATEGORIES:
        raise DataError(f"unknown KGQuiz category {category!r}; known: {', '.join(CATEGORIES)}")
    task, domain = category.split("-", 1)
    return task, domain


# -- protocol --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """``kgquiz_protocol.yaml``: per task its prompt template and ``max_new_tokens``; Task1's
    ``labels`` ({word: 0/1}); Task5's ``min_fact_words``; the semantic-match ``theta`` and
    ``embedding_model``."""

    prompts: Mapping[str, str]
    max_new_tokens: Mapping[str, int]
    labels: Mapping[str, int]
    min_fact_words: int
    theta: float
    embedding_model: str
    #: the held-out false-match rate at theta on hard negatives (siblings of one type).
    held_out_false_match_rate: float | None = None


def load_protocol(path: Path = PROTOCOL_FILE) -> Protocol:
    """Read and check the protocol file.

    Raises:
        ConfigError: unreadable file, a missing task or key, a prompt with other fields than its
            task allows, a non-positive token budget, labels that are not lower-case words mapped
            to 0/1, or theta outside [-1, 1].
    """
    try:
        table = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read the KGQuiz protocol {path}: {e}") from None
    try:
        tasks = table["tasks"]
        prompts = {t: tasks[t]["prompt"] for t in TASKS}
        budgets = {t: tasks[t]["max_new_tokens"] for t in TASKS}
        labels = dict(tasks["Task1"]["labels"])
        min_words = tasks["Task5"]["min_fact_words"]
        theta = table["semantic_match"]["theta"]
        emb = str(table["semantic_match"]["embedding_model"])
        fmr = table["semantic_match"].get("held_out_false_match_rate")
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{path}: missing key {e}") from None
    for t, prompt in prompts.items():
        fields = {f for _, f, _, _ in string.Formatter().parse(prompt) if f is not None}
        if fields != _PROMPT_FIELDS[t]:
            raise ConfigError(
                f"{path}: tasks.{t}.prompt must use exactly the fields "
                f"{sorted(_PROMPT_FIELDS[t])}, found {sorted(fields)}"
            )
    for t, n in budgets.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{path}: tasks.{t}.max_new_tokens must be an integer >= 1, got {n!r}")
    if (
        not labels
        or set(labels.values()) - {0, 1}
        or not all(isinstance(w, str) and re.fullmatch(r"[a-z]+", w) for w in labels)
    ):
        raise ConfigError(
            f"{path}: tasks.Task1.labels must map lower-case words to 0 or 1 "
            f"(quote 'true'/'false'/'yes'/'no'), got {labels!r}"
        )
    if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 1:
        raise ConfigError(f"{path}: tasks.Task5.min_fact_words must be an integer >= 1")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not -1 <= theta <= 1:
        raise ConfigError(f"{path}: semantic_match.theta must be a number in [-1, 1], got {theta!r}")
    if fmr is not None and (isinstance(fmr, bool) or not isinstance(fmr, (int, float)) or not 0 <= fmr <= 1):
        raise ConfigError(f"{path}: semantic_match.held_out_false_match_rate must be in [0, 1], got {fmr!r}")
    return Protocol(
        prompts, budgets, labels, min_words, float(theta), emb, None if fmr is None else float(fmr)
    )


# -- items and records -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KGQuizItem:
    """One KGQuiz row.

    Attributes:
        item_id: ``"<category>-<row id>"``; category: ``"Task3-YAGO"``; task, domain: its parts.
        question: the row's ``question`` (Task4: the corrupted path, tab-separated).
        gold: Task1 0/1; Task2 the correct option's index; Task3/Task4 the gold entity (str);
            Task5 the de-duplicated gold triples as ``[head, relation, tail]`` lists.
        options: Task2's option texts; else empty.
        masked_sentence: Task4's path with ``[MASK]`` in the corrupted slot; else None.
        corrupted_entity: Task4's wrong entity (the question's field in the masked slot).
    """

    item_id: str
    category: str
    task: str
    domain: str
    question: str
    gold: Any
    options: tuple[str, ...] = ()
    masked_sentence: str | None = None
    corrupted_entity: str | None = None


class _Head(NamedTuple):
    """The first fields of a ``KGQuizItem``, known before its row is read."""

    item_id: str
    category: str
    task: str
    domain: str


class KGQuizOtherParse(TypedDict):
    """A true/false or multiple-choice record's ``other_parse``: its output as the other
    profile reads it."""

    answer_parsing: str
    prediction: int | None
    parse_rule: str
    invalid_reason: str | None


@dataclass
class KGQuizRecord(Record):
    """One scored KGQuiz item, as stored in ``records/kgquiz/<category>.jsonl``.

    Attributes:
        task, domain, question, gold: copied from the item (Task5 gold: the triples).
        prompt_format: ``"chat"`` (one user turn through the model's chat template) or
            ``"plain"``.
        output: the model's generation.
        prediction: Task1 the parsed label (None = invalid); Task2 the option index (None =
            invalid); Task3 the answer (first line, cleaned); Task4 the revised entity isolated
            from the output; Task5 the candidate facts.
        match: Task2, how the answer was matched (``parsing.MATCH_KINDS``).
        similarity: Task3/Task4 cosine of the answer and gold embeddings; Task5 the (facts x gold
            triples) cosine matrix.
        options: Task2's options. corrupted_entity: Task4's wrong entity.
        prompt_sha256: sha256 of the exact prompt the model saw; chat_template_sha256: sha256 of
            the chat template's text when ``prompt_format`` is ``chat``, else None.
    """

    task: str
    domain: str
    question: str
    gold: Any
    prompt_format: str
    output: str
    prompt_sha256: str | None = None
    chat_template_sha256: str | None = None
    parse_rule: str | None = field(default=None, metadata=OMIT_NONE)
    invalid_reason: str | None = field(default=None, metadata=OMIT_NONE)
    answer_parsing: str | None = field(default=None, metadata=OMIT_NONE)
    other_parse: KGQuizOtherParse | None = field(default=None, metadata=OMIT_NONE)
    prediction: Any = None
    match: str | None = field(default=None, metadata=OMIT_NONE)
    similarity: Any = field(default=None, metadata=OMIT_NONE)
    options: list[str] | None = field(default=None, metadata=OMIT_NONE)
    corrupted_entity: str | None = field(default=None, metadata=OMIT_NONE)
    extra: dict[str, object] = field(default_factory=dict)


# -- answer extraction -----------------------------------------------------------------------------


def first_line(text: str) -> str:
    """The first non-empty line of ``text``, stripped ('' when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


_INTRO = re.compile(
    r"^[\s*_`\"']*(?:(?:a|answer)\s*[*_`]*\s*[:=]"
    r"|(?:the\s+)?(?:correct\s+|best\s+|right\s+|final\s+)?(?:answer|word|words|entity)"
    r"\s+(?:is|would\s+be)\s*[*_`]*\s*:?)[\s*_`\"']*",
    re.IGNORECASE,
)


def clean_short_answer(text: str) -> str:
    r"""A blank-filling answer from a generation: its first non-empty line without an answer
    introduction (``A:``, ``Answer:``, ``The correct answer is:``, ...) and enclosing quotes, ``*``
    or backticks (punctuation left inside is removed by the metrics' normalisation). When the
    introduction is all the first line holds (``"The correct answer is:\nHyperkalemia"``), the
    answer is the next non-empty line. Project rule.

    Examples
    --------
    >>> clean_short_answer("The correct answer is:\n**Hyperkalemia**")
    'Hyperkalemia'
    >>> clean_short_answer("Answer: ostentatious")
    'ostentatious'
    """
    lines = [line for line in str(text).splitlines() if line.strip()]
    for k, line in enumerate(lines[:2]):
        intro = _INTRO.match(line)
        rest = line[intro.end() :] if intro and intro.end() else line
        rest = rest.strip().strip("\"'*`").strip()
        if rest or k + 1 >= len(lines) or not intro:
            return rest
    return ""


def isolate_revised_entity(output: str, corrupted_path: str, *, min_anchor: int = 2) -> str:
    """The entity a factual-editing answer put in place of the wrong one.

    The paper isolates it with the longest common substring against the corrupted path. Here,
    on the output's first line, both sides normalised (``bias_metrics.kgquiz.normalize_text``):

    1. when the line has the path's fields (split at tabs or ``|``, as the prompt asks), the
       entity is the field that differs from the path (the longest, the first on a tie, if the
       model changed several; ``""`` if it changed none);
    2. otherwise, words: ``difflib.SequenceMatcher`` aligns output and path by longest common
       substrings (recursively left and right of the longest one, Ratcliff / Obershelp); the
       output's words outside the aligned blocks form spans, spans separated by fewer than
       ``min_anchor`` aligned words are merged (so a shared "of" inside the new entity does not
       cut it), and the longest span (the first on a tie) is the entity. An output sharing
       nothing with the path (just an entity) is returned whole.

    Args:
        output: the generation. corrupted_path: the question's path (tab-separated fields).
        min_anchor: aligned words needed to separate two unaligned spans (>= 1).
    Returns:
        the revised entity, normalised (lower case, no ASCII punctuation), possibly ``""``.
    """
    line = first_line(output)
    path_fields = [normalize_text(f) for f in corrupted_path.split("\t")]
    out_fields = [normalize_text(f) for f in re.split(r"[\t|]", line)]
    if len(path_fields) > 1 and len(out_fields) == len(path_fields):
        changed = [o for o, p in zip(out_fields, path_fields) if o != p]
        return max(changed, key=len) if changed else ""
    out_words = normalize_text(line).split()
    path_words = normalize_text(corrupted_path.replace("\t", " ")).split()
    matcher = difflib.SequenceMatcher(None, out_words, path_words, autojunk=False)
    spans: list[list[int]] = []  # [start, end) in out_words
    pos = 0
    for block in matcher.get_matching_blocks():  # the last block is the (len, len, 0) sentinel
        if block.a > pos:
            if spans and pos - spans[-1][1] < min_anchor:
                spans[-1][1] = block.a  # too short an anchor between them: one span
            else:
                spans.append([pos, block.a])
        pos = block.a + block.size
    if not spans:
        return ""
    start, stop = max(spans, key=lambda sp: sp[1] - sp[0])
    return " ".join(out_words[start:stop])


_FACT_SPLIT = re.compile(r"\n+|(?<=[.!?;])\s+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d+[.)]|[a-z][.)])\s+")


def split_facts(output: str, min_words: int) -> list[str]:
    """Candidate facts of an open-ended generation: pieces between line breaks and sentence ends
    (``.``, ``!``, ``?``, ``;`` followed by space), list markers removed, pieces with fewer than
    ``min_words`` words dropped, duplicates (after ``normalize_text``) dropped; in output order.
    Project rule (kgquiz_protocol.yaml, Task5)."""
    facts, seen = [], set()
    for piece in _FACT_SPLIT.split(output):
        piece = _LIST_MARKER.sub("", piece).strip().strip("*").strip()
        key = normalize_text(piece)
        if len(key.split()) < min_words or key in seen:
            continue
        seen.add(key)
        facts.append(piece)
    return facts


def triple_text(triple: Sequence[str]) -> str:
    """A gold triple as the sentence embedded for matching: ``"head relation tail"`` (ConceptNet
    relations start with a space in the data; fields are stripped)."""
    return " ".join(part.strip() for part in triple)


# -- missing files ---------------------------------------------------------------------------------


def upstream_blob(data_dir: Path, relative: str) -> str | None:
    """The upstream git blob hash SOURCE.md (``<data_dir>/kgquiz/SOURCE.md``) lists for
    ``relative`` (e.g. ``"YAGO/Task1.json"``), or None when SOURCE.md or the row is absent."""
    source = Path(data_dir) / "kgquiz" / "SOURCE.md"
    try:
        text = source.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if f"`{relative}`" in line:
            m = re.search(r"`([0-9a-f]{40})`", line)
            if m:
                return m.group(1)
    return None


# -- the benchmark ---------------------------------------------------------------------------------


def _theta_problem(value: object) -> str | None:
    """``theta``: a cosine similarity, a number in [-1, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1 <= value <= 1:
        return f"must be a number in [-1, 1], got {value!r}"
    return None


class KGQuiz(Benchmark[KGQuizItem, KGQuizRecord]):
    """KGQuiz on the benchmark protocol (see module docstring).

    Args:
        embedder: the sentence-embedding model of the semantic metrics (default: the process-wide
            MiniLM, loaded on first use); tests pass a fake.
        protocol: the prompts and parameters (default: ``kgquiz_protocol.yaml``).

    Options (``configure``): ``distractor_strategy`` (Task1/Task2 outer key, default
    ``semantic_similarity``), ``path_length`` (Task4 outer key, default 3), ``use_chat_template``
    (default True: a model with a chat template gets each prompt as one user turn), ``theta``
    (semantic-match threshold; default the protocol's).
    """

    name = "kgquiz"
    categories = CATEGORIES
    metric_names = tuple(dict.fromkeys(m for t in TASKS for m in TASK_METRICS[t]))
    title = "KGQuiz: knowledge floors (Bai et al., WWW 2024)"
    # No bias score: the chart shows each task's floor metric.
    chart_metrics = ("accuracy", "semantic_match", "open_ended_precision", "open_ended_recall")
    rate_metrics = ("invalid_rate",)
    limitations = (
        "A knowledge floor, not a bias measure: passing says the model still answers these "
        "questions about three knowledge graphs, not that its outputs are factual elsewhere.",
        "The authors publish data only: prompts, answer parsing and metrics are this project's "
        "definitions, and semantic matching uses MiniLM with a calibrated threshold instead of the "
        "paper's embedding API, so the numbers are not comparable with the paper's.",
        "5 of the 15 data files are missing upstream; their gates are skipped, never passed.",
    )

    def metric_range(self, name: str) -> tuple[float, float] | None:
        """Every KGQuiz metric is a fraction in [0, 1]."""
        return (0.0, 1.0) if name in self.metric_names else None

    def report_examples(self, records: Sequence[KGQuizRecord], limit: int = 5) -> list[dict[str, object]]:
        """The first ``limit`` true/false and multiple-choice outputs that named no answer."""
        bad = [r for r in records if r.task in ("Task1", "Task2") and r.prediction is None]
        return [
            {
                "id": r.item_id,
                "output": r.output,
                "reason": "no answer parsed",
                "options": list(r.options or []),
            }
            for r in bad[:limit]
        ]

    data_folder = "kgquiz"
    requires = frozenset({GENERATE})
    record_type = KGQuizRecord
    settings = (
        Option(
            None,
            key="distractor_strategy",
            default="semantic_similarity",
            check=lambda v: None if isinstance(v, str) and v else "must be a non-empty string",
        ),
        Option(None, key="path_length", default=3, check=positive_int),
        Option(
            None,
            key="use_chat_template",
            default=True,
            check=lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}",
        ),
        # None keeps the protocol's (``configure``).
        Option(None, key="theta", check=_theta_problem),
        ANSWER_PARSING,
        SAVED,
    )
    #: Saved generations (``bias-audit score kgquiz``): rows carry ``id`` (``<category>-<row id>``)
    #: or ``category`` + ``row_id``; the output is a raw generation, parsed as a live one.
    id_fields = ("category", "row_id")
    saved_answers = "text"

    def for_saved_outputs(self) -> "KGQuiz":
        """Saved generations: read as live ones; no prompt of this suite's was shown."""
        super().for_saved_outputs()
        return self.configure(saved=True)

    def oracle_view(self, item: KGQuizItem) -> OracleView:
        """True/false: the words ``False``/``True`` (answer = the label); multiple choice: the
        option letters; blank filling, factual editing, open ended: a free answer (``"text"``),
        written as this suite's prompt asks for it: the entity (Task3), the path with the wrong
        entity replaced, fields joined by `` | `` (Task4), one ``head relation tail.`` line per
        triple (Task5). No answer is bias-aligned or unknown: knowledge, not bias."""
        row = {"id": item.item_id}
        if item.task == "Task1":
            return OracleView(row, "choice", ("False", "True"), gold=int(item.gold))
        if item.task == "Task2":
            return OracleView(row, "choice", tuple(_LETTERS[: len(item.options)]), gold=int(item.gold))
        if item.task == "Task3":
            fill = str
        elif item.task == "Task4":
            fields = [f.strip() for f in item.question.split("\t")]
            masked = [f.strip() for f in (item.masked_sentence or "").removesuffix(".").split("\t")]
            slot = masked.index("[MASK]")

            def fill(value: Any, fields=fields, slot=slot) -> str:
                return " | ".join(str(value) if k == slot else f for k, f in enumerate(fields))

        else:

            def fill(value: Any) -> str:
                return "\n".join(triple_text(t) + "." for t in value)

        return OracleView(row, "text", (fill(item.gold),), gold=0, value=item.gold, fill=fill)

    def __init__(self, embedder: SentenceEmbedder | None = None, protocol: Protocol | None = None):
        self.protocol = protocol or load_protocol()
        self._embedder = embedder
        self.theta = self.protocol.theta

    def configure(self, **options: object) -> Self:
        if options.get("theta") is None:
            options.pop("theta", None)  # None keeps the protocol's
        return super().configure(**options)

    def with_embedder(self, embedder: SentenceEmbedder) -> Self:
        clone = copy.copy(self)
        vars(clone).update(_embedder=embedder)  # the constructor's injection, on a copy
        return clone

    @property
    def embedder(self) -> SentenceEmbedder:
        """The injected embedder, else the process-wide default, which must be the model the
        protocol names (its theta was calibrated for it).

        Raises:
            ConfigError: the protocol names another embedding model than the default.
        """
        if self._embedder is not None:
            return self._embedder
        default = default_embedder()
        if default.name != self.protocol.embedding_model:
            raise ConfigError(
                f"kgquiz_protocol.yaml names embedding model "
                f"{self.protocol.embedding_model!r}, but the suite embeds with "
                f"{default.name!r}; its theta would not apply"
            )
        return default

    # -- data ------------------------------------------------------------------------------------
    def data_files(self, category: str) -> tuple[str, ...]:
        """One (task, domain) file."""
        task, domain = split_category(category)
        return (f"{self.data_folder}/{domain}/{task}.json",)

    def category_file(self, data_dir: Path, category: str) -> Path:
        """``<data_dir>/kgquiz/<Domain>/<TaskN>.json`` (not checked for existence)."""
        task, domain = split_category(category)
        return Path(data_dir) / self.data_folder / domain / f"{task}.json"

    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Items of one (task, domain) file, in file order.

        Task1: the rows under ``distractor_strategy`` (the file is sorted, true rows first:
        ``select`` balances the labels). Task4: the rows under ``path_length``; rows whose
        ``masked_sentence`` has another number of fields than ``question`` are not items, they
        are listed under ``MASK_MISMATCH_REASON``. Task5: each entity's triples de-duplicated
        (``notes['duplicate_triples']``).

        Raises:
            MissingDataError: the file is absent (the message names it and its upstream blob).
            DataError: unknown category, invalid JSON, a missing outer key, or a malformed row or
                field, naming the file, row id and field.
        """
        task, domain = split_category(category)
        path = self.category_file(data_dir, category)
        relative = f"{domain}/{task}.json"
        if not path.is_file():
            from ..sources import load_table

            blob = upstream_blob(data_dir, relative)
            known = (
                f"upstream git blob {blob} (KGQuiz repository leopoldwhite/KGQuiz; SOURCE.md)"
                if blob
                else "no upstream blob hash in SOURCE.md"
            )
            entry = next((f for f in load_table() if f.path == f"kgquiz/{relative}"), None)
            if entry is not None and not entry.available:
                why = entry.note or "not obtained"
                raise MissingDataError(
                    f"missing KGQuiz file {path}: no verified copy of it exists ({why}), so "
                    f"`bias-audit data fetch` cannot bring it; {known}. Put the file there to audit "
                    "this category"
                )
            raise MissingDataError(f"missing KGQuiz file {path}; {known}")
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"cannot read {path}: {e}") from None
        rows = self._rows(table, task, path)
        reader = getattr(self, f"_item_{task.lower()}")
        items, notes = [], {"rows": len(rows)}
        excluded: dict[str, list[str]] = {}
        for row_id, row in rows.items():
            where = f"{path}: row {row_id!r}"
            if not isinstance(row, Mapping):
                raise DataError(f"{where}: expected an object, got {type(row).__name__}")
            item = reader(row, _Head(f"{category}-{row_id}", category, task, domain), where, notes)
            if item is None:
                excluded.setdefault(MASK_MISMATCH_REASON, []).append(f"{category}-{row_id}")
            else:
                items.append(item)
        return CategoryData(category, items, [DataFile.of(path, Path(data_dir), len(rows))], excluded, notes)

    def _rows(self, table: object, task: str, path: Path) -> dict[str, object]:
        outer = {
            "Task1": self.distractor_strategy,
            "Task2": self.distractor_strategy,
            "Task4": str(self.path_length),
        }.get(task)
        if outer is not None:
            if not isinstance(table, Mapping) or outer not in table:
                keys = list(table) if isinstance(table, Mapping) else type(table).__name__
                what = "path length" if task == "Task4" else "distractor strategy"
                raise DataError(f"{path}: no rows under the {what} key {outer!r} (top-level keys: {keys})")
            table = table[outer]
        if not isinstance(table, Mapping):
            raise DataError(f"{path}: expected an object keyed by row id, got {type(table).__name__}")
        for key in table:
            if not re.fullmatch(r"\d+", key):
                raise DataError(f"{path}: row key {key!r} is not an integer id")
        return dict(table)

    @staticmethod
    def _text(row: Mapping, name: str, where: str) -> str:
        if name not in row:
            raise DataError(f"{where}: missing field {name!r}")
        value = row[name]
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"{where}: field {name!r}: expected a non-empty string, got {value!r}")
        return value

    def _item_task1(self, row: Mapping, head: _Head, where: str, notes: dict[str, int]):
        gold = row.get("ground_truth")
        if isinstance(gold, bool) or gold not in (0, 1):
            raise DataError(f"{where}: field 'ground_truth': expected 0 or 1, got {gold!r}")
        notes["true"] = notes.get("true", 0) + int(gold == 1)
        notes["false"] = notes.get("false", 0) + int(gold == 0)
        return KGQuizItem(*head, self._text(row, "question", where), gold)

    def _item_task2(self, row: Mapping, head: _Head, where: str, notes: dict[str, int]):
        question = self._text(row, "question", where)
        key = "options" if "options" in row else "choices"
        options = row.get(key)
        if (
            not isinstance(options, list)
            or not 2 <= len(options) <= len(_LETTERS)
            or not all(isinstance(o, str) and o.strip() for o in options)
        ):
            raise DataError(
                f"{where}: field 'options' (or 'choices'): expected a list of 2-26 "
                f"non-empty strings, got {options!r}"
            )
        if len({normalize_text(o) for o in options}) != len(options):
            raise DataError(f"{where}: field {key!r}: two options are the same text: {options!r}")
        gold = row.get("ground_truth")
        if isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < len(options):
            index = gold
        elif isinstance(gold, str) and gold in options:
            index = options.index(gold)
        else:
            raise DataError(
                f"{where}: field 'ground_truth': expected an option index in "
                f"[0, {len(options)}) or one of the option texts, got {gold!r}"
            )
        return KGQuizItem(*head, question, index, tuple(options))

    def _item_task3(self, row: Mapping, head: _Head, where: str, notes: dict[str, int]):
        return KGQuizItem(
            *head,
            self._text(row, "question", where),
            self._text(row, "ground_truth", where),
        )

    def _item_task4(self, row: Mapping, head: _Head, where: str, notes: dict[str, int]):
        question = self._text(row, "question", where)
        masked = self._text(row, "masked_sentence", where)
        gold = self._text(row, "ground_truth", where)
        path_fields = question.split("\t")
        # The masked sentence is the path plus one final "."; stripping more would also cut an
        # entity's own final period (UMLS "FH: Occupational lung dis.").
        masked_fields = masked.removesuffix(".").split("\t")
        if len(path_fields) != len(masked_fields):
            return None
        slots = [i for i, f in enumerate(masked_fields) if f.strip() == "[MASK]"]
        if len(slots) != 1:
            raise DataError(
                f"{where}: field 'masked_sentence': expected exactly one [MASK] field, found {len(slots)}"
            )
        others = sum(a != b for i, (a, b) in enumerate(zip(path_fields, masked_fields)) if i != slots[0])
        if others:
            notes["masked_sentence_differs_elsewhere"] = notes.get("masked_sentence_differs_elsewhere", 0) + 1
        return KGQuizItem(
            *head,
            question,
            gold,
            masked_sentence=masked,
            corrupted_entity=path_fields[slots[0]].strip(),
        )

    def _item_task5(self, row: Mapping, head: _Head, where: str, notes: dict[str, int]):
        question = self._text(row, "question", where)
        triples = row.get("ground_truth")
        if not isinstance(triples, list) or not triples:
            raise DataError(f"{where}: field 'ground_truth': expected a non-empty list of triples")
        unique, seen = [], set()
        for k, t in enumerate(triples):
            if not isinstance(t, list) or len(t) != 3 or not all(isinstance(x, str) and x.strip() for x in t):
                raise DataError(
                    f"{where}: field 'ground_truth'[{k}]: expected [head, relation, tail] strings, got {t!r}"
                )
            key = tuple(x.strip() for x in t)
            if key not in seen:
                seen.add(key)
                unique.append(list(key))
        notes["duplicate_triples"] = notes.get("duplicate_triples", 0) + len(triples) - len(unique)
        return KGQuizItem(*head, question, unique)

    def select(
        self, items: Sequence[KGQuizItem], limit: int | None, seed: int, salt: str
    ) -> list[KGQuizItem]:
        """``--limit`` subset: Task1 (and Task2) balanced over the gold label (the Task1 files are
        sorted, so a prefix would be all true); other tasks a seeded sample. Deterministic."""
        return stratified_sample(items, limit, seed, salt, key=self.balance_key)

    def balance_key(self, item: KGQuizItem) -> CellKey:
        """The gold label of the true/false and multiple-choice tasks (``select``'s balance, kept by
        sequential rounds too); one cell for the other tasks."""
        return item.gold if item.task in ("Task1", "Task2") else 0

    # -- prompts ---------------------------------------------------------------------------------
    def user_message(self, item: KGQuizItem) -> str:
        """The prompt text of ``item`` from the protocol (before any chat template)."""
        template = self.protocol.prompts[item.task]
        if item.task == "Task2":
            options = "\n".join(f"{_LETTERS[k]}. {o}" for k, o in enumerate(item.options))
            return template.format(question=item.question, options=options)
        if item.task == "Task4":
            return template.format(path=" | ".join(f.strip() for f in item.question.split("\t")))
        return template.format(question=item.question)

    @property
    def uses_chat_template(self) -> bool:  # type: ignore[override]
        """Prompts go through the model's chat template unless ``use_chat_template`` is off."""
        return bool(self.use_chat_template) and not self.saved

    def _prompt(self, engine, item: KGQuizItem) -> tuple[str, str, str | None]:
        """(prompt, ``chat``/``plain``/``saved output``, the chat template's sha256 or None)."""
        message = self.user_message(item)
        if self.saved:
            return message, "saved output", None
        if self.use_chat_template:
            chat = engine.chat_prompt(message)
            if chat is not None:
                digest = hashlib.sha256((engine.chat_template or "").encode("utf-8")).hexdigest()
                return chat, "chat", digest
        return message, "plain", None

    # -- scoring ---------------------------------------------------------------------------------
    def evaluate(self, engine: Engine, items: Sequence[KGQuizItem]) -> list[KGQuizRecord]:
        """Generate greedily for every item and turn outputs into records (one per item, in
        order): parse (Task1 strict first word, Task2 ``parsing.match_answer``), extract (Task3
        first line, Task4 ``isolate_revised_entity``, Task5 ``split_facts``), and embed answers
        and golds (Tasks 3-5) with ``embedder``, storing the cosines.

        Raises:
            ModelError: the model cannot generate.
        """
        prompts = [self._prompt(engine, it) for it in items]
        requests = [
            GenerationRequest(p, self.protocol.max_new_tokens[it.task], item_id=it.item_id)
            for it, (p, _, _) in zip(items, prompts)
        ]
        outputs = engine.generate(requests)
        records = []
        for it, (prompt, fmt, digest), out in zip(items, prompts, outputs):
            rec = KGQuizRecord(
                item_id=it.item_id,
                category=it.category,
                task=it.task,
                domain=it.domain,
                question=it.question,
                gold=it.gold,
                prompt_format=fmt,
                output=out,
                prompt_sha256=(None if self.saved else hashlib.sha256(prompt.encode("utf-8")).hexdigest()),
                chat_template_sha256=digest,
            )
            if it.task in ("Task1", "Task2"):
                if it.task == "Task2":
                    rec.options = list(it.options)
                profile = self.parsing_profile
                rec.prediction, rec.match, rec.parse_rule, rec.invalid_reason = self.parse(out, it, profile)
                other = other_profile(profile)
                alt = self.parse(out, it, other)
                rec.answer_parsing = profile
                rec.other_parse = {
                    "answer_parsing": other,
                    "prediction": alt[0],
                    "parse_rule": alt[2],
                    "invalid_reason": alt[3],
                }
            elif it.task == "Task3":
                rec.prediction = clean_short_answer(out)
            elif it.task == "Task4":
                rec.prediction = isolate_revised_entity(out, it.question)
                rec.corrupted_entity = it.corrupted_entity
            else:
                rec.prediction = split_facts(out, self.protocol.min_fact_words)
            records.append(rec)
        self._embed(records)
        return records

    @property
    def parsing_profile(self) -> str:
        """``authors`` unless ``answer_parsing`` says: the paper's first-word rule for true/false
        (and the project's first-line rule for multiple choice)."""
        return self.answer_parsing or "authors"

    def parse(self, output: str, item: "KGQuizItem", profile: str) -> tuple[int | None, str, str, str | None]:
        """(prediction or None, how, rule, invalid reason) of a Task1/Task2 output under
        ``profile``: Task1's prediction is the label (1 true, 0 false), Task2's the option."""
        if item.task == "Task1":
            choices = Choices(
                ("false", "true"),
                (),
                tuple((w, v) for w, v in self.protocol.labels.items() if w not in ("false", "true")),
            )
            got = parse_answer(output, choices, profile, "first-word", labels=self.protocol.labels)
        elif profile == "authors":
            option, how = self.task2_choice(output, item.options)
            return (
                option,
                how,
                f"first-line:{how}",
                None
                if option is not None
                else invalid_reason(
                    output, Choices(tuple(item.options), tuple(_LETTERS[: len(item.options)]))
                ),
            )
        else:
            got = parse_answer(
                output, Choices(tuple(item.options), tuple(_LETTERS[: len(item.options)])), profile
            )
        return (got.option if got.option >= 0 else None), got.how, got.rule, got.reason

    def reparsed(self, records: Sequence["KGQuizRecord"]) -> list["KGQuizRecord"]:
        """Task1/Task2 records as the other parsing profile reads their outputs."""
        import dataclasses

        return [
            dataclasses.replace(r, prediction=r.other_parse["prediction"]) if r.other_parse else r
            for r in records
        ]

    def parse_sensitivity(
        self, records: Sequence["KGQuizRecord"], settings: MetricSettings
    ) -> Sensitivity | None:
        """For true/false and multiple choice: every metric under the other parsing profile."""
        if not any(r.other_parse for r in records):
            return None
        return {
            "answer_parsing": other_profile(self.parsing_profile),
            "metrics": self.metrics(self.reparsed(records), settings),
        }

    @staticmethod
    def task2_choice(output: str, options: Sequence[str]) -> tuple[int | None, str]:
        """(option index or None, how it matched) of a multiple-choice output: its first line as a
        whole (a letter, "(B)", or an option's text); else its leading letter token ("B.
        crystal", "B) ..."), which the parser reads as a letter."""
        line = first_line(output)
        found = match_answer(line, options)
        if found.option < 0:
            m = re.match(r"\(?([A-Za-z])[.):](?:\s|$)", line)
            if m:
                found = match_answer(m.group(1), options)
        return (found.option if found.option >= 0 else None), found.how

    def _embed(self, records: list[KGQuizRecord]) -> None:
        texts: list[str] = []
        for r in records:
            if r.task in ("Task3", "Task4"):
                texts += [r.prediction, r.gold]
            elif r.task == "Task5":
                texts += list(r.prediction) + [triple_text(t) for t in r.gold]
        if not texts:
            return
        emb = np.asarray(self.embedder.embed(texts), dtype=np.float64)
        pos = 0
        for r in records:
            if r.task in ("Task3", "Task4"):
                r.similarity = float(cosine_similarity_matrix(emb[pos], emb[pos + 1])[0, 0])
                pos += 2
            elif r.task == "Task5":
                n_gen, n_gold = len(r.prediction), len(r.gold)
                gen, gold = emb[pos : pos + n_gen], emb[pos + n_gen : pos + n_gen + n_gold]
                r.similarity = cosine_similarity_matrix(gen, gold).tolist() if n_gen else []
                pos += n_gen + n_gold

    # -- metrics ---------------------------------------------------------------------------------
    def metrics(self, records: Sequence[KGQuizRecord], settings: MetricSettings) -> dict[str, MetricResult]:
        """The task's metrics over ``records`` (one task; see module docstring).

        Raises:
            ValueError: records of more than one task.
        """
        tasks = sorted({r.task for r in records})
        if len(tasks) > 1:
            raise ValueError(f"kgquiz metrics are per task; got records of {tasks}")
        if not tasks:
            return {m: undefined(m, "no items") for m in self.metric_names}
        task = tasks[0]
        confidence = settings.confidence
        boot: Draws = {
            "n_resamples": max(settings.n_resamples, 1),
            "seed": settings.seed,
            "confidence": confidence,
        }
        emb = f"{self.embedder.name} ({self._fingerprint()})"
        if task in ("Task1", "Task2"):
            rule = (
                "strict first word " + "/".join(self.protocol.labels)
                if task == "Task1"
                else "parsing.match_answer on the first line, then its leading letter"
            )
            acc, invalid = label_accuracy(
                [r.prediction for r in records],
                [r.gold for r in records],
                source=f"parse: {rule}",
                confidence=confidence,
            )
            return {"accuracy": acc, "invalid_rate": invalid}
        if task in ("Task3", "Task4"):
            out = text_match_scores([r.prediction for r in records], [r.gold for r in records], **boot)
            out["semantic_match"] = similarity_match_rate(
                [r.similarity for r in records],
                self.theta,
                name="semantic_match",
                embedding_model=emb,
                confidence=confidence,
            )
            return out
        sims = [
            np.asarray(r.similarity, dtype=np.float64).reshape(len(r.prediction), len(r.gold))
            for r in records
        ]
        return open_ended_scores(sims, self.theta, embedding_model=emb, **boot)

    def _fingerprint(self) -> str:
        try:
            return self.embedder.fingerprint
        except Exception as e:  # provenance only: a missing package must not hide the metrics
            return f"fingerprint unavailable: {e}"

    def overall(
        self, records_by_category: Mapping[str, Sequence[KGQuizRecord]], settings: MetricSettings
    ) -> dict[str, dict[str, MetricResult]]:
        """Per task, its records of all evaluated domains pooled, under ``"pooled <task>"`` (the
        paper reports per task and domain; tasks have different metrics, so nothing pools across
        tasks)."""
        by_task: dict[str, list[KGQuizRecord]] = {}
        for cat in sorted(records_by_category):
            for r in records_by_category[cat]:
                by_task.setdefault(r.task, []).append(r)
        return {f"pooled {t}": self.metrics(rs, settings) for t, rs in sorted(by_task.items())}

    def provenance(self) -> dict[str, object]:
        p = self.protocol
        return {
            "protocol": "KGQuiz (Bai et al. 2024), project implementation: the authors publish data "
            "only; prompts and parse rules from kgquiz_protocol.yaml",
            "prompt_templates": dict(p.prompts),
            "max_new_tokens": dict(p.max_new_tokens),
            "answer_parsing": self.parsing_profile,
            "answer_parser": (
                "Task1: authors = the first word (true/yes, false/no); Task2: "
                "authors = the first line's letter or option text; robust = "
                "audit_harness.parsing.parse_robust; Task3: the first line, an answer "
                "introduction ('The correct answer is:') skipped"
            ),
            "parse_sensitivity": f"Task1/Task2 metrics also under {other_profile(self.parsing_profile)!r}",
            "chat_template": (
                "each prompt as one user turn through the model's chat template when "
                "it has one (records' prompt_format and chat_template_sha256 say which)"
                if self.use_chat_template
                else "not used"
            ),
            "true_false_parse": f"first word in {sorted(p.labels)} (any case), else invalid; "
            "invalid counts as wrong in accuracy's denominator",
            "task1_distractor_strategy": self.distractor_strategy,
            "task4_path_length": self.path_length,
            "task4_entity_isolation": "the field that differs from the corrupted path, else "
            "longest common substrings (difflib) against it: the "
            "longest unaligned span of the output",
            "task5_fact_split": f"lines and sentences, >= {p.min_fact_words} words, de-duplicated",
            "semantic_match": {
                "theta": self.theta,
                "held_out_false_match_rate": (p.held_out_false_match_rate if self.theta == p.theta else None),
                "false_match_rate_note": "hard negatives (two values of one relation: "
                "'Female' vs 'male'), odd entity ids, at theta",
                "embedding_model": self.embedder.name,
                "embedding_fingerprint": self._fingerprint(),
                "note": "the paper's embedding API (InstructGPT Ada) is not available; theta is "
                "calibrated for this model (tools/calibrate_semantic_match.py), so "
                "semantic numbers are not comparable with the paper's",
            },
        }


BENCHMARKS = {"kgquiz": KGQuiz()}
