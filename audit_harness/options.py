"""The audit's command-line options: the suite's own (model, data, intervals, outputs: the rows
of ``option_values.AuditOptions``) and every benchmark's (``Benchmark.cli_options``), registered
once for ``pytest audits`` and ``bias-audit run``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

from .option_spec import Option
from .option_values import ROWS

if TYPE_CHECKING:
    from .benchmarks.base import Benchmark

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


#: The options every audit has (model, data, intervals, gates, outputs, cache), each declared once
#: as a field of ``option_values.AuditOptions``: the plugin registers them (``add_suite_options``;
#: the backend's group: ``backends.add_options``) and ``bias-audit score`` takes some of them under
#: the same declaration (``cli``).
SUITE_OPTIONS: tuple[Option, ...] = tuple(opt for opt in ROWS if opt.group != "backend")
#: Every option of the run (``option_values.ROWS``) by flag.
SUITE = {opt.flag: opt for opt in ROWS}


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


def benchmark_options(benchmarks: Mapping[str, Benchmark]) -> dict[str, Option]:
    """``{flag: Option}`` of every benchmark's declared options, each flag once (several
    benchmarks may declare the same option object).

    Raises:
        ValueError: two benchmarks declare one flag with different meanings (help or choices).
    """
    seen: dict[str, Option] = {}
    for bench in benchmarks.values():
        for opt in bench.cli_options:
            other = seen.setdefault(opt.flag, opt)
            if (other.help, other.choices, other.switch) != (opt.help, opt.choices, opt.switch):
                raise ValueError(
                    f"{opt.flag} is declared twice with different meanings "
                    f"(by {bench.name} and another benchmark)"
                )
    return seen


def add_benchmark_options(g, benchmarks: Mapping[str, Benchmark]) -> None:
    """Register every benchmark option (``benchmark_options``) on the option group, its help
    naming the benchmarks that take it. Unset, it is None: each benchmark keeps its own default."""
    for opt in benchmark_options(benchmarks).values():
        who = sorted(b.name for b in benchmarks.values() if opt in b.cli_options)
        default = os.environ.get(opt.env) if opt.env else None
        register(g, opt, default, help=f"{opt.help} [{', '.join(who)}]")


def configured_options(config, benchmarks: Mapping[str, Benchmark]) -> dict[str, dict[str, object]]:
    """``{benchmark: {configure key: value}}`` of the benchmark options given (a flag left unset
    keeps every benchmark's default)."""
    out: dict[str, dict[str, object]] = {}
    for name, bench in benchmarks.items():
        for opt in bench.cli_options:
            value = config.getoption(opt.dest, None)
            if value is not None:
                out.setdefault(name, {})[opt.key] = value
    return out
