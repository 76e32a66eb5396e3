"""``AuditOptions``: the options of one audit, grouped by what reads them (the backend, the
metrics and gates, the outputs), built from a pytest config (``options_from_config``) and
checked once (``AuditOptions.validate``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .benchmarks.base import MetricSettings
from .errors import ConfigError


@dataclass(frozen=True)
class BackendOptions:
    """What opens and runs the audited model (``backends``)."""

    #: ``--backend``: a name of ``backends.REGISTRY``.
    name: str = "hf"
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    #: ``--backend openai``: the server(s) (one URL, or several for a pool of replicas) and
    #: the client's settings.
    base_url: tuple[str, ...] | None = None
    api_key_env: str = "OPENAI_API_KEY"
    tokenizer: str | None = None
    max_concurrency: int = 8
    request_timeout: float = 120.0
    max_retries: int = 5
    #: ``--backend replay``: the saved outputs, their field, how numbers count options, and
    #: whether a category the file covers only in part may be judged.
    predictions: str | None = None
    prediction_field: str | None = None
    index_base: int | None = None
    allow_partial: bool = False
    #: ``--plan``: a dry run with the model's tokenizer and config only (``models.plan``),
    #: counting what a run would compute; ``plan_params``: the parameter count to estimate time
    #: and FLOPs for (``--plan-params``; default the model's).
    plan: bool = False
    plan_params: float | None = None


@dataclass(frozen=True)
class MetricOptions:
    """How metrics are computed and gates judged."""

    n_resamples: int = 1000
    confidence: float = 0.95
    #: every gate's min_n when set (``--min-n``), else thresholds.yaml's.
    min_n: int | None = None
    #: ``--allow-low-confidence``: a thresholds file may sign off below ``gates.CONFIDENCE_FLOOR``.
    allow_low_confidence: bool = False
    #: ``--sequential``: every gate is sequential (``audit_harness.sequential``), as
    #: thresholds.yaml's ``sequential: true`` makes the gates it names.
    sequential: bool = False


@dataclass(frozen=True)
class OutputOptions:
    """Where the run writes, what it reuses, and what it records of the audited system."""

    results_dir: str = "audit-results"
    #: folder of the result cache (None: ``engine.cache.default_cache_dir()``); ``cache=False``
    #: (``--no-cache``) turns it off.
    cache_dir: str | None = None
    cache: bool = True
    #: ``engine.progress`` mode: ``bar``, ``lines`` or ``off``.
    progress: str = "off"
    #: ``--audit-meta``: the audited system's description (``compliance.meta``), and
    #: ``--regulatory-mapping``: the clause mapping to use instead of the packaged one.
    audit_meta: str | None = None
    regulatory_mapping: str | None = None


#: The options as results.json and plan.json have always listed them (``AuditOptions.to_dict``):
#: one flat mapping, in this order, whatever group holds each.
_RECORDED = (
    "model data_dir device dtype batch_size limit seed n_resamples confidence thresholds "
    "results_dir min_n require_published_data strict_baseline allow_low_confidence sequential "
    "chat_template benchmark_options cache_dir cache progress backend base_url api_key_env "
    "tokenizer max_concurrency request_timeout max_retries predictions prediction_field "
    "index_base allow_partial plan plan_params audit_meta regulatory_mapping bbq_datasets"
).split()


@dataclass(frozen=True)
class AuditOptions:
    """The options of an audit (see ``pytest_plugin`` for their flags)."""

    model: str | None = None
    data_dir: str | None = None
    limit: int | None = None
    seed: int = 0
    thresholds: str = "thresholds.yaml"
    #: stop at start-up when a data file is not the published release (``--require-published-data``).
    require_published_data: bool = False
    #: ``--strict-baseline``: a baseline that is not like for like is an input error (exit 4).
    strict_baseline: bool = False
    #: ``--chat-template``: ``auto`` (the model's), ``none`` (plain text) or a template file.
    chat_template: str = "auto"
    #: ``{benchmark: {option: value}}`` passed to ``Benchmark.configure`` (e.g. KoBBQ's mode).
    benchmark_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``--bbq-dataset``: the declarations of BBQ-format datasets (absolute paths) audited beside
    #: the built-in benchmarks (``benchmarks.registry``).
    bbq_datasets: tuple[str, ...] = ()
    backend: BackendOptions = field(default_factory=BackendOptions)
    metrics: MetricOptions = field(default_factory=MetricOptions)
    outputs: OutputOptions = field(default_factory=OutputOptions)

    @property
    def metric_settings(self) -> MetricSettings:
        return MetricSettings(
            confidence=self.metrics.confidence, n_resamples=self.metrics.n_resamples, seed=self.seed
        )

    def to_dict(self) -> dict[str, Any]:
        """Every option in one flat mapping (``_RECORDED``), as the results file records them."""
        flat = {k: v for k, v in self.__dict__.items() if k not in ("backend", "metrics", "outputs")}
        flat.update(asdict(self.metrics), **asdict(self.outputs))
        backend = asdict(self.backend)
        flat.update(backend, backend=backend.pop("name"))
        return {k: flat[k] for k in _RECORDED}

    def validate(self) -> None:
        """Raises ConfigError on an out-of-range option, naming the flag."""
        from .option_spec import check_confidence

        if self.backend.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.backend.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {self.limit}")
        if self.metrics.n_resamples < 0:
            raise ConfigError(f"--bootstrap-resamples must be >= 0, got {self.metrics.n_resamples}")
        check_confidence(self.metrics.confidence, "--confidence")
        if self.metrics.min_n is not None and self.metrics.min_n < 0:
            raise ConfigError(f"--min-n must be >= 0, got {self.metrics.min_n}")
        if self.chat_template not in ("auto", "none"):
            path = Path(self.chat_template)
            if not path.is_file():
                raise ConfigError(f"--chat-template {self.chat_template}: not auto, none or a template file")
            from .models.chat_template import check_template_file

            check_template_file(path)  # renders, with the user's message: else exit 4 here
        from .backends import validate

        validate(self)


def _progress_mode(config) -> str:
    from .engine.progress import progress_mode

    worker = getattr(config, "workerinput", {}).get("workerid")
    return progress_mode(quiet=config.getoption("verbose") < 0, worker=worker)


def options_from_config(config) -> AuditOptions:
    """``AuditOptions`` from a pytest config (flags already merged with environment defaults)."""
    from .backends import options_from_config as backend_options
    from .benchmarks import registry
    from .options import configured_options

    get = config.getoption
    # Relative to where the run started (a declaration's own paths are relative to its file).
    declared = tuple(
        str((Path(config.invocation_params.dir) / Path(p).expanduser()).resolve())
        for p in get("audit_bbq_dataset") or ()
    )
    opts = AuditOptions(
        model=get("audit_model"),
        data_dir=get("audit_data_dir"),
        limit=get("audit_limit"),
        seed=get("audit_seed"),
        thresholds=get("audit_thresholds"),
        require_published_data=get("audit_require_published"),
        strict_baseline=get("audit_strict_baseline"),
        chat_template=get("audit_chat_template"),
        benchmark_options=configured_options(config, registry(declared)),
        bbq_datasets=tuple(dict.fromkeys(declared)),
        backend=BackendOptions(**backend_options(config)),
        metrics=MetricOptions(
            n_resamples=get("audit_bootstrap"),
            confidence=get("audit_confidence"),
            min_n=get("audit_min_n"),
            allow_low_confidence=get("audit_allow_low_confidence"),
            sequential=get("audit_sequential"),
        ),
        outputs=OutputOptions(
            results_dir=get("audit_results_dir"),
            cache_dir=get("audit_cache_dir"),
            cache=not get("audit_no_cache"),
            progress=_progress_mode(config),
            audit_meta=get("audit_meta"),
            regulatory_mapping=get("audit_regulatory_mapping"),
        ),
    )
    opts.validate()
    return opts
