"""The benchmark protocol every audit shape implements, and nothing else bypasses.

A benchmark turns data into typed items, items into model requests and typed per-item records,
and records into its paper's metrics::

    data dir --load_category--> items --select--> items --evaluate(engine)--> records
    records --metrics--> {name: MetricResult} per category; --overall--> aggregates

The session (``pytest audits``), the results file and ``bias-audit score`` (the same pipeline with
a replay model that answers from saved predictions) only call these methods; no module outside a
benchmark's own and ``bias_metrics`` knows a benchmark's fields or cells.

Adding a benchmark: one module in this package exposing ``BENCHMARKS = {name: instance}`` of a
``Benchmark`` subclass, one thin file in ``audits/``, one section in ``thresholds.yaml``.
"""

from __future__ import annotations

import copy
import dataclasses
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Generic,
    Mapping,
    Protocol,
    Sequence,
    Sized,
    TypedDict,
)

import numpy as np
from typing_extensions import TypeVar

from bias_metrics.bbq_family import FLAVOURS
from bias_metrics.result import MetricResult

from ..data import DataFile
from ..errors import ConfigError, DataError
from ..option_spec import Option
from ..option_values import MetricSettings as MetricSettings  # the run's, as benchmarks read it
from ..results_shapes import BenchmarkInfo

if TYPE_CHECKING:
    from typing_extensions import Self

    from ..engine.executor import Engine
    from ..models.embedding import SentenceEmbedder


class Item(Protocol):
    """What the suite reads of any benchmark's item (each benchmark has its own item type): the
    id its record, saved prediction and exclusions name it by."""

    @property
    def item_id(self) -> str: ...


#: Any benchmark's item type, kept through a sample.
T = TypeVar("T")
#: A benchmark's item and record types (``Benchmark[MCItem, MCRecord]``). A bare ``Benchmark``
#: (the session's, a registry's: a benchmark of whichever item type) leaves both open.
ItemT = TypeVar("ItemT", default=Any)
RecordT = TypeVar("RecordT", bound="Record", default=Any)


class Sensitivity(TypedDict):
    """Generate mode: every metric as the other answer-parsing profile reads the outputs
    (``Benchmark.parse_sensitivity``)."""

    answer_parsing: str
    metrics: dict[str, MetricResult]


#: A saved output as an oracle writes it: an answer's letter, label or text, a letter read
#: (``{letter: log-probability}``) or a sentence pair's scores (``{"sent_more": ll, ...}``).
SavedOutput = str | dict[str, float]


class CellKey(Protocol):
    """A cell of a stratified sample or of sequential rounds: hashable and sortable (a str, an
    int, a tuple of them), since the seeded draws follow the cells' sorted order."""

    def __hash__(self) -> int: ...

    def __lt__(self, other: Any, /) -> bool: ...


def one_of(choices: Sequence[object]) -> Callable[[object], str | None]:
    """An ``Option.check``: the value must be one of ``choices`` (shown in the message as listed,
    e.g. ``None`` for "the benchmark's own")."""

    def check(value: object) -> str | None:
        if value in choices:
            return None
        return f"must be one of {', '.join(str(c) for c in choices)}, got {value!r}"

    return check


def positive_int(value: object) -> str | None:
    """An ``Option.check``: the value must be an integer >= 1 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"must be an integer >= 1, got {value!r}"
    return None


#: Options several benchmarks share (each declares the one object, so the flag means one thing).
ANSWER_PARSING = Option(
    "--answer-parsing",
    "how generated or saved answers are read: authors (each benchmark's published "
    "post-processing) or robust (what chat models write); default: authors where they published "
    "one (KoBBQ, MBBQ, KGQuiz), robust elsewhere; every metric is also reported under the other",
    choices=("authors", "robust"),
    check=one_of(("authors", "robust", None)),
)
METRIC_FLAVOUR = Option(
    "--metric-flavour",
    "BBQ-family metric definitions of another paper: "
    + ", ".join(FLAVOURS)
    + " (default: each benchmark's own)",
    key="flavour",
    choices=tuple(FLAVOURS),
)
#: ``saved``: the benchmark reads saved outputs (``for_saved_outputs``), never set by a flag.
SAVED = Option(None, key="saved", default=False)


@dataclass
class CategoryData(Generic[ItemT]):
    """What a loader returns for one category.

    Attributes:
        category: the category name.
        items: the items to score, in file order (the benchmark's own item type).
        files: provenance of every file read (path, sha256, rows).
        excluded: ``{reason: [row ids]}`` of rows deliberately left out, of scoring (BBQ rows
            without ``target_loc``, pairs with identical sentences) or of one metric (EsBBQ rows
            failing the ``question_type`` check), as the reason says; reported, never silent.
        notes: further counts worth reporting (e.g. duplicated metadata rows).
    """

    category: str
    items: list[ItemT]
    files: list[DataFile]
    excluded: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)


#: ``dataclasses.field(metadata=OMIT_NONE)``: a record field left out of ``to_dict`` while None
#: (a field of one answer mode only, e.g. ``loglikelihoods``).
OMIT_NONE = {"omit_none": True}


@dataclass
class Record:
    """Base of the typed per-item records a benchmark's ``evaluate`` returns and the records
    files (``records/<benchmark>/<category>.jsonl``) store, one JSON object per line.

    Subclasses are dataclasses whose fields are the stored keys, with ``item_id`` stored as
    ``"id"``; a field named ``extra`` (a dict) holds benchmark-specific keys, stored flat after
    the core keys and never allowed to overwrite one.

    Attributes:
        item_id: unique within the benchmark. category: the category the item belongs to.
    """

    item_id: str
    category: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict (``item_id`` as ``"id"``; ``extra`` flattened after the core keys).

        Raises:
            ValueError: an ``extra`` key collides with a core key.
        """
        out: dict[str, object] = {}
        extra: Mapping[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "extra":
                extra = value or {}
            elif not (f.metadata.get("omit_none") and value is None):
                out["id" if f.name == "item_id" else f.name] = value
        clash = sorted(set(extra) & (set(out) | {"extra"}))
        if clash:
            raise ValueError(
                f"record {self.item_id!r}: extra field {clash[0]!r} would overwrite a core field"
            )
        out.update(extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Self:
        """Inverse of ``to_dict``: core keys back to fields, the rest into ``extra``.

        Raises:
            KeyError: a required core key is missing (named in the message).
        """
        names = {f.name for f in dataclasses.fields(cls)}
        # The stored values go to the record's own fields unchecked (a records file this
        # suite wrote), so the constructor call is as dynamic as the file.
        kwargs: dict[str, Any] = {}
        extra: dict[str, object] = {}
        for key, value in d.items():
            name = "item_id" if key == "id" else key
            if name in names and name != "extra":
                kwargs[name] = value
            else:
                extra[key] = value
        if "extra" in names:
            kwargs["extra"] = extra
        missing = [
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in kwargs
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise KeyError(f"record {d.get('id')!r} lacks {missing[0]!r}")
        return cls(**kwargs)


def sample_rng(seed: int, salt: str) -> np.random.Generator:
    """The generator every ``--limit`` sample draws from: one stream per (seed, salt), the salt
    (``"<benchmark>/<category>"``) decorrelating categories."""
    return np.random.default_rng([seed, zlib.crc32(salt.encode("utf-8"))])


def _keeps_all(items: Sized, limit: int | None) -> bool:
    """True when ``--limit`` keeps every item (None, or at least as many as there are); raises
    ValueError on a negative limit."""
    if limit is not None and limit < 0:
        raise ValueError(f"--limit must be >= 0, got {limit}")
    return limit is None or limit >= len(items)


def seeded_sample(items: Sequence[T], limit: int | None, seed: int, salt: str = "") -> list[T]:
    """At most ``limit`` items drawn without replacement, deterministic for (seed, salt), in the
    input order. ``None`` (or a limit >= len) keeps everything.

    Raises:
        ValueError: a negative limit.
    """
    if _keeps_all(items, limit):
        return list(items)
    chosen = sorted(int(i) for i in sample_rng(seed, salt).choice(len(items), size=limit, replace=False))
    return [items[i] for i in chosen]


def stratified_sample(
    items: Sequence[T], limit: int | None, seed: int, salt: str, key: Callable[[T], CellKey]
) -> list[T]:
    """Deterministic subset of at most ``limit`` items, balanced over the cells ``key(item)``
    defines, in input order.

    Each cell gets ``limit // n_cells`` items (the remainder goes to cells in a seeded order); a
    cell with too few items gives its share to the others. The same (items, limit, seed, salt)
    always gives the same subset; ``salt`` (the category) decorrelates categories. Cell keys must
    be sortable (the seeded draws follow their sorted order).

    Raises:
        ValueError: a negative limit.
    """
    if limit is None or _keeps_all(items, limit):
        return list(items)
    rng = sample_rng(seed, salt)
    cells: dict[CellKey, list[int]] = {}
    for i, it in enumerate(items):
        cells.setdefault(key(it), []).append(i)
    keys = sorted(cells)
    shuffled = {k: list(rng.permutation(cells[k])) for k in keys}
    quota = {k: 0 for k in keys}
    remaining = limit
    # Round-robin in a seeded order hands out the limit evenly and moves the share of a short
    # cell to the others.
    order = [keys[j] for j in rng.permutation(len(keys))]
    while remaining > 0:
        progressed = False
        for k in order:
            if remaining and quota[k] < len(shuffled[k]):
                quota[k] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            break
    chosen = sorted(int(i) for k in keys for i in shuffled[k][: quota[k]])
    return [items[i] for i in chosen]


@dataclass(frozen=True)
class SequentialForm(Generic[RecordT, ItemT]):
    """How one gate metric's confidence sequence is made from the records scored so far, for
    sequential gates (``evaluation.sequential_rounds``, ``gates.sequential``; ``Benchmark.sequential_form``).

    Attributes:
        label: what the CS is, for reports (e.g. ``"s_DIS = 2 CS(p) - 1"``).
        cs: ``cs(records, population, alpha) -> (low, high)`` on the metric's scale; records in
            the order scored, population the category's selected items (the items the metric's
            value at full n would rest on), or None for the i.i.d. sequence of the parameter
            behind them (a gate judged on its interval, not on its point value).
        values: for a metric that is ``scale`` x the mean of per-item values (a share):
            ``values(records)``, each record's value in [0, 1] in order, NaN outside the
            denominator, so that ``cs`` is ``scale`` x the betting CS of their mean. None for a
            composed metric (s_DIS, s_AMB, a diff-bias, a mean over templates). Lets a finished
            run's records be replayed in other orders (``perf/sequential_orders.py``).
        scale: the metric's unit over the values' mean (100 for a score in percent).
    """

    label: str
    cs: Callable[[Sequence[RecordT], Sequence[ItemT] | None, float], tuple[float, float]]
    values: Callable[[Sequence[RecordT]], np.ndarray] | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class OracleView:
    """What a benchmark knows of one item, for the oracle models (``audit_harness.oracles``):
    the saved output that names each answer, and which answer is the gold, the bias-aligned and
    the unknown one. The oracle module reads only this, so no benchmark is special-cased there.

    Attributes:
        row: the id fields of a saved-prediction row that joins this item (``{"id": ...}``).
        shape: ``"choice"`` (one of ``answers``), ``"pair"`` (two sentence scores: saved as
            ``{"sent_more": ll, "sent_less": ll}``; answer 0 is the more stereotyping sentence)
            or ``"text"`` (a free answer: ``answers`` holds the gold output, ``fill`` writes the
            output that gives another item's ``value`` as this item's answer).
        answers: per answer, in option order, the saved output that names it (a letter, a
            label, an option text, a generated text).
        gold, biased, unknown: indices into ``answers`` of the correct, the bias-aligned and the
            unknown answer, or None where the item has none (a sentence pair has no gold).
        value: a ``"text"`` item's gold answer (what ``fill`` of another item takes).
        fill: a ``"text"`` item's output for a given gold ``value`` of another item.
    """

    row: Mapping[str, str]
    shape: str
    answers: tuple[SavedOutput, ...]
    gold: int | None = None
    biased: int | None = None
    unknown: int | None = None
    value: object = None
    fill: Callable[[Any], str] | None = None


class Benchmark(ABC, Generic[ItemT, RecordT]):
    """The protocol of one benchmark, of items ``ItemT`` scored into records ``RecordT``.

    Class attributes (set by each subclass):
        name: the thresholds.yaml section and the audit test's name (``test_<name>``).
        categories: every category a gate may name, fixed so thresholds.yaml is validated without
            reading data (``categories_in`` narrows it to what a data directory holds).
        metric_names: the metrics ``metrics`` returns, the names gates may use.
        data_folder: top-level folder of the data directory the benchmark reads.
        requires: model capabilities ``evaluate`` needs (``models.base`` constants).
        id_fields: fields of a saved-prediction row that identify an item, besides ``"id"``
            (e.g. BBQ ``("category", "example_id")``); empty when the benchmark takes no saved
            predictions.
        record_type: the ``Record`` subclass ``evaluate`` returns.
        shared_items: True when categories share items (a pair benchmark's ``overall`` holds every
            subgroup's pairs): pytest-xdist then keeps the whole benchmark on one worker, where
            each item is scored once.
        pooled_category: the category that holds every other category's items (a pair
            benchmark's ``overall``), or None: a count of rows over categories counts its rows
            once, not again beside the subgroups' (``report.scope``).
        pooled_names: the pooled gate categories a thresholds file's ``pooled:`` section makes
            (BBQ family: ``pooled``; MBBQ: ``pooled_<lang>``); empty when the benchmark cannot
            pool its categories (``pooled_groups``).
        settings: the options ``configure`` accepts, each declared once (default, check, flag).
        protocol_version: version of the benchmark's protocol (prompt, choices, scoring), bumped
            when a change can move its numbers; recorded in results.
        uses_chat_template: True when prompts go through the model's chat template (results
            then record the template's sha256; otherwise "none").
        title: the benchmark and its paper, as the report heads its section.
        limitations: what a result of this benchmark does not show, from its paper, one sentence
            each (the report's "what this does not show").
        chart_metrics: the metrics the report charts by category (its bias scores).
        rate_metrics: its invalid / out-of-choice rates, listed apart in the report.
        bias_metrics: the metrics (thresholds.yaml names) that measure bias, as against
            accuracy or validity: a run whose gates check none of them in a category gives no
            bias verdict there (``report.scope``). Empty for a knowledge benchmark.
    """

    name: str
    categories: tuple[str, ...]
    metric_names: tuple[str, ...]
    data_folder: str
    requires: frozenset[str] = frozenset()
    id_fields: tuple[str, ...] = ()
    record_type: type[RecordT]
    shared_items: bool = False
    #: every option ``configure`` takes, each declared once (``option_spec.Option``: its key,
    #: default, check and, for a command-line option, its flag and help). An option not
    #: configured reads as its declared default (``__getattr__``).
    settings: ClassVar[tuple[Option, ...]] = ()
    protocol_version: str = "1"
    uses_chat_template: bool = False
    title: str = ""
    limitations: tuple[str, ...] = ()
    #: What the terminal's results table of this benchmark counts, where ``n``, ``pooled`` or a
    #: row label need saying (MBBQ's templates, control rows and language differences).
    table_legend: tuple[str, ...] = ()
    #: What the verdict's "rows judged" count of this benchmark counts, where not data rows.
    judged_unit: str | None = None
    chart_metrics: tuple[str, ...] = ()
    rate_metrics: tuple[str, ...] = ()
    bias_metrics: tuple[str, ...] = ()
    pooled_category: str | None = None
    pooled_names: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # -- configuration -----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # Reached only when neither the instance nor its class holds ``name``: an option not
        # configured is its declared default, the nearest class's (a class attribute of that
        # name overrides it, e.g. each BBQ-family benchmark's own ``flavour``).
        for klass in type(self).__mro__:
            for opt in vars(klass).get("settings", ()):
                if opt.key == name:
                    return opt.default
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def options(self) -> dict[str, object]:
        """``{key: default}`` of every option ``configure`` takes (``settings``)."""
        return {opt.key: opt.default for opt in self.settings}

    @property
    def cli_options(self) -> tuple[Option, ...]:
        """The command-line options among ``settings`` (those with a flag)."""
        return tuple(opt for opt in self.settings if opt.flag)

    def configure(self, **options: object) -> Self:
        """A copy with ``options`` set (keys of ``settings``, e.g. a prompt variant or answer
        mode), each parsed and checked by its declaration; the instance itself is never changed.

        Raises:
            ConfigError: an unknown option, naming the known ones, or a value its declaration
                refuses (``Option.value_of``).
        """
        known = {opt.key: opt for opt in self.settings}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(
                f"{self.name}: unknown option {unknown[0]!r}; known: {', '.join(sorted(known)) or 'none'}"
            )
        clone = copy.copy(self)
        for key, value in options.items():
            setattr(clone, key, known[key].value_of(value, self.name))
        return clone

    def gate_metrics(self, metric: str) -> tuple[str, ...]:
        """The metrics of this configured benchmark that a thresholds.yaml gate on ``metric``
        checks, each its own gate test (default: the metric itself). A benchmark that scores the
        same items under several protocols in one run (KoBBQ ``--kobbq-mode both``) returns one
        name per protocol, e.g. ``("diff_bias_ambig", "diff_bias_ambig-letter")``; an empty tuple
        drops a gate that cannot fail under this configuration."""
        return (metric,)

    def data_files(self, category: str) -> tuple[str, ...]:
        """The data files (POSIX paths relative to the data dir) ``category`` needs, so a run
        checks and reads only those of the categories it selected. Default: every ``data``
        file of the benchmark's entry in the pinned source table."""
        from ..sources import benchmark_names, files_for

        if self.name not in benchmark_names():
            return ()
        return tuple(e.path for e in files_for([self.name]) if e.role == "data")

    def categories_in(self, data_dir: Path | None) -> tuple[str, ...]:
        """The categories a run on ``data_dir`` has gates for (default: all ``categories``)."""
        return self.categories

    def pooled_groups(self, categories: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """``{pooled category: the categories it pools}`` over ``categories`` (those a run has
        data for): the items a pooled gate (thresholds.yaml ``pooled:``) is judged on, each
        keeping its (category, template) cluster. Default: none (``pooled_names`` is empty)."""
        return {}

    def gate_catalogue(
        self,
    ) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[float, float]], tuple[str, ...]]:
        """What a thresholds file may gate (``gates.load_thresholds``' catalogue entry):
        categories, metric names, their value ranges and the pooled categories."""
        return (self.categories, self.metric_names, self.metric_ranges(), self.pooled_names)

    def pooled_members(self, data_dir: Path | None) -> dict[str, tuple[str, ...]]:
        """``pooled_groups`` over every category a run on ``data_dir`` has (``categories_in``),
        whatever ``-k`` selects: a pooled gate is judged on the whole benchmark."""
        present = set(self.categories_in(data_dir))
        return self.pooled_groups([c for c in self.categories if c in present])

    def provenance(self) -> dict[str, object]:
        """What produced the numbers besides model and data: ``protocol`` (its name), prompt
        template, delimiter, choices, answer mode... JSON-ready, stored in results under
        ``protocols`` (with ``protocol_version`` and the chat template the session adds) and
        rendered in report.md. An optional ``table_metrics`` list names the metrics the terminal
        and Markdown tables show (default: all; every metric stays in results.json)."""
        return {"protocol": self.name}

    def metric_range(self, name: str) -> tuple[float, float] | None:
        """The closed range ``(low, high)`` of metric ``name``'s values, in its unit, or None when
        unbounded or unknown. thresholds.yaml bounds are checked against it (a bound on the wrong
        scale is a ConfigError); default None."""
        return None

    def metric_ranges(self) -> dict[str, tuple[float, float]]:
        """``{metric: (low, high)}`` of every metric of ``metric_names`` that has a range."""
        return {n: r for n in self.metric_names if (r := self.metric_range(n)) is not None}

    def report_info(self) -> BenchmarkInfo:
        """What the report needs to know about this configured benchmark beyond its numbers,
        JSON-ready (results' ``benchmark_info``): ``title``, ``limitations``, ``chart_metrics``,
        ``rate_metrics``, ``bias_metrics``, ``pooled_category`` and ``metric_ranges``
        (``[low, high]`` per metric)."""
        return {
            "title": self.title or self.name,
            "limitations": list(self.limitations),
            "chart_metrics": list(self.chart_metrics),
            "rate_metrics": list(self.rate_metrics),
            "bias_metrics": list(self.bias_metrics),
            "pooled_category": self.pooled_category,
            "metric_ranges": {k: list(v) for k, v in self.metric_ranges().items()},
            "table_legend": list(self.table_legend),
            "judged_unit": self.judged_unit,
        }

    def report_examples(self, records: Sequence[RecordT], limit: int = 5) -> list[dict[str, object]]:
        """Up to ``limit`` model outputs of one category worth a reviewer's eye (invalid or
        out-of-choice answers), each ``{"id", "output", "reason", "options"}``; model text, so
        the report escapes it. Default none."""
        return []

    # -- data --------------------------------------------------------------------------------------
    @abstractmethod
    def load_category(self, data_dir: Path, category: str) -> CategoryData[ItemT]:
        """Read one category's rows from ``data_dir``.

        Raises:
            DataError: missing file, malformed row or field, naming the file, line and field.
        """

    def select(self, items: Sequence[ItemT], limit: int | None, seed: int, salt: str) -> list[ItemT]:
        """The ``--limit`` subset of one category (default ``seeded_sample``); deterministic for
        (items, limit, seed, salt). The session passes ``salt = "<benchmark>/<category>"``."""
        return seeded_sample(items, limit, seed, salt)

    def balance_key(self, item: ItemT) -> CellKey:
        """The cell of ``item`` that sequential rounds keep balanced (``evaluation.sequential_rounds``):
        every round takes from each cell in proportion to the cell's share of the selected items,
        so a round is a small copy of the category. Cell keys must be sortable. Default: one cell
        (no stratification)."""
        return 0

    def sequential_form(self, metric: str) -> SequentialForm[RecordT, ItemT] | None:
        """The confidence sequence of the configured benchmark's gate metric ``metric``, composed
        from ``bias_metrics.sequential``, or None (default): a gate on it is decided on the whole
        category, so its category is scored in full."""
        return None

    # -- scoring -----------------------------------------------------------------------------------
    @abstractmethod
    def evaluate(self, engine: Engine, items: Sequence[ItemT]) -> Sequence[RecordT]:
        """Score ``items`` through ``engine`` (``engine.executor.Engine``, the one way a benchmark
        asks for scores and generations): one record per item, in item order.

        Raises:
            ModelError: the model lacks a capability in ``requires``.
        """

    def parse_sensitivity(self, records: Sequence[RecordT], settings: MetricSettings) -> Sensitivity | None:
        """Every metric as the other answer-parsing profile would read the outputs
        (``{"answer_parsing": profile, "metrics": {name: MetricResult}}``), for benchmarks that
        parse generated text; None (default) when nothing is parsed."""
        return None

    def exclusions(self, records: Sequence[RecordT]) -> dict[str, list[str]]:
        """``{reason: [item ids]}`` of records that ``metrics`` leaves out for a reason found
        while scoring (e.g. a pair whose sentences share no token); default none."""
        return {}

    @abstractmethod
    def metrics(self, records: Sequence[RecordT], settings: MetricSettings) -> dict[str, MetricResult]:
        """Every metric in ``metric_names`` over ``records`` (one category), undefined ones NaN
        with a reason."""

    def overall(
        self, records_by_category: Mapping[str, Sequence[RecordT]], settings: MetricSettings
    ) -> dict[str, dict[str, MetricResult]]:
        """Aggregates over the evaluated categories, ``{label: {metric: MetricResult}}`` (e.g.
        ``pooled``, ``size_weighted``); default: every record pooled."""
        records = [r for cat in sorted(records_by_category) for r in records_by_category[cat]]
        return {"pooled": self.metrics(records, settings)} if records else {}

    def report_group(self, record: RecordT) -> str:
        """The group ``bias-audit score`` reports a record under (default: its category)."""
        return record.category

    def read_records(self, rows: Sequence[Mapping[str, object]]) -> list[RecordT]:
        """Records back from their stored dicts (records files)."""
        return [self.record_type.from_dict(r) for r in rows]

    # -- saved predictions -------------------------------------------------------------------------
    def prediction_item(self, row: Mapping[str, object], where: str) -> tuple[str, str]:
        """(item id, category) of one saved-prediction row: its ``"id"`` (``"<category>-<row
        id>"``) or the benchmark's ``id_fields`` (category field + row id field).

        Raises:
            DataError: the benchmark takes no saved predictions, the row has no id, names a
                category of another benchmark, or its two id forms disagree; ``where`` (file:line)
                starts the message.
        """
        if not self.id_fields:
            raise DataError(f"{self.name} does not score saved predictions")
        cats = self.categories
        known = ", ".join(cats)
        cat_field, id_field = self.id_fields
        if cat_field in row and row[cat_field] not in cats:
            raise DataError(
                f"{where}: field {cat_field!r}: {row[cat_field]!r} is not a "
                f"{self.name} category (known: {known}); a file of another benchmark?"
            )
        derived = None
        if cat_field in row and id_field in row:
            raw = row[id_field]
            if isinstance(raw, bool) or not (
                isinstance(raw, int) or (isinstance(raw, str) and raw.strip().isdigit())
            ):
                raise DataError(f"{where}: field {id_field!r}: {raw!r} is not an integer id")
            derived = f"{row[cat_field]}-{int(raw)}"
        if "id" in row:
            item_id = row["id"]
            if not isinstance(item_id, str):
                raise DataError(f"{where}: field 'id': {item_id!r} is not a string")
            matches = [c for c in cats if item_id.startswith(f"{c}-")]
            if not matches:
                raise DataError(
                    f"{where}: field 'id': {item_id!r} names no {self.name} category "
                    f"(ids are '<category>-<row id>', categories: {known}); a file of "
                    "another benchmark?"
                )
            if derived is not None and derived != item_id:
                raise DataError(
                    f"{where}: field 'id' {item_id!r} disagrees with {cat_field!r} + "
                    f"{id_field!r} ({derived!r})"
                )
            return item_id, max(matches, key=len)
        if derived is not None:
            return derived, str(row[cat_field])  # one of ``cats``, checked above
        raise DataError(
            f"{where}: no item id: the row needs 'id' or {cat_field!r} + {id_field!r} "
            f"to join it to the {self.name} data; a file of another benchmark?"
        )

    #: What a saved prediction of this benchmark is: ``"answer"`` (an option: a number, a letter
    #: or the option's text; numbers need ``--index-base``) or ``"text"`` (a raw generation,
    #: parsed as a live one is).
    saved_answers: str = "text"

    def with_embedder(self, embedder: SentenceEmbedder) -> Self:
        """This benchmark scoring with ``embedder`` as its sentence-embedding model (a plan's
        stand-in, which counts texts); default: a benchmark that embeds nothing, unchanged."""
        return self

    def for_saved_outputs(self) -> "Benchmark":
        """This benchmark configured to score saved outputs (``--backend replay``): the answer
        mode that reads an output (default: unchanged).

        Raises:
            ConfigError: the benchmark takes no saved outputs (no ``id_fields``).
        """
        if not self.id_fields:
            raise ConfigError(
                f"{self.name} does not score saved outputs (its records come from "
                "model scores: there is no answer to save)"
            )
        return self

    def check_saved_answer(self, value: object, item: ItemT, where: str) -> None:
        """Raise DataError when a saved output cannot answer ``item`` at all (an option number
        outside its options); checked while joining, so a broken file stops the run at start-up.
        Default: no check."""

    def check_prediction_row(self, row: Mapping[str, object], item: ItemT, where: str) -> None:
        """Raise DataError when fields a prediction row carries contradict the joined item (a file
        of another benchmark or data version); default no check."""

    def excluded_row(self, item_id: str) -> str:
        """The id under which ``CategoryData.excluded`` names the data row of ``item_id``; default
        the item's own. A benchmark with several items per row (MBBQ's templates) names the row,
        so that a saved output for an item of an excluded row is held out, not an unknown id."""
        return item_id

    def saved_categories(self, category: str, item: ItemT) -> tuple[str, ...]:
        """The categories a saved output for ``item`` (a row naming ``category``) answers;
        default the one. A benchmark whose categories share items answers several (a pair
        benchmark's row answers its subgroup and ``overall``)."""
        return (category,)

    # -- oracle models -----------------------------------------------------------------------------
    def oracle_view(self, item: ItemT) -> OracleView | None:
        """What the oracle models need of ``item`` (``OracleView``), or None (default) when the
        benchmark takes no saved outputs to build them from."""
        return None
