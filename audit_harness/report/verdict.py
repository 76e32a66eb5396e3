"""The run's overall verdict, as every report states it first: one word a release manager acts
on and one sentence saying why, from the gate verdicts of a results document alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import exit_codes


@dataclass(frozen=True)
class OverallVerdict:
    """``label``: ``PASS``, ``FAIL``, ``RUN ERROR``, ``INTERRUPTED``, ``NOTHING CHECKED``;
    ``passed``: True only for PASS; ``reason``: one sentence; ``exit_code``: the run's (None when
    the results do not say)."""

    label: str
    passed: bool
    reason: str
    exit_code: int | None


def overall_verdict(results: Mapping[str, Any]) -> OverallVerdict:
    """What the run decided, from ``results["gates"]`` and ``results["run"]``.

    A run passes only when it completed and every gate it evaluated passed; an error, an
    interruption, or nothing evaluated is never a pass (``exit_codes``)."""
    gates = results.get("gates") or []
    run = results.get("run") or {}
    code = run.get("exit_status")
    counts: dict[str, int] = {}
    for v in gates:
        counts[v["status"]] = counts.get(v["status"], 0) + 1
    blocked = sum(counts.get(s, 0) for s in ("fail", "undefined", "insufficient", "not run"))
    if run.get("status") == "interrupted":
        return OverallVerdict("INTERRUPTED", False, "the run was stopped before every selected gate "
                              "ran; the numbers are partial and decide nothing", code)
    if counts.get("error"):
        return OverallVerdict("RUN ERROR", False, f"{counts['error']} gate(s) have no verdict: a "
                              "model or data error stopped their category during the run (not a "
                              "gate failure); fix it and run again", code)
    if not gates or counts.get("skipped", 0) == len(gates):
        return OverallVerdict("NOTHING CHECKED", False, "no gate was evaluated (every selected gate "
                              "was skipped, or none was selected): never a pass", code)
    if blocked:
        parts = ", ".join(f"{counts[s]} {s}" for s in ("fail", "undefined", "insufficient", "not run")
                          if counts.get(s))
        return OverallVerdict("FAIL", False, f"{blocked} of {len(gates)} gate(s) did not pass "
                              f"({parts}): the release is blocked", code)
    skipped = counts.get("skipped", 0)
    note = f"; {skipped} skipped (their data is missing), which is not a pass" if skipped else ""
    passed = code in (None, exit_codes.OK)
    return OverallVerdict("PASS" if passed else "FAIL", passed,
                          f"all {counts.get('pass', 0)} evaluated gate(s) passed{note}"
                          + ("" if passed else f", but the run exited {code}"), code)
