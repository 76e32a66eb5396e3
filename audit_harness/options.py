"""The audit's command-line options: the suite's own (model, data, intervals, outputs) and every
benchmark's (``Benchmark.cli_options``), registered once for ``pytest audits`` and ``bias-audit
run``; and ``AuditOptions`` built from them."""

from __future__ import annotations

import os
from typing import Any, Mapping

from .option_spec import Option

#: Where the suite's options appear in ``--help``.
GROUP = ("bias-audit", "model bias audit")


def _env_int(name: str):
    """An integer option's default from the environment: None when unset or empty.

    Raises:
        pytest.UsageError: the variable holds something else (exit 4, naming it): a limit or
            min_n that cannot be read must never become a different run.
    """
    import pytest

    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"environment variable {name}={value!r}: not an integer") from None


#: The spellings an on/off environment variable may take; anything else is an input error.
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _env_flag(name: str) -> bool:
    """An on/off option's default from the environment (unset: off).

    Raises:
        pytest.UsageError: the variable holds neither spelling (``AUDIT_SEQUENTIAL=false`` once
            turned the option on: any non-empty value did).
    """
    import pytest

    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise pytest.UsageError(
        f"environment variable {name}={os.environ[name]!r}: not one of "
        f"{', '.join(_TRUE)} (on) or {', '.join(v for v in _FALSE if v)} (off)"
    )


#: The options every audit has (model, data, intervals, gates, outputs, cache), each declared once:
#: the plugin registers them (``add_suite_options``) and ``bias-audit score`` takes some of them
#: under the same declaration (``cli``).
SUITE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--model",
        env="AUDIT_MODEL",
        help="zoo name, local transformers folder or hub id (env AUDIT_MODEL; "
        "default: the embedded smollm2-135m-instruct)",
    ),
    Option(
        "--data-dir",
        env="AUDIT_DATA_DIR",
        help="folder holding bbq/, esbbq_cabbq/, ... (env AUDIT_DATA_DIR; default: $BIAS_AUDIT_CACHE/data)",
    ),
    Option(
        "--fetch-data",
        switch=True,
        help="fetch missing benchmark files from the authors' pinned sources first",
    ),
    Option(
        "--device",
        default="auto",
        env="AUDIT_DEVICE",
        choices=("auto", "cpu", "cuda", *(f"cuda:{i}" for i in range(16))),
        help="auto (CUDA when present), cpu or cuda[:N] (env AUDIT_DEVICE)",
    ),
    Option(
        "--dtype",
        default="auto",
        env="AUDIT_DTYPE",
        choices=("auto", "float32", "bfloat16", "float16"),
        help="auto = bfloat16 on CUDA, float32 on CPU (env AUDIT_DTYPE)",
    ),
    Option(
        "--batch-size",
        type=int,
        default=16,
        env="AUDIT_BATCH_SIZE",
        help="sequences per forward pass",
    ),
    Option(
        "--limit",
        type=int,
        env="AUDIT_LIMIT",
        help="items per category, balanced as the benchmark defines (BBQ family: "
        "context condition x polarity; KGQuiz true/false: the label), deterministic for a "
        "given --seed (env AUDIT_LIMIT; default: all)",
    ),
    Option(
        "--seed",
        type=int,
        default=0,
        env="AUDIT_SEED",
        help="seed of --limit sampling and of bootstrap intervals",
    ),
    Option(
        "--bootstrap-resamples",
        dest="audit_bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples for confidence intervals (0 = none)",
    ),
    Option(
        "--confidence",
        type=float,
        default=0.95,
        metavar="LEVEL",
        help="confidence level of the intervals",
    ),
    Option(
        "--bbq-dataset",
        env="AUDIT_BBQ_DATASETS",
        metavar="FILE",
        repeat=True,
        help="a BBQ-format dataset declared in a YAML file (name, language, files, fields, "
        "prompts, metric family; docs/datasets.md), audited as a built-in benchmark with the "
        "thresholds file's section of its name; repeatable (env AUDIT_BBQ_DATASETS: files "
        "separated by os.pathsep, read first)",
    ),
    Option(
        "--thresholds",
        env="AUDIT_THRESHOLDS",
        help="gates file (env AUDIT_THRESHOLDS; default: ./thresholds.yaml when present, "
        "else the packaged one)",
    ),
    Option(
        "--min-n",
        type=int,
        env="AUDIT_MIN_N",
        help="fewest items in a metric's denominator for any verdict, overriding the "
        "thresholds file's min_n (below it: INSUFFICIENT, a failure)",
    ),
    Option(
        "--baseline",
        env="AUDIT_BASELINE",
        metavar="RESULTS",
        help="a previous run's results.json (or its folder): adds a "
        "test_<bench>[<cat>-<metric>-vs-baseline] per gate, failing when the metric got "
        "worse than there by more than the gate's max_regression (env AUDIT_BASELINE)",
    ),
    Option(
        "--sequential",
        switch=True,
        env="AUDIT_SEQUENTIAL",
        help="score each category in seeded, balanced rounds and decide every gate on an "
        "anytime-valid confidence sequence, stopping a category once all its gates are decided "
        "(as `sequential: true` in the thresholds file does per gate; env AUDIT_SEQUENTIAL; "
        "docs/gates.md#sequential-gates)",
    ),
    Option(
        "--strict-baseline",
        switch=True,
        help="with --baseline: stop with exit 4 when the baseline run is not "
        "like for like (another seed, interval settings, dtype, protocol, chat template, "
        "items scored, data or thresholds file) instead of marking its regression gates",
    ),
    Option(
        "--allow-low-confidence",
        switch=True,
        help="accept a thresholds file whose confidence is below 0.9 (else exit 4); the "
        "verdict then says the run is on a partial scope and why",
    ),
    Option(
        "--chat-template",
        default="auto",
        env="AUDIT_CHAT_TEMPLATE",
        metavar="auto|none|FILE",
        help="generation prompts: through the model's own chat template (auto, the "
        "default), as plain text (none), or through the Jinja template in FILE; "
        "recorded with its sha256 (env AUDIT_CHAT_TEMPLATE)",
    ),
    Option(
        "--require-published-data",
        dest="audit_require_published",
        switch=True,
        help="stop (exit 4) unless every data file read is the authors' "
        "published release (sha256 of the pinned source table)",
    ),
    Option(
        "--audit-meta",
        dest="audit_meta",
        env="AUDIT_META",
        metavar="FILE",
        help="YAML file describing the audited system (name, version, intended use, responsible "
        "person and organisation, training-data cutoff, notes): validated at start-up, recorded "
        "in results.json and shown first in the reports (env AUDIT_META; docs/compliance.md)",
    ),
    Option(
        "--regulatory-mapping",
        env="AUDIT_REGULATORY_MAPPING",
        metavar="FILE",
        help="which regulatory clause each benchmark and gate gives evidence for, and when each "
        "benchmark's data was published (env AUDIT_REGULATORY_MAPPING; default: the packaged "
        "regulatory_mapping.yaml)",
    ),
    Option(
        "--results-json",
        metavar="PATH",
        help="also write the run's results.json to PATH",
    ),
    Option(
        "--cache-dir",
        env="AUDIT_CACHE_DIR",
        help="result cache folder (SQLite; env AUDIT_CACHE_DIR; default: "
        "$BIAS_AUDIT_CACHE/scores): a repeated or resumed run recomputes only what is missing",
    ),
    Option(
        "--no-cache",
        switch=True,
        help="do not read or write the result cache",
    ),
    Option(
        "--plan",
        switch=True,
        help="a dry run: build every selected request with the model's tokenizer and config "
        "(no weights loaded) and print per benchmark and category the items, requests, tokens "
        "to forward and to generate, an estimate of the time and the FLOPs; nothing is scored, "
        "no gate is judged (exit 0); writes plan.json in the run folder",
    ),
    Option(
        "--plan-params",
        type=float,
        metavar="N",
        help="with --plan: estimate time and FLOPs for a model of N parameters (e.g. 8.03e9) "
        "instead of the model's own count; the token counts stay the model's tokenizer's",
    ),
    Option(
        "--results-dir",
        default="audit-results",
        env="AUDIT_RESULTS_DIR",
        help="each run writes <results-dir>/<run id>/ (results.json, records/, junit.xml)",
    ),
)
#: ``SUITE_OPTIONS`` by flag.
SUITE = {opt.flag: opt for opt in SUITE_OPTIONS}


def default_of(opt: Option):
    """``opt``'s default: its environment variable's value when set (``env``), else ``default``.

    Raises:
        pytest.UsageError: the variable holds a value of the wrong type (``_env_int``,
            ``_env_flag``).
    """
    if opt.switch:  # off unless turned on: results.json records False, never None
        return _env_flag(opt.env) if opt.env else bool(opt.default)
    if opt.repeat:  # a list the flags add to: the variable's paths first (os.pathsep, as PATH)
        return [p for p in os.environ.get(opt.env or "", "").split(os.pathsep) if p.strip()] or None
    if opt.env is None:
        return opt.default
    if opt.type is int:
        value = _env_int(opt.env)
        # 0 keeps a non-None default, as ``AUDIT_BATCH_SIZE=0`` has always meant 16.
        return opt.default if value is None or (not value and opt.default is not None) else value
    return os.environ.get(opt.env, opt.default)


def register(g, opt: Option, default=None, help: str | None = None) -> None:
    """Register ``opt`` on the plugin's option group, with ``default`` and ``help`` (default: the
    declaration's)."""
    kwargs = opt.parser_kwargs() | {"dest": opt.dest, "default": default}
    if help is not None:
        kwargs["help"] = help
    g.addoption(opt.flag, **kwargs)


def add_suite_options(g) -> None:
    """Register ``SUITE_OPTIONS`` on the option group."""
    for opt in SUITE_OPTIONS:
        register(g, opt, default_of(opt))


def benchmark_options(benchmarks: Mapping[str, Any]) -> dict[str, Any]:
    """``{flag: Option}`` of every benchmark's declared options, each flag once (several
    benchmarks may declare the same option object).

    Raises:
        ValueError: two benchmarks declare one flag with different meanings (help or choices).
    """
    seen: dict[str, Any] = {}
    for bench in benchmarks.values():
        for opt in bench.cli_options:
            other = seen.setdefault(opt.flag, opt)
            if (other.help, other.choices, other.switch) != (opt.help, opt.choices, opt.switch):
                raise ValueError(
                    f"{opt.flag} is declared twice with different meanings "
                    f"(by {bench.name} and another benchmark)"
                )
    return seen


def add_benchmark_options(g, benchmarks: Mapping[str, Any]) -> None:
    """Register every benchmark option (``benchmark_options``) on the option group, its help
    naming the benchmarks that take it. Unset, it is None: each benchmark keeps its own default."""
    for opt in benchmark_options(benchmarks).values():
        who = sorted(b.name for b in benchmarks.values() if opt in b.cli_options)
        default = os.environ.get(opt.env) if opt.env else None
        register(g, opt, default, help=f"{opt.help} [{', '.join(who)}]")


def configured_options(config, benchmarks: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{benchmark: {configure key: value}}`` of the benchmark options given (a flag left unset
    keeps every benchmark's default)."""
    out: dict[str, dict[str, Any]] = {}
    for name, bench in benchmarks.items():
        for opt in bench.cli_options:
            value = config.getoption(opt.dest, None)
            if value is not None:
                out.setdefault(name, {})[opt.key] = value
    return out
