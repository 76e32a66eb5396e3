"""One declaration per option: every row of ``option_values.AuditOptions`` is registered as a
flag, read from the parsed command line and recorded in results.json's ``options``, and its
range check names the flag; a flag added to a group is all of that with no second edit."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from audit_harness import backends, option_values
from audit_harness.audit_options import validate
from audit_harness.errors import ConfigError
from audit_harness.option_spec import Option
from audit_harness.option_values import ROWS, AuditOptions, BackendOptions, option, read_options
from audit_harness.options import SUITE_OPTIONS, add_suite_options


def _read(argv: list[str]) -> AuditOptions:
    """``AuditOptions`` of ``argv`` as a run reads them: the plugin's own registration of the
    flags (suite and backend), parsed, then the one reader."""
    parser = argparse.ArgumentParser()

    class Group:
        def addoption(self, flag, **kwargs):
            parser.add_argument(flag, **kwargs)

    add_suite_options(Group())
    backends.add_options(Group())
    ns = parser.parse_args(argv)
    return read_options(lambda dest: getattr(ns, dest))


def _given(opt: Option) -> tuple[list[str], Any]:
    """A value for ``opt`` other than its default: the command line giving it, and the value
    results.json must then record."""
    if opt.switch:
        args, value = [opt.flag], True
    else:
        if opt.choices:
            raw: Any = next(c for c in opt.choices if c != opt.default)
        elif opt.type in (int, float):
            raw = 3
        else:
            raw = "http://host:1/v1" if opt.flag == "--base-url" else f"given-{opt.field}"
        value = opt.type(str(raw)) if opt.type else str(raw)
        args, value = [opt.flag, str(raw)], [value] if opt.repeat else value
    return args, opt.parse(value) if opt.parse else value


def test_every_declared_option_is_registered():
    registered = [opt.flag for opt in (*SUITE_OPTIONS, *backends.backend_rows())]
    assert sorted(registered) == sorted(opt.flag for opt in ROWS)
    assert len(set(registered)) == len(registered)


@pytest.mark.parametrize("opt", ROWS, ids=lambda opt: opt.flag)
def test_every_declared_option_is_recorded_as_given(opt):
    # The row as registered (``--backend`` takes its choices from the backend registry).
    opt = next(o for o in (*SUITE_OPTIONS, *backends.backend_rows()) if o.flag == opt.flag)
    args, expected = _given(opt)
    recorded = _read(args).to_dict()
    assert opt.key in recorded, f"{opt.flag} is declared but results.json's options lack {opt.key!r}"
    assert recorded[opt.key] == expected and recorded[opt.key] != AuditOptions().to_dict()[opt.key]


def test_the_record_keeps_every_key_it_had():
    # results.json's options before rows declared them (the former hand-kept list): each key
    # is still there, under the same name; new ones may only be added.
    before = (
        "model data_dir device dtype batch_size limit seed n_resamples confidence thresholds "
        "results_dir min_n require_published_data strict_baseline allow_low_confidence sequential "
        "chat_template benchmark_options cache_dir cache progress backend base_url api_key_env "
        "tokenizer max_concurrency request_timeout max_retries predictions prediction_field "
        "index_base allow_partial plan plan_params audit_meta regulatory_mapping bbq_datasets"
    ).split()
    recorded = _read([]).to_dict()
    assert set(before) <= set(recorded)
    # unset switches are recorded off, the cache on, as before
    assert recorded["plan"] is False and recorded["cache"] is True and recorded["backend"] == "hf"
    assert _read(["--no-cache"]).to_dict()["cache"] is False


def test_a_new_backend_flag_is_one_field(monkeypatch):
    # A backend's flag declared as one field of the backend group (as a random backend's
    # --random-scale would be) is registered, read and recorded with no other edit.
    @dataclasses.dataclass(frozen=True)
    class WithScale(BackendOptions):
        random_scale: float = option("--random-scale", "scale of the random scores", type=float, default=1.0)

    monkeypatch.setitem(option_values.GROUPS, "backend", WithScale)
    monkeypatch.setattr(option_values, "ROWS", option_values.rows())
    monkeypatch.setattr(option_values, "HOME", option_values.field_groups())
    # what importing the modules derives from the rows, derived again
    monkeypatch.setattr(backends, "ROWS", option_values.ROWS)
    opts = _read(["--random-scale", "3"])
    assert opts.backend.random_scale == 3.0
    assert opts.to_dict()["random_scale"] == 3.0
    assert _read([]).to_dict()["random_scale"] == 1.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--limit", "0"], "--limit must be >= 1, got 0"),
        (["--bootstrap-resamples", "-1"], "--bootstrap-resamples must be >= 0, got -1"),
        (["--confidence", "1.5"], "--confidence must be in (0, 1), got 1.5"),
        (["--min-n", "-1"], "--min-n must be >= 0, got -1"),
        (["--max-concurrency", "0"], "--max-concurrency must be >= 1, got 0"),
        (["--request-timeout", "0"], "--request-timeout must be > 0 seconds, got 0.0"),
        (["--max-retries", "-1"], "--max-retries must be >= 0, got -1"),
    ],
)
def test_a_value_out_of_its_rows_range_names_the_flag(args, message):
    opts = _read(args)
    with pytest.raises(ConfigError) as e:
        validate(opts)
    assert str(e.value) == message


def test_the_declared_ranges_accept_the_defaults():
    validate(_read([]))
