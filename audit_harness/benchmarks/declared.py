"""BBQ-format datasets a user declares in YAML (``--bbq-dataset FILE``, docs/datasets.md): each
declaration (``declaration.read_declaration``) becomes a ``DeclaredBBQ``, a BBQ-family benchmark
audited as a built-in one is (both answer modes, gates, reports, saved outputs, oracles).

Rows: one JSONL or CSV file per category; each row's BBQ fields are read from the declared
columns, its values mapped (``values``) and checked: the context condition and polarity, the
three options, the gold label, the unknown option and the targeted group's option (or the
bias-aligned one). The bias-aligned option is the targeted group's in a negative question and the
other group's in a non-negative one (``bias_metrics.records.biased_option``). An ambiguous row's
gold must be the unknown option and a disambiguated row's one of the others, as in BBQ, where the
metrics rely on it. Every problem names the data file, the line and the column.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from bias_metrics.records import biased_option

from ..data import DataFile, csv_rows, require_file, sha256_file
from ..errors import ConfigError, DataError
from ..results_shapes import BenchmarkInfo
from .base import CategoryData
from .bbq import BBQRow, checked_row, metadata_target, native_item, read_metadata
from .bbq_family import GENERATE_PROMPTS, BBQFamilyBenchmark, MCItem
from .declaration import CHOICE_FIELDS, NATIVE, Declaration, jsonl_rows, read_declaration, resolved

#: What every declared dataset's report says first (its own ``limitations`` follow).
DECLARED_LIMITATION = (
    "A dataset declared by the user (--bbq-dataset): the suite checked its schema and rows, not "
    "whether its items measure the stereotypes they claim to; the numbers mean what its items mean."
)


class DeclaredBBQ(BBQFamilyBenchmark):
    """A BBQ-format dataset from a ``Declaration``: the declared files, fields, prompts and
    metric family (``flavour``); the BBQ family's options (``--bbq-answer-mode``, ...)."""

    id_fields = ("category", "example_id")

    def __init__(self, declaration: Declaration):
        d = declaration
        self.declaration = d
        self.name = d.name
        self.flavour = d.flavour
        self.language = d.language
        self.categories = tuple(d.files)
        self.data_folder = d.name
        self.title = d.title or f"{d.name} (a BBQ-format dataset declared in {d.path.name})"
        self.unknown_phrasings = d.unknown_phrasings
        self.delimiter = d.delimiter
        self.limitations = (DECLARED_LIMITATION, *d.limitations)
        if "id" in d.fields:
            self.id_fields = ("category", d.fields["id"])

    def __repr__(self) -> str:
        return f"DeclaredBBQ({self.name!r}, {str(self.declaration.path)!r})"

    def report_info(self) -> BenchmarkInfo:
        """The BBQ family's, and the metric ``family`` (its ``flavour``): the regulatory mapping
        counts the dataset's gates where it lists that family's benchmark (``Row.covers``)."""
        info = super().report_info()
        info["family"] = self.flavour
        return info

    @property
    def rate_metrics(self) -> tuple[str, ...]:  # type: ignore[override]
        """The flavour's rate of answers naming no option (``invalid_rate``, KoBBQ's
        ``out_of_choice_rate``)."""
        return tuple(n + self.suffix for n in self.base_metric_names if n.endswith("_rate"))

    # -- data ------------------------------------------------------------------------------------
    def data_files(self, category: str) -> tuple[str, ...]:
        """None under the data dir: the declared files were checked when it was read."""
        return ()

    def load_category(self, data_dir: Path, category: str) -> CategoryData:
        """The items of one category's declared file, in file order (``data_dir`` is not read).

        Raises:
            DataError: unknown category, a file gone since the declaration was read, a malformed
                line, a missing column, a value the declaration does not allow, a label outside
                the options, a duplicate id; each names the file, the line and the column.
        """
        d = self.declaration
        if category not in d.files:
            raise DataError(f"unknown {self.name} category {category!r}; known: {', '.join(self.categories)}")
        path = require_file(d.files[category], f"{self.name} {category} data (declared in {d.path})")
        items: list[MCItem] = []
        seen: dict[str, str] = {}
        excluded: dict[str, list[str]] = {}
        native = d.formats[category] == NATIVE
        rows = jsonl_rows(path) if native else _rows(path, d.formats[category], d.fields.values())
        for number, (where, row) in enumerate(rows, start=1):
            item = (
                _native(d, row, where, category, excluded)
                if native
                else _Row(self, row, where).item(category, number)
            )
            if item is None:
                continue
            if item.item_id in seen:
                column = "example_id" if native else d.fields.get("id")
                raise DataError(f"{where}: column {column!r}: duplicate id (first at {seen[item.item_id]})")
            seen[item.item_id] = where
            items.append(item)
        n_rows = len(items) + sum(map(len, excluded.values()))
        files = [DataFile(d.shown[category], sha256_file(path), n_rows)]
        if native and d.metadata is not None:
            meta_rows = read_metadata(d.metadata)[2]
            files.append(DataFile(f"{d.name}/{d.metadata.name}", sha256_file(d.metadata), meta_rows))
        return CategoryData(category, items, files, excluded, {"rows": n_rows})

    # -- protocol --------------------------------------------------------------------------------
    def prompt(self, item: MCItem) -> str:
        return self.declaration.prompt.format(context=item.context, question=item.question)

    def generate_prompt(self, item: MCItem) -> str:
        """The declared lettered prompt, or the suite's in the dataset's language."""
        if self.declaration.generate_prompt is None:
            return super().generate_prompt(item)
        a, b, c = self.shown_options(item)
        return self.declaration.generate_prompt.format(
            context=item.context, question=item.question, a=a, b=b, c=c
        )

    def provenance(self) -> dict[str, object]:
        d = self.declaration
        base = self
        if d.generate_prompt is not None and self.language not in GENERATE_PROMPTS:
            # The family's provenance looks the suite's prompt up by language; the declared
            # prompt replaces it below, so any language the suite has stands in for the lookup.
            base = copy.copy(self)
            base.language = "en"
        out = {
            "protocol": f"declared BBQ-format dataset {d.name} (cloze over the 3 options)",
            "declaration": d.path.name,
            "declaration_sha256": d.sha256,
            "prompt_template": d.prompt,
            **BBQFamilyBenchmark.provenance(base),
        }
        if "generate_prompt_template" in out and d.generate_prompt is not None:
            out["generate_prompt_template"] = d.generate_prompt
        return out


def _rows(path: Path, fmt: str, columns) -> Iterator[tuple[str, dict]]:
    """``("<file>:<line>", row)`` of each row of a JSONL or CSV file (CSV: ``columns`` must all
    be in its header)."""
    if fmt == "csv":
        for start, width, row in csv_rows(path, list(dict.fromkeys(columns))):
            if None in row or any(v is None for v in row.values()):
                raise DataError(f"{path}:{start}: the row does not have the header's {width} fields")
            yield f"{path}:{start}", row
        return
    yield from jsonl_rows(path)


def _native(
    d: Declaration, raw: object, where: str, category: str, excluded: dict[str, list[str]]
) -> MCItem | None:
    """``format: bbq``: a BBQ row read by the built-in loader's code (``bbq.checked_row``,
    ``native_item``), its bias-aligned option the metadata's ``target_loc`` as the built-in
    reads it, or, without ``metadata``, derived from the row's own groups (``_row_target``)."""
    row, unknown = checked_row(raw, where, None)
    if d.metadata is not None:
        if not isinstance(row["example_id"], int) or isinstance(row["example_id"], bool):
            raise DataError(f"{where}: field 'example_id': {row['example_id']!r} is not an integer")
        key = (row["category"], row["example_id"])
        target = metadata_target(
            read_metadata(d.metadata)[0], key, f"{category}-{row['example_id']}", excluded
        )
        if target is None:
            return None
        return native_item(row, where, category, unknown, target)
    targeted = _row_target(row, where, unknown)
    biased = biased_option(target_option=targeted, unknown_option=unknown, polarity=row["question_polarity"])
    return native_item(row, where, category, unknown, (biased, "label"))


def _row_target(row: BBQRow, where: str, unknown: int) -> int:
    """The option naming the targeted group: the one whose ``answer_info`` group is in the row's
    ``additional_metadata.stereotyped_groups`` (compared without case). BBQ's ``target_loc``
    is this on the categories whose groups are spelt alike in both (docs/datasets.md).

    Raises:
        DataError: no option or two match (the groups are spelt otherwise: ``F`` for ``woman``,
            ``low SES`` for ``lowSES``, a country for its region); the message names the
            ``metadata`` key that reads BBQ's ``target_loc`` instead.
    """
    try:
        stereotyped = {str(g).casefold() for g in row["additional_metadata"]["stereotyped_groups"]}
    except (KeyError, TypeError):
        raise DataError(f"{where}: field 'additional_metadata.stereotyped_groups': missing") from None
    groups = {k: str(row["answer_info"][f"ans{k}"][1]) for k in range(3) if k != unknown}
    matched = [k for k, g in groups.items() if g.casefold() in stereotyped]
    if len(matched) != 1:
        raise DataError(
            f"{where}: field 'additional_metadata.stereotyped_groups': "
            f"{'no' if not matched else 'two'} option's answer_info group ({', '.join(groups.values())}) "
            f"is in {sorted(stereotyped)}, so the targeted option is not known; declare BBQ's "
            "additional_metadata.csv under metadata: to read its target_loc (docs/datasets.md)"
        )
    return matched[0]


def _text(value: object) -> str:
    """A data value as the declaration's ``values`` keys are written (YAML text)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


class _Row:
    """One data row read through the declaration; every problem a DataError naming the file,
    line, column and the BBQ field it holds."""

    def __init__(self, bench: DeclaredBBQ, row: Mapping[str, object], where: str):
        self.d = bench.declaration
        self.row = row
        self.where = where

    def fail(self, key: str, problem: str) -> DataError:
        column = self.d.fields[key]
        named = f"column {column!r}" + ("" if column == key else f" ({key})")
        return DataError(f"{self.where}: {named}: {problem} (declared in {self.d.where('fields.' + key)})")

    def raw(self, key: str) -> object:
        column = self.d.fields[key]
        if column not in self.row or self.row[column] is None:
            raise self.fail(key, "missing")
        return self.row[column]

    def text(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a non-empty text, got {value!r}")
        return value

    def mapped(self, key: str) -> object:
        """The value after the declaration's ``values`` table (when it has one for ``key``)."""
        value = self.raw(key)
        table = self.d.values.get(key)
        if table is None:
            return value
        text = _text(value)
        if text not in table:
            raise self.fail(key, f"{value!r} is not one of the declared values.{key} ({', '.join(table)})")
        return table[text]

    def choice(self, key: str) -> str:
        value = self.mapped(key)
        if not isinstance(value, str) or value not in CHOICE_FIELDS[key]:  # the choices are texts
            raise self.fail(
                key, f"{value!r} is not one of {', '.join(CHOICE_FIELDS[key])} (map it under values.{key})"
            )
        return value

    def option(self, key: str) -> int:
        """An option index 0-2 (an integer, or its digits in a text)."""
        value = self.mapped(key)
        text = _text(value)
        if isinstance(value, bool) or not text.isdigit() or int(text) not in (0, 1, 2):
            raise self.fail(
                key,
                f"{value!r} is not one of the options 0, 1, 2 (ans0, ans1, ans2; map other "
                f"labels under values.{key})",
            )
        return int(text)

    def item(self, category: str, number: int) -> MCItem:
        condition, polarity = self.choice("context_condition"), self.choice("question_polarity")
        gold, unknown = self.option("label"), self.option("unknown_option")
        if condition == "ambig" and gold != unknown:
            raise self.fail(
                "label", f"{gold} in an ambiguous context: the answer must be the unknown option ({unknown})"
            )
        if condition == "disambig" and gold == unknown:
            raise self.fail("label", f"{gold} is the unknown option in a disambiguated context")
        biased = self.biased(unknown, polarity)
        row_id = _text(self.raw("id")) if "id" in self.d.fields else str(number)
        return MCItem(
            item_id=f"{category}-{row_id}",
            category=category,
            context_condition=condition,
            polarity=polarity,
            context=self.text("context"),
            question=self.text("question"),
            options=(self.text("ans0"), self.text("ans1"), self.text("ans2")),
            gold=gold,
            biased_option=biased,
            unknown_option=unknown,
            template_id=_text(self.raw("template_id")) if "template_id" in self.d.fields else "",
        )

    def biased(self, unknown: int, polarity: str) -> int:
        """The bias-aligned option: declared, or from the targeted group's option and polarity."""
        key = "biased_option" if "biased_option" in self.d.fields else "target_option"
        option = self.option(key)
        if option == unknown:
            raise self.fail(key, f"{option} is the unknown option")
        if key == "biased_option":
            return option
        return biased_option(target_option=option, unknown_option=unknown, polarity=polarity)


def declared_benchmarks(paths: Sequence[str | Path], known: Mapping[str, object]) -> dict[str, DeclaredBBQ]:
    """``{name: DeclaredBBQ}`` of the declarations at ``paths`` (a file given twice is read once).

    Raises:
        ConfigError: a declaration ``read_declaration`` refuses, or whose name is a built-in
            benchmark's or an earlier declaration's.
    """
    taken = {name: "a built-in benchmark" for name in known}
    out: dict[str, DeclaredBBQ] = {}
    read: set[Path] = set()
    for path in paths:
        file = resolved(path)
        if file in read:
            continue
        read.add(file)
        d = read_declaration(path, taken)
        taken[d.name] = f"the dataset declared in {d.path}"
        out[d.name] = DeclaredBBQ(d)
    return out


def declared_names(benchmarks: Mapping[str, object]) -> list[str]:
    """The names of the declared datasets among ``benchmarks``."""
    return [name for name, b in benchmarks.items() if isinstance(b, DeclaredBBQ)]


def require_gates(
    benchmarks: Mapping[str, object], gates: Mapping[str, Sequence[object]], thresholds: str
) -> None:
    """Every declared dataset has gates in the thresholds file: a dataset without a section would
    run no test at all, which must never read as a pass.

    Raises:
        ConfigError: naming the dataset, its declaration and the thresholds file.
    """
    for name, bench in benchmarks.items():
        if isinstance(bench, DeclaredBBQ) and not gates.get(name):
            d = bench.declaration
            raise ConfigError(
                f"the dataset {name!r} declared in {d.path} has no gates in the thresholds file "
                f"{thresholds}: add a section `{name}:` with its gates (as bbq's; docs/datasets.md) "
                "and pass the file with --thresholds"
            )
