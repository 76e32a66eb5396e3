"""BBQ (Parrish et al., Findings of ACL 2022): English, 11 categories.

Data: ``<data_dir>/bbq/data/<Category>.jsonl`` and ``bbq/supplemental/additional_metadata.csv``
(``../shared/data/bbq/SOURCE.md``). The biased answer of each item is the metadata's ``target_loc``
(already polarity-adjusted); metadata rows are de-duplicated on (category, example_id) and items
without ``target_loc`` (16 Gender_identity rows) are excluded and counted, as the authors' R script
does. Protocol: cloze log-likelihood of each option after ``"{context}\\n\\nQ: {question}\\nA:"``
(lm-eval ``bbq`` prompt), argmax over the 3 options.
"""

from __future__ import annotations

import csv
import json
import threading
from functools import lru_cache
from pathlib import Path
from typing import Mapping, TypedDict

from typing_extensions import TypeGuard

from ..data import DataFile, require_file
from ..errors import DataError
from ..option_spec import Option
from .base import CategoryData
from .bbq_family import ITEM_FIELDS, ROW_FIELDS, BBQFamilyBenchmark, MCItem, item_from_row

CATEGORIES = (
    "Age",
    "Disability_status",
    "Gender_identity",
    "Nationality",
    "Physical_appearance",
    "Race_ethnicity",
    "Race_x_SES",
    "Race_x_gender",
    "Religion",
    "SES",
    "Sexual_orientation",
)
REQUIRED_FIELDS = (
    *ROW_FIELDS,
    "answer_info",
    *ITEM_FIELDS,
)
PROMPT = "{context}\n\nQ: {question}\nA:"
PROTOCOLS = ("default", "lmeval")
#: lm-eval 0.4.13 ``tasks/bbq/utils.py`` ``UNKNOWN_RESPONSES`` (from HELM), in its order.
LMEVAL_UNKNOWN_RESPONSES = (
    "Unknown",
    "Cannot answer",
    "Can't be determined",
    "Cannot be determined",
    "Can't answer",
    "Not known",
    "Not enough info",
    "Not enough information",
    "Not answerable",
    "Undetermined",
)
METADATA_FILE = Path("bbq/supplemental/additional_metadata.csv")
_lock = threading.Lock()


@lru_cache(maxsize=4)
def _read_metadata(path: Path) -> tuple[dict[tuple[str, int], tuple[str | None, str]], dict[str, int], int]:
    """{(category, example_id): (target_loc or None, label_type)}, duplicate counts per category,
    and the row count. Raises DataError on a missing column or conflicting duplicates."""
    table: dict[tuple[str, int], tuple[str | None, str]] = {}
    duplicates: dict[str, int] = {}
    rows = 0
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"category", "example_id", "target_loc", "label_type"} - set(reader.fieldnames or ())
        if missing:
            raise DataError(f"{path}: missing column(s) {sorted(missing)}")
        for row in reader:
            rows += 1
            line = reader.line_num
            try:
                key = (row["category"], int(row["example_id"]))
            except ValueError:
                raise DataError(
                    f"{path}:{line}: example_id {row['example_id']!r} is not an integer"
                ) from None
            target = None if row["target_loc"] in ("", "NA") else row["target_loc"]
            value = (target, row["label_type"])
            if key in table:
                if table[key][0] != target:
                    raise DataError(
                        f"{path}:{line}: duplicate metadata for {key} with a different "
                        f"target_loc ({table[key][0]} vs {target})"
                    )
                duplicates[key[0]] = duplicates.get(key[0], 0) + 1
                continue
            table[key] = value
    return table, duplicates, rows


def read_metadata(path: Path) -> tuple[dict[tuple[str, int], tuple[str | None, str]], dict[str, int], int]:
    """``_read_metadata``'s table, parsed once per process (5.8 MB), even with threads."""
    with _lock:
        return _read_metadata(path)


class BBQMetadata(TypedDict, total=False):
    """A BBQ row's ``additional_metadata`` (data/bbq/SOURCE.md)."""

    stereotyped_groups: list[str]
    subcategory: str
    version: str
    source: str


class BBQRow(TypedDict):
    """One line of ``bbq/data/<Category>.jsonl`` (data/bbq/SOURCE.md, "Schema"): 13 keys, of
    which ``checked_row`` checks ``REQUIRED_FIELDS``."""

    example_id: int
    question_index: str
    question_polarity: str
    context_condition: str
    category: str
    answer_info: dict[str, list[str]]
    additional_metadata: BBQMetadata
    context: str
    question: str
    ans0: str
    ans1: str
    ans2: str
    label: int


def _json_object(row: object) -> TypeGuard[BBQRow]:
    # A JSON object, read as a BBQ row: ``checked_row`` checks the fields it reads one by one.
    return isinstance(row, dict)


def checked_row(row: object, where: str, category: str | None) -> tuple[BBQRow, int]:
    """The BBQ row, once its fields are checked, and its unknown option.

    Args:
        row, where: the row and ``<file>:<line>``. category: the file's category, or None where
            any is taken (a declared copy of BBQ's rows, ``format: bbq``).

    Raises:
        DataError: not an object, a missing field, another category, an unknown context
            condition or polarity, ``answer_info`` without exactly one UNKNOWN option, or a label
            outside 0-2.
    """
    if not _json_object(row):
        raise DataError(f"{where}: expected a JSON object")
    for key in REQUIRED_FIELDS:
        if key not in row:
            raise DataError(f"{where}: missing field {key!r}")
    if category is not None and row["category"] != category:
        raise DataError(f"{where}: category {row['category']!r} in the {category} file")
    if row["context_condition"] not in ("ambig", "disambig"):
        raise DataError(f"{where}: context_condition {row['context_condition']!r} is not ambig/disambig")
    if row["question_polarity"] not in ("neg", "nonneg"):
        raise DataError(f"{where}: question_polarity {row['question_polarity']!r} is not neg/nonneg")
    try:
        unknowns = [k for k in range(3) if row["answer_info"][f"ans{k}"][1] == "unknown"]
    except (KeyError, IndexError, TypeError):
        raise DataError(f"{where}: answer_info must map ans0..ans2 to [text, group]") from None
    if len(unknowns) != 1:
        raise DataError(f"{where}: expected exactly one UNKNOWN option in answer_info, found {len(unknowns)}")
    if row["label"] not in (0, 1, 2):
        raise DataError(f"{where}: label {row['label']!r} is not 0, 1 or 2")
    return row, unknowns[0]


def metadata_target(
    meta: Mapping[tuple[str, int], tuple[str | None, str]],
    key: tuple[str, int],
    item_id: str,
    excluded: dict[str, list[str]],
) -> tuple[int, str] | None:
    """``(target_loc, label_type)`` of the row ``key`` = (category, example_id) in BBQ's
    metadata (``_read_metadata``), or None after listing ``item_id`` under ``excluded``'s reason:
    no metadata row, or no ``target_loc`` (the 16 Gender_identity rows), as the authors' R
    script leaves them out."""
    entry = meta.get(key)
    if entry is None:
        excluded.setdefault("no metadata row", []).append(item_id)
        return None
    target_loc, label_type = entry
    if target_loc is None:
        excluded.setdefault("target_loc missing (NA) in additional_metadata.csv", []).append(item_id)
        return None
    return int(target_loc), label_type


def native_item(row: BBQRow, where: str, category: str, unknown: int, target: tuple[int, str]) -> MCItem:
    """The item of a checked BBQ row (``checked_row``) of ``category``; ``target`` is its
    bias-aligned option (BBQ's ``target_loc``) and label type (``label`` or ``name``).

    Raises:
        DataError: the bias-aligned option is the UNKNOWN option or no option.
    """
    biased, label_type = target
    if biased == unknown or biased not in (0, 1, 2):
        raise DataError(f"{where}: target_loc {biased} points at the UNKNOWN option or out of range")
    return item_from_row(
        row,
        MCItem,
        item_id=f"{category}-{row['example_id']}",
        category=category,
        biased_option=biased,
        unknown_option=unknown,
        label_type=label_type,
    )


#: ``--bbq-split-names`` (``bias-audit score --split-names``).
SPLIT_NAMES = Option(
    "--bbq-split-names",
    "BBQ: also report the name-proxy items as '<category> (names)' groups, as "
    "the paper does (results' overall section)",
    key="split_names",
    default=False,
    switch=True,
)


class BBQ(BBQFamilyBenchmark):
    """BBQ benchmark: loader and prompt (see module docstring); metrics: flavour ``bbq``.

    Option ``protocol`` (``--bbq-protocol``): ``default`` (argmax over the 3 options) or
    ``lmeval`` (lm-evaluation-harness 0.4.13's ``bbq`` task: 12 choices, see ``choices``), to
    reproduce lm-eval's BBQ numbers with this suite's intervals and per-category metrics.
    """

    settings = (
        Option(
            "--bbq-protocol",
            "BBQ scoring: default (argmax over the 3 options) or lmeval "
            "(lm-evaluation-harness 0.4.13's bbq task: 2 group answers + 10 unknown "
            "phrasings)",
            key="protocol",
            default="default",
            choices=PROTOCOLS,
            env="AUDIT_BBQ_PROTOCOL",
        ),
        SPLIT_NAMES,
        *(opt for opt in BBQFamilyBenchmark.settings if opt.key != "split_names"),
    )

    name = "bbq"
    flavour = "bbq"
    categories = CATEGORIES
    data_folder = "bbq"
    id_fields = ("category", "example_id")
    title = "BBQ: Bias Benchmark for QA (Parrish et al., Findings of ACL 2022)"
    # The gated accuracy gaps first, the paper's s_AMB / s_DIS beside them (s_AMB is undefined
    # when every ambiguous answer is "unknown"; diff_bias_ambig is then 0).
    base_chart_metrics = ("diff_bias_ambig", "diff_bias_disambig", "bias_score_ambig", "bias_score_disambig")
    #: Generate mode's ``authors`` profile: the BBQ R script's text matching
    #: (``BBQ_calculate_bias_score.R``: clean-ups, then an option's first two words).
    authors_rule = "bbq-reference"
    #: HELM's / lm-eval's 10 phrasings of the unknown answer (each names the unknown option).
    unknown_phrasings = LMEVAL_UNKNOWN_RESPONSES
    language = "en"
    limitations = (
        "A low bias score is not evidence that a model is unbiased: BBQ covers only the "
        "stereotypes its templates attest, in nine social dimensions and two intersections, "
        "asked as multiple-choice questions (Parrish et al. 2022, Limitations).",
        "The ambiguous score s_AMB = (1 - accuracy) x s_DIS mixes accuracy and bias: a model that "
        "answers 'unknown' more often scores closer to 0 whatever its preference among the other "
        "answers.",
        "US English only: the stereotypes are those attested in the US context, in English; the "
        "numbers say nothing about other languages or cultures.",
        "This suite scores by cloze log-likelihood over the options (lm-eval's prompt), so its "
        "numbers share the paper's definitions, not its models' setup or tables.",
    )

    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """Items of one category file joined with their metadata.

        Raises:
            DataError: unknown category, missing file, malformed JSON line, missing field, a row
                without exactly one UNKNOWN option, or a target_loc pointing at UNKNOWN; each
                message names the file and line.
        """
        if category not in CATEGORIES:
            raise DataError(f"unknown BBQ category {category!r}; known: {', '.join(CATEGORIES)}")
        path = require_file(data_dir / "bbq" / "data" / f"{category}.jsonl", f"BBQ {category} data")
        meta_path = require_file(data_dir / METADATA_FILE, "BBQ metadata (target_loc)")
        meta, duplicates, meta_rows = read_metadata(meta_path)
        items: list[MCItem] = []
        excluded: dict[str, list[str]] = {}
        n_rows = 0
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    raise DataError(f"{path}:{line_no}: empty line")
                n_rows += 1
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(
                        f"{path}:{line_no}: malformed JSON ({e.msg.removesuffix(' at')} at column "
                        f"{e.colno}; a truncated or broken line?)"
                    ) from None
                item = self._item(row, f"{path}:{line_no}", category, meta, excluded)
                if item is not None:
                    items.append(item)
        files = [DataFile.of(path, data_dir, n_rows), DataFile.of(meta_path, data_dir, meta_rows)]
        notes = {"rows": n_rows, "metadata_duplicates_dropped": duplicates.get(category, 0)}
        return CategoryData(category, items, files, excluded, notes)

    def _item(
        self,
        raw: object,
        where: str,
        category: str,
        meta: Mapping[tuple[str, int], tuple[str | None, str]],
        excluded: dict[str, list[str]],
    ) -> MCItem | None:
        row, unknown = checked_row(raw, where, category)
        item_id = f"{category}-{row['example_id']}"
        target = metadata_target(meta, (category, int(row["example_id"])), item_id, excluded)
        if target is None:
            return None
        return native_item(row, where, category, unknown, target)

    def data_files(self, category: str) -> tuple[str, ...]:
        """A category's JSONL and the metadata file that names each item's biased answer."""
        return (f"bbq/data/{category}.jsonl", METADATA_FILE.as_posix())

    def prompt(self, item: MCItem) -> str:
        return PROMPT.format(context=item.context, question=item.question)

    def choices(self, item: MCItem) -> list[str]:
        """``default``: the 3 options. ``lmeval``: lm-eval 0.4.13 ``bbq`` ``doc_to_choice``: the
        two group answers in dataset order (unstripped, as lm-eval scores them) + the 10 HELM
        unknown phrasings (``LMEVAL_UNKNOWN_RESPONSES``).

        Raises:
            DataError: (lmeval) the item's UNKNOWN option is not one of the 10 phrasings (lm-eval
                finds the unknown option by its text and fails on such a row).
        """
        if self.protocol != "lmeval":
            return super().choices(item)
        if item.options[item.unknown_option] not in LMEVAL_UNKNOWN_RESPONSES:
            raise DataError(
                f"bbq {item.item_id}: UNKNOWN option {item.options[item.unknown_option]!r} "
                "is not one of lm-eval's unknown phrasings (--bbq-protocol lmeval)"
            )
        groups = [o for k, o in enumerate(item.options) if k != item.unknown_option]
        return groups + list(LMEVAL_UNKNOWN_RESPONSES)

    def choice_to_option(self, item: MCItem, choice: int) -> int:
        """``lmeval``: choices 0 and 1 are the two group options, any phrasing is UNKNOWN."""
        if self.protocol != "lmeval":
            return choice
        if choice >= 2:
            return item.unknown_option
        return [k for k in range(3) if k != item.unknown_option][choice]

    def provenance(self) -> dict[str, object]:
        if self.protocol == "lmeval":
            protocol = (
                "lm-eval 0.4.13 bbq (multiple_choice): cloze over the 2 group answers + "
                "10 HELM unknown phrasings, argmax over 12, any phrasing = unknown"
            )
            extra = {"unknown_phrasings": list(LMEVAL_UNKNOWN_RESPONSES)}
        else:
            protocol, extra = "cloze over the 3 options (lm-eval bbq prompt)", {}
        return {
            "protocol": protocol,
            "protocol_option": self.protocol,
            "prompt_template": PROMPT,
            **extra,
            **super().provenance(),
        }


BENCHMARKS = {"bbq": BBQ()}
