"""Saved predictions joined to a benchmark's data: the one part of scoring saved outputs that an
audit run does not already do. The replay backend (``models/replay.py``) then answers each item
with its saved output, and the run goes on as any other.

Input is JSONL, one object per line, carrying the item's id (``"id"`` = ``"<Category>-<row id>"``,
or the benchmark's own id fields, e.g. BBQ ``category`` + ``example_id``) and a prediction field:
text (a letter, the option text, a whole generated answer) or, for a benchmark whose saved answers
may be option numbers (``Benchmark.saved_answers``), a number, read with ``--index-base 0|1``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .data import decoded_lines, not_text
from .errors import DataError

if TYPE_CHECKING:
    from .benchmarks.base import Benchmark, CategoryData

_NUMBER = re.compile(r"\s*[+-]?\d+\s*")


def read_predictions(path: str | Path) -> list[tuple[int, dict[str, object]]]:
    """``[(line number, row)]`` of a JSONL file; blank lines are skipped.

    Raises:
        DataError: the file cannot be read, a line is not a JSON object, or there is no row;
            messages are ``"<file>:<line>: <reason>"``.
    """
    path = Path(path)
    rows: list[tuple[int, dict[str, object]]] = []
    try:
        for line_no, line, utf8 in decoded_lines(path):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                bytes_note = "" if utf8 else "; the line is not UTF-8"
                raise DataError(
                    f"{where}: malformed JSON ({e.msg} at column {e.colno}{bytes_note})"
                ) from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
            # Bytes that are not UTF-8, or a \ud800-style escape: no text a record can hold (the
            # run died writing its records, exit 3, instead of refusing the row here).
            bad = not_text(row, where, utf8)
            if bad is not None:
                raise bad
            rows.append((line_no, row))
    except OSError as e:
        raise DataError(f"cannot read predictions {path}: {e.strerror or e}") from None
    if not rows:
        raise DataError(f"{path}: no prediction rows")
    return rows


def saved_answer(value: object, index_base: int | None, where: str) -> str | int | None:
    """A saved answer as the benchmark's parser reads it: text as is, ``None`` (no output) as
    is, and a number (an int, an integral float, or digits as text) as a 0-based option index
    counted from ``index_base`` (``-1`` stays "no answer").

    Raises:
        DataError: a number without ``index_base`` (``"1"`` could be A or B: the file must say),
            ``0`` under ``--index-base 1``, or a boolean, list or object.
    """
    if value is None or (isinstance(value, str) and not _NUMBER.fullmatch(value)):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise DataError(f"{where}: {value!r} is not an option number, a letter or a text")
    if isinstance(value, float) and not value.is_integer():
        raise DataError(f"{where}: {value!r} is not an integer option number")
    number = int(value)
    if index_base is None:
        raise DataError(
            f"{where}: {value!r} is a number, which could count the options from 0 "
            "or from 1: say which with --index-base 0 or --index-base 1 (a letter or "
            "the option's text needs neither)"
        )
    if number == -1:
        return -1
    if number < index_base:
        raise DataError(
            f"{where}: {value!r} names no option when options count from "
            f"{index_base} (--index-base {index_base}); -1 means no answer"
        )
    return number - index_base


@dataclass
class JoinedPredictions:
    """A predictions file joined to a benchmark's items.

    Attributes:
        path, field, sha256: the file, the prediction field, the file's sha256.
        outputs: ``{item id: saved output}`` (numbers already 0-based indices).
        lines: ``{item id: line number}``.
        by_category: ``{category: [item ids]}`` of the rows that answer an item, file order.
        available: ``{category: items the category holds}`` for the categories the file names.
        held_out: ``{category: {reason: [item ids]}}`` rows whose item the loader leaves out
            (BBQ's rows without ``target_loc``), counted, never scored.
    """

    path: Path
    field: str
    sha256: str
    outputs: dict[str, object]
    lines: dict[str, int]
    by_category: dict[str, list[str]]
    available: dict[str, int]
    held_out: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def coverage(self, category: str) -> tuple[int, int]:
        """(items the file answers, items the category holds)."""
        return len(self.by_category.get(category, ())), self.available.get(category, 0)


def _place_rows(
    benchmark: Benchmark, path: Path, prediction_field: str
) -> tuple[dict[str, int], list[tuple[str, dict[str, object], str, str]]]:
    """``({item id: line}, [(where, row, item id, category)])`` of the file's rows, in file order.

    Raises:
        DataError: a benchmark that takes no saved predictions, a row it cannot place
            (``prediction_item``), a duplicated id, or a row without the prediction field
            (naming the row's fields and the closest one).
    """
    if not benchmark.id_fields:
        raise DataError(
            f"{benchmark.name} does not score saved predictions (its records come "
            "from model scores, there is no answer to save)"
        )
    lines: dict[str, int] = {}
    placed: list[tuple[str, dict[str, object], str, str]] = []
    for line_no, row in read_predictions(path):
        where = f"{path}:{line_no}"
        item_id, category = benchmark.prediction_item(row, where)
        if item_id in lines:
            raise DataError(f"{where}: duplicate id {item_id!r} (first at line {lines[item_id]})")
        lines[item_id] = line_no
        if prediction_field not in row:
            close = difflib.get_close_matches(prediction_field, [str(k) for k in row], n=1)
            raise DataError(
                f"{where}: missing prediction field {prediction_field!r}; the row's "
                f"fields are {', '.join(map(repr, row))}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
            )
        placed.append((where, row, item_id, category))
    return lines, placed


def _saved_output(
    benchmark: Benchmark, item: object, value: object, index_base: int | None, where: str
) -> object:
    """A row's saved output for ``item``: an option's number made a 0-based index where the
    benchmark saves answers (``saved_answer``), then checked by the benchmark."""
    if getattr(benchmark, "saved_answers", "text") == "answer":
        value = saved_answer(value, index_base, where)
    benchmark.check_saved_answer(value, item, where)
    return value


def _left_out(benchmark: Benchmark, data: dict[str, CategoryData]) -> Callable[[str], tuple[str, str] | None]:
    """``item id -> (category, reason)`` where the loader leaves the item's row out, else None.
    A complete output set answers those rows too: BBQ's 16 without target_loc, MBBQ's whose
    targeted option cannot be resolved, each in its 5 templates (``Benchmark.excluded_row``)."""
    table = {i: (c, reason) for c, d in data.items() for reason, ids in d.excluded.items() for i in ids}
    return lambda item_id: table.get(item_id) or table.get(benchmark.excluded_row(item_id))


def join_predictions(
    benchmark: Benchmark,
    path: str | Path,
    prediction_field: str,
    load_category: Callable[[str], CategoryData],
    index_base: int | None = None,
) -> JoinedPredictions:
    """Join a predictions file to ``benchmark``'s data, category by category.

    Args:
        benchmark: a configured ``Benchmark`` with ``id_fields`` (it takes saved predictions).
        path, prediction_field: the JSONL file and the field holding the prediction.
        load_category: ``category -> CategoryData`` (the session's cached loader).
        index_base: how numbers count the options (``saved_answer``); None refuses numbers.
    Raises:
        DataError: naming ``<file>:<line>`` and the reason: malformed JSON, no id, an id or
            category of another benchmark, an id not in the data, a duplicated id, a missing
            prediction field (with the row's fields and the closest one), a number without
            ``--index-base``, or a row whose own fields disagree with the item. The loader's own
            DataError (missing or malformed data files) passes through.
    """
    path = Path(path)
    lines, placed = _place_rows(benchmark, path, prediction_field)
    categories = [c for c in benchmark.categories if any(p[3] == c for p in placed)]
    data = {c: load_category(c) for c in categories}
    items = {it.item_id: it for d in data.values() for it in d.items}
    left_out = _left_out(benchmark, data)
    outputs: dict[str, object] = {}
    by_category: dict[str, list[str]] = {c: [] for c in categories}
    held_out: dict[str, dict[str, list[str]]] = {}
    for where, row, item_id, category in placed:
        item = items.get(item_id)
        if item is None:
            held = left_out(item_id)
            if held is not None:  # e.g. BBQ's 16 rows without target_loc: left out, counted
                cat, reason = held
                held_out.setdefault(cat, {}).setdefault(reason, []).append(item_id)
                continue
            files = ", ".join(f.path for f in data[category].files[:1])
            raise DataError(f"{where}: id {item_id!r} is not in the {benchmark.name} data ({files})")
        benchmark.check_prediction_row(row, item, where)
        outputs[item_id] = _saved_output(
            benchmark, item, row[prediction_field], index_base, f"{where}: field {prediction_field!r}"
        )
        # A benchmark whose categories share items (pairs: a subgroup and ``overall``) answers
        # each of them with the one row.
        for answered in benchmark.saved_categories(category, item):
            if answered not in data:
                data[answered] = load_category(answered)
            by_category.setdefault(answered, []).append(item_id)
    return JoinedPredictions(
        path=path,
        field=prediction_field,
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        outputs=outputs,
        lines=lines,
        by_category=by_category,
        available={c: len(d.items) for c, d in data.items()},
        held_out=held_out,
    )
