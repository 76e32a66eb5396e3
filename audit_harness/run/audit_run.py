"""``AuditRun``: the one object that owns a pytest run of the audits. It is kept under
``RUN_KEY`` in the config's stash and registered as a plugin, so pytest calls its methods as
hooks (the way pytest's own ``junitxml`` keeps ``LogXML``); each hook is a few lines over the
modules that do the work: ``startup`` (checks before scoring), ``scheduling`` (xdist),
``gate_check`` (one gate's verdict), ``finish`` (outcome and files) and ``report.terminal``.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from ..errors import AuditError
from ..gates import PACKAGED_THRESHOLDS, Gate, add_regression_gates, load_thresholds
from ..option_values import AuditOptions
from . import startup
from .finish import RunFiles
from .finish_plan import PlanFiles
from .gate_check import FINDINGS, VERDICT_KEY, GateFinding, finding_text

#: The gates used when neither --thresholds nor ./thresholds.yaml gives any.


@dataclass(frozen=True)
class BaselineRun:
    """The ``--baseline`` run: its results document and what this run's results say of it."""

    document: dict[str, Any]
    summary: dict[str, Any]


class AuditRun:
    """Everything one run of the audits knows, from the options to the files it wrote.

    Attributes
    ----------
    session : AuditSession
        Options, data, the engine and this process's outcomes and verdicts.
    gates : dict
        ``{benchmark: [Gate]}`` of the thresholds file, expanded for this run.
    run_id : str
        The run folder's name (shared by the xdist workers).
    files : RunFiles or None
        Set by ``finish``: the results document, the outcome and where each file went.
    """

    def __init__(
        self,
        config: pytest.Config,
        session,
        gates: dict[str, list[Gate]],
        run_id: str,
        *,
        baseline: BaselineRun | None = None,
        thresholds_warnings: list[str] | None = None,
        gpus: list | None = None,
        compliance: tuple | None = None,
    ):
        self.config = config
        self.session = session
        self.gates = gates
        self.run_id = run_id
        self.baseline = baseline
        self.thresholds_warnings = list(thresholds_warnings or [])
        self.gpus = gpus
        #: ``(AuditMeta | None, RegulatoryMapping)`` read at start-up (the controller only).
        self.audit_meta, self.mapping = compliance or (None, None)
        self.started = time.time()
        self.is_worker = hasattr(config, "workerinput")
        #: whether the start-up checks ran (at configure time, or after collection).
        self.validated = False
        #: ``{benchmark: [gate ids]}`` the command line selects (None: not an audit path).
        self.selected: dict[str, list[str]] | None = None
        #: whether this run chose the JUnit path (removed again when nothing ran).
        self.own_junit = False
        self.worker_outputs: list[str] = []
        self.collected_gates: list[Gate] | None = None
        self.gate_nodeids: dict[tuple[str, str], str] = {}
        #: pytest reported a KeyboardInterrupt in this process.
        self.interrupted = False
        self.files: RunFiles | None = None
        #: Set by ``finish`` in a ``--plan`` run instead of ``files``.
        self.plan: PlanFiles | None = None
        #: Puts back the SIGTERM handler the run replaced (``interrupts.sigterm_as_interrupt``).
        self.restore_sigterm = lambda: None

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_config(cls, config: pytest.Config) -> AuditRun:
        """The run of this pytest invocation: options, gates, baseline and session.

        Raises
        ------
        AuditError
            A bad option, thresholds file or baseline (the plugin makes it a usage error).
        """
        from ..audit_options import options_from_config
        from ..backends import spec_for
        from ..benchmarks import registry
        from ..benchmarks.declared import require_gates
        from ..session import AuditSession

        if config.getoption("audit_thresholds") is None:
            local = Path(config.invocation_params.dir) / "thresholds.yaml"
            config.option.audit_thresholds = str(local if local.is_file() else PACKAGED_THRESHOLDS)
        options = options_from_config(config)
        benchmarks = registry(options.bbq_datasets)
        gates, caught = _read_gates(options, benchmarks)
        require_gates(benchmarks, gates, options.thresholds)  # a declared dataset never runs no gate
        baseline = _read_baseline(config)
        workerinput = getattr(config, "workerinput", None)
        if workerinput is None:
            # A deprecated key warns once, in the controller...
            for warning in {str(w.message): w.message for w in caught}.values():
                config.issue_config_time_warning(warning, stacklevel=2)
            run_id, worker_index = _new_run_id(spec_for(options)), None
            gpus = startup.gpu_plan(config, options, startup.targets_audits(config))
            compliance = startup.compliance_inputs(options, benchmarks)
        else:
            from ..devices import pin

            pin(workerinput.get("bias_audit_gpu"))  # before anything initializes CUDA
            run_id = workerinput["bias_audit_run_id"]
            worker_index = int(re.sub(r"\D", "", workerinput.get("workerid", "gw0")) or 0)
            gpus = compliance = None
        session = AuditSession(
            options, benchmarks, Path(options.outputs.results_dir).resolve() / run_id, worker_index
        )
        _connect(session, config, workerinput)
        gates = startup.expand_gates(gates, session.benchmarks)
        if baseline is not None:
            gates = add_regression_gates(gates, baseline.document)
        # ...and is kept for the results and both reports, which outlive pytest's warnings summary.
        kept = list(dict.fromkeys(str(w.message) for w in caught))
        return cls(
            config,
            session,
            gates,
            run_id,
            baseline=baseline,
            thresholds_warnings=kept,
            gpus=gpus,
            compliance=compliance,
        )

    def start(self) -> None:
        """With the audits folder on the command line (the controller only): check what every
        selected gate needs before anything runs, and before xdist starts workers: files
        present, model name usable, every selected category's rows valid, saved predictions,
        cache and run folder. Then JUnit XML goes into the run folder unless a path was given.

        Raises
        ------
        AuditError
            The first problem, naming what to fix.
        """
        if self.is_worker or not startup.targets_audits(self.config):
            return
        selected = startup.selected_gates(self.config, self.gates)
        self._check(startup.selected_pairs(self.session, selected, self.gates))
        self.selected = selected
        # A plan judges no gate: a JUnit file of skipped gates would only look like a run's. A
        # selection of no gate makes no run folder: pytest would name a junit.xml in a folder
        # that is gone when the run ends.
        if not self.config.option.xmlpath and not self.session.backend_spec.placeholder_scores and selected:
            self.config.option.xmlpath = str(self.session.run_dir / "junit.xml")
            self.own_junit = True

    def _check(self, pairs: list[tuple[str, str]]) -> None:
        s = self.session
        pairs = startup.read_pairs(s, pairs)  # a pooled gate reads every category it pools
        startup.check_inputs(s, pairs, self.config.getoption("audit_fetch_data"))
        startup.validate_data(s, startup.present_pairs(s, pairs))
        if pairs:
            startup.check_backend(s, sorted({b for b, _ in pairs}))
            startup.check_outputs(s, self.baseline.document if self.baseline else None)
            # The whole run's progress line (with xdist the controller scores nothing: unused).
            startup.expect_progress(s, startup.present_pairs(s, pairs))
        self.validated = True

    # -- collection and scheduling ----------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector, name: str, obj) -> None:
        # The declared datasets' audit class (audits/test_declared.py) gets one test_<name> per
        # dataset this run declares, before pytest collects it as any test class.
        if isinstance(obj, type) and any(m.name == "audit_declared" for m in getattr(obj, "pytestmark", ())):
            _declare_tests(obj, self.declared, collector.obj.audit_test)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "audit_gate" not in metafunc.fixturenames:
            return
        marker = metafunc.definition.get_closest_marker("audit")
        if marker is None or not marker.args:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: a test using audit_gate needs "
                "@pytest.mark.audit('<benchmark>')"
            )
        benchmark = marker.args[0]
        if benchmark not in self.session.benchmarks:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid}: unknown benchmark {benchmark!r}; "
                f"known: {', '.join(sorted(self.session.benchmarks))}"
            )
        gates = startup.gates_for_data(self.session, benchmark, self.gates.get(benchmark, []))
        metafunc.parametrize("audit_gate", gates, ids=[g.test_id for g in gates], indirect=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.is_worker or self.config.option.collectonly:
            return
        found = [(item.nodeid, g) for item in session.items if (g := _gate_of(item)) is not None]
        self.gate_nodeids = {(g.benchmark, g.test_id): nodeid for nodeid, g in found}
        if not found:
            return
        if not self.validated:
            # Gate tests selected without the audits folder on the command line: check here.
            try:
                self._check(list(dict.fromkeys((g.benchmark, g.category) for _, g in found)))
            except AuditError as e:
                pytest.exit(f"bias audit: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
        self.collected_gates = [g for _, g in found]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        # With xdist the controller collects nothing: learn the selected gates from the workers,
        # so that gates never run (an interrupted run) are listed as NOT RUN.
        if self.collected_gates is None:
            from .scheduling import gate_of_nodeid

            found = [(i, g) for i in ids if (g := gate_of_nodeid(i, self.gates)) is not None]
            self.gate_nodeids = {(g.benchmark, g.test_id): nodeid for nodeid, g in found}
            self.collected_gates = [g for _, g in found]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        # With -n and no explicit --dist, schedule by category. (xdist's loadgroup would need
        # node-id rewriting, which pytest >= 9.2 no longer honours.) An explicit --dist is kept.
        explicit = any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)
        if explicit or config.getoption("dist") != "load":
            return None
        from .scheduling import category_scheduler

        # Audit modules name their test ``test_<benchmark>`` (see audits/). A benchmark with a
        # pooled gate stays whole on one worker too: the gate reads every category's records.
        whole = frozenset(
            f"test_{name}"
            for name, b in self.session.benchmarks.items()
            if b.shared_items or any(g.category in b.pooled_names for g in self.gates.get(name, ()))
        )
        return category_scheduler(config, log, self.gates, whole)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        from ..devices import worker_number

        node.workerinput["bias_audit_run_id"] = self.run_id
        node.workerinput["bias_audit_replay"] = self.session.backend_spec.benchmark
        if self.gpus:
            # A worker xdist starts again after a crash gets a new number: it takes a crashed
            # one's GPU.
            node.workerinput["bias_audit_gpu"] = self.gpus[
                worker_number(node.workerinput["workerid"]) % len(self.gpus)
            ]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", {}).get("bias_audit")
        if output:
            self.worker_outputs.append(output)

    # -- reports ------------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        verdict = item.stash.get(VERDICT_KEY, None)
        if verdict is None or report.when != "call":
            return report
        if verdict.not_decided and (call.excinfo is None or call.excinfo.errisinstance(AssertionError)):
            # A detection gate not decided is neither a pass nor a failure: the test (which
            # asserts ``verdict.passed``) is reported as skipped, with its own status word
            # (``pytest_report_teststatus``) and JUnit type (``report.junit.mark_not_decided``).
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] + 1, f"NOT DECIDED: {finding_text(verdict)}")
        elif report.failed:
            report.longrepr = GateFinding(finding_text(verdict))
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report):
        # A report from an xdist worker arrives with its longrepr flattened to text: wrap it
        # again before the terminal and JUnit see it, so a parallel run prints a finding as a
        # serial one does.
        if (
            report.when == "call"
            and report.failed
            and isinstance(report.longrepr, str)
            and dict(report.user_properties).get("status") in FINDINGS
        ):
            report.longrepr = GateFinding(report.longrepr)
        result = yield
        if _not_decided(report):
            from ..report.junit import mark_not_decided

            mark_not_decided(self.config, report)
        return result

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report, config: pytest.Config):
        # Its own word in the progress row and the summary line ("20 passed, 2 not decided"), so
        # a detection gate not decided is never read as a pass or as a skip for missing data.
        if _not_decided(report):
            return "not decided", "N", "NOT DECIDED"
        return None

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter renders the traceback
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        self.interrupted = True
        # Python 3.11 can leave a traceback entry without a line number when Ctrl-C lands between
        # bytecodes; pytest's rendering of it then raises TypeError, which escapes pytest and
        # turns an interrupted run into exit 1. Drop such entries before anything renders them.
        try:
            excinfo.traceback = excinfo.traceback.filter(_has_line_number)
        except Exception:  # noqa: BLE001 - a pytest internal; never let this hook fail
            pass

    # -- the end ------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)  # before junitxml's own, which writes the file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus) -> None:
        import json

        if self.is_worker:
            self.config.workeroutput["bias_audit"] = json.dumps(self.session.export())
            return
        from ..interrupts import deferred_interrupts
        from .finish import finish

        # A Ctrl-C from here on is counted, not raised: the run's files are written whole, and
        # say the run was interrupted.
        with deferred_interrupts() as presses:
            if self.session.backend_spec.placeholder_scores:
                from .finish_plan import finish_plan

                code = finish_plan(self, exitstatus)
            else:
                code = finish(self, exitstatus, presses)
        if code is not None:
            session.exitstatus = code

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config: pytest.Config) -> None:
        from ..report import terminal

        if self.selected == {} and config.option.keyword:
            terminal.write_no_selection(terminalreporter, config.option.keyword, self.known_audits())
        elif self.plan is not None:
            terminal.write_plan(terminalreporter, self.plan.document, self.plan.path)
        elif self.files is not None:
            terminal.write_summary(terminalreporter, self.files, config.option.xmlpath)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.restore_sigterm()
        # A run that selected nothing (or stopped before any gate) leaves no run folder: the JUnit
        # file this run chose for it is removed, and the folder with it when that empties it.
        if self.session.backend_spec.placeholder_scores and self.plan is None and not self.is_worker:
            try:  # a plan that planned nothing leaves no run folder either
                self.session.run_dir.rmdir()
            except OSError:
                pass
        if self.files is not None or not self.own_junit:
            return
        junit = Path(config.option.xmlpath)
        junit.unlink(missing_ok=True)
        try:
            junit.parent.rmdir()
        except OSError:
            pass

    @property
    def declared(self) -> list[str]:
        """The names of the BBQ-format datasets this run declares (``--bbq-dataset``)."""
        from ..benchmarks.declared import declared_names

        return declared_names(self.session.benchmarks)

    def known_audits(self) -> list[str]:
        """Lines naming every benchmark and the categories its gates cover (the ``-k`` hint)."""
        lines = []
        for name in sorted(self.session.benchmarks):
            cats = list(dict.fromkeys(g.category for g in self.gates.get(name, ())))
            cats.sort(key=lambda c: c in self.session.benchmarks[name].pooled_names)  # pooled last
            lines.append(f"  test_{name}: {', '.join(cats) if cats else '(no gates configured)'}")
        return lines


def _declare_tests(cls: type, names: list[str], body) -> None:
    """Set ``cls``'s tests to one ``test_<name>`` per declared dataset, marked
    ``audit(<name>)`` (so ``pytest_generate_tests`` gives it that dataset's gates) and running
    ``body(audit_gate)``; a test of an earlier run in this process is removed."""
    for attr in [a for a in vars(cls) if a.startswith("test_")]:
        delattr(cls, attr)
    for name in names:

        def test(self, audit_gate):
            body(audit_gate)

        test.__name__ = test.__qualname__ = f"test_{name}"
        setattr(cls, test.__name__, pytest.mark.audit(name)(test))


def _not_decided(report) -> bool:
    """The call report of a gate test whose verdict is ``not_decided`` (here or on a worker)."""
    return (
        report.when == "call"
        and report.skipped
        and dict(getattr(report, "user_properties", ())).get("status") == "not_decided"
    )


def _has_line_number(entry) -> bool:
    raw = getattr(entry, "_rawentry", None)
    return raw is None or raw.tb_lineno is not None


def _read_gates(options: AuditOptions, benchmarks) -> tuple[dict[str, list[Gate]], list]:
    """The thresholds file's gates, and the warnings reading it raised (deprecated keys)."""
    catalogue = {name: b.gate_catalogue() for name, b in benchmarks.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gates = load_thresholds(
            Path(options.thresholds),
            catalogue,
            min_n=options.metrics.min_n,
            allow_low_confidence=options.metrics.allow_low_confidence,
        )
    return gates, caught


def _connect(session, config: pytest.Config, workerinput) -> None:
    """What a worker is told of the controller's start-up, or the controller's progress lines."""
    if workerinput is not None:
        session.backend_spec.benchmark = workerinput.get("bias_audit_replay")
        return

    # A progress line (stderr) must not land after pytest's row of outcome letters. The
    # terminal reporter is looked up when a line is written: it may not be registered yet.
    def end_outcome_row() -> None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.ensure_newline()
            terminal.flush()  # stdout is buffered when redirected; the line goes to stderr

    session.progress_line_start = end_outcome_row


def _gate_of(item) -> Gate | None:
    gate = getattr(getattr(item, "callspec", None), "params", {}).get("audit_gate")
    return gate if isinstance(gate, Gate) else None


def _read_baseline(config: pytest.Config) -> BaselineRun | None:
    """The ``--baseline`` results document, read once (``report.results.ResultsDocument``)."""
    path = config.getoption("audit_baseline")
    if not path:
        return None
    from ..report.results import ResultsDocument

    doc = ResultsDocument.read(Path(config.invocation_params.dir) / path, "--baseline")
    return BaselineRun(document=doc, summary=startup.baseline_summary(doc, path, doc.path))


def _new_run_id(spec) -> str:
    """The run folder's name: the time, what ran (``BackendSpec.run_label``) and the process."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{spec.run_label()}-{os.getpid()}"
