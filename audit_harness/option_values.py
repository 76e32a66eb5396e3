"""``AuditOptions``: the options of one audit, grouped by what reads them (the backend, the
metrics and gates, the outputs), each field declared once by its ``Option`` row (``option``):
its flag, default, environment variable, help and range check sit on the field itself.

Everything else is derived from those rows (``ROWS``): the flags the plugin registers
(``options.add_suite_options``, ``backends.add_options``) and ``bias-audit score`` passes on,
the reading of a pytest config (``read_options``), the range checks (``AuditOptions.check``) and
what results.json records (``AuditOptions.to_dict``). A new flag is one field here and the code
that reads its value.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .errors import ConfigError
from .option_spec import Option, a_confidence, above, at_least

_UNSET = object()


def option(flag: str, help: str = "", *, value: object = _UNSET, recorded: str = "", **row: Any) -> Any:
    """A field declared by its ``Option`` row (``flag``, ``help`` and the ``row`` keywords).

    Args:
        value: the field's default when it differs from the flag's (``--no-cache``'s False is
            ``cache=True``); default: the row's ``default``.
        recorded: the name results.json records it under (default: the field's name).
    """
    opt = Option(flag, help, **row)
    if value is _UNSET:  # a switch is off unless given: False, never None
        value = bool(opt.default) if opt.switch else opt.default
    return field(default=value, metadata={"option": opt, "recorded": recorded})


def base_urls(values: Sequence[str] | None) -> tuple[str, ...] | None:
    """The ``--base-url`` values with each ``@FILE`` replaced by the file's URLs (one a line;
    blank lines and ``#`` comments skipped); None when there are none.

    Raises:
        ConfigError: the file cannot be read or lists no URL.
    """
    urls: list[str] = []
    for value in values or ():
        if not value.startswith("@"):
            urls.append(value)
            continue
        path = Path(value[1:]).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"--base-url {value}: cannot read {path} ({e})") from None
        listed = [line.split("#", 1)[0].strip() for line in lines]
        listed = [u for u in listed if u]
        if not listed:
            raise ConfigError(f"--base-url {value}: {path} lists no URL")
        urls += listed
    return tuple(urls) or None


def _given_urls(values: Sequence[str] | None) -> tuple[str, ...] | None:
    """``--base-url``'s values, else ``AUDIT_BASE_URL``'s (URLs separated by spaces or commas: a
    URL holds ``:``, so not ``os.pathsep``), each ``@FILE`` read (``base_urls``)."""
    return base_urls(values or os.environ.get("AUDIT_BASE_URL", "").replace(",", " ").split())


def _paths(values: Sequence[str] | None) -> tuple[str, ...]:
    """A repeated flag's values, each once, in order."""
    return tuple(dict.fromkeys(values or ()))


@dataclass(frozen=True)
class MetricSettings:
    """How intervals are computed: nominal coverage in (0, 1), bootstrap resamples (0 = none) and
    the bootstrap seed."""

    confidence: float = 0.95
    n_resamples: int = 1000
    seed: int = 0


@dataclass(frozen=True)
class BackendOptions:
    """What opens and runs the audited model (``backends``)."""

    #: a name of ``backends.REGISTRY``, which gives the flag its help and choices.
    name: str = option(
        "--backend", "which backend runs the model", default="hf", env="AUDIT_BACKEND", recorded="backend"
    )
    #: ``--backend openai``: the server(s) (one URL, or several for a pool of replicas) and
    #: the client's settings.
    base_url: tuple[str, ...] | None = option(
        "--base-url",
        "with --backend openai: the API root, e.g. http://127.0.0.1:8000/v1; several "
        "times (or @FILE, one URL a line) for a pool of replicas of one model "
        "(env AUDIT_BASE_URL: URLs separated by spaces or commas)",
        repeat=True,
        metavar="URL",
        parse=_given_urls,
    )
    device: str = option(
        "--device",
        "auto (CUDA when present), cpu or cuda[:N] (env AUDIT_DEVICE)",
        default="auto",
        env="AUDIT_DEVICE",
        choices=("auto", "cpu", "cuda", *(f"cuda:{i}" for i in range(16))),
    )
    dtype: str = option(
        "--dtype",
        "auto = bfloat16 on CUDA, float32 on CPU (env AUDIT_DTYPE)",
        default="auto",
        env="AUDIT_DTYPE",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    batch_size: int = option(
        "--batch-size",
        "sequences per forward pass",
        type=int,
        default=16,
        env="AUDIT_BATCH_SIZE",
        check=at_least(1),
    )
    api_key_env: str = option(
        "--api-key-env",
        "environment variable holding the server's API key "
        "(default OPENAI_API_KEY; unset: no key is sent; never logged)",
        default="OPENAI_API_KEY",
        metavar="NAME",
    )
    tokenizer: str | None = option(
        "--tokenizer",
        "with --backend openai: zoo name, folder or hub id of the served model's "
        "tokenizer, for servers without /tokenize and for chat formatting "
        "(default: --model when it names one)",
        metavar="NAME",
    )
    max_concurrency: int = option(
        "--max-concurrency",
        "with --backend openai: requests in flight per endpoint and process (default 8)",
        default=8,
        type=int,
        metavar="N",
        check=at_least(1),
    )
    request_timeout: float = option(
        "--request-timeout",
        "with --backend openai: seconds per request (default 120)",
        default=120.0,
        type=float,
        metavar="SECONDS",
        check=above(0, " seconds"),
    )
    max_retries: int = option(
        "--max-retries",
        "with --backend openai: retries after HTTP 408, 409, 429, "
        "500, 502, 503, 504 or a connection error, "
        "with exponential backoff (default 5)",
        default=5,
        type=int,
        metavar="N",
        check=at_least(0),
    )
    #: ``--backend replay``: the saved outputs, their field, how numbers count options, and
    #: whether a category the file covers only in part may be judged.
    predictions: str | None = option(
        "--predictions",
        "with --backend replay: JSONL of saved outputs, one row per item with its id and the output",
        metavar="FILE",
    )
    prediction_field: str | None = option(
        "--prediction-field",
        "with --backend replay: the row field holding the output (letter, text or number; "
        "sentence pairs: the two sentences' log-likelihoods, docs/replay.md)",
        metavar="FIELD",
    )
    index_base: int | None = option(
        "--index-base",
        "with --backend replay: saved answers that are numbers count the options "
        "from 0 or from 1 (without it a number is an error: '1' could be A or B)",
        type=int,
        choices=(0, 1),
    )
    allow_partial: bool = option(
        "--allow-partial",
        "with --backend replay: judge a category the predictions "
        "cover only in part (else its gates are INSUFFICIENT)",
        default=False,
        switch=True,
    )
    #: a dry run with the model's tokenizer and config only (``models.counting``), counting what a
    #: run would compute (its checks: ``backends.PlanSpec.check_flags``).
    plan: bool = option(
        "--plan",
        "a dry run: build every selected request with the model's tokenizer and config "
        "(no weights loaded) and print per benchmark and category the items, requests, tokens "
        "to forward and to generate, an estimate of the time and the FLOPs; nothing is scored, "
        "no gate is judged (exit 0); writes plan.json in the run folder",
        switch=True,
    )
    plan_params: float | None = option(
        "--plan-params",
        "with --plan: estimate time and FLOPs for a model of N parameters (e.g. 8.03e9) "
        "instead of the model's own count; the token counts stay the model's tokenizer's",
        type=float,
        metavar="N",
    )


@dataclass(frozen=True)
class MetricOptions:
    """How metrics are computed and gates judged."""

    n_resamples: int = option(
        "--bootstrap-resamples",
        "bootstrap resamples for confidence intervals (0 = none)",
        dest="audit_bootstrap",
        type=int,
        default=1000,
        metavar="N",
        check=at_least(0),
    )
    confidence: float = option(
        "--confidence",
        "confidence level of the intervals",
        type=float,
        default=0.95,
        metavar="LEVEL",
        check=a_confidence,
    )
    #: every gate's min_n when set, else thresholds.yaml's.
    min_n: int | None = option(
        "--min-n",
        "fewest items in a metric's denominator for any verdict, overriding the "
        "thresholds file's min_n (below it: INSUFFICIENT, a failure)",
        type=int,
        env="AUDIT_MIN_N",
        check=at_least(0),
    )
    #: a thresholds file may sign off below ``gates.CONFIDENCE_FLOOR``.
    allow_low_confidence: bool = option(
        "--allow-low-confidence",
        "accept a thresholds file whose confidence is below 0.9 (else exit 4); the "
        "verdict then says the run is on a partial scope and why",
        switch=True,
    )
    #: every gate is sequential (``gates.sequential``), as thresholds.yaml's
    #: ``sequential: true`` makes the gates it names.
    sequential: bool = option(
        "--sequential",
        "score each category in seeded, balanced rounds and decide every gate on an "
        "anytime-valid confidence sequence, stopping a category once all its gates are decided "
        "(as `sequential: true` in the thresholds file does per gate; env AUDIT_SEQUENTIAL; "
        "docs/gates.md#sequential-gates)",
        switch=True,
        env="AUDIT_SEQUENTIAL",
    )


@dataclass(frozen=True)
class OutputOptions:
    """Where the run writes, what it reuses, and what it records of the audited system."""

    results_dir: str = option(
        "--results-dir",
        "each run writes <results-dir>/<run id>/ (results.json, records/, junit.xml)",
        default="audit-results",
        env="AUDIT_RESULTS_DIR",
    )
    results_json: str | None = option(
        "--results-json", "also write the run's results.json to PATH", metavar="PATH"
    )
    #: folder of the result cache (None: ``engine.cache.default_cache_dir()``).
    cache_dir: str | None = option(
        "--cache-dir",
        "result cache folder (SQLite; env AUDIT_CACHE_DIR; default: "
        "$BIAS_AUDIT_CACHE/scores): a repeated or resumed run recomputes only what is missing",
        env="AUDIT_CACHE_DIR",
    )
    cache: bool = option(
        "--no-cache", "do not read or write the result cache", switch=True, parse=operator.not_, value=True
    )
    #: ``engine.progress`` mode: ``bar``, ``lines`` or ``off`` (from pytest's verbosity).
    progress: str = "off"
    #: the audited system's description (``compliance.meta``), and the clause mapping to use
    #: instead of the packaged one.
    audit_meta: str | None = option(
        "--audit-meta",
        "YAML file describing the audited system (name, version, intended use, responsible "
        "person and organisation, training-data cutoff, notes): validated at start-up, recorded "
        "in results.json and shown first in the reports (env AUDIT_META; docs/compliance.md)",
        dest="audit_meta",
        env="AUDIT_META",
        metavar="FILE",
    )
    regulatory_mapping: str | None = option(
        "--regulatory-mapping",
        "which regulatory clause each benchmark and gate gives evidence for, and when each "
        "benchmark's data was published (env AUDIT_REGULATORY_MAPPING; default: the packaged "
        "regulatory_mapping.yaml)",
        env="AUDIT_REGULATORY_MAPPING",
        metavar="FILE",
    )


@dataclass(frozen=True)
class AuditOptions:
    """The options of an audit: its own, then each group's."""

    model: str | None = option(
        "--model",
        "zoo name, local transformers folder or hub id (env AUDIT_MODEL; "
        "default: the embedded smollm2-135m-instruct)",
        env="AUDIT_MODEL",
    )
    data_dir: str | None = option(
        "--data-dir",
        "folder holding bbq/, esbbq_cabbq/, ... (env AUDIT_DATA_DIR; default: $BIAS_AUDIT_CACHE/data)",
        env="AUDIT_DATA_DIR",
    )
    fetch_data: bool = option(
        "--fetch-data",
        "fetch missing benchmark files from the authors' pinned sources first",
        switch=True,
    )
    limit: int | None = option(
        "--limit",
        "items per category, balanced as the benchmark defines (BBQ family: "
        "context condition x polarity; KGQuiz true/false: the label), deterministic for a "
        "given --seed (env AUDIT_LIMIT; default: all)",
        type=int,
        env="AUDIT_LIMIT",
        check=at_least(1),
    )
    seed: int = option(
        "--seed", "seed of --limit sampling and of bootstrap intervals", type=int, default=0, env="AUDIT_SEED"
    )
    #: the declarations of BBQ-format datasets (absolute paths) audited beside the built-in
    #: benchmarks (``benchmarks.registry``).
    bbq_datasets: tuple[str, ...] = option(
        "--bbq-dataset",
        "a BBQ-format dataset declared in a YAML file (name, language, files, fields, "
        "prompts, metric family; docs/datasets.md), audited as a built-in benchmark with the "
        "thresholds file's section of its name; repeatable (env AUDIT_BBQ_DATASETS: files "
        "separated by os.pathsep, read first)",
        env="AUDIT_BBQ_DATASETS",
        metavar="FILE",
        repeat=True,
        parse=_paths,
        value=(),
    )
    thresholds: str = option(
        "--thresholds",
        "gates file (env AUDIT_THRESHOLDS; default: ./thresholds.yaml when present, else the packaged one)",
        env="AUDIT_THRESHOLDS",
        value="thresholds.yaml",
    )
    baseline: str | None = option(
        "--baseline",
        "a previous run's results.json (or its folder): adds a "
        "test_<bench>[<cat>-<metric>-vs-baseline] per gate, failing when the metric got "
        "worse than there by more than the gate's max_regression (env AUDIT_BASELINE)",
        env="AUDIT_BASELINE",
        metavar="RESULTS",
    )
    #: a baseline that is not like for like is an input error (exit 4).
    strict_baseline: bool = option(
        "--strict-baseline",
        "with --baseline: stop with exit 4 when the baseline run is not "
        "like for like (another seed, interval settings, dtype, protocol, chat template, "
        "items scored, data or thresholds file) instead of marking its regression gates",
        switch=True,
    )
    require_published_data: bool = option(
        "--require-published-data",
        "stop (exit 4) unless every data file read is the authors' "
        "published release (sha256 of the pinned source table)",
        dest="audit_require_published",
        switch=True,
    )
    #: ``auto`` (the model's), ``none`` (plain text) or a template file.
    chat_template: str = option(
        "--chat-template",
        "generation prompts: through the model's own chat template (auto, the "
        "default), as plain text (none), or through the Jinja template in FILE; "
        "recorded with its sha256 (env AUDIT_CHAT_TEMPLATE)",
        default="auto",
        env="AUDIT_CHAT_TEMPLATE",
        metavar="auto|none|FILE",
    )
    #: ``{benchmark: {option: value}}`` passed to ``Benchmark.configure`` (e.g. KoBBQ's mode),
    #: from the benchmarks' own options (``options.configured_options``).
    benchmark_options: dict[str, dict[str, object]] = field(default_factory=dict)
    backend: BackendOptions = field(default_factory=BackendOptions)
    metrics: MetricOptions = field(default_factory=MetricOptions)
    outputs: OutputOptions = field(default_factory=OutputOptions)

    @property
    def metric_settings(self) -> MetricSettings:
        return MetricSettings(
            confidence=self.metrics.confidence, n_resamples=self.metrics.n_resamples, seed=self.seed
        )

    def value(self, opt: Option) -> object:
        """The value of row ``opt`` (of ``ROWS``)."""
        return getattr(getattr(self, opt.group) if opt.group else self, opt.field)

    def to_dict(self) -> dict[str, object]:
        """Every field of every group in one flat mapping, each under its recorded name (the
        backend's ``name`` as ``backend``), as results.json and plan.json record them."""
        return _flat(self)

    def check(self) -> None:
        """Raise ConfigError on the first value a row's ``check`` refuses, naming the flag
        (``--limit must be >= 1, got 0``)."""
        for opt in ROWS:
            if opt.check is not None and (problem := opt.check(self.value(opt))):
                raise ConfigError(f"{opt.flag} {problem}")


#: The groups by their field of ``AuditOptions`` (``""``: its own fields).
GROUPS: dict[str, type] = {
    "": AuditOptions,
    "backend": BackendOptions,
    "metrics": MetricOptions,
    "outputs": OutputOptions,
}


def _flat(values: AuditOptions | BackendOptions | MetricOptions | OutputOptions) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(values):
        value = getattr(values, f.name)
        if f.name in GROUPS:
            out.update(_flat(value))
        else:
            out[f.metadata.get("recorded") or f.name] = value
    return out


def rows() -> tuple[Option, ...]:
    """Every field's row, naming its group, field and recorded name (its ``key``)."""
    rows = []
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            if "option" in f.metadata:
                key = f.metadata["recorded"] or f.name
                rows.append(dataclasses.replace(f.metadata["option"], group=group, field=f.name, key=key))
    return tuple(rows)


#: Every option of the run, declared once, in ``--help``'s order within its group.
ROWS = rows()


def field_groups() -> dict[str, str]:
    """The group holding each field: a field's name is its name in ``to_dict``'s flat mapping
    (and ``read_options``'s ``given``), so it is one group's only."""
    homes: dict[str, str] = {}
    for group, cls in GROUPS.items():
        for f in dataclasses.fields(cls):
            if f.name not in GROUPS and homes.setdefault(f.name, group) != group:
                raise ValueError(f"option field {f.name!r} is in two groups")
    return homes


HOME = field_groups()


def read_options(get: Callable[[str], object], **given: object) -> AuditOptions:
    """``AuditOptions`` read from ``get`` (``pytest.Config.getoption``: each row's value under its
    ``dest``, flags already merged with environment defaults), each parsed by its row's
    ``parse``; ``given``: fields set as they are (those no flag gives, such as
    ``benchmark_options`` and ``progress``, or one the caller reads in its own context)."""
    values: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    for opt in ROWS:
        if opt.field not in given:
            value = get(opt.dest)
            values[opt.group][opt.field] = opt.parse(value) if opt.parse is not None else value
    for name, value in given.items():
        values[HOME[name]][name] = value
    groups = {group: cls(**values[group]) for group, cls in GROUPS.items() if group}
    return AuditOptions(**values[""], **groups)
