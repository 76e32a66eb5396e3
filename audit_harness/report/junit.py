"""What the audit adds to pytest's own JUnit XML (``_pytest.junitxml.LogXML``) when a run ends:
a testcase for every selected gate that never reported (an interrupted run, a stop after a model
failure), so a CI dashboard counts it as an error instead of seeing ``tests="0"``, and the run's
outcome as testsuite properties, so the file says what the exit code says.

Both go through LogXML's own hooks before its ``pytest_sessionfinish`` writes the file.
"""

from __future__ import annotations

from typing import Iterable, Literal, Mapping

from ..redact import redact_text
from ..run_outcome import Outcome


def _logxml(config):
    from _pytest.junitxml import xml_key

    return config.stash.get(xml_key, None)


def add_unreported_gates(config, cases: Iterable[tuple[str, Mapping[str, object], str]]) -> int:
    """Add one ``<error>`` testcase per ``(node id, properties, reason)``: a gate selected for
    the run that produced no test report. Returns how many were added (0 without JUnit)."""
    xml = _logxml(config)
    if xml is None:
        return 0
    from _pytest.reports import TestReport

    added = 0
    for nodeid, props, reason in cases:
        path, _, name = nodeid.rpartition("::")
        properties = [(k, redact_text(str(v))) for k, v in props.items()]
        steps: tuple[tuple[Literal["failed", "passed"], str | None, Literal["setup", "teardown"]], ...] = (
            ("failed", reason, "setup"),
            ("passed", None, "teardown"),
        )
        for outcome, longrepr, when in steps:
            xml.pytest_runtest_logreport(
                TestReport(
                    nodeid=nodeid,
                    location=(path, None, name),
                    keywords={},
                    outcome=outcome,
                    longrepr=longrepr,
                    when=when,
                    user_properties=properties,
                )
            )
        added += 1
    return added


def mark_not_decided(config, report) -> None:
    """Give the ``<skipped>`` element pytest wrote for a not-decided gate test the type
    ``not_decided`` (instead of ``pytest.skip``), so a dashboard tells a detection gate that was
    not decided from a gate skipped for missing data. Called after LogXML's own report hook, while
    the testcase is still open (before its teardown report finalizes it)."""
    xml = _logxml(config)
    if xml is None:
        return
    for node in getattr(xml.node_reporter(report), "nodes", ()):
        if node.tag == "skipped" and node.get("type") == "pytest.skip":
            node.set("type", "not_decided")


def add_outcome_properties(config, outcome: Outcome, extra: Mapping[str, object] | None = None) -> None:
    """The run's outcome (label, exit code, status, reason) as testsuite properties
    ``bias_audit_verdict``, ``bias_audit_exit_code``, ``bias_audit_status``,
    ``bias_audit_reason``, plus ``extra`` (``bias_audit_<key>``)."""
    xml = _logxml(config)
    if xml is None:
        return
    props = {
        "verdict": outcome.label,
        "exit_code": outcome.exit_code,
        "status": outcome.status,
        "reason": outcome.reason,
        **dict(extra or {}),
    }
    xml.global_properties = [(n, v) for n, v in xml.global_properties if not n.startswith("bias_audit_")]
    for key, value in props.items():
        xml.add_global_property(f"bias_audit_{key}", redact_text(str(value)))
