"""KoBBQ (Jin et al., TACL 2024; arXiv 2307.16778): Korean BBQ, 12 categories, 2,280 test rows.

Data: ``<data_dir>/kobbq/data/KoBBQ_test_samples.tsv`` and the 5 prompt templates of
``kobbq/evaluation/0_evaluation_prompts.tsv`` (``../shared/data/kobbq/SOURCE.md``). The protocol is
upstream's ``evaluation/1_preprocess.py`` ... ``5_evaluation.py`` (docs/metrics.md §1.3):

- every test row is asked under each prompt template (1-5) with its own "unknown" phrase in place
  of ``알 수 없음``, and under the 3 circulant option orders (``PERMUTATIONS``), each as an
  independent item (micro-average, no voting): item id ``<sample_id>-p<prompt>-o<permutation>``;
- the model input is ``instruction\\n\\n<context prefix><context>\\n<question prefix><question>\\n
  <a label><A>\\n<b label><B>\\n<c label><C>\\n<answer prefix>`` as one user turn through the model's
  chat template (plain text when it has none);
- ``generate`` mode (upstream's): greedy, at most 30 new tokens, no stop string (upstream has
  none; the parser reads the leading span, and its later rules look at the whole output), parsed by
  ``parsing.parse_choice``; an output naming no option is out-of-choice (OOC), counted by
  ``out_of_choice_rate`` and left out of the other metrics;
- ``letter`` mode (the paper's letter reading, for models too weak to follow the instruction):
  letter log-probs (``parsing.letters``, ``Engine.letter_logprobs``): the first answer token's
  log-probability of each option letter right after the same prompt (its best variant: ``A``,
  `` A``, ``(A``, `` (A``), argmax; exact in process, a chat API's ``top_logprobs`` on a server,
  where a read with no option letter among the candidates is out of choice (``NO_LETTER``).
  Under ``both``, the generation's first step scores the letters (the same distribution). Its
  item ids and metric names end in ``-letter``; ``both`` runs the two on the same rows.

Metrics (flavour ``kobbq`` of ``bias_metrics.bbq_family``) over all (prompt, permutation) items of a
category, the paper's numbers; then the same per prompt template (``<metric>_p<k>``) and per
permutation (``<metric>_o<j>``), and the spread (max - min) of each bias score over the prompt
templates (``<score>_spread_prompts``) and over the permutations (``<score>_spread_permutations``).
Bootstrap intervals resample whole KoBBQ templates (``<category>-<template number>``). A test row's
variants are one unit, not 15 independent items: ``n`` (and so a gate's ``min_n``) counts the
distinct test rows, ``n_variants`` the (prompt, permutation) items, and the intervals weigh each
row once (``bias_metrics.bbq_family.metrics_from_counts``' ``row_counts``).
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import hashlib
import math
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from bias_metrics.bbq_family import grouped_cluster_counts, grouped_row_counts, metrics_mean_over_groups
from bias_metrics.bbq_family import metric_names as flavour_metric_names
from bias_metrics.result import MetricResult

from ..data import DataFile, require_file
from ..errors import ConfigError, DataError, PredictionError
from ..models.base import GENERATE, LETTER_LOGPROBS, GenerationRequest
from ..option_spec import Option
from ..parsing import Choices, other_profile, parse_fields
from ..parsing.letters import variants
from .base import (
    ANSWER_PARSING,
    METRIC_FLAVOUR,
    SAVED,
    CategoryData,
    MetricSettings,
    SequentialForm,
    positive_int,
)
from .bbq_family import BBQFamilyBenchmark, MCItem, MCRecord, agree, balanced_sample
from .bbq_family_sequential import kobbq_form

if TYPE_CHECKING:
    from ..engine.executor import Engine

CATEGORIES = (
    "age",
    "disability_status",
    "gender_identity",
    "physical_appearance",
    "race_ethnicity_nationality",
    "religion",
    "ses",
    "sexual_orientation",
    "domestic_area_of_origin",
    "family_structure",
    "political_orientation",
    "educational_background",
)
SAMPLES_FILE = Path("kobbq/data/KoBBQ_test_samples.tsv")
PROMPTS_FILE = Path("kobbq/evaluation/0_evaluation_prompts.tsv")
SAMPLE_COLUMNS = (
    "sample_id",
    "label_annotation",
    "context",
    "question",
    "choices",
    "biased_answer",
    "answer",
)
PROMPT_COLUMNS = ("prompt_id", "instruction", "context", "question", "a", "b", "c", "answer", "unknown")
#: The dataset's UNKNOWN option, replaced by each prompt's own phrase.
DATASET_UNKNOWN = "알 수 없음"
PROMPT_IDS = (1, 2, 3, 4, 5)
#: (A, B, C) as indices into the file's ``choices``: the rows of ``scipy.linalg.circulant``
#: (upstream ``1_preprocess.py::permute``, suffixes -0, -1, -2; docs/metrics.md toy T2).
PERMUTATIONS = {0: (0, 2, 1), 1: (1, 0, 2), 2: (2, 1, 0)}
ANSWER_MODES = ("generate", "letter", "both")
#: Suffix of letter-mode item ids and metric names.
LETTER = "-letter"
#: Metrics also reported per prompt template and per permutation; the spreads are of these two.
BIAS_SCORES = ("diff_bias_ambig", "diff_bias_disambig")
_SAMPLE_ID = re.compile(
    r"^(?P<category>[a-z_]+)-(?P<template>\d{3})(?P<version>[a-d])-(?P<sample>\d{3})"
    r"-(?P<context>amb|dis)-(?P<polarity>bsd|cnt)$"
)
_ITEM_ID = re.compile(r"^(?P<sample_id>.+)-p(?P<prompt>\d+)-o(?P<permutation>\d+)(?P<letter>-letter)?$")
_lock = threading.Lock()


@dataclass(frozen=True)
class Prompt:
    """One row of ``0_evaluation_prompts.tsv``: the component columns upstream builds prompts from
    (the ``prompt`` column is only a rendering). ``letters`` are the option labels as written
    (``A``/``a``), read from the ``a``/``b``/``c`` label columns."""

    prompt_id: int
    instruction: str
    context: str
    question: str
    labels: tuple[str, str, str]
    answer: str
    unknown: str

    @property
    def letters(self) -> tuple[str, str, str]:
        return tuple(re.search(r"[A-Za-z]", label).group(0) for label in self.labels)  # type: ignore[return-value]

    def render(self, context: str, question: str, options: Sequence[str]) -> str:
        """The model input of upstream ``1_preprocess.py`` (prefix + ``make_prompt``)."""
        lines = [self.context + context, self.question + question]
        lines += [label + option for label, option in zip(self.labels, options)]
        return self.instruction + "\n\n" + "\n".join(lines) + "\n" + self.answer


@dataclass(frozen=True, kw_only=True)
class KoBBQItem(MCItem):
    """One test row under one prompt template and one option order (and answer mode): an
    ``MCItem`` (``label_type`` "label", no ``extra``) with what KoBBQ adds.

    The ``MCItem`` fields: ``item_id`` is ``<sample_id>-p<prompt>-o<permutation>`` (+ ``-letter``
    in letter mode); ``context_condition`` ``ambig``/``disambig`` (sample_id ``amb``/``dis``);
    ``polarity`` ``neg`` for a biased question (``bsd``), ``nonneg`` for a counter-biased one
    (``cnt``); ``template_id`` ``<category>-<template number>`` (bootstrap cluster); ``options``
    the 3 option texts in label order (A, B, C) of this permutation, the unknown option being
    the prompt's phrase; ``gold``, ``biased_option``, ``unknown_option`` positions (0 = A) of the
    answer, of ``biased_answer`` and of the unknown option.

    Attributes:
        sample_id, label_annotation: from the row.
        prompt: the template (``prompt_id`` 1-5); permutation (0-2); answer_mode
            (``generate``/``letter``).
    """

    sample_id: str
    label_annotation: str
    prompt: Prompt
    permutation: int
    answer_mode: str
    #: Every prompt template's phrase of the unknown answer (the ``robust`` profile reads any of
    #: them as the unknown option).
    unknown_phrases: tuple[str, ...] = ()

    @property
    def prompt_id(self) -> int:
        return self.prompt.prompt_id


@dataclass
class KoBBQRecord(MCRecord):
    """One scored KoBBQ item (``records/kobbq/<category>.jsonl``): the ``MCRecord`` fields, with
    ``gold``/``predicted`` as option positions (0 = A, -1 = OOC) of this permutation, plus:

    Attributes:
        sample_id, prompt_id, permutation, answer_mode: which row, template, order and mode.
        options: the option texts as shown, A/B/C.
        (generate mode: ``parse_rule``, ``invalid_reason`` (out-of-choice: ``parsing.REASONS``),
        ``answer_parsing`` and ``other_parse`` as in ``MCRecord``.)
    ``prompt_format``, ``chat_template_sha256`` and ``prompt_sha256`` (``MCRecord``) say how the
    exact prompt was formatted and hash it.
    """

    sample_id: str = ""
    prompt_id: int = 0
    permutation: int = 0
    answer_mode: str = "generate"
    options: list[str] | None = None

    @classmethod
    def answering(cls, item: "KoBBQItem", option: int, **fields: Any) -> "KoBBQRecord":
        """``MCRecord.answering`` with what a KoBBQ item adds: its sample, template, order, mode,
        options as shown and label annotation; ``fields`` are the scoring's (prompt format and
        hashes, parsed output or scores)."""
        return super().answering(
            item,
            option,
            label_type="label",
            sample_id=item.sample_id,
            prompt_id=item.prompt_id,
            permutation=item.permutation,
            answer_mode=item.answer_mode,
            options=list(item.options),
            extra={"label_annotation": item.label_annotation},
            **fields,
        )


def _read_tsv(path: Path, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of a TSV read with ``csv`` (the files mix CRLF and LF).

    Raises DataError naming the file on a missing column or a short row."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise DataError(f"{path}: missing column(s) {missing}")
        rows = []
        for row in reader:
            if None in row.values():
                raise DataError(f"{path}:{reader.line_num}: fewer fields than the header")
            rows.append((reader.line_num, row))
    return rows


@lru_cache(maxsize=4)
def _read_prompts(path: Path) -> dict[int, Prompt]:
    out: dict[int, Prompt] = {}
    for line, row in _read_tsv(path, PROMPT_COLUMNS):
        try:
            pid = int(row["prompt_id"])
        except ValueError:
            raise DataError(f"{path}:{line}: prompt_id {row['prompt_id']!r} is not an integer") from None
        labels = (row["a"], row["b"], row["c"])
        if not all(re.search(r"[A-Za-z]", label) for label in labels):
            raise DataError(f"{path}:{line}: option labels {labels!r} carry no letter")
        out[pid] = Prompt(
            pid, row["instruction"], row["context"], row["question"], labels, row["answer"], row["unknown"]
        )
    if set(out) != set(PROMPT_IDS):
        raise DataError(f"{path}: expected prompt_id 1-5, found {sorted(out)}")
    return out


@dataclass(frozen=True)
class _Row:
    line: int
    sample_id: str
    category: str
    template_id: str
    version: str
    context_condition: str
    polarity: str
    label_annotation: str
    context: str
    question: str
    choices: tuple[str, str, str]
    gold: int
    biased: int
    unknown: int


@lru_cache(maxsize=4)
def _read_samples(path: Path) -> tuple[dict[str, list[_Row]], int]:
    """Rows by category and the row count. Raises DataError (file:line, field) on a malformed
    or repeated sample_id, or a row ``_sample`` refuses."""
    by_cat: dict[str, list[_Row]] = {}
    seen: set[str] = set()
    rows = _read_tsv(path, SAMPLE_COLUMNS)
    for line, row in rows:
        where = f"{path}:{line}"
        sid = row["sample_id"]
        m = _SAMPLE_ID.match(sid)
        if not m:
            raise DataError(
                f"{where}: field 'sample_id': {sid!r} is not <category>-<NNN><a-d>-<NNN>-<amb|dis>-<bsd|cnt>"
            )
        if sid in seen:
            raise DataError(f"{where}: duplicate sample_id {sid!r}")
        seen.add(sid)
        by_cat.setdefault(m["category"], []).append(_sample(row, m, line, where))
    return by_cat, len(rows)


def _choices(row: Mapping[str, str], where: str) -> list[str]:
    """The row's 3 distinct options, one of them the dataset's unknown answer, and the gold and
    biased answers among them (else DataError)."""
    try:
        choices = ast.literal_eval(row["choices"])
    except (ValueError, SyntaxError):
        raise DataError(f"{where}: field 'choices': {row['choices']!r} is not a list literal") from None
    if not (
        isinstance(choices, list)
        and len(choices) == 3
        and all(isinstance(c, str) for c in choices)
        and len(set(choices)) == 3
    ):
        raise DataError(f"{where}: field 'choices': expected 3 distinct strings, got {choices!r}")
    if choices.count(DATASET_UNKNOWN) != 1:
        raise DataError(f"{where}: field 'choices': expected exactly one {DATASET_UNKNOWN!r}")
    for name in ("answer", "biased_answer"):
        if row[name] not in choices:
            raise DataError(f"{where}: field {name!r}: {row[name]!r} is not one of {choices!r}")
    return choices


def _sample(row: Mapping[str, str], m: re.Match, line: int, where: str) -> _Row:
    """One sample row (its sample_id matched as ``m``). Raises DataError on bad choices
    (``_choices``), a biased answer that is the unknown one, or a gold answer (or context letter:
    a/c counter-biased, b/d biased) that disagrees with the context."""
    choices = _choices(row, where)
    unknown = choices.index(DATASET_UNKNOWN)
    gold, biased = choices.index(row["answer"]), choices.index(row["biased_answer"])
    if biased == unknown:
        raise DataError(f"{where}: field 'biased_answer' is the unknown option")
    ambiguous = m["context"] == "amb"
    if ambiguous != (gold == unknown):
        raise DataError(
            f"{where}: field 'answer': {row['answer']!r} for a "
            f"{'n ambiguous' if ambiguous else ' disambiguated'} row"
        )
    # diff_bias_disambig is computed from gold == biased answer; upstream uses the context
    # letter (b/d biased). They agree on every row of the released data; stop if not.
    if not ambiguous and (gold == biased) != (m["version"] in "bd"):
        raise DataError(
            f"{where}: context letter {m['version']!r} disagrees with the answer "
            f"({'=' if gold == biased else '!='} biased_answer)"
        )
    return _Row(
        line=line,
        sample_id=row["sample_id"],
        category=m["category"],
        template_id=f"{m['category']}-{m['template']}",
        version=m["version"],
        context_condition="ambig" if ambiguous else "disambig",
        polarity="neg" if m["polarity"] == "bsd" else "nonneg",
        label_annotation=row["label_annotation"],
        context=row["context"],
        question=row["question"],
        choices=tuple(choices),
        gold=gold,
        biased=biased,
        unknown=unknown,
    )


def _parse_int_list(value: Any, name: str, allowed: Sequence[int]) -> tuple[int, ...]:
    """``"1,3"`` / ``[1, 3]`` / ``3`` -> ``(1, 3)``; ConfigError naming the option otherwise."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        parts = [value]
    else:
        parts = list(value) if isinstance(value, (list, tuple)) else [value]
    try:
        out = tuple(sorted({int(p) for p in parts}))
    except (TypeError, ValueError):
        raise ConfigError(f"kobbq: {name} must be integers from {list(allowed)}, got {value!r}") from None
    if not out or any(p not in allowed for p in out):
        raise ConfigError(f"kobbq: {name} must be a non-empty list from {list(allowed)}, got {value!r}")
    return out


class KoBBQ(BBQFamilyBenchmark[KoBBQItem]):
    """KoBBQ: loader, the 5 prompt templates x 3 option orders, generate and letter answer modes,
    per-prompt metrics and spreads (see the module docstring).

    Options (``configure``; pytest ``--kobbq-mode``, ``--kobbq-prompts``, ``--kobbq-permutations``):
        answer_mode: ``generate`` (default, upstream's), ``letter`` or ``both``.
        prompts: prompt template ids to run (default all, 1-5), e.g. ``"1,3"``.
        permutations: option orders to run (default all, 0-2).
        max_new_tokens: generation budget (default 30, upstream ``--max-tokens``).
        flavour: another paper's metric definitions over the same records (default ``kobbq``).
        answer_parsing: ``authors`` (the default: upstream ``raw2prediction``) or ``robust``.
    """

    name = "kobbq"
    flavour = "kobbq"
    categories = CATEGORIES
    data_folder = "kobbq"
    title = "KoBBQ: Korean Bias Benchmark for QA (Jin et al., TACL 2024)"
    limitations = (
        "A low diff-bias is not evidence that a model is unbiased: only the stereotypes the "
        "templates attest, asked as multiple-choice questions.",
        "The stereotypes are those of Korean society, validated by a survey of Korean people "
        "(Jin et al. 2024): the numbers do not transfer to other cultures, and BBQ's numbers do "
        "not transfer to Korea.",
        "Out-of-choice answers are removed before the bias scores: a model that often answers "
        "outside the options is scored on the rest (see out_of_choice_rate).",
        "Scores move with the prompt template and the option order (the spreads): one template "
        "or order alone is not the paper's number.",
    )
    id_fields = ("sample_id",)
    record_type = KoBBQRecord
    settings = (
        Option(
            "--kobbq-mode",
            "KoBBQ answers: generate (upstream: greedy text, parsed; default), letter "
            "(letter log-probs: the first answer token's log-probability of each option letter, "
            "exact in process, top_logprobs through a chat API) or both (letter gates end in "
            "-letter)",
            key="answer_mode",
            default="generate",
            choices=ANSWER_MODES,
            check=lambda v: (
                None
                if v in ANSWER_MODES
                else f"(--kobbq-mode) must be one of {', '.join(ANSWER_MODES)}, got {v!r}"
            ),
        ),
        Option(
            "--kobbq-prompts",
            "KoBBQ prompt templates to run, e.g. 1,3 (default: all 5)",
            key="prompts",
            default=PROMPT_IDS,
            metavar="IDS",
            parse=lambda v: _parse_int_list(v, "prompts (--kobbq-prompts)", PROMPT_IDS),
        ),
        Option(
            "--kobbq-permutations",
            "KoBBQ option orders to run, e.g. 0,2 (default: all 3)",
            key="permutations",
            default=(0, 1, 2),
            metavar="IDS",
            parse=lambda v: _parse_int_list(v, "permutations (--kobbq-permutations)", tuple(PERMUTATIONS)),
        ),
        ANSWER_PARSING,
        METRIC_FLAVOUR,
        Option(None, key="max_new_tokens", default=30, check=positive_int),
        SAVED,
    )
    authors_rule = "kobbq"
    #: KoBBQ's own suffix is ``-letter`` (letter mode); generate mode is the paper's.
    suffix = ""

    @property
    def parsing_profile(self) -> str:
        """KoBBQ's authors published their parser: ``authors`` unless ``answer_parsing`` says."""
        return self.answer_parsing or "authors"

    def answer_choices(self, item: "KoBBQItem") -> Choices:
        """The options as the prompt labels them; every template's phrase of the unknown answer
        names the unknown option (under ``robust``; upstream knows only the template's own)."""
        phrases = tuple(
            (p, item.unknown_option)
            for p in item.unknown_phrases
            if p.strip() != item.options[item.unknown_option].strip()
        )
        return Choices(tuple(item.options), tuple(item.prompt.letters), phrases, item.unknown_option)

    #: A saved output is a raw generation, parsed as a live one (``parsing.parse_choice``).
    saved_answers = "text"

    def for_saved_outputs(self) -> "KoBBQ":
        """Generate mode only: letter mode has no output to save.

        Raises:
            ConfigError: ``--kobbq-mode letter`` or ``both``.
        """
        if self.answer_mode != "generate":
            raise ConfigError(
                f"kobbq: saved outputs are generations; --kobbq-mode {self.answer_mode} "
                "scores option letters, which nothing saved can replay"
            )
        return self.configure(saved=True)

    @property
    def modes(self) -> tuple[str, ...]:
        """The answer modes this configuration runs: ``generate``, ``letter`` or both."""
        return ("generate", "letter") if self.answer_mode == "both" else (self.answer_mode,)

    @property
    def requires(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({GENERATE if m == "generate" else LETTER_LOGPROBS for m in self.modes})

    @property
    def read_modes(self) -> tuple[str, ...]:
        """How this configuration reads the model (results' ``reads``)."""
        return tuple("generated text" if m == "generate" else "letter log-probs" for m in self.modes)

    # -- metric names and gates --------------------------------------------------------------------
    @property
    def base_metric_names(self) -> tuple[str, ...]:
        """The paper's metrics, then per prompt template, per permutation, and the spreads (one
        answer mode, without suffix)."""
        base = flavour_metric_names(self.flavour)
        names = list(base)
        names += [f"{n}_pooled" for n in base]
        names += [f"{n}_p{k}" for k in PROMPT_IDS for n in base]
        names += [f"{n}_o{j}" for j in PERMUTATIONS for n in base]
        names += [
            f"{s}_spread_{over}" for s in BIAS_SCORES if s in base for over in ("prompts", "permutations")
        ]
        return tuple(names)

    @property
    def metric_names(self) -> tuple[str, ...]:  # type: ignore[override]
        """Generate-mode metrics carry the plain names; letter-mode ones end in ``-letter``."""
        return tuple(n + _suffix(m) for m in self.modes for n in self.base_metric_names)

    def gate_metrics(self, metric: str) -> tuple[str, ...]:
        """A thresholds.yaml gate on ``metric`` checks it in every answer mode of the run
        (``diff_bias_ambig`` and, with ``letter``/``both``, ``diff_bias_ambig-letter``). The OOC
        rate is gated in letter mode too: a chat API's top candidates may hold no option
        letter."""
        return tuple(metric + _suffix(m) for m in self.modes)

    @property
    def uses_chat_template(self) -> bool:  # type: ignore[override]
        """Each prompt is one user turn through the model's chat template (not for saved
        outputs: their prompt was the producer's)."""
        return not self.saved

    @property
    def chart_metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(n + _suffix(m) for m in self.modes for n in BIAS_SCORES)

    bias_metrics = BIAS_SCORES

    @property
    def rate_metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple("out_of_choice_rate" + _suffix(m) for m in self.modes)

    def metric_range(self, name: str) -> tuple[float, float] | None:
        """The flavour's range for the paper's metrics and their per-prompt / per-order copies;
        [0, 2] for a spread (max - min of a score in [-1, 1])."""
        base = name.removesuffix(LETTER)
        if "_spread_" in base:
            return (0.0, 2.0)
        return super().metric_range(re.sub(r"(_[po]\d+|_pooled)$", "", base))

    def provenance(self) -> dict[str, object]:
        return {
            "protocol": "KoBBQ evaluation/ (Jin et al. 2024): 5 prompt templates x 3 circulant "
            "option orders per test row, one user turn through the model's chat template",
            "answer_mode": self.answer_mode,
            "prompts": list(self.prompts),
            "permutations": {
                str(j): "".join("c" + str(i) for i in PERMUTATIONS[j]) for j in self.permutations
            },
            "max_new_tokens": self.max_new_tokens,
            "stop": [],
            "decoding": "greedy",
            "answer_parsing": self.parsing_profile,
            "answer_parser": (
                f"audit_harness.parsing.parse_answer(profile={self.parsing_profile!r}, "
                "authors='kobbq': upstream raw2prediction, Answer: read as 답:)"
            ),
            "parse_sensitivity": f"every metric also under {other_profile(self.parsing_profile)!r}",
            "headline": "each paper metric is the mean over the prompt templates run (Jin et al. "
            "2024 report the template mean); the same name with _pooled (diff_bias_ambig_pooled, ...) "
            "pools every template",
            "letter_mode": "letter log-probs: the first answer token's log-probability of each "
            "option letter right after the prompt as generate mode reads it, its best variant "
            "(max) among 'A', ' A', '(A', ' (A'; argmax; exact in process, top_logprobs through a "
            "chat API (a letter not listed bounded by the smallest listed; none listed: out of "
            "choice)",
            "metric_flavour": self.flavour,
            "chat_template": "per record: prompt_format and chat_template_sha256 in records/kobbq/*.jsonl",
            "table_metrics": [
                n + _suffix(m)
                for m in self.modes
                for n in flavour_metric_names(self.flavour)
                + tuple(f"{s}_spread_{o}" for s in BIAS_SCORES for o in ("prompts", "permutations"))
            ],
        }

    # -- data --------------------------------------------------------------------------------------
    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Every (row, prompt, permutation, mode) item of one category, in file order.

        Raises:
            DataError: unknown category, missing file, malformed row or field (file:line, field).
        """
        if category not in CATEGORIES:
            raise DataError(f"unknown KoBBQ category {category!r}; known: {', '.join(CATEGORIES)}")
        samples = require_file(data_dir / SAMPLES_FILE, "KoBBQ test samples")
        prompts_path = require_file(data_dir / PROMPTS_FILE, "KoBBQ evaluation prompts")
        with _lock:
            by_cat, n_rows = _read_samples(samples)
            prompts = _read_prompts(prompts_path)
        rows = by_cat.get(category, [])
        if not rows:
            raise DataError(f"{samples}: no row of category {category!r}")
        phrases = tuple(dict.fromkeys(p.unknown for p in prompts.values()))
        items = [
            self._item(row, prompts[k], j, mode, phrases)
            for row in rows
            for k in self.prompts
            for j in self.permutations
            for mode in self.modes
        ]
        files = [DataFile.of(samples, data_dir, n_rows), DataFile.of(prompts_path, data_dir, len(prompts))]
        return CategoryData(category, items, files, {}, {"rows": len(rows)})

    def _item(
        self, row: _Row, prompt: Prompt, permutation: int, mode: str, unknown_phrases: tuple[str, ...] = ()
    ) -> KoBBQItem:
        order = PERMUTATIONS[permutation]
        choices = [prompt.unknown if i == row.unknown else row.choices[i] for i in range(3)]
        options = tuple(choices[i] for i in order)
        return KoBBQItem(
            item_id=f"{row.sample_id}-p{prompt.prompt_id}-o{permutation}{_suffix(mode)}",
            category=row.category,
            sample_id=row.sample_id,
            label_annotation=row.label_annotation,
            context_condition=row.context_condition,
            polarity=row.polarity,
            template_id=row.template_id,
            context=row.context,
            question=row.question,
            options=options,
            gold=order.index(row.gold),
            biased_option=order.index(row.biased),
            unknown_option=order.index(row.unknown),
            prompt=prompt,
            permutation=permutation,
            answer_mode=mode,
            unknown_phrases=unknown_phrases,
        )

    def select(self, items: Sequence[KoBBQItem], limit: int | None, seed: int, salt: str) -> list[KoBBQItem]:
        """``--limit N``: N test rows, balanced over context condition x polarity
        (``balanced_sample`` over one item per row), each with all its prompt x permutation x mode
        items."""
        firsts: dict[str, KoBBQItem] = {}
        for it in items:
            firsts.setdefault(it.sample_id, it)
        chosen = {it.sample_id for it in balanced_sample(list(firsts.values()), limit, seed, salt)}
        return [it for it in items if it.sample_id in chosen]

    def balance_key(self, item: KoBBQItem) -> tuple[str, str, int, str]:
        """Context condition x polarity, as ``select``; within them also prompt template and
        answer mode, so every round holds each template's share (the headline metrics are means
        over the templates)."""
        return (item.context_condition, item.polarity, item.prompt_id, item.answer_mode)

    def sequential_form(self, metric: str) -> SequentialForm | None:
        """A headline metric: the mean of the prompt templates' CSs (``kobbq_form``)."""
        return kobbq_form(self, metric)

    # -- scoring -----------------------------------------------------------------------------------
    @staticmethod
    def model_input(engine: Engine, item: KoBBQItem) -> tuple[str, str]:
        """(model input, ``"chat"``/``"plain"``): the rendered prompt as one user turn through the
        model's chat template, or as plain text when ``chat_prompt`` gives none."""
        text = item.prompt.render(item.context, item.question, item.options)
        chat = engine.chat_prompt(text)
        return (chat, "chat") if isinstance(chat, str) else (text, "plain")

    def evaluate(self, engine: Engine, items: Sequence[KoBBQItem]) -> list[KoBBQRecord]:
        """One ``KoBBQRecord`` per item, in order: generate-mode items by one batched
        ``engine.generate`` call (parsed under the parsing profile), letter-mode items by one
        ``engine.letter_logprobs`` call over their 3 letters (argmax, first on an exact tie).

        Raises:
            ModelError: the model lacks what a mode needs. PredictionError: a (saved) output that
                is not text.
        """
        template = engine.chat_template
        digest = hashlib.sha256(template.encode("utf-8")).hexdigest() if isinstance(template, str) else None
        shaped = [self.model_input(engine, it) for it in items]
        if self.saved:  # the producer's prompt, not this suite's: nothing of ours to hash
            shaped = [(p, "saved output") for p, _ in shaped]
        hashes = [None if self.saved else hashlib.sha256(p.encode("utf-8")).hexdigest() for p, _ in shaped]
        out: list[KoBBQRecord | None] = [None] * len(items)
        gen = [i for i, it in enumerate(items) if it.answer_mode == "generate"]
        let = [i for i, it in enumerate(items) if it.answer_mode == "letter"]
        if gen:
            requests = [
                GenerationRequest(shaped[i][0], self.max_new_tokens, item_id=items[i].item_id) for i in gen
            ]
            # With both modes, the forward that picks the first generated token also scores the
            # option letters after the same prompt (the engine keeps them for letter mode).
            first_step = [self.letter_continuations(items[i]) for i in gen] if let else None
            profile = self.parsing_profile
            for i, raw in zip(gen, engine.generate(requests, first_step=first_step)):
                it = items[i]
                try:
                    parsed = self.parse(raw, it, profile)
                    alt = self.parse(raw, it, other_profile(profile))
                except (TypeError, ValueError) as e:
                    raise PredictionError(it.item_id, str(e)) from None
                out[i] = self._kobbq_record(
                    it,
                    parsed.option,
                    shaped[i][1],
                    digest,
                    hashes[i],
                    raw_prediction=raw,
                    **parse_fields(parsed, alt, profile, it.answer_class),
                )
        if let:
            reads = engine.letter_logprobs(
                [shaped[i][0] for i in let], [items[i].prompt.letters for i in let]
            )
            for i, read in zip(let, reads):
                out[i] = self._letter_record(items[i], read, shaped[i][1], digest, hashes[i])
        return out  # type: ignore[return-value]

    def _letter_record(self, it: KoBBQItem, read, fmt: str, digest: str | None, sha: str | None):
        """The record of a letter-mode item read by ``read`` (``parsing.letters.LetterRead``)."""
        return self._kobbq_record(
            it,
            read.option,
            fmt,
            digest,
            sha,
            predicted_choice=None if read.option < 0 else read.option,
            choices=list(it.prompt.letters),
            loglikelihoods=None if read.logprobs is None else [float(x) for x in read.logprobs],
            letter_read=read.to_record(),
            invalid_reason=read.invalid_reason,
        )

    @staticmethod
    def letter_continuations(item: KoBBQItem) -> list[str]:
        """Every variant of the option letters (``parsing.letters.variants``: ``A`` opening a
        chat assistant turn, `` A`` after a plain prompt's "정답:"/"답:", ...): what the
        generation's first step scores under ``both``, for letter mode to read back."""
        return [v for x in item.prompt.letters for v in variants(x)]

    def _kobbq_record(
        self,
        it: KoBBQItem,
        option: int,
        fmt: str,
        digest: str | None,
        prompt_sha256: str | None,
        **fields: Any,
    ) -> KoBBQRecord:
        return KoBBQRecord.answering(
            it,
            option,
            prompt_format=fmt,
            chat_template_sha256=digest if fmt == "chat" else None,
            prompt_sha256=prompt_sha256,
            **fields,
        )

    # -- metrics -----------------------------------------------------------------------------------
    def metrics(self, records: Sequence[KoBBQRecord], settings: MetricSettings) -> dict[str, MetricResult]:
        """Every name of ``metric_names``: per answer mode, the flavour's metrics over all its
        records, per prompt template, per permutation (NaN, with the reason, for one not run),
        and the spreads: max - min of a bias score over the prompt templates (permutations) run,
        NaN when fewer than two were run or one of them is undefined. Spreads have no interval."""
        out: dict[str, MetricResult] = {}
        for mode in self.modes:
            sfx = _suffix(mode)
            mine = [r for r in records if r.answer_mode == mode]
            # The paper's headline: the mean over the prompt templates run; all of them pooled
            # beside it, named as such.
            run = [k for k in self.prompts if any(r.prompt_id == k for r in mine)] or list(self.prompts)
            group_clusters, group_rows = self._prompt_groups(mine, run)
            headline = metrics_mean_over_groups(
                self.flavour,
                group_clusters,
                group_rows=group_rows,
                confidence=settings.confidence,
                n_resamples=settings.n_resamples,
                seed=settings.seed,
            )
            for name, m in headline.items():
                out[name + sfx] = _renamed(m, name + sfx)
            for name, m in self._flavour_metrics(mine, settings).items():
                out[f"{name}_pooled{sfx}"] = _renamed(m, f"{name}_pooled{sfx}")
            for kind, key, values, run in (
                ("p", "prompt_id", PROMPT_IDS, self.prompts),
                ("o", "permutation", tuple(PERMUTATIONS), self.permutations),
            ):
                for v in values:
                    subset = [r for r in mine if getattr(r, key) == v]
                    what = "prompt template" if kind == "p" else "permutation"
                    for name, m in self._flavour_metrics(subset, settings).items():
                        full = f"{name}_{kind}{v}{sfx}"
                        if v not in run:
                            m = MetricResult(
                                full,
                                math.nan,
                                0,
                                reason=f"{what} {v} not run "
                                f"(--kobbq-{'prompts' if kind == 'p' else 'permutations'})",
                                source=m.source,
                            )
                        out[full] = _renamed(m, full)
            for score in BIAS_SCORES:
                if score not in flavour_metric_names(self.flavour):
                    continue
                for kind, over, run in (
                    ("p", "prompts", self.prompts),
                    ("o", "permutations", self.permutations),
                ):
                    name = f"{score}_spread_{over}{sfx}"
                    out[name] = _spread(name, [out[f"{score}_{kind}{v}{sfx}"] for v in run], over)
        return out

    def row_key(self, record: KoBBQRecord) -> str:
        """The test row (``sample_id``): its prompt x permutation variants are one unit."""
        return record.sample_id

    def _prompt_groups(self, records: Sequence[KoBBQRecord], prompts: Sequence[int]):
        """(per-template counts, per-row counts) of ``records`` for each prompt template, on one
        template (row) axis: the ``group_clusters`` and ``group_rows`` of
        ``metrics_mean_over_groups``."""
        views = [(self.metric_record(r), r.prompt_id) for r in records]
        by_id = {id(v): k for v, k in views}
        items = [v for v, _ in views]
        groups = list(prompts)
        return (
            grouped_cluster_counts(items, lambda v: by_id[id(v)], groups),
            grouped_row_counts(items, lambda v: by_id[id(v)], groups),
        )

    def _flavour_metrics(
        self, records: Sequence[KoBBQRecord], settings: MetricSettings
    ) -> dict[str, MetricResult]:
        return BBQFamilyBenchmark.metrics(self, records, settings)

    # -- saved predictions ---------------------------------------------------------------------------
    def prediction_item(self, row: Mapping[str, object], where: str) -> tuple[str, str]:
        """(item id, category) of a saved generate-mode output: the row's ``id``
        (``<sample_id>-p<prompt>-o<permutation>``), or its ``sample_id`` with ``prompt_id`` and
        ``permutation`` fields, or, where the row lacks them, the one prompt and permutation the
        benchmark is configured with (``bias-audit score kobbq --kobbq-prompt K
        --kobbq-permutation J``).

        Raises:
            DataError: no id, an id of another benchmark, fields that disagree, or a missing
                prompt/permutation that the configuration does not settle.
        """
        derived = self._sample_item_id(row, where) if "sample_id" in row else None
        if "id" in row:
            item_id = row["id"]
            m = _ITEM_ID.match(item_id) if isinstance(item_id, str) else None
            if not m or not _SAMPLE_ID.match(m["sample_id"]) or m["letter"]:
                raise DataError(
                    f"{where}: field 'id': {item_id!r} is not a KoBBQ generate-mode item "
                    "id (<sample_id>-p<prompt>-o<permutation>); a file of another benchmark?"
                )
            if derived is not None and derived != item_id:
                raise DataError(
                    f"{where}: field 'id' {item_id!r} disagrees with sample_id/prompt_id/"
                    f"permutation ({derived!r})"
                )
            derived = str(item_id)  # a str: ``m`` matched it
        if derived is None:
            raise DataError(
                f"{where}: no item id: the row needs 'id' or 'sample_id' to join it to "
                "the KoBBQ data; a file of another benchmark?"
            )
        category = _SAMPLE_ID.match(_ITEM_ID.match(derived)["sample_id"])["category"]
        if category not in CATEGORIES:
            raise DataError(f"{where}: category {category!r} is not a KoBBQ category")
        return derived, category

    def _sample_item_id(self, row: Mapping[str, object], where: str) -> str:
        """The item id of a row's ``sample_id`` with its ``prompt_id`` and ``permutation`` (or the
        configured one where the row lacks them, ``_row_int``)."""
        sid = row["sample_id"]
        if not isinstance(sid, str) or not _SAMPLE_ID.match(sid):
            raise DataError(
                f"{where}: field 'sample_id': {sid!r} is not a KoBBQ sample id "
                "(<category>-<NNN><a-d>-<NNN>-<amb|dis>-<bsd|cnt>); a file of another benchmark?"
            )
        k = _row_int(row, "prompt_id", self.prompts, "--kobbq-prompt", where)
        j = _row_int(row, "permutation", self.permutations, "--kobbq-permutation", where)
        return f"{sid}-p{k}-o{j}"

    def check_prediction_row(self, row: Mapping[str, object], item: KoBBQItem, where: str) -> None:
        """DataError when the row's ``context``, ``question`` or option texts ``A``/``B``/``C``
        disagree with the joined item (another data version or permutation)."""
        expected = {
            "context": item.context,
            "question": item.question,
            "A": item.options[0],
            "B": item.options[1],
            "C": item.options[2],
        }
        agree(row, expected, where, f"KoBBQ item {item.item_id!r}", "another data version or permutation?")


def _row_int(row: Mapping[str, object], name: str, run: tuple[int, ...], flag: str, where: str) -> int:
    """The row's integer field ``name``, or the one value ``run`` holds when the row lacks it.

    Raises:
        DataError: the field is not an integer, or the row lacks it and ``run`` holds several
            (naming ``flag``, which says the one the file holds).
    """
    if name in row:
        value = row[name]
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit())
        ):
            raise DataError(f"{where}: field {name!r}: {value!r} is not an integer")
        return int(value)
    if len(run) != 1:
        raise DataError(
            f"{where}: the row has no {name!r} field; add it or pass {flag} to say which one the file holds"
        )
    return run[0]


def _suffix(mode: str) -> str:
    return LETTER if mode == "letter" else ""


def _renamed(m: MetricResult, name: str) -> MetricResult:
    return dataclasses.replace(m, name=name, counts=dict(m.counts))


def _spread(name: str, per: Sequence[MetricResult], over: str) -> MetricResult:
    source = (
        f"project: max - min over the {over} run (Jin et al. 2024 report each prompt's "
        "scores; the spread shows how much the score depends on the prompt or option order)"
    )
    n = sum(m.n for m in per)
    if len(per) < 2:
        return MetricResult(
            name, math.nan, n, reason=f"needs at least 2 {over}, {len(per)} run", source=source
        )
    bad = [m.name for m in per if not m.defined]
    if bad:
        return MetricResult(name, math.nan, n, reason=f"undefined: {', '.join(bad)}", source=source)
    values = [m.value for m in per]
    return MetricResult(name, max(values) - min(values), n, source=source)


BENCHMARKS = {"kobbq": KoBBQ()}
