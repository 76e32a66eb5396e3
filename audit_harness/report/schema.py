"""The shape of a results document (results.json), as its readers see it: one ``TypedDict`` per
JSON object the reports, the model card, ``compare`` and the MLflow export read, so a type
checker can tell a misspelt key or a wrong type from the document docs/report.md describes.

Every key is optional (``total=False``): a document read from disk may predate a field (the
readers fall back, e.g. ``views.resolution_of``), and a category that failed holds ``status``
and ``error`` only. Objects whose keys are data, not fields (metric names, categories, file
paths, library names), are ``dict[str, ...]`` of the entry type. ``build_results`` writes these;
``ResultsDocument`` reads them back.

An object written below ``report/`` (a server endpoint's accounting, a benchmark's
``benchmark_info``) is declared once, in ``results_shapes``, for its writer and its readers. An
endpoint's accounting holds every key in every file that has one.
"""

from __future__ import annotations

from typing import Mapping, TypedDict, cast

from ..compliance.mapping import MappingRecord
from ..compliance.meta import AuditMetaRecord
from ..results_shapes import BenchmarkInfo, EndpointAccounting

#: An interval as recorded: ``[low, high]``, ``null`` where undefined or open.
Interval = list[float | None]
#: A gate's bounds or certifiable band (``min``, ``max``, ``abs_max``, ``target``,
#: ``tolerance``), as ``gates.resolution.describe_band`` reads them.
Band = dict[str, float]


class MetricEntry(TypedDict, total=False):
    """One metric of a category or an aggregate (``bias_metrics.MetricResult.to_dict``)."""

    name: str
    value: float | None
    ci: Interval
    n: int
    n_variants: int | None
    clusters: int | None
    confidence: float | None
    ci_method: str | None
    counts: dict[str, int]
    reason: str | None
    source: str


class Coverage(TypedDict, total=False):
    """How many of a category's rows a predictions file answered (``--backend replay``)."""

    predicted: int
    available: int
    predictions: str


class SensitivityEntry(TypedDict, total=False):
    """A category's metrics under the other parsing profile."""

    answer_parsing: str
    metrics: dict[str, MetricEntry]


class RequestCounts(TypedDict, total=False):
    """What the engine asked the model for a category (``engine`` counters)."""

    requests: int
    distinct: int
    from_cache: int
    computed: int
    forwards: int
    tokens_forwarded: int
    oom_retries: int
    truncated: int


class Example(TypedDict, total=False):
    """An output that was invalid or out of choice, kept as an example."""

    id: str
    options: list[str]
    output: str
    reason: str


class CategoryEntry(TypedDict, total=False):
    """``benchmarks.<bench>.<category>``: a scored category (``status: ok``) or one whose
    evaluation failed (``status: error`` with the ``error``)."""

    status: str
    error: str
    n_available: int
    n_scored: int
    metrics: dict[str, MetricEntry]
    excluded: dict[str, list[str]]
    notes: dict[str, int]
    seconds: float
    records_path: str
    requests: RequestCounts
    examples: list[Example]
    coverage: Coverage | None
    sensitivity: SensitivityEntry | None
    sequential: SequentialEntry | None


class ToDecide(TypedDict, total=False):
    """What would decide an undecided gate (``gates.resolution.ToDecide`` with its ``text``)."""

    outcome: str
    scale: float | None
    items: int | None
    clusters: int | None
    text: str


class SequentialEntry(TypedDict, total=False):
    """How a sequential gate was decided (``gates`` sequential decision)."""

    alpha: float
    pass_alpha: float
    band: Interval
    cs: Interval | None
    decision: str | None
    form: str
    items_saved: int
    items_scored: int
    n: int
    note: str | None
    population: int
    round_size: int
    rounds: int
    sides: int
    target: str
    verdict_from: str


class OtherParse(TypedDict, total=False):
    """A gate's verdict under the other parsing profile."""

    answer_parsing: str
    status: str
    value: float | None
    ci: Interval
    verdict_differs: bool


class BaselineValue(TypedDict, total=False):
    """A regression gate's baseline metric (``gates.regression.Baseline.to_dict``)."""

    value: float | None
    ci: Interval
    n: int | None
    run_id: str
    reason: str | None


class GateEntry(TypedDict, total=False):
    """One gate verdict (``gates.gate.Verdict.to_dict``) with what its gate can resolve
    (``gates.resolution.of_entry``)."""

    benchmark: str
    category: str
    metric: str
    kind: str
    test_id: str
    status: str
    bounds: Band
    mode: str
    allowed: Interval
    min_n: int
    confidence: float
    value: float | None
    ci: Interval
    clusters: int | None
    n: int | None
    n_variants: int | None
    message: str
    cause: str
    other_parse: OtherParse
    sequential: SequentialEntry
    baseline: BaselineValue
    max_regression: float
    like_for_like: bool
    not_like_for_like: list[str]
    half_width: float | None
    certifiable_band: Band | None
    to_decide: ToDecide | None
    #: ``mode``'s name in results files written before it was renamed.
    basis: str


class LetterRead(TypedDict, total=False):
    """How letter log-probs were read through a chat API."""

    served_model: str
    endpoint: str
    top_logprobs: int
    requested: int


class ServerInfo(TypedDict, total=False):
    """``model.server``: a served model's endpoints and how its letters were read."""

    endpoints: list[EndpointAccounting]
    letter_read: LetterRead | str
    notices: list[str]


class ModelInfo(TypedDict, total=False):
    """``model``: what was audited."""

    name: str
    source: str
    fingerprint: str
    dtype: str
    device: str
    n_parameters: int
    kind: str
    server: ServerInfo | None
    chat_template_sha256: str | None
    chat_template_source: str


class Options(TypedDict, total=False):
    """``options``: the run's options (``AuditOptions.to_dict``) as the reports read them; the
    file holds every declared option."""

    model: str
    limit: int | None
    seed: int
    confidence: float
    n_resamples: int
    min_n: int | None
    allow_partial: bool
    sequential: bool
    backend: str


class OutcomeRecord(TypedDict, total=False):
    """``run.outcome`` (``run_outcome.Outcome.to_dict``)."""

    label: str
    exit_code: int
    reason: str
    status: str
    partial: list[str]


class SuiteInfo(TypedDict, total=False):
    """``run.suite``: the suite's version and git commit (``results.suite_provenance``)."""

    version: str
    git_commit: str
    git_dirty: bool | None


class IntervalFloors(TypedDict, total=False):
    """``run.interval_floors``: the confidence and resamples the gates were signed off at."""

    confidence: float
    n_resamples: int
    signed_off_confidence: list[float]
    min_resamples: dict[str, int]


class RunInfo(TypedDict, total=False):
    """``run``: how the run was invoked, what produced it and its outcome."""

    invocation: list[str]
    command_line: str
    working_directory: str
    started: str
    duration_s: float
    suite: SuiteInfo
    engine_version: str
    thresholds_sha256: str
    thresholds_origin: str
    packaged_thresholds_sha256: str
    thresholds_warnings: list[str]
    interval_floors: IntervalFloors
    gates_configured: int
    outcome: OutcomeRecord
    status: str
    exit_status: int


class Environment(TypedDict, total=False):
    """``environment``: library versions and the platform."""

    libraries: dict[str, str | None]
    platform: str


class DataFile(TypedDict, total=False):
    """``data_files.<path>``: a data file the run read."""

    sha256: str
    rows: int
    status: str
    license: str | None
    source: str
    benchmarks: list[str]


class ErrorEntry(TypedDict, total=False):
    """``errors``: a category whose evaluation failed."""

    benchmark: str
    category: str
    message: str


class ProtocolEntry(TypedDict, total=False):
    """``protocols.<bench>``: what produced a benchmark's numbers (``AuditSession.protocol``);
    the reports read these keys and list every other one as recorded."""

    protocol: str
    protocol_version: str
    answer_mode: str
    answer_parsing: str
    table_metrics: list[str]


class BaselineSummary(TypedDict, total=False):
    """``baseline``: the ``--baseline`` run and how it differs from this one."""

    path: str
    run_id: str
    model: str
    fingerprint: str
    created: str
    sha256: str
    not_like_for_like: list[str]
    models: list[str]


class ReadEntry(TypedDict, total=False):
    """``reads.<bench>``: how the model was read (``results.reads_entry``); ``letter_read`` a
    word, or a copy of what the server recorded (``model.server.letter_read``, shown as given)."""

    answer_mode: str
    letter_read: dict[str, object] | str


#: ``overall.<bench>``: ``categories`` (the categories pooled) and one metrics object per
#: aggregate (``pooled``, ``size_weighted``, a reporting group).
OverallEntry = dict[str, list[str] | dict[str, MetricEntry]]


class Results(TypedDict, total=False):
    """A results document (results.json), as docs/report.md describes it."""

    run_id: str
    created: str
    model: ModelInfo | None
    options: Options
    thresholds: str
    run: RunInfo
    environment: Environment
    data_files: dict[str, DataFile]
    benchmarks: dict[str, dict[str, CategoryEntry]]
    errors: list[ErrorEntry]
    overall: dict[str, OverallEntry]
    protocols: dict[str, ProtocolEntry]
    benchmark_info: dict[str, BenchmarkInfo]
    baseline: BaselineSummary | None
    audit_meta: AuditMetaRecord | None
    regulatory_mapping: MappingRecord | None
    gates: list[GateEntry]
    gate_summary: dict[str, int]
    reads: dict[str, ReadEntry]


class PlanWhole(TypedDict):
    """A plan row's counts with every request computed on its own (no cache, no prefix sharing)."""

    forward_tokens: int
    score_tokens: int
    prompt_tokens: int
    generation_requests: int
    tokens_to_generate: int


class PlanEstimate(TypedDict, total=False):
    """A plan row's time and FLOPs, as planned and with every request whole."""

    seconds: float
    flops: float
    whole_seconds: float
    whole_flops: float


class PlanCounts(TypedDict):
    """A category's counts as ``planning.plan_row`` writes them (every key); a benchmark's and
    the run's total are their sums."""

    items: int
    new_items: int
    requests: int
    distinct: int
    computed: int
    forwards: int
    forward_tokens: int
    score_tokens: int
    generation_prompt_tokens: int
    generations: int
    tokens_to_generate: int
    whole: PlanWhole
    texts_to_embed: int


class PlanRow(PlanCounts, total=False):
    """A category's, benchmark's or run's counts in a plan (``planning.build_plan``), with the
    seconds its planning took and its estimate."""

    seconds_planning: float
    estimate: PlanEstimate


class PlanSection(TypedDict, total=False):
    """A benchmark in a plan: its categories' rows and their total."""

    categories: dict[str, PlanRow]
    total: PlanRow


class FirstRun(TypedDict, total=False):
    """A plan's estimate of a first real run (``planning.first_run``): each first-use cost
    (``[what, seconds or None]``), the load, cores and slow-down factor, and the sum."""

    parts: list[tuple[str, float | None]]
    load: float
    cores: int
    factor: float
    seconds: float


class Skipped(TypedDict, total=False):
    """A category a plan left out, and why."""

    benchmark: str
    category: str
    reason: str


class Plan(TypedDict, total=False):
    """A plan document (plan.json, ``planning.build_plan``), as the terminal reads it."""

    plan: str
    run_id: str
    exit_status: int
    duration_s: float
    model: ModelInfo
    model_error: str | None
    errors: list[ErrorEntry]
    skipped: list[Skipped]
    parameters: int
    parameters_source: str
    benchmarks: dict[str, PlanSection]
    #: ``{}`` when no category was planned (no ``benchmarks``).
    total: PlanRow
    seconds_planning: float
    notes: list[str]
    first_run: FirstRun | None


def as_plan(document: Mapping[str, object]) -> Plan:
    """``document`` (the plan ``planning.build_plan`` made) typed by its schema, as
    ``as_results`` types a results document."""
    return cast(Plan, document)


def as_results(document: Mapping[str, object]) -> Results:
    """``document`` typed by its schema: the one place a results document's JSON is taken to
    have the shape ``Results`` declares. The reports' entry points take what their callers hold
    (a ``ResultsDocument`` read from disk, the dict ``build_results`` made, a baseline's
    document) and read it through this; ``ResultsDocument.read`` has checked a file for
    ``run_id``, ``benchmarks`` and ``gates``, and every reader falls back where an older file
    lacks a field."""
    return cast(Results, document)
