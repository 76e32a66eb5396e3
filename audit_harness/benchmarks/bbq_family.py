"""The shape BBQ, EsBBQ and CaBBQ share on top of the benchmark protocol: 3-option items
(``MCItem``), one record per item (``MCRecord``), and metrics from ``bias_metrics.bbq_family``.

A module subclasses ``BBQFamilyBenchmark`` and supplies the loader, the prompt and the choices.
Two answer modes: ``loglikelihood`` (cloze: every choice scored as a continuation of the prompt,
argmax) for audits, and ``generate`` (the model's text mapped to an option by
``audit_harness.parsing``), which ``bias-audit score`` uses with a replay model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from bias_metrics.bbq_family import (FLAVOURS, bbq_paper_category, cluster_cell_counts, metric_names,
                                     metrics_from_counts, size_weighted_mean, value_ranges)
from bias_metrics.records import AnswerClass, BBQFamilyRecord, answer_class
from bias_metrics.result import MetricResult

from ..engine.multiple_choice import score_choices
from ..errors import ConfigError, DataError, PredictionError
from ..models.base import GENERATE, LOGLIKELIHOOD, GenerationRequest, LanguageModel
from ..parsing import MATCH_MODES, match_answer
from .base import Benchmark, MetricSettings, OMIT_NONE, Record, stratified_sample

ANSWER_MODES = ("loglikelihood", "generate")


@dataclass(frozen=True)
class MCItem:
    """One 3-option BBQ-family item, in the benchmark-independent form.

    Attributes:
        item_id: unique id within the benchmark, ``"<category>-<row id>"``.
        category: file stem, e.g. ``"Age"``.
        context_condition: ``"ambig"`` | ``"disambig"``; polarity: ``"neg"`` | ``"nonneg"``.
        context, question: the texts shown to the model.
        options: the 3 answer texts in dataset order.
        gold: index of the correct option; biased_option: index of the biased answer;
        unknown_option: index of the UNKNOWN option.
        template_id: template the item came from (bootstrap cluster).
        label_type: ``"label"`` or ``"name"`` (BBQ name-proxy items).
        extra: benchmark-specific fields kept in the records (e.g. EsBBQ ``question_type``).
    """

    item_id: str
    category: str
    context_condition: str
    polarity: str
    context: str
    question: str
    options: tuple[str, str, str]
    gold: int
    biased_option: int
    unknown_option: int
    template_id: str = ""
    label_type: str = "label"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def answer_class(self, option: int) -> AnswerClass:
        """Class of option index ``option`` (-1 = invalid) for this item."""
        return answer_class(option, biased_option=self.biased_option,
                            unknown_option=self.unknown_option)



@dataclass
class MCRecord(Record):
    """One scored BBQ-family item, as stored in ``records/<benchmark>/<category>.jsonl``.

    Attributes:
        item_id, category, context_condition, polarity, template_id, label_type, context,
            question: copied from the item.
        gold: gold option index; gold_class: its ``AnswerClass`` value.
        predicted: predicted option index (-1 = invalid); predicted_class: its class value.
        predicted_choice: index of the winning choice (log-likelihood mode; differs from
            ``predicted`` where several choices stand for one option), else None.
        correct: predicted == gold.
        choices: the texts scored as continuations (log-likelihood mode).
        loglikelihoods: summed log-likelihood per choice, natural log (log-likelihood mode).
        raw_prediction: the model's (or saved) output (generate mode); match: how it was mapped
            (``parsing.MATCH_KINDS``).
        prompt_sha256: sha256 of the exact prompt text the model saw (the benchmark's
            ``prompt_template`` in results' ``protocols``, filled with this item, and formatted
            by the chat template when ``prompt_format`` is ``chat``).
        prompt_format: ``chat`` (one user turn through the model's chat template) or ``plain``.
        chat_template_sha256: sha256 of the chat template's text when ``prompt_format`` is
            ``chat``, else None (results' ``protocols`` say the same per benchmark).
        extra: benchmark-specific fields (EsBBQ ``question_type``, ``instance_id``, ...).
    """

    context_condition: str
    polarity: str
    template_id: str
    label_type: str
    context: str
    question: str
    gold: int
    gold_class: str
    predicted: int
    predicted_class: str
    predicted_choice: int | None = field(default=None, metadata=OMIT_NONE)
    correct: bool = False
    choices: list[str] | None = field(default=None, metadata=OMIT_NONE)
    loglikelihoods: list[float] | None = field(default=None, metadata=OMIT_NONE)
    raw_prediction: Any = field(default=None, metadata=OMIT_NONE)
    match: str | None = field(default=None, metadata=OMIT_NONE)
    prompt_sha256: str | None = field(default=None, metadata=OMIT_NONE)
    prompt_format: str = "plain"
    chat_template_sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def balanced_sample(items: Sequence[MCItem], limit: int | None, seed: int, salt: str = "") -> list[MCItem]:
    """Deterministic subset of at most ``limit`` items, balanced over the four
    (context condition x polarity) cells, in file order.

    Each cell gets ``limit // 4`` items (the remainder goes to cells in a seeded order); a cell
    with too few items gives its share to the others. The same (items, limit, seed, salt) always
    gives the same subset; ``salt`` (the category) decorrelates categories.

    Raises:
        ValueError: a negative limit.
    """
    return stratified_sample(items, limit, seed, salt,
                             key=lambda it: (it.context_condition, it.polarity))


class BBQFamilyBenchmark(Benchmark):
    """Base of BBQ, EsBBQ and CaBBQ.

    Subclasses set ``name``, ``flavour`` (the ``bias_metrics.bbq_family`` flavour whose metrics
    gates may use), ``categories``, ``data_folder``, ``id_fields``, and implement
    ``load_category`` and ``prompt``. Override ``choices``/``choice_to_option`` when the scored
    choices are not the item's 3 options (EsBBQ scores 9 unknown phrasings).

    Options (``configure``): ``answer_mode`` (``loglikelihood`` | ``generate``), ``match`` (the
    parser's mode in generate mode, ``parsing.MATCH_MODES``), ``flavour`` (another paper's metric
    definitions over the same records), ``max_new_tokens`` (generate mode), ``split_names``
    (``report_group`` gives BBQ's "(names)" groups).
    """

    flavour: str
    delimiter: str = " "
    record_type = MCRecord
    options = {"answer_mode": "loglikelihood", "match": "exact", "flavour": None,
               "max_new_tokens": 30, "split_names": False}
    answer_mode = "loglikelihood"
    match = "exact"
    max_new_tokens = 30
    split_names = False

    @property
    def metric_names(self) -> tuple[str, ...]:  # type: ignore[override]
        return metric_names(self.flavour)

    @property
    def requires(self) -> frozenset[str]:  # type: ignore[override]
        return frozenset({LOGLIKELIHOOD if self.answer_mode == "loglikelihood" else GENERATE})

    chart_metrics = ("bias_score_ambig", "bias_score_disambig")
    rate_metrics = ("invalid_rate",)

    def metric_range(self, name: str) -> tuple[float, float] | None:
        """The flavour's declared range (``bias_metrics.bbq_family.value_ranges``)."""
        return value_ranges(self.flavour).get(name)

    def report_examples(self, records: Sequence[Record], limit: int = 5) -> list[dict[str, Any]]:
        """The first ``limit`` invalid answers (generate mode: outputs no option matched), with
        the options they were matched against."""
        out = []
        for r in records:
            if r.predicted == -1 and len(out) < limit:
                out.append({"id": r.item_id, "output": r.raw_prediction,
                            "reason": getattr(r, "ooc_reason", None) or r.match or "no option matched",
                            "options": list(getattr(r, "options", None) or r.choices or [])})
        return out

    #: A saved answer is an option: its number (``--index-base``), letter or text.
    saved_answers = "answer"

    def for_saved_outputs(self) -> "BBQFamilyBenchmark":
        """Generate mode: each saved output is read as a generated answer would be."""
        super().for_saved_outputs()
        return self.configure(answer_mode="generate")

    def configure(self, **options: Any) -> "BBQFamilyBenchmark":
        if options.get("flavour") is None:
            options.pop("flavour", None)  # None keeps the benchmark's own
        return super().configure(**options)  # type: ignore[return-value]

    def check_option(self, key: str, value: Any) -> None:
        allowed = {"answer_mode": ANSWER_MODES, "match": MATCH_MODES, "flavour": tuple(FLAVOURS)}
        if key in allowed and value not in allowed[key]:
            raise ConfigError(f"{self.name}: {key} must be one of {', '.join(allowed[key])}, got {value!r}")
        if key == "max_new_tokens" and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"{self.name}: max_new_tokens must be an integer >= 1, got {value!r}")

    #: How the scored choices are formed (``provenance``); EsBBQ overrides it.
    choices_description = "the item's 3 answer options (ans0, ans1, ans2), stripped"

    def provenance(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer_mode": self.answer_mode, "metric_flavour": self.flavour,
                               "choices": self.choices_description,
                               "record_prompt": "prompt_sha256: sha256 of the UTF-8 prompt text "
                                                "(prompt_template filled, before the delimiter)"}
        if self.answer_mode == "generate":
            out["answer_parser"] = f"audit_harness.parsing.match_answer(match={self.match!r})"
            out["max_new_tokens"] = self.max_new_tokens
        else:
            out["delimiter"] = self.delimiter
        return out

    # -- protocol hooks of a BBQ-family module ---------------------------------------------------------
    def prompt(self, item: MCItem) -> str:
        """The context the choices are scored after (without the trailing delimiter)."""
        raise NotImplementedError

    def choices(self, item: MCItem) -> list[str]:
        """Texts scored as continuations; default: the item's 3 options, stripped."""
        return [o.strip() for o in item.options]

    def choice_to_option(self, item: MCItem, choice: int) -> int:
        """Option index (0-2) a choice index stands for; default identity."""
        return choice

    def select(self, items: Sequence[MCItem], limit: int | None, seed: int, salt: str) -> list[MCItem]:
        """``balanced_sample``: balanced over context condition x polarity."""
        return balanced_sample(items, limit, seed, salt)

    # -- scoring ---------------------------------------------------------------------------------------
    def evaluate(self, model: LanguageModel, items: Sequence[MCItem]) -> list[MCRecord]:
        """Score ``items`` with ``model``: one ``MCRecord`` per item.

        Log-likelihood mode: the predicted choice is the argmax of the summed log-likelihoods
        (first index on an exact tie, which float scores make vanishingly rare). Generate mode:
        the model's output (a replay model's saved prediction) mapped by ``parsing.match_answer``
        against the options and every scored choice.

        Raises:
            ModelError: the model cannot do what the answer mode needs.
            PredictionError: (generate mode) an output of a type the parser refuses (a saved
                boolean, list, or an index out of range).
        """
        if self.answer_mode == "generate":
            return self._evaluate_generated(model, items)
        prompts = [self.prompt(it) for it in items]
        choice_lists = [self.choices(it) for it in items]
        scores = score_choices(model, prompts, choice_lists, delimiter=self.delimiter)
        records = []
        for it, prompt, choices, lls in zip(items, prompts, choice_lists, scores):
            best = int(np.argmax(lls))
            records.append(self._record(it, self.choice_to_option(it, best), predicted_choice=best,
                                        choices=choices, loglikelihoods=[float(x) for x in lls],
                                        prompt_sha256=_sha256(prompt)))
        return records

    def _evaluate_generated(self, model: LanguageModel, items: Sequence[MCItem]) -> list[MCRecord]:
        requests = [GenerationRequest(self.prompt(it), self.max_new_tokens, item_id=it.item_id)
                    for it in items]
        outputs = model.generate(requests)
        records = []
        for it, r, raw in zip(items, requests, outputs):
            extra = [(text, self.choice_to_option(it, k)) for k, text in enumerate(self.choices(it))]
            try:
                found = match_answer(raw, it.options, match=self.match, extra_choices=extra)
            except (TypeError, ValueError) as e:
                raise PredictionError(it.item_id, str(e)) from None
            records.append(self._record(it, found.option, raw_prediction=raw, match=found.how,
                                        prompt_sha256=_sha256(r.prompt)))
        return records

    def _record(self, it: MCItem, option: int, **fields: Any) -> MCRecord:
        return MCRecord(
            item_id=it.item_id, category=it.category, context_condition=it.context_condition,
            polarity=it.polarity, template_id=it.template_id, label_type=it.label_type,
            context=it.context, question=it.question, gold=it.gold,
            gold_class=it.answer_class(it.gold).value, predicted=option,
            predicted_class=it.answer_class(option).value, correct=option == it.gold,
            extra=dict(it.extra), **fields)

    # -- metrics ---------------------------------------------------------------------------------------
    def in_bias_score(self, record: MCRecord) -> bool:
        """Whether a record enters the bias scores (default: all); see ``BBQFamilyRecord``."""
        return True

    def metric_record(self, record: MCRecord) -> BBQFamilyRecord:
        """The ``bias_metrics`` view of a record."""
        return BBQFamilyRecord(
            item_id=record.item_id, category=record.category,
            context_condition=record.context_condition, polarity=record.polarity,
            gold=AnswerClass(record.gold_class), pred=AnswerClass(record.predicted_class),
            template_id=str(record.template_id or ""), label_type=record.label_type or "label",
            in_bias_score=self.in_bias_score(record))

    def metric_records(self, records: Sequence[MCRecord]) -> list[BBQFamilyRecord]:
        """``metric_record`` of each record, in order."""
        return [self.metric_record(r) for r in records]

    def report_group(self, record: MCRecord) -> str:
        """The category, or with ``split_names`` the paper's reporting group
        (``bias_metrics.bbq_family.bbq_paper_category``: "Gender_identity (names)", ...)."""
        if self.split_names:
            return bbq_paper_category(self.metric_record(record))
        return record.category

    def metrics(self, records: Sequence[MCRecord], settings: MetricSettings) -> dict[str, MetricResult]:
        """Every metric of the flavour over ``records``; bootstrap intervals resample whole
        templates (within their category)."""
        clusters = cluster_cell_counts([self.metric_record(r) for r in records])
        return metrics_from_counts(self.flavour, clusters.sum(axis=0), clusters if len(clusters) else None,
                                   confidence=settings.confidence, n_resamples=settings.n_resamples,
                                   seed=settings.seed)

    def overall(self, records_by_category: Mapping[str, Sequence[MCRecord]],
                settings: MetricSettings) -> dict[str, dict[str, MetricResult]]:
        """Aggregates over the evaluated categories (or groups), each under its own name:

        - ``pooled``: records of all categories together (the bootstrap resamples templates of
          all categories). BBQ's and KoBBQ's papers report no overall number (metrics.md §1.1);
          this is a convenience, not theirs.
        - with ``split_names``: one aggregate per paper reporting group that is not itself a
          category (BBQ's ``"<category> (names)"`` groups of name-proxy items).
        - ``size_weighted`` (flavour ``esbbq`` only, the one benchmark family whose authors and
          lm-eval define a group number): sum_i metric_i N_i / sum_i N_i with N_i the items scored
          in category i (``weight_by_size``; metrics.md §1.4, toy B6); NaN if any category's
          value is NaN.
        """
        cats = sorted(records_by_category)
        if not cats:
            return {}
        pooled = self.metrics([r for c in cats for r in records_by_category[c]], settings)
        groups = {}
        if self.split_names:  # the paper's reporting groups, e.g. "Gender_identity (names)"
            by_group: dict[str, list[MCRecord]] = {}
            for c in cats:
                for r in records_by_category[c]:
                    by_group.setdefault(self.report_group(r), []).append(r)
            groups = {g: self.metrics(rs, settings) for g, rs in sorted(by_group.items())
                      if g not in records_by_category}
        if self.flavour != "esbbq":
            return {"pooled": pooled, **groups}
        per_cat = {c: self.metrics(records_by_category[c], settings) for c in cats}
        sizes = {c: len(records_by_category[c]) for c in cats}
        return {"pooled": pooled, **groups,
                "size_weighted": {k: size_weighted_mean(per_cat, sizes, k) for k in pooled}}

    # -- saved predictions -----------------------------------------------------------------------------
    def check_saved_answer(self, value: Any, item: MCItem, where: str) -> None:
        """An option number must name one of the item's options (``-1``: no answer)."""
        if isinstance(value, int) and not isinstance(value, bool) and not -1 <= value < len(item.options):
            raise DataError(f"{where}: option index {value} is outside [0, {len(item.options)}) "
                            "(-1 means no answer); a file of another benchmark, or numbers "
                            "counted from another base (--index-base)?")

    def check_prediction_row(self, row: Mapping[str, Any], item: MCItem, where: str) -> None:
        """DataError when a field the row carries (``context_condition``, ``question_polarity``,
        ``label``, ``question``, ``ans0..2``) disagrees with the joined item."""
        expected = {"context_condition": item.context_condition, "question_polarity": item.polarity,
                    "label": item.gold, "question": item.question, "ans0": item.options[0],
                    "ans1": item.options[1], "ans2": item.options[2]}
        for name, value in expected.items():
            if name in row and str(row[name]).strip() != str(value).strip():
                raise DataError(f"{where}: field {name!r} is {row[name]!r} but {self.name} item "
                                f"{item.item_id!r} has {value!r}; a file of another benchmark "
                                "or data version?")

