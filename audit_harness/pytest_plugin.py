"""The pytest plugin: registers the audit's options, creates the run (``run.AuditRun``, which
pytest then calls as a plugin of its own) and provides the fixtures audit tests use.

Audit test modules stay thin::

    @pytest.mark.audit("bbq")
    def test_bbq(audit_gate):
        verdict = audit_gate.evaluate()
        assert verdict.passed, verdict.message

and the run parametrizes ``audit_gate`` with every gate of ``thresholds.yaml`` for that
benchmark, with ids such as ``test_bbq[Age-bias_score_ambig]``.
"""

from __future__ import annotations

import pytest

from .errors import AuditError
from .gates import Gate
from .run import RUN_KEY, AuditRun, GateCheck

#: The audit modules ship inside the package (the repository's ``audits/`` links here).
from .run.startup import AUDITS_DIR  # noqa: F401  (re-exported for the CLI)


def pytest_addoption(parser: pytest.Parser) -> None:
    from .backends import add_options
    from .benchmarks import registry
    from .options import GROUP, add_benchmark_options, add_suite_options

    g = parser.getgroup(*GROUP)
    add_suite_options(g)
    add_options(g)
    add_benchmark_options(g, registry())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "audit(benchmark): an audit test parametrized with the benchmark's gates from thresholds.yaml",
    )
    config.addinivalue_line(
        "markers", "audit_declared: the class that holds a test per declared dataset (--bbq-dataset)"
    )
    try:
        run = AuditRun.from_config(config)
        run.start()
    except AuditError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[RUN_KEY] = run
    config.pluginmanager.register(run, "bias-audit-run")
    from .interrupts import sigterm_as_interrupt

    # A CI runner's timeout or cancel (SIGTERM) leaves the evidence a Ctrl-C leaves.
    run.restore_sigterm = sigterm_as_interrupt()


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (a CPU count)
def pytest_xdist_auto_num_workers(config: pytest.Config):
    # `-n auto` with the in-process backend: one worker per GPU (None: xdist's CPU count). This
    # runs before pytest_configure, so before the run exists.
    from .backends import in_process
    from .devices import auto_workers, visible_gpus

    return auto_workers(
        in_process(config.getoption("audit_backend")), config.getoption("audit_device"), visible_gpus()
    )


@pytest.fixture(scope="session")
def bias_audit(request: pytest.FixtureRequest):
    """The run's ``AuditSession`` (options, outcomes, verdicts), told which gates this process
    judges (a category with sequential gates stops once all of them are decided)."""
    session = request.config.stash[RUN_KEY].session
    if session.category_gates is None:
        session.use_gates(_selected_gates(request.session))
    return session


def _selected_gates(session: pytest.Session) -> list[Gate]:
    """The gates of the gate tests this process collected and kept (after ``-k``)."""
    params = (getattr(getattr(item, "callspec", None), "params", {}) for item in session.items)
    return [g for p in params if isinstance(g := p.get("audit_gate"), Gate)]


@pytest.fixture(scope="session")
def audit_model(bias_audit, request):
    """The audited model, loaded once per process (CUDA when available, see --device)."""
    if bias_audit.model_error is None:
        try:
            return _open_model(bias_audit, request.config)
        except AuditError as e:
            bias_audit.model_error = str(e)
    # A model that cannot load makes every gate meaningless: fail this test with the one-line
    # message and stop the run (pytest.exit would print an internal traceback, and crash an
    # xdist worker); the results list every selected gate as ERROR and the exit code is 4.
    request.session.shouldstop = "bias audit: the model could not be loaded"
    pytest.fail(f"bias audit: {bias_audit.model_error}", pytrace=False)


def _open_model(session, config: pytest.Config):
    """The session's model, opened in front of the user: what is being loaded (size, cache,
    a first use's conversion) before, the time it took after, and the loader's own output live,
    outside pytest's capture (a first run is otherwise silent for a minute, and the conversion's
    progress shows later as the first failing gate's "Captured stderr setup")."""
    import contextlib
    import time

    if session.options.outputs.progress == "off" or session.model_loaded:
        return session.model
    capman = config.pluginmanager.getplugin("capturemanager")
    notice = session.backend_spec.opening_notice()
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        if notice:
            session.progress.write_line(f"bias audit: {notice}")
        start = time.monotonic()
        model = session.model
        if notice:
            info = model.info
            size = f"{info.n_parameters / 1e6:,.1f} M parameters, " if info.n_parameters else ""
            session.progress.write_line(
                f"bias audit: model {info.name} loaded in {time.monotonic() - start:.1f} s "
                f"({size}{info.dtype} on {info.device}); scoring starts"
            )
    return model


@pytest.fixture
def audit_gate(request: pytest.FixtureRequest, bias_audit, record_property):
    from .redact import redact

    def record(key, value, _record=record_property):
        _record(key, redact(value))  # JUnit properties never show a URL's credentials

    record_property = record
    """One gate of thresholds.yaml, ready to evaluate (parametrized by the run)."""
    g = request.param
    # The gate's identity goes into JUnit first, so a testcase names its gate whatever happens
    # next (a model that does not load, an ERROR, a skip), as a judged one does.
    for key, value in (
        ("benchmark", g.benchmark),
        ("category", g.category),
        ("metric", g.metric),
        ("kind", g.kind),
    ):
        record_property(key, value)
    try:
        request.getfixturevalue("audit_model")
    except pytest.fail.Exception:
        record_property("status", "error")
        record_property("reason", f"bias audit: {bias_audit.model_error}")
        raise
    run = request.config.stash[RUN_KEY]
    return GateCheck(
        g, bias_audit, record_property, request.node, baseline=run.baseline.document if run.baseline else None
    )
