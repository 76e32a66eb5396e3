"""EsBBQ and CaBBQ (Ruiz-Fernández et al. 2025, arXiv 2507.11216): BBQ adapted to Spanish society,
in Spanish (EsBBQ) and Catalan (CaBBQ), 10 categories each.

Data: ``<data_dir>/esbbq_cabbq/data_{es,ca}/<Category>.full.csv`` (``../shared/data/esbbq_cabbq/
SOURCE.md``): 24 columns, list fields as Python literals, ``ans2`` the placeholder ``unknown``,
``label`` the gold option (2 = unknown), ``question_type`` pro-stereo / anti-stereo / n/a.

Protocol (the authors', used unchanged by lm-evaluation-harness 0.4.13 ``esbbq``/``cabbq``): the
prompt ``"Contexto: {context}\\nPregunta: {question}\\nRespuesta:"`` (Catalan: ``Context:`` /
``Pregunta:`` / ``Resposta:``); choices ``[ans0, ans1]`` + 9 unknown phrasings of the language,
each scored as the continuation ``" " + choice`` by summed log-likelihood; prediction
``min(argmax, 2)``. The prompt template and the phrasings are data: ``esbbq_protocol.yaml``.

Metrics: ``bias_metrics.bbq_family`` flavour ``esbbq``. The target option is the one whose group
(last comma part of ``answer_info[ansK][-1]``) is in ``stereotyped_groups``; the biased option
follows from it and the polarity. lm-eval decides pro-/anti-stereo of a disambiguated item from the
row's ``question_type`` field, we from (gold, biased option): the two agree exactly when the row is
consistent, so every row is checked and inconsistent rows are scored, saved and counted in the
accuracies but left out of the disambiguated bias score (listed in ``CategoryData.excluded``).
"""

from __future__ import annotations

import ast
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import yaml

from bias_metrics.records import biased_option

from ..data import DataFile, csv_rows, require_file
from ..errors import ConfigError, DataError
from ..option_spec import Option
from .base import CategoryData
from .bbq_family import BBQFamilyBenchmark, MCItem, MCRecord

CATEGORIES = (
    "Age",
    "DisabilityStatus",
    "Gender",
    "LGBTQIA",
    "Nationality",
    "PhysicalAppearance",
    "RaceEthnicity",
    "Religion",
    "SES",
    "SpanishRegion",
)
#: The 24 CSV columns (SOURCE.md, schema); all are required.
COLUMNS = (
    "instance_id",
    "template_id",
    "version",
    "template_label",
    "flipped",
    "question_polarity",
    "context_condition",
    "category",
    "subcategory",
    "relevant_social_value",
    "stereotyped_groups",
    "answer_info.ans0",
    "answer_info.ans1",
    "answer_info.ans2",
    "stated_gender_info",
    "proper_nouns_only",
    "context",
    "question",
    "ans0",
    "ans1",
    "ans2",
    "question_type",
    "label",
    "source",
)
QUESTION_TYPES = ("pro-stereo", "anti-stereo", "n/a")
UNKNOWN_PLACEHOLDER = "unknown"
UNKNOWN_OPTION = 2
#: ``CategoryData.excluded`` key of rows whose ``question_type`` contradicts their other fields.
INCONSISTENT_REASON = (
    "question_type disagrees with polarity/gold group/stereotyped_groups "
    "(scored; left out of the disambiguated bias score)"
)
#: Record field that marks an item as consistent (True) or not (False); see ``metric_records``.
CONSISTENT_FIELD = "question_type_consistent"
PROTOCOL_FILE = Path(__file__).with_name("esbbq_protocol.yaml")


@dataclass(frozen=True)
class Protocol:
    """The prompt and choices of one language (``esbbq_protocol.yaml``).

    Attributes:
        language: ``"es"`` or ``"ca"``.
        dataset: ``"EsBBQ"`` or ``"CaBBQ"``.
        data_subdir: folder of the category CSVs, relative to the data directory.
        prompt: ``str.format`` template with exactly the fields ``context`` and ``question``.
        unknown_phrasings: the 9 phrasings scored after ans0 and ans1, in lm-eval's order.
    """

    language: str
    dataset: str
    data_subdir: str
    prompt: str
    unknown_phrasings: tuple[str, ...]


def load_protocol(language: str, path: Path = PROTOCOL_FILE) -> Protocol:
    """Read the protocol of ``language`` (``"es"`` | ``"ca"``) from ``path``.

    Raises:
        ConfigError: missing file or language, a prompt whose fields are not exactly
            ``{context}`` and ``{question}``, or an empty / duplicated list of phrasings.
    """
    try:
        with open(path, encoding="utf-8") as f:
            table = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read the EsBBQ/CaBBQ protocol {path}: {e}") from None
    if not isinstance(table, dict) or language not in table:
        raise ConfigError(f"{path}: no protocol for language {language!r}")
    entry = table[language]
    where = f"{path}: {language}"
    try:
        prompt = entry["prompt"]
        phrasings = entry["unknown_phrasings"]
        dataset, subdir = entry["dataset"], entry["data_subdir"]
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{where}: missing key {e}") from None
    fields = [f for _, f, _, _ in string.Formatter().parse(prompt) if f is not None]
    if sorted(fields) != ["context", "question"]:
        raise ConfigError(
            f"{where}: prompt must contain {{context}} and {{question}} once each, found fields {fields}"
        )
    if (
        not isinstance(phrasings, list)
        or not phrasings
        or not all(isinstance(p, str) and p.strip() for p in phrasings)
        or len(set(phrasings)) != len(phrasings)
    ):
        raise ConfigError(f"{where}: unknown_phrasings must be a non-empty list of distinct strings")
    return Protocol(language, str(dataset), str(subdir), prompt, tuple(phrasings))


def answer_group(info: Sequence[str]) -> str:
    """Social group of an option from its ``answer_info`` entry ``[surface form, group]``: the
    part after the last comma of the last element (``'m, llatinoamericà'`` -> ``'llatinoamericà'``),
    as lm-eval ``esbbq/utils.py::_model_answer_type`` and SOURCE.md define it."""
    return info[-1].split(",")[-1].strip()


def expected_question_type(context_condition: str, gold: int, biased: int) -> str:
    """``question_type`` a row must have: ``"n/a"`` for ambiguous rows; for disambiguated rows
    ``"pro-stereo"`` when the gold answer is the biased answer, else ``"anti-stereo"``."""
    if context_condition == "ambig":
        return "n/a"
    return "pro-stereo" if gold == biased else "anti-stereo"


class _Fields:
    """Typed reads of one CSV row's fields, each failing with a DataError that names the row and
    the field.

    Raises:
        DataError: (on construction) the row has more or fewer fields than the header.
    """

    def __init__(self, row: dict, where: str, n_columns: int):
        if None in row:
            raise DataError(f"{where}: {n_columns + len(row[None])} fields, the header has {n_columns}")
        short = [k for k, v in row.items() if v is None]
        if short:
            raise DataError(
                f"{where}: {n_columns - len(short)} fields, the header has {n_columns} "
                f"(missing {short[0]!r} onwards)"
            )
        self.row, self.where = row, where

    def fail(self, name: str, problem: str) -> DataError:
        return DataError(f"{self.where}: field {name!r}: {problem}")

    def integer(self, name: str) -> int:
        try:
            return int(self.row[name])
        except ValueError:
            raise self.fail(name, f"{self.row[name]!r} is not an integer") from None

    def str_list(self, name: str, min_len: int) -> list[str]:
        """A Python list literal of at least ``min_len`` strings."""
        text = self.row[name]
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise self.fail(name, f"{text!r} is not a Python list literal") from None
        if not isinstance(value, list) or len(value) < min_len or not all(isinstance(v, str) for v in value):
            raise self.fail(name, f"expected a list of at least {min_len} strings, got {text!r}")
        return value

    def one_of(self, name: str, allowed: Sequence[str]) -> str:
        if self.row[name] not in allowed:
            raise self.fail(name, f"{self.row[name]!r} is not one of {list(allowed)}")
        return self.row[name]


def _target_option(f: _Fields, stereotyped: list[str]) -> int:
    """The option (0 or 1) whose group (``answer_info``) is the stereotyped one; ans2 must be the
    unknown placeholder's.

    Raises:
        DataError: ans2's group is another, or not exactly one of ans0/ans1 is stereotyped.
    """
    infos = [f.str_list(f"answer_info.ans{k}", 2) for k in range(3)]
    if answer_group(infos[2]) != UNKNOWN_PLACEHOLDER:
        raise f.fail("answer_info.ans2", f"expected group {UNKNOWN_PLACEHOLDER!r}, got {infos[2]!r}")
    groups = [answer_group(infos[k]) for k in (0, 1)]
    targets = [k for k in (0, 1) if groups[k] in stereotyped]
    if len(targets) != 1:
        raise f.fail(
            "stereotyped_groups",
            f"{stereotyped} must contain the group of exactly one of ans0/ans1 (groups {groups})",
        )
    return targets[0]


class EsBBQ(BBQFamilyBenchmark):
    """EsBBQ (``language="es"``) or CaBBQ (``"ca"``): loader, data check and the authors' prompt
    and choices (see module docstring). Metric flavour ``esbbq``.

    Raises:
        ConfigError: a language without a protocol in ``esbbq_protocol.yaml``.
    """

    flavour = "esbbq"
    categories = CATEGORIES
    data_folder = "esbbq_cabbq"
    limitations = (
        "A low bias score is not evidence that a model is unbiased: only the stereotypes the "
        "templates attest, in ten social categories, asked as multiple-choice questions.",
        "The stereotypes are those of the Spanish social context (adapted from BBQ by the authors), "
        "in Spanish or Catalan: the numbers say nothing about other Spanish- or Catalan-speaking "
        "societies.",
        "bias_score_ambig mixes accuracy and bias (it shrinks as 'unknown' answers grow), and "
        "bias_score_disambig is an accuracy gap between pro- and anti-stereotypical contexts, not "
        "BBQ's s_DIS: the two papers' numbers are not interchangeable.",
    )
    id_fields = ("category", "instance_id")
    #: ``data_source``: ``files`` (the pinned CSVs under the data dir) or ``hf`` (the authors'
    #: Hugging Face copy, ``BSC-LT/EsBBQ`` / ``BSC-LT/CaBBQ``, or ``hf_path``: a Hub id or a local
    #: copy in the Hub layout), through ``datasets`` with its cache and offline mode.
    settings = (
        Option(
            "--data-source",
            "EsBBQ/CaBBQ rows from the pinned files in the data dir, or from the "
            "authors' Hugging Face copy through `datasets` (env AUDIT_DATA_SOURCE)",
            key="data_source",
            default="files",
            choices=("files", "hf"),
            env="AUDIT_DATA_SOURCE",
            check=lambda v: None if v in ("files", "hf") else f"must be files or hf, got {v!r}",
        ),
        Option(
            "--hf-dataset",
            "with --data-source hf: a Hub id or a local copy in the Hub layout "
            "(default: BSC-LT/EsBBQ or BSC-LT/CaBBQ)",
            key="hf_path",
            metavar="ID_OR_DIR",
        ),
        *BBQFamilyBenchmark.settings,
    )

    def __init__(self, language: str):
        self.language = language
        self.protocol = load_protocol(language)
        self.name = self.protocol.dataset.lower()
        self.title = (
            f"{self.protocol.dataset}: {'Spanish' if language == 'es' else 'Catalan'} "
            "Bias Benchmark for QA (Ruiz-Fernández et al. 2025)"
        )

    def __repr__(self) -> str:
        return f"EsBBQ({self.language!r})"

    def shown_options(self, item: MCItem) -> tuple[str, str, str]:
        """Generate mode shows the first of the authors' unknown phrasings in place of the
        dataset's ``unknown`` placeholder (which is never scored either)."""
        shown = [o.strip() for o in item.options]
        shown[item.unknown_option] = self.protocol.unknown_phrasings[0]
        return tuple(shown)  # type: ignore[return-value]

    # -- data ------------------------------------------------------------------------------------
    def data_files(self, category: str) -> tuple[str, ...]:
        """One category needs its own CSV only (or nothing local with ``--data-source hf``)."""
        if self.data_source == "hf":
            return ()
        return (f"{self.protocol.data_subdir}/{category}.full.csv",)

    def category_file(self, data_dir: Path, category: str) -> Path:
        """Path of one category's CSV under ``data_dir`` (not checked for existence)."""
        return Path(data_dir) / self.protocol.data_subdir / f"{category}.full.csv"

    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Items of one category CSV, in file order, with the ``question_type`` check.

        Every row becomes an item. Rows whose ``question_type`` disagrees with (polarity, gold
        group, stereotyped groups) are also listed under ``excluded[INCONSISTENT_REASON]`` and carry
        ``extra[CONSISTENT_FIELD] = False``, which keeps them out of the disambiguated bias score
        (``in_bias_score``).
        ``notes`` holds ``rows`` and ``question_type_inconsistent`` counts.

        Raises:
            DataError: unknown category, missing file or column, malformed CSV, a row with the
                wrong number of fields, or a malformed field (non-integer id/label, bad list
                literal, unknown condition/polarity/question_type, label not matching the context
                condition, ans2 not the ``unknown`` placeholder, not exactly one option of a
                stereotyped group, duplicate instance_id). Messages name the file, line and field.
        """
        if category not in CATEGORIES:
            raise DataError(
                f"unknown {self.protocol.dataset} category {category!r}; known: {', '.join(CATEGORIES)}"
            )
        if self.data_source == "hf":
            items, provenance = self._read_hub(category)
        else:
            path = require_file(
                self.category_file(data_dir, category), f"{self.protocol.dataset} {category} data"
            )
            items, n_rows = self._read(path, category)
            provenance = DataFile.of(path, Path(data_dir), n_rows)
        bad = [it.item_id for it in items if not it.extra[CONSISTENT_FIELD]]
        excluded = {INCONSISTENT_REASON: bad} if bad else {}
        notes = {"rows": len(items), "question_type_inconsistent": len(bad)}
        return CategoryData(category, items, [provenance], excluded, notes)

    def _read_hub(self, category: str) -> tuple[list[MCItem], DataFile]:
        """Items of one category from the authors' Hub copy (``--data-source hf``): the same rows
        as the pinned CSV (``sources.hf.read_rows``), parsed by the same row checks. The
        provenance path is ``hf:<dataset>/<config>@<revision>`` and its hash the sha256 of the
        rows as read, so two runs on different Hub revisions are told apart."""
        import hashlib
        import json

        from ..sources.hf import read_rows

        rows, prov = read_rows(self.name, category, source="hf", hf_path=self.hf_path)
        where = f"hf:{prov['dataset']}/{prov['config']}"
        missing = [c for c in COLUMNS if rows and c not in rows[0]]
        if missing:
            raise DataError(f"{where}: missing column(s) {missing}")
        items: list[MCItem] = []
        seen: dict[object, str] = {}
        for n, row in enumerate(rows, start=1):
            self._add(
                items,
                seen,
                self._item(row, f"{where}: row {n}", category, len(row)),
                f"{where}: row {n}",
                f"row {n}",
            )
        digest = hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode("utf-8")).hexdigest()
        return items, DataFile(f"{where}@{prov['revision']}", digest, len(rows))

    def _read(self, path: Path, category: str) -> tuple[list[MCItem], int]:
        items: list[MCItem] = []
        seen: dict[object, str] = {}
        for start, width, row in csv_rows(path, COLUMNS):
            self._add(
                items,
                seen,
                self._item(row, f"{path}:{start}", category, width),
                f"{path}:{start}",
                f"line {start}",
            )
        return items, len(items)

    @staticmethod
    def _add(items: list[MCItem], seen: dict[object, str], item: MCItem, where: str, here: str) -> None:
        """Append ``item`` unless its ``instance_id`` was seen (DataError naming where first)."""
        instance_id = item.extra["instance_id"]
        if instance_id in seen:
            raise DataError(
                f"{where}: field 'instance_id': duplicate id {instance_id} (first at {seen[instance_id]})"
            )
        seen[instance_id] = here
        items.append(item)

    def _item(self, row: dict, where: str, category: str, n_columns: int) -> MCItem:
        f = _Fields(row, where, n_columns)
        instance_id = f.integer("instance_id")
        template_id = f.integer("template_id")
        label = f.integer("label")
        if row["category"] != category:
            raise f.fail("category", f"{row['category']!r} in the {category} file")
        condition = f.one_of("context_condition", ("ambig", "disambig"))
        polarity = f.one_of("question_polarity", ("neg", "nonneg"))
        question_type = f.one_of("question_type", QUESTION_TYPES)
        allowed_labels = (UNKNOWN_OPTION,) if condition == "ambig" else (0, 1)
        if label not in allowed_labels:
            raise f.fail(
                "label",
                f"{label} is not allowed for a {condition} row (expected one of {list(allowed_labels)})",
            )
        for name in ("context", "question", "ans0", "ans1"):
            if not row[name].strip():
                raise f.fail(name, "empty")
        if row["ans2"] != UNKNOWN_PLACEHOLDER:
            raise f.fail("ans2", f"expected the placeholder {UNKNOWN_PLACEHOLDER!r}, got {row['ans2']!r}")
        stereotyped = f.str_list("stereotyped_groups", 1)
        target = _target_option(f, stereotyped)
        biased = biased_option(target_option=target, unknown_option=UNKNOWN_OPTION, polarity=polarity)
        consistent = question_type == expected_question_type(condition, label, biased)
        return MCItem(
            item_id=f"{category}-{instance_id}",
            category=category,
            context_condition=condition,
            polarity=polarity,
            context=row["context"],
            question=row["question"],
            options=(row["ans0"], row["ans1"], row["ans2"]),
            gold=label,
            biased_option=biased,
            unknown_option=UNKNOWN_OPTION,
            template_id=str(template_id),
            extra={
                "question_type": question_type,
                "stereotyped_groups": stereotyped,
                "instance_id": instance_id,
                CONSISTENT_FIELD: consistent,
            },
        )

    # -- protocol --------------------------------------------------------------------------------
    def prompt(self, item: MCItem) -> str:
        """The authors' prompt, e.g. ``"Contexto: …\\nPregunta: …\\nRespuesta:"`` (no trailing
        space: the delimiter is put before each choice)."""
        return self.protocol.prompt.format(context=item.context, question=item.question)

    choices_description = (
        "ans0, ans1 and each unknown phrasing (unknown_phrasings), not "
        "stripped; every unknown phrasing stands for the UNKNOWN option"
    )

    def choices(self, item: MCItem) -> list[str]:
        """``[ans0, ans1]`` + the 9 unknown phrasings of the language (11 choices); ``ans2`` (the
        placeholder ``unknown``) is never scored. Texts are not stripped, as in lm-eval."""
        return [item.options[0], item.options[1], *self.protocol.unknown_phrasings]

    def choice_to_option(self, item: MCItem, choice: int) -> int:
        """``min(choice, 2)``: every unknown phrasing stands for option 2 (lm-eval
        ``esbbq/utils.py::_model_answer``).

        Raises:
            ValueError: ``choice`` outside ``[0, 11)``.
        """
        n = 2 + len(self.protocol.unknown_phrasings)
        if not 0 <= choice < n:
            raise ValueError(f"choice must be in [0, {n}), got {choice}")
        return min(choice, UNKNOWN_OPTION)

    # -- metrics ---------------------------------------------------------------------------------
    def in_bias_score(self, record: MCRecord) -> bool:
        """False for a disambiguated record whose ``question_type_consistent`` is False.

        Such rows (listed under ``INCONSISTENT_REASON`` in ``CategoryData.excluded``) have a
        ``question_type`` that contradicts their gold answer's group; lm-eval trusts the field and
        we trust (gold, biased option), so their pro-/anti-stereo side is uncertain. They are left
        out of the disambiguated bias score (as issue 4 asks) and still count for accuracy, which
        does not depend on that side; the cells ``disambig_unchecked_*`` count them.
        """
        # An ambiguous row's bias score never reads question_type, so only disambiguated rows
        # are held out.
        return bool(record.extra.get(CONSISTENT_FIELD, True)) or record.context_condition == "ambig"

    def provenance(self) -> dict[str, object]:
        return {
            "protocol": f"{self.protocol.dataset} (authors' prompt, as lm-eval {self.name})",
            "prompt_template": self.protocol.prompt,
            "unknown_phrasings": list(self.protocol.unknown_phrasings),
            **super().provenance(),
        }


BENCHMARKS = {"esbbq": EsBBQ("es"), "cabbq": EsBBQ("ca")}
