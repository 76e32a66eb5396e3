"""The audit's command-line options: the suite's own (model, data, intervals, outputs) and every
benchmark's (``Benchmark.cli_options``), registered once for ``pytest audits`` and ``bias-audit
run``; and ``AuditOptions`` built from them."""

from __future__ import annotations

import os
from typing import Any, Mapping

import pytest

#: Where the suite's options appear in ``--help``.
GROUP = ("bias-audit", "model bias audit")


def _env_int(name: str):
    """An integer option's default from the environment: None when unset or empty.

    Raises:
        pytest.UsageError: the variable holds something else (exit 4, naming it): a limit or
            min_n that cannot be read must never become a different run.
    """
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
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise pytest.UsageError(
        f"environment variable {name}={os.environ[name]!r}: not one of "
        f"{', '.join(_TRUE)} (on) or {', '.join(v for v in _FALSE if v)} (off)"
    )


def add_suite_options(g) -> None:
    """The options every audit has (model, data, intervals, gates, outputs, cache)."""
    g.addoption(
        "--model",
        dest="audit_model",
        default=os.environ.get("AUDIT_MODEL"),
        help="zoo name, local transformers folder or hub id (env AUDIT_MODEL; "
        "default: the embedded smollm2-135m-instruct)",
    )
    g.addoption(
        "--data-dir",
        dest="audit_data_dir",
        default=os.environ.get("AUDIT_DATA_DIR"),
        help="folder holding bbq/, esbbq_cabbq/, ... (env AUDIT_DATA_DIR; default: $BIAS_AUDIT_CACHE/data)",
    )
    g.addoption(
        "--fetch-data",
        dest="audit_fetch_data",
        action="store_true",
        default=False,
        help="fetch missing benchmark files from the authors' pinned sources first",
    )
    g.addoption(
        "--device",
        dest="audit_device",
        default=os.environ.get("AUDIT_DEVICE", "auto"),
        choices=["auto", "cpu", "cuda"] + [f"cuda:{i}" for i in range(16)],
        help="auto (CUDA when present), cpu or cuda[:N] (env AUDIT_DEVICE)",
    )
    g.addoption(
        "--dtype",
        dest="audit_dtype",
        default=os.environ.get("AUDIT_DTYPE", "auto"),
        choices=["auto", "float32", "bfloat16", "float16"],
        help="auto = bfloat16 on CUDA, float32 on CPU (env AUDIT_DTYPE)",
    )
    g.addoption(
        "--batch-size",
        dest="audit_batch_size",
        type=int,
        default=_env_int("AUDIT_BATCH_SIZE") or 16,
        help="sequences per forward pass",
    )
    g.addoption(
        "--limit",
        dest="audit_limit",
        type=int,
        default=_env_int("AUDIT_LIMIT"),
        help="items per category, balanced as the benchmark defines (BBQ family: "
        "context condition x polarity; KGQuiz true/false: the label), deterministic for a "
        "given --seed (env AUDIT_LIMIT; default: all)",
    )
    g.addoption(
        "--seed",
        dest="audit_seed",
        type=int,
        default=_env_int("AUDIT_SEED") or 0,
        help="seed of --limit sampling and of bootstrap intervals",
    )
    g.addoption(
        "--bootstrap-resamples",
        dest="audit_bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="bootstrap resamples for confidence intervals (0 = none)",
    )
    g.addoption(
        "--confidence",
        dest="audit_confidence",
        type=float,
        default=0.95,
        metavar="LEVEL",
        help="confidence level of the intervals",
    )
    g.addoption(
        "--thresholds",
        dest="audit_thresholds",
        default=os.environ.get("AUDIT_THRESHOLDS"),
        help="gates file (env AUDIT_THRESHOLDS; default: ./thresholds.yaml when present, "
        "else the packaged one)",
    )
    g.addoption(
        "--min-n",
        dest="audit_min_n",
        type=int,
        default=_env_int("AUDIT_MIN_N"),
        help="fewest items in a metric's denominator for any verdict, overriding the "
        "thresholds file's min_n (below it: INSUFFICIENT, a failure)",
    )
    g.addoption(
        "--baseline",
        dest="audit_baseline",
        default=os.environ.get("AUDIT_BASELINE"),
        metavar="RESULTS",
        help="a previous run's results.json (or its folder): adds a "
        "test_<bench>[<cat>-<metric>-vs-baseline] per gate, failing when the metric got "
        "worse than there by more than the gate's max_regression (env AUDIT_BASELINE)",
    )
    g.addoption(
        "--sequential",
        dest="audit_sequential",
        action="store_true",
        default=_env_flag("AUDIT_SEQUENTIAL"),
        help="score each category in seeded, balanced rounds and decide every gate on an "
        "anytime-valid confidence sequence, stopping a category once all its gates are decided "
        "(as `sequential: true` in the thresholds file does per gate; env AUDIT_SEQUENTIAL; "
        "docs/gates.md#sequential-gates)",
    )
    g.addoption(
        "--strict-baseline",
        dest="audit_strict_baseline",
        action="store_true",
        default=False,
        help="with --baseline: stop with exit 4 when the baseline run is not "
        "like for like (another seed, interval settings, dtype, protocol, chat template, "
        "items scored, data or thresholds file) instead of marking its regression gates",
    )
    g.addoption(
        "--allow-low-confidence",
        dest="audit_allow_low_confidence",
        action="store_true",
        default=False,
        help="accept a thresholds file whose confidence is below 0.9 (else exit 4); the "
        "verdict then says the run is on a partial scope and why",
    )
    g.addoption(
        "--chat-template",
        dest="audit_chat_template",
        default=os.environ.get("AUDIT_CHAT_TEMPLATE", "auto"),
        metavar="auto|none|FILE",
        help="generation prompts: through the model's own chat template (auto, the "
        "default), as plain text (none), or through the Jinja template in FILE; "
        "recorded with its sha256 (env AUDIT_CHAT_TEMPLATE)",
    )
    g.addoption(
        "--require-published-data",
        dest="audit_require_published",
        action="store_true",
        default=False,
        help="stop (exit 4) unless every data file read is the authors' "
        "published release (sha256 of the pinned source table)",
    )
    g.addoption(
        "--audit-meta",
        dest="audit_meta",
        default=os.environ.get("AUDIT_META"),
        metavar="FILE",
        help="YAML file describing the audited system (name, version, intended use, responsible "
        "person and organisation, training-data cutoff, notes): validated at start-up, recorded "
        "in results.json and shown first in the reports (env AUDIT_META; docs/compliance.md)",
    )
    g.addoption(
        "--regulatory-mapping",
        dest="audit_regulatory_mapping",
        default=os.environ.get("AUDIT_REGULATORY_MAPPING"),
        metavar="FILE",
        help="which regulatory clause each benchmark and gate gives evidence for, and when each "
        "benchmark's data was published (env AUDIT_REGULATORY_MAPPING; default: the packaged "
        "regulatory_mapping.yaml)",
    )
    g.addoption(
        "--results-json",
        dest="audit_results_json",
        default=None,
        metavar="PATH",
        help="also write the run's results.json to PATH",
    )
    g.addoption(
        "--cache-dir",
        dest="audit_cache_dir",
        default=os.environ.get("AUDIT_CACHE_DIR"),
        help="result cache folder (SQLite; env AUDIT_CACHE_DIR; default: "
        "$BIAS_AUDIT_CACHE/scores): a repeated or resumed run recomputes only what is missing",
    )
    g.addoption(
        "--no-cache",
        dest="audit_no_cache",
        action="store_true",
        default=False,
        help="do not read or write the result cache",
    )
    g.addoption(
        "--plan",
        dest="audit_plan",
        action="store_true",
        default=False,
        help="a dry run: build every selected request with the model's tokenizer and config "
        "(no weights loaded) and print per benchmark and category the items, requests, tokens "
        "to forward and to generate, an estimate of the time and the FLOPs; nothing is scored, "
        "no gate is judged (exit 0); writes plan.json in the run folder",
    )
    g.addoption(
        "--plan-params",
        dest="audit_plan_params",
        type=float,
        default=None,
        metavar="N",
        help="with --plan: estimate time and FLOPs for a model of N parameters (e.g. 8.03e9) "
        "instead of the model's own count; the token counts stay the model's tokenizer's",
    )
    g.addoption(
        "--results-dir",
        dest="audit_results_dir",
        default=os.environ.get("AUDIT_RESULTS_DIR", "audit-results"),
        help="each run writes <results-dir>/<run id>/ (results.json, records/, junit.xml)",
    )


def benchmark_options(benchmarks: Mapping[str, Any]) -> dict[str, Any]:
    """``{flag: BenchmarkOption}`` of every benchmark's declared options, each flag once (several
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
    """Register every ``BenchmarkOption`` (``benchmark_options``) on the option group."""
    for opt in benchmark_options(benchmarks).values():
        who = sorted(b.name for b in benchmarks.values() if opt in b.cli_options)
        help_text = f"{opt.help} [{', '.join(who)}]"
        if opt.switch:
            g.addoption(opt.flag, dest=opt.dest, action="store_true", default=None, help=help_text)
            continue
        g.addoption(
            opt.flag,
            dest=opt.dest,
            default=os.environ.get(opt.env) if opt.env else None,
            choices=list(opt.choices) if opt.choices else None,
            metavar=opt.metavar,
            help=help_text,
        )


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


def all_flags(benchmarks: Mapping[str, Any]) -> set[str]:
    """Every audit flag (the suite's, the backends', the benchmarks'), e.g. for checking CI files."""
    from .backends import add_options

    class Collect:
        def __init__(self):
            self.flags: set[str] = set()

        def addoption(self, *names, **_):
            self.flags.update(names)

    c = Collect()
    add_suite_options(c)
    add_options(c)
    add_benchmark_options(c, benchmarks)
    return c.flags
