"""MBBQ (Neplenbroek, Bisazza and Fernández, COLM 2024): BBQ's questions in English, Dutch,
Spanish and Turkish, 6 categories, with a parallel control set.

Data: ``<data_dir>/mbbq/data/<Category>_<lang>.jsonl`` and ``<Category>_control_<lang>.jsonl``,
and the authors' ``mbbq/answer_detection.py`` (their 5 prompt templates per language and their
answer phrases, read at run time by ``mbbq_protocol``: MBBQ states no licence, so nothing of it
ships with the suite). One category per (category, language), named like the file stems
(``Age_nl``); ``--mbbq-language`` picks the languages.

- Each row is asked in the 5 templates of its language (item ids end in ``-p<k>``), options in
  the file's order, as the authors' ``get_samples`` builds them. Generate mode: one user turn
  through the chat template, greedy, at most 100 new tokens (the authors' settings); answers read
  under ``authors`` (their ``detect_answer``, the default) or ``robust``. Log-likelihood mode (a
  project addition): cloze over the 3 options after each filled template.
- The control rows of the category are scored in the same run (``-control-`` in their ids): they
  give ``control_acc_ambig`` / ``control_acc_disambig`` and stay out of every other metric.
- Metrics: flavour ``kobbq`` (diff-bias, accuracies, out-of-choice rate) over the bias rows of all
  5 templates, and the same per template (``<metric>_p<k>``). ``overall`` holds each language's
  pooled numbers and the cross-language differences (``mbbq_compare``).
- A row's 5 templates are one unit, not 5 independent items: ``n`` (and a gate's ``min_n``)
  counts distinct rows, ``n_variants`` the (row, template) items, and the intervals weigh each row
  once; the bootstrap resamples question templates (``question_index``), rows within them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from bias_metrics.bbq_family import metric_names as flavour_metric_names
from bias_metrics.result import MetricResult

from ..data import DataFile, require_file
from ..errors import ConfigError, DataError
from ..option_spec import Option
from ..parsing import Choices, Parsed, parse_answer
from .base import CategoryData, MetricSettings, SequentialForm, positive_int
from .bbq_family import (
    ITEM_FIELDS,
    ROW_FIELDS,
    BBQFamilyBenchmark,
    MCItem,
    MCRecord,
    balanced_sample,
    item_from_row,
)
from .mbbq_compare import cross_language
from .mbbq_protocol import (
    LANGUAGES,
    Protocol,
    detect_answer,
    detected_option,
    read_protocol,
    targeted_options,
)
from .mbbq_sequential import mbbq_form

BASE_CATEGORIES = (
    "Age",
    "Disability_status",
    "Gender_identity",
    "Physical_appearance",
    "SES",
    "Sexual_orientation",
)
CATEGORIES = tuple(f"{c}_{lang}" for c in BASE_CATEGORIES for lang in LANGUAGES)
PROTOCOL_FILE = Path("mbbq/answer_detection.py")
PROMPT_IDS = (1, 2, 3, 4, 5)
_TEMPLATE_SUFFIX = re.compile(r"-p\d+$")
#: The control-set accuracies reported beside the bias (the paper's Table 2 / Figure 3 pairing).
CONTROL_METRICS = ("control_acc_ambig", "control_acc_disambig")
REQUIRED_FIELDS = (
    *ROW_FIELDS,
    "answer_info",
    "additional_metadata",
    *ITEM_FIELDS,
)
_lock = threading.Lock()


def _languages(value: Any) -> tuple[str, ...]:
    """``"en,nl"`` / ``["en", "nl"]`` -> ``("en", "nl")`` (the order of ``LANGUAGES``)."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    found = {str(p).strip() for p in parts if str(p).strip()}
    unknown = sorted(found - set(LANGUAGES))
    if not found or unknown:
        raise ConfigError(
            f"mbbq: languages (--mbbq-language) must be from {', '.join(LANGUAGES)}, got {value!r}"
        )
    return tuple(lang for lang in LANGUAGES if lang in found)


@dataclass(frozen=True, kw_only=True)
class MBBQItem(MCItem):
    """One MBBQ row in one of the authors' 5 prompt templates: an ``MCItem`` (``template_id``
    is the row's ``question_index``, the bootstrap cluster) with what MBBQ adds.

    Attributes:
        example_id: the row's id (the same row in every language); language; base_category
            (``Age``); prompt_id: the template (1-5); control: a control-set row;
        template: the authors' template text, ``{}`` slots for context, question, ans0-2;
        targeted_option: the option naming the stereotyped group (``biased_option`` adjusts it
            for the question's polarity).
    """

    example_id: int
    language: str
    base_category: str
    prompt_id: int
    control: bool
    template: str
    targeted_option: int
    #: The authors' file the template came from: the parser reads its phrases.
    protocol: Protocol = dataclasses.field(compare=False, repr=False)


@dataclass
class MBBQRecord(MCRecord):
    """One scored MBBQ item (``records/mbbq/<Category>_<lang>.jsonl``): the ``MCRecord`` fields,
    plus ``example_id``, ``language``, ``prompt_id``, ``control`` and ``targeted_option`` (the
    authors' ``target_loc``) and the options as shown. In generate mode ``parse_rule`` names the
    step of the authors' rule that decided (``mbbq:<step>``) or the robust parser's rule."""

    example_id: int = 0
    language: str = "en"
    prompt_id: int = 0
    control: bool = False
    targeted_option: int = -1
    unknown_option: int = -1
    options: list[str] | None = None

    @classmethod
    def answering(cls, item: MBBQItem, option: int, **fields: Any) -> "MBBQRecord":
        return super().answering(
            item,
            option,
            label_type=item.label_type,
            extra=dict(item.extra),
            example_id=item.example_id,
            language=item.language,
            prompt_id=item.prompt_id,
            control=item.control,
            targeted_option=item.targeted_option,
            unknown_option=item.unknown_option,
            options=list(item.options),
            **fields,
        )


def _check_fields(row: Any, where: str, base: str) -> None:
    """DataError (``where`` = file:line, and the field) on a row missing a field or holding a
    value outside its domain."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object")
    for key in REQUIRED_FIELDS:
        if key not in row:
            raise DataError(f"{where}: missing field {key!r}")
    allowed = {
        "category": (base,),
        "context_condition": ("ambig", "disambig"),
        "question_polarity": ("neg", "nonneg"),
    }
    for key, values in allowed.items():
        if row[key] not in values:
            raise DataError(f"{where}: field {key!r} is {row[key]!r}, expected one of {', '.join(values)}")
    for k in range(3):
        if not isinstance(row[f"ans{k}"], str) or not row[f"ans{k}"].split():
            raise DataError(f"{where}: field 'ans{k}' is empty or not text")
    if row["label"] not in (0, 1, 2) or isinstance(row["label"], bool):
        raise DataError(f"{where}: field 'label' {row['label']!r} is not 0, 1 or 2")


def _checked(row: Any, where: str, base: str) -> tuple[int, list[int]]:
    """The unknown option and the targeted options of a row, once its fields are checked.

    Raises:
        DataError: naming ``where`` (file:line) and the field.
    """
    _check_fields(row, where, base)
    try:
        groups = [row["answer_info"][f"ans{k}"][1] for k in range(3)]
        stereotyped = list(row["additional_metadata"]["stereotyped_groups"])
    except (KeyError, IndexError, TypeError):
        raise DataError(
            f"{where}: field 'answer_info' must map ans0..ans2 to [text, group] and "
            "'additional_metadata' hold 'stereotyped_groups'"
        ) from None
    unknowns = [k for k, g in enumerate(groups) if g == "unknown"]
    if len(unknowns) != 1:
        raise DataError(
            f"{where}: field 'answer_info': {len(unknowns)} options of group 'unknown', expected 1"
        )
    if (row["context_condition"] == "ambig") != (row["label"] == unknowns[0]):
        raise DataError(
            f"{where}: field 'label' {row['label']} disagrees with the {row['context_condition']} context"
        )
    return unknowns[0], targeted_options(base, row["answer_info"], stereotyped)


@lru_cache(maxsize=64)
def _read_rows(path: Path, base: str) -> tuple[list[tuple[dict, int, int]], dict[str, list[int]], int]:
    """``([(row, unknown, targeted), ...], {reason: [example_id]}, n_rows)`` of one file: rows whose
    targeted option cannot be resolved (none or two options in ``stereotyped_groups``) go to the
    second part. Raises DataError (file:line, field) on a bad line or a repeated example_id."""
    rows, excluded, seen, n = [], {}, set(), 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            where = f"{path}:{line_no}"
            if not line.strip():
                raise DataError(f"{where}: empty line")
            n += 1
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}: malformed JSON ({e.msg} at column {e.colno})") from None
            unknown, targeted = _checked(row, where, base)
            if row["example_id"] in seen:
                raise DataError(f"{where}: field 'example_id': {row['example_id']!r} repeats")
            seen.add(row["example_id"])
            if len(targeted) != 1:
                reason = (
                    "no option's answer_info group is in stereotyped_groups"
                    if not targeted
                    else "two options' answer_info groups are in stereotyped_groups"
                )
                excluded.setdefault(reason, []).append(row["example_id"])
                continue
            rows.append((row, unknown, targeted[0]))
    return rows, excluded, n


class MBBQ(BBQFamilyBenchmark[MBBQItem]):
    """MBBQ: loader, the authors' 5 templates, their answer detection, the control set, and the
    cross-language comparison (see the module docstring).

    Options: ``languages`` (``--mbbq-language``, default all four), and the BBQ family's
    (``--bbq-answer-mode``, ``--answer-parsing``: ``authors`` by default, ``--metric-flavour``).
    """

    settings = (
        Option(
            "--mbbq-language",
            "MBBQ languages to audit, comma-separated from en,nl,es,tr (default: all four; the "
            "cross-language comparison needs en and another)",
            key="languages",
            default=LANGUAGES,
            metavar="LANGS",
            parse=_languages,
            check=lambda v: None,
        ),
        *(o for o in BBQFamilyBenchmark.settings if o.key not in ("max_new_tokens", "split_names")),
        Option(None, key="max_new_tokens", default=100, check=positive_int),
        Option(None, key="split_names", default=False),
    )
    name = "mbbq"
    flavour = "kobbq"
    categories = CATEGORIES
    data_folder = "mbbq"
    #: Saved outputs join on their ``id`` (``<Category>_<lang>[-control]-<example_id>-p<k>``).
    id_fields = ("id",)
    record_type = MBBQRecord
    title = "MBBQ: Multilingual Bias Benchmark for QA (Neplenbroek et al., COLM 2024)"
    limitations = (
        "A low diff-bias is not evidence that a model is unbiased: only the stereotypes the BBQ "
        "templates kept in MBBQ attest (those held in all four languages' cultures), asked as "
        "multiple-choice questions.",
        "Read each language's bias beside its control accuracy: a model that cannot answer the "
        "control questions in a language shows little bias there for want of understanding.",
        "A cross-language difference is over the same items; its interval resamples question "
        "templates in both languages together. Languages run without English get no difference.",
        "Out-of-choice answers are dropped before the bias scores (see out_of_choice_rate).",
    )
    table_legend = (
        "n of a category-language: items scored, each row once per prompt template, bias and "
        "control rows: (bias + control rows) x 5 templates, e.g. --limit 8: (8 + 8) x 5 = 80",
        "'pooled <lang>': that language's bias items of every category (control items left out)",
        "'<Category>: <lang> - en' (one category) and '<lang> - en' (all): the language's value "
        "minus English's over the same items; an interval that contains 0 shows no difference",
        "a gate line's n: the bias items in its metric's denominator, one context (ambiguous or "
        "disambiguated)",
    )
    judged_unit = "mbbq counts each row once per prompt template (5), bias and control rows"
    authors_rule = "exact"

    @property
    def parsing_profile(self) -> str:
        """The authors published their answer detection: ``authors`` unless told otherwise."""
        return self.answer_parsing or "authors"

    # -- names ---------------------------------------------------------------------------------------
    @property
    def base_metric_names(self) -> tuple[str, ...]:
        base = flavour_metric_names(self.flavour)
        return base + CONTROL_METRICS + tuple(f"{n}_p{k}" for k in PROMPT_IDS for n in base)

    @property
    def metric_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(n + self.suffix for n in self.base_metric_names)

    def gate_metrics(self, metric: str) -> tuple[str, ...]:
        if self.answer_mode != "generate" and metric.startswith(("out_of_choice_rate", "invalid_rate")):
            return ()
        return (metric + self.suffix,)

    @property
    def rate_metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("out_of_choice_rate" + self.suffix,)

    base_chart_metrics = ("diff_bias_ambig", "diff_bias_disambig")

    def metric_range(self, name: str) -> tuple[float, float] | None:
        base = name.removesuffix(self.suffix)
        if base in CONTROL_METRICS:
            return (0.0, 1.0)
        for k in PROMPT_IDS:
            base = base.removesuffix(f"_p{k}")
        return super().metric_range(base)

    def provenance(self) -> dict[str, object]:
        out = {
            "protocol": "MBBQ (Neplenbroek et al. 2024) mbbq.py get_samples: each row in the "
            "authors' 5 prompt templates of its language, options in file order",
            "languages": list(self.languages),
            "prompt_templates": "read at run time from mbbq/answer_detection.py (the authors' "
            "pinned commit; not shipped)",
            "control_set": "the category's control rows, scored in the same run, give control_acc_*",
            # No angle brackets: report.md escapes them (&lt;) wherever a reader sees them raw.
            "headline": "bias rows of all 5 templates pooled (the authors average over all rows); "
            "the same metric per template named with _p1 to _p5 (diff_bias_ambig_p1, ...)",
            "table_metrics": [n + self.suffix for n in flavour_metric_names(self.flavour) + CONTROL_METRICS],
            **super().provenance(),
        }
        if self.answer_mode == "generate":
            out["generate_prompt_template"] = "the authors' templates (prompt_templates)"
            out["answer_parser"] = (
                "authors: audit_harness.benchmarks.mbbq_protocol.detect_answer (the authors' "
                "detect_answer with their phrases); robust: audit_harness.parsing.parse_answer"
            )
        return out

    # -- data ----------------------------------------------------------------------------------------
    def categories_in(self, data_dir: Path | None) -> tuple[str, ...]:
        """The categories of the configured languages."""
        return tuple(c for c in self.categories if c.rsplit("_", 1)[1] in self.languages)

    #: MBBQ pools per language, as its ``pooled <lang>`` aggregates do.
    pooled_names = tuple(f"pooled_{lang}" for lang in LANGUAGES)

    def pooled_groups(self, categories: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``{"pooled_<lang>": that language's categories}`` of the languages in ``categories``."""
        out: dict[str, tuple[str, ...]] = {}
        for lang in LANGUAGES:
            members = tuple(c for c in categories if c.rsplit("_", 1)[1] == lang)
            if members:
                out[f"pooled_{lang}"] = members
        return out

    def data_files(self, category: str) -> tuple[str, ...]:
        base, lang = category.rsplit("_", 1)
        return (
            f"mbbq/data/{base}_{lang}.jsonl",
            f"mbbq/data/{base}_control_{lang}.jsonl",
            PROTOCOL_FILE.as_posix(),
        )

    def protocol(self, data_dir: Path) -> Protocol:
        """The authors' templates and phrases (``mbbq_protocol.read_protocol``)."""
        return read_protocol(data_dir / PROTOCOL_FILE)

    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Every (row, template) item of one category-language, bias rows then control rows.

        Raises:
            DataError: unknown category, a missing file, a malformed row (file:line, field), or an
                ``answer_detection.py`` of another shape.
        """
        if category not in CATEGORIES:
            raise DataError(f"unknown MBBQ category {category!r}; known: {', '.join(CATEGORIES)}")
        base, lang = category.rsplit("_", 1)
        proto = self.protocol(data_dir)
        items, files, excluded, notes = [], [], {}, {}
        for control in (False, True):
            stem = f"{base}_control_{lang}" if control else f"{base}_{lang}"
            path = require_file(data_dir / "mbbq" / "data" / f"{stem}.jsonl", f"MBBQ {stem} data")
            with _lock:
                rows, dropped, n_rows = _read_rows(path, base)
            files.append(DataFile.of(path, data_dir, n_rows))
            tag = "control " if control else ""
            for reason, ids in dropped.items():
                excluded[f"{tag}{reason}"] = [self.row_id(category, i, control) for i in ids]
            notes[f"{tag}rows".strip()] = n_rows
            for row, unknown, targeted in rows:
                items += [
                    self._item(category, row, (unknown, targeted, control), (k, proto)) for k in PROMPT_IDS
                ]
        files.append(DataFile.of(proto.path, data_dir, 0))
        return CategoryData(category, items, files, excluded, notes)

    @staticmethod
    def row_id(category: str, example_id: object, control: bool) -> str:
        """``Age_nl-12`` or ``Age_nl-control-12``: a row, before its template."""
        return f"{category}-{'control-' if control else ''}{example_id}"

    def _item(
        self, category, row, resolved: tuple[int, int, bool], template: tuple[int, Protocol]
    ) -> MBBQItem:
        """Row ``row`` of ``category`` (its unknown and targeted options, whether a control row)
        in template ``k`` of the authors' ``proto``."""
        base, lang = category.rsplit("_", 1)
        unknown, targeted, control = resolved
        k, proto = template
        # BBQ's convention: a negative question's biased answer is the targeted group, a
        # non-negative one's the other group (the authors' score is +1 for the target alone).
        other = next(j for j in range(3) if j not in (unknown, targeted))
        return item_from_row(
            row,
            MBBQItem,
            item_id=f"{self.row_id(category, row['example_id'], control)}-p{k}",
            category=category,
            biased_option=targeted if row["question_polarity"] == "neg" else other,
            unknown_option=unknown,
            example_id=row["example_id"],
            language=lang,
            base_category=base,
            prompt_id=k,
            control=control,
            template=proto.prompts[lang][k - 1],
            targeted_option=targeted,
            protocol=proto,
        )

    def excluded_row(self, item_id: str) -> str:
        """``Gender_identity_nl-276-p1`` -> ``Gender_identity_nl-276``: the loader excludes rows
        (``row_id``), each of which the authors' pipeline answers in its 5 templates."""
        return _TEMPLATE_SUFFIX.sub("", item_id)

    def prediction_item(self, row: Mapping[str, object], where: str) -> tuple[str, str]:
        """(item id, category) of a saved output: its ``id``, whose prefix names the category.

        Raises:
            DataError: no ``id``, or one of no MBBQ category-language.
        """
        item_id = row.get("id")
        category = item_id.split("-", 1)[0] if isinstance(item_id, str) else ""
        if not isinstance(item_id, str) or category not in CATEGORIES:
            raise DataError(
                f"{where}: field 'id': {item_id!r} is not an MBBQ item id "
                "(<Category>_<lang>[-control]-<example_id>-p<template>); a file of another benchmark?"
            )
        return item_id, category

    # -- selection -----------------------------------------------------------------------------------
    def select(self, items: Sequence[MBBQItem], limit: int | None, seed: int, salt: str) -> list[MBBQItem]:
        """``--limit N``: N bias rows and N control rows, balanced over context condition x
        polarity, each with its 5 templates. The draw is salted by the base category, not the
        language, so every language gets the same example_ids (the cross-language comparison)."""
        salt = salt.rsplit("_", 1)[0] if salt.rsplit("_", 1)[-1] in LANGUAGES else salt
        chosen: set[tuple[bool, int]] = set()
        for control in (False, True):
            firsts: dict[int, MBBQItem] = {}
            for it in items:
                if it.control == control:
                    firsts.setdefault(it.example_id, it)
            picked = balanced_sample(
                list(firsts.values()), limit, seed, salt + ("/control" if control else "")
            )
            chosen |= {(control, it.example_id) for it in picked}
        return [it for it in items if (it.control, it.example_id) in chosen]

    def balance_key(self, item: MBBQItem) -> tuple[bool, str, str, int]:
        return (item.control, item.context_condition, item.polarity, item.prompt_id)

    def sequential_form(self, metric: str) -> SequentialForm | None:
        return mbbq_form(self, metric.removesuffix(self.suffix))

    # -- prompts and parsing --------------------------------------------------------------------------
    def generate_prompt(self, item: MBBQItem) -> str:
        """The authors' template, stripped, filled with context, question and the 3 options."""
        return item.template.strip().format(item.context, item.question, *item.options)

    def prompt(self, item: MBBQItem) -> str:
        """Log-likelihood mode scores each option after the same filled template."""
        return self.generate_prompt(item)

    def shown_options(self, item: MBBQItem) -> tuple[str, str, str]:
        return tuple(item.options)  # type: ignore[return-value]

    def answer_choices(self, item: MBBQItem) -> Choices:
        return Choices(tuple(item.options), ("A", "B", "C"), (), item.unknown_option)

    def parse(self, output: object, item: MBBQItem, profile: str) -> Parsed:
        """``authors``: the authors' ``detect_answer`` (``mbbq_protocol``); ``robust``: the suite's
        parser. A saved option index is read as an index under both."""
        if profile != "authors" or not isinstance(output, (str, type(None))):
            return parse_answer(output, self.answer_choices(item), profile)
        found, step = detect_answer(item.protocol, item.options, output, item.unknown_option, item.language)
        option = detected_option(found)
        if option < 0:
            reason = (
                "several_options"
                if found == "all"
                else ("empty" if step in ("empty", "not-text") else "no_match")
            )
            return Parsed(-1, "invalid", f"mbbq:{step}", reason)
        return Parsed(option, "text", f"mbbq:{step}")

    def row_key(self, record: MBBQRecord) -> str:
        """The row (``row_id``: category-language, control or not, example_id): its 5 prompt
        templates are one unit in ``n`` and in the intervals."""
        return self.row_id(record.category, record.example_id, record.control)

    def _record(self, it: MBBQItem, option: int, **fields: Any) -> MBBQRecord:
        return MBBQRecord.answering(it, option, **fields)

    # -- metrics -------------------------------------------------------------------------------------
    def metrics(self, records: Sequence[MBBQRecord], settings: MetricSettings) -> dict[str, MetricResult]:
        """The flavour's metrics over the bias rows of all templates, the control accuracies, and
        the flavour's metrics per template; generate mode adds ``-generate`` to every name."""
        bias = [r for r in records if not r.control]
        out = dict(self.flavour_metrics(bias, settings))
        control = self.flavour_metrics([r for r in records if r.control], settings)
        for name in CONTROL_METRICS:
            out[name] = control[name.removeprefix("control_")]
        for k in PROMPT_IDS:
            for name, m in self.flavour_metrics([r for r in bias if r.prompt_id == k], settings).items():
                out[f"{name}_p{k}"] = m
        return {n + self.suffix: dataclasses.replace(m, name=n + self.suffix) for n, m in out.items()}

    def overall(
        self, records_by_category: Mapping[str, Sequence[MBBQRecord]], settings: MetricSettings
    ) -> dict[str, dict[str, MetricResult]]:
        """Each language's categories pooled (``pooled <lang>``; ``pooled`` when one language
        ran), and for every other language run with English its difference from English over
        the same items (``mbbq_compare.cross_language``)."""
        by_lang: dict[str, list[MBBQRecord]] = {}
        for cat in sorted(records_by_category):
            by_lang.setdefault(cat.rsplit("_", 1)[1], []).extend(records_by_category[cat])
        if not by_lang:
            return {}
        if len(by_lang) == 1:
            return {"pooled": self.metrics(next(iter(by_lang.values())), settings)}
        out = {
            f"pooled {lang}": self.metrics(by_lang[lang], settings) for lang in LANGUAGES if lang in by_lang
        }
        out.update(cross_language(self, records_by_category, settings))
        return out


BENCHMARKS = {"mbbq": MBBQ()}
