"""The end of an audit run, in the controller: merge what every process evaluated, list the gates
that never ran, build the results document, decide the outcome once (``run_outcome.decide``) and
write results.json, report.md and report.html, where everything after reads them."""

from __future__ import annotations

import json
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AuditError
from ..gates import Gate, Verdict
from ..report.results import ResultsDocument
from ..run_outcome import Outcome, decide, nothing_checked

if TYPE_CHECKING:
    from ..interrupts import Presses
    from ..report.schema import Results
    from .audit_run import AuditRun


@dataclass
class Facts:
    """What the end of the run established besides the gates' verdicts (``run_outcome.decide``)."""

    interrupted: bool = False
    input_error: str | None = None
    run_error: str | None = None
    #: why the audits the command line names have no gate to check (``unchecked``).
    nothing_checked: str | None = None


@dataclass
class RunFiles:
    """The finished run: its results document, its outcome, and where each file went (a path, or
    a sentence saying why it was not written)."""

    results: ResultsDocument
    facts: Facts
    outcome: Outcome | None = None
    results_path: Path | None = None
    report_path: Any = None
    html_path: Any = None
    results_copy: Any = None
    #: the temporary folder the files went to when the run folder could not be written.
    moved_to: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Evaluated:
    """What every process of the run evaluated, merged: outcomes, verdicts (the gates never run
    included), the categories whose evaluation failed, and the model (each xdist worker's pool
    of servers counted together)."""

    outcomes: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    model: dict[str, Any] | None = None

    def touched(self) -> set[str]:
        """The benchmarks the run scored, judged or failed in."""
        return (
            {o["benchmark"] for o in self.outcomes}
            | {v["benchmark"] for v in self.verdicts}
            | {e["benchmark"] for e in self.errors}
        )


def finish(run: AuditRun, exitstatus, presses: Presses) -> int | None:
    """Build, decide and write the run's outputs; the exit code pytest is to report, or None
    when this was no audit run (nothing selected, nothing evaluated: no run folder)."""
    parts = [run.session.export()] + [json.loads(p) for p in run.worker_outputs]
    done = Evaluated(
        outcomes=[o for p in parts for o in p["outcomes"]],
        verdicts=[v for p in parts for v in p["verdicts"]],
        errors=[e for p in parts for e in p.get("errors", [])],
    )
    model_error = next((p["model_error"] for p in parts if p.get("model_error")), None)
    why_unchecked = None
    if not (done.outcomes or done.verdicts or done.errors or run.collected_gates):
        why_unchecked = None if model_error else unchecked(run)
        if why_unchecked is None:
            return 4 if model_error else None
    # (A model that cannot load stops the run through shouldstop, which pytest also reports as
    # INTERRUPTED: that is an input error, not a Ctrl-C.)
    interrupted = (int(exitstatus) == 2 or run.interrupted) and not model_error
    done.verdicts += unrun_verdicts(run, done.verdicts, interrupted, model_error)

    from ..models.pool import merge_worker_models

    done.model = merge_worker_models([p["model"] for p in parts])
    results, run_error = build(run, done)
    facts = Facts(
        interrupted=interrupted,
        run_error=run_error,
        input_error=f"the model could not be loaded: {model_error}" if model_error else None,
        nothing_checked=why_unchecked,
    )
    if run.baseline is not None:
        compare_baseline(run, results, facts)
    run.files = RunFiles(results=ResultsDocument(results), facts=facts)
    write_outputs(run, presses)
    return run.files.outcome.exit_code


def unrun_verdicts(
    run: AuditRun, verdicts, interrupted: bool, model_error: str | None
) -> list[dict[str, Any]]:
    """Every selected gate appears in the results: those never evaluated (absent from
    ``verdicts``) as NOT RUN with why, or as ERROR when the model could not load; each gets its
    JUnit testcase."""
    seen = {(v["benchmark"], v["category"], v["metric"]) for v in verdicts}
    why = (
        "the run was interrupted"
        if interrupted
        else "the run stopped before it (-x/--maxfail, a skip, or a crash)"
    )
    unrun = [g for g in run.collected_gates or [] if (g.benchmark, g.category, g.metric) not in seen]
    junit_unrun_gates(run, unrun, model_error or why, "error" if model_error else "not run")
    return [
        (
            Verdict.error(g, f"{g.benchmark}/{g.category}: {model_error}")
            if model_error
            else Verdict.not_run(g, why)
        ).to_dict()
        for g in unrun
    ]


def unchecked(run: AuditRun) -> str | None:
    """Why the audit tests the command line names got no gate (the gates file configures none
    for their benchmarks, or none whose category the data holds), or None when it named none.

    Such a run is NOTHING CHECKED with a run folder that says so (exit 5): pytest alone would
    skip each test for an empty parameter set and exit 0, a pass of a release nothing checked.
    A ``-k`` that selects nothing (``run.selected == {}``) keeps pytest's own exit 5 and leaves
    no run folder."""
    if not run.selected or run.config.option.collectonly:
        return None
    names = ", ".join(sorted(run.selected))
    thresholds = run.session.options.thresholds
    if not any(run.selected.values()):
        return f"the gates file {thresholds} configures no gate for {names}"
    return (
        f"no gate of {thresholds} for {names} was collected (their categories are not in the data "
        "directory, or the command line deselected them)"
    )


def compare_baseline(run: AuditRun, results: Results, facts: Facts) -> None:
    """Regression gates are only meaningful like for like: say in ``results`` what differs from
    the baseline run (and, with ``--strict-baseline``, make it an input error)."""
    from ..gates.comparability import comparability_notes, model_notes
    from ..report.compare import incomplete_notes

    unlike = incomplete_notes({"baseline": run.baseline.document}) + comparability_notes(
        run.baseline.document, results
    )
    baseline = results["baseline"]
    if baseline is not None:  # build_results records run.baseline's summary
        baseline["not_like_for_like"] = unlike
        baseline["models"] = model_notes(run.baseline.document, results)
    if unlike and run.session.options.strict_baseline and not facts.input_error:
        facts.input_error = f"--strict-baseline: the baseline run is not like for like ({'; '.join(unlike)})"


def build(run: AuditRun, done: Evaluated) -> tuple[Results, str | None]:
    """The results document (``report.results.build_results``) and the run error, if the overall
    aggregates could not be computed."""
    from ..evaluation import overall_from_records
    from ..report.results import ResultsInput, build_results

    session = run.session
    touched = done.touched()
    meta = run_meta(run, touched)
    run_error = None
    try:
        overall = overall_from_records(
            session.benchmarks, done.outcomes, session.run_dir, session.options.metric_settings
        )
    except AuditError as e:  # the records of a category went missing under the run
        overall, run_error = {}, f"the overall aggregates could not be computed ({e})"
    results = build_results(
        ResultsInput(
            run_id=run.run_id,
            # The run's one identity (``AuditSession.identity``): the options as the start-up
            # baseline check and the regression gates saw them (resolved data dir, credentials
            # masked).
            identity=session.identity,
            model=done.model,
            outcomes=done.outcomes,
            verdicts=done.verdicts,
            thresholds_path=str(session.options.thresholds),
            overall=overall,
            provenance={name: session.protocol(name, done.model) for name in touched},
            run=meta,
            errors=done.errors,
            benchmark_info={n: session.benchmarks[n].report_info() for n in touched},
            baseline=run.baseline.summary if run.baseline else None,
            audit_meta=run.audit_meta.to_dict() if run.audit_meta else None,
            regulatory_mapping=run.mapping.to_dict() if run.mapping else None,
            read_modes={
                n: modes for n in touched if (modes := getattr(session.benchmarks[n], "read_modes", None))
            },
        )
    )
    return results, run_error


def run_meta(run: AuditRun, touched: set[str]) -> dict[str, Any]:
    """results.json's ``run``: invocation, command line, start and duration, the suite's and the
    engine's versions, the thresholds file, its warnings, the interval floors and the gates
    configured for the benchmarks this run touched."""
    from ..redact import redact
    from ..report.results import suite_provenance
    from .startup import gates_for_data

    session, config = run.session, run.config
    # Gates configured for the benchmarks this run touched: a BBQ-only run is complete when
    # all BBQ gates ran, whatever EsBBQ's section holds.
    configured = sum(len(gates_for_data(session, b, g)) for b, g in run.gates.items() if b in touched)
    args = redact(list(config.invocation_params.args))
    return {
        "invocation": args,
        "command_line": shlex.join(["pytest", *args]),
        "working_directory": str(config.invocation_params.dir),
        "started": datetime.fromtimestamp(run.started, timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - run.started, 3),
        "suite": suite_provenance(),
        # The same identity the start-up baseline check and the regression gates compared.
        **session.identity.run_entry(),
        "thresholds_warnings": run.thresholds_warnings,
        "interval_floors": interval_floors(run),
        "gates_configured": configured,
    }


def decide_outcome(files: RunFiles, presses: Presses) -> Outcome:
    """The run's one outcome decision (``run_outcome.decide``), stored in results.json's ``run``
    where the terminal, both reports and JUnit read it."""
    from ..report.scope import partial_reasons

    results, facts = files.results, files.facts
    outcome = decide(
        results["gates"],
        interrupted=facts.interrupted or bool(presses),
        input_error=facts.input_error,
        run_error=facts.run_error,
        partial=partial_reasons(results),
    )
    if outcome.label == "NOTHING CHECKED" and facts.nothing_checked:
        outcome = nothing_checked(facts.nothing_checked)
    results["run"]["outcome"] = outcome.to_dict()
    results["run"]["status"] = outcome.status
    results["run"]["exit_status"] = outcome.exit_code
    files.outcome = outcome
    return outcome


def write_outputs(run: AuditRun, presses: Presses) -> None:
    """results.json, then report.md and report.html, into the run folder; where that fails, into
    a temporary folder the terminal names (a RUN ERROR: the results are not where asked). A
    Ctrl-C meanwhile makes the outcome INTERRUPTED and everything is written again to say so; a
    second one skips (and removes) the reports, which ``bias-audit report`` renders later."""
    from ..report.html import write_html
    from ..report.junit import add_outcome_properties
    from ..report.markdown import write_markdown

    files = run.files
    folder = run.session.run_dir
    while True:
        pressed = presses.count
        decide_outcome(files, presses)
        try:
            files.results.write(folder / "results.json")
        except OSError as e:
            if files.moved_to:
                raise
            tmp = Path(tempfile.mkdtemp(prefix=f"bias-audit-{run.run_id}-"))
            files.facts.run_error = (
                f"the run folder {folder} could not be written "
                f"({e.strerror or e}); this run's files are in {tmp}"
            )
            files.moved_to, folder = str(tmp), tmp
            continue
        files.results_path = files.results.path
        for key, name, writer in (
            ("report_path", "report.md", write_markdown),
            ("html_path", "report.html", write_html),
        ):
            if presses.count >= 2:
                (folder / name).unlink(missing_ok=True)  # never a report of an older verdict
                setattr(files, key, f"not written (interrupted; `bias-audit report {folder}` renders it)")
                continue
            try:
                setattr(files, key, writer(folder / name, files.results))
            except OSError as e:
                setattr(files, key, f"not written ({e.strerror or e})")
        if presses.count == pressed:
            break
    copy = run.config.getoption("audit_results_json", None)
    if copy:
        try:
            from ..report.results import write_results

            files.results_copy = write_results(Path(run.config.invocation_params.dir) / copy, files.results)
        except OSError as e:
            files.results_copy = f"{copy}: not written ({e.strerror or e})"
    add_outcome_properties(run.config, files.outcome, junit_extra(run, files))


def junit_extra(run: AuditRun, files: RunFiles) -> dict[str, Any]:
    """The run's JUnit properties beyond its outcome: run id, results path and, where recorded,
    how each model was read (``bias_audit_read``: option log-likelihood, letter log-probs,
    generated text)."""
    from ..report.results import read_text

    extra: dict[str, Any] = {"run_id": run.run_id, "results": files.results_path}
    reads = (files.results or {}).get("reads") or {}
    if reads:
        extra["read"] = "; ".join(f"{b}: {read_text(e)}" for b, e in reads.items())
    return extra


def junit_unrun_gates(run: AuditRun, gates: list[Gate], why: str, status: str) -> None:
    """JUnit testcases for the selected gates that produced no test report (``report.junit``)."""
    from ..report.junit import add_unreported_gates

    terminal = run.config.pluginmanager.get_plugin("terminalreporter")
    # A gate counts as reported once its call ran, or its setup failed or skipped; a test
    # interrupted after a passing setup still needs its testcase.
    reported = {
        getattr(r, "nodeid", None)
        for reports in getattr(terminal, "stats", {}).values()
        for r in reports
        if getattr(r, "when", None) == "call"
        or (getattr(r, "when", None) == "setup" and not getattr(r, "passed", False))
    }
    cases = []
    for g in gates:
        nodeid = run.gate_nodeids.get((g.benchmark, g.test_id))
        if nodeid is None or nodeid in reported:
            continue
        props = {
            "benchmark": g.benchmark,
            "category": g.category,
            "metric": g.metric,
            "kind": g.kind,
            "status": status,
            "reason": f"not run: {why}",
        }
        cases.append((nodeid, props, f"{g.benchmark}/{g.category}/{g.metric}: not run ({why})"))
    add_unreported_gates(run.config, cases)


def interval_floors(run: AuditRun) -> dict[str, Any]:
    """The run's interval settings next to what its gates are signed off at (results.json)."""
    from ..gates import MIN_RESAMPLES

    levels = sorted({g.confidence for gs in run.gates.values() for g in gs})
    return {
        "confidence": run.session.options.metrics.confidence,
        "n_resamples": run.session.options.metrics.n_resamples,
        "signed_off_confidence": levels,
        "min_resamples": dict(MIN_RESAMPLES),
    }
