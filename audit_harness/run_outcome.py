"""The run's outcome: one decision of exit code, label, reason and status that the terminal,
report.md, report.html, results.json and JUnit XML all read, so they can never disagree.

The labels and the exit codes they give (``exit_codes``), in order of precedence:

=================  ====  ==================================================================
label              code  when
=================  ====  ==================================================================
INPUT ERROR        4     the model could not be loaded, or ``--strict-baseline`` refused a
                         baseline that is not like for like: no verdict of the run counts
INTERRUPTED        2     Ctrl-C: the numbers are partial and decide nothing
RUN ERROR          3     a model or data failure left gates without a verdict, or the run's
                         outputs could not be written where asked
NOTHING CHECKED    5     no gate was evaluated (every selected one skipped, or none selected)
FAIL               1     blocked: a gate failed (its whole interval outside the band: evidence
                         of bias, or of a broken floor), was undefined, or did not run (``-x``)
NOT CERTIFIED      1     not decided: no gate failed, but a must-pass gate was inconclusive or
                         insufficient, so the release is not certified (a ``--limit`` run:
                         too small to decide)
PASS               0     no gate blocks: every must-pass gate passed; detection gates
                         (``ci_detect``) that the data did not decide are counted beside it
=================  ====  ==================================================================

A ``not_decided`` gate (a detection gate whose interval straddles its band) never blocks and is
never counted as a pass: a PASS says how many there were. Nor is it a skip: a run whose gates
are all not decided checked them (PASS, not NOTHING CHECKED).

A PASS, FAIL or NOT CERTIFIED of a run that covers less than a full audit (``--limit``, ``-k``, ``--min-n``,
skipped gates: ``report.scope.partial_reasons``) keeps its label and exit code, since a smoke run
is a legitimate use, but its status is ``partial`` and its reason and verdict line say so and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from . import exit_codes

#: Gate statuses that block a release although the gate was judged (or should have been).
BLOCKING = ("fail", "undefined", "insufficient", "insufficient (interval)", "inconclusive", "not run")
#: An ``insufficient`` verdict whose interval is more lenient than the gate is signed off at, or
#: rests on too few resamples (``cause: interval``): a setting of the run, not a sample too small.
LENIENT = "insufficient (interval)"
#: Blocking statuses that are no evidence against the model: the data did not decide the gate.
NOT_CERTIFIED = ("inconclusive", "insufficient")
#: A detection gate the data did not decide: it never blocks, and is never a pass.
NOT_DECIDED = "not_decided"
#: How a partial-scope reason begins when categories were judged on part of their rows
#: (``report.scope``): undecided gates are then a sample too small to decide.
SAMPLED = ("items sampled", "part of the rows")
#: ``label: (exit code, run status)``.
LABELS = {
    "PASS": (exit_codes.OK, "complete"),
    "FAIL": (exit_codes.GATE_FAILED, "complete"),
    "NOT CERTIFIED": (exit_codes.GATE_FAILED, "complete"),
    "INTERRUPTED": (exit_codes.INTERRUPTED, "interrupted"),
    "RUN ERROR": (exit_codes.RUN_ERROR, "incomplete"),
    "INPUT ERROR": (exit_codes.USAGE_ERROR, "input error"),
    "NOTHING CHECKED": (exit_codes.NOTHING_SELECTED, "nothing checked"),
}


#: The labels of a run whose gates were judged: these may cover a partial scope.
JUDGED = ("PASS", "FAIL", "NOT CERTIFIED")


@dataclass(frozen=True)
class Outcome:
    """What a run decided.

    Attributes
    ----------
    label : str
        One of ``LABELS``: ``PASS``, ``FAIL``, ``NOT CERTIFIED``, ``INTERRUPTED``, ``RUN ERROR``,
        ``INPUT ERROR``, ``NOTHING CHECKED``.
    exit_code : int
        The process's exit code for that label (``exit_codes``).
    reason : str
        One sentence a release manager can act on.
    status : str
        results.json's ``run.status``: ``complete``, ``partial``, ``interrupted``,
        ``incomplete``, ``input error`` or ``nothing checked``.
    partial : tuple of str
        Why a PASS, FAIL or NOT CERTIFIED is not the verdict of a full audit; empty when it is
        (or for the other labels).
    """

    label: str
    exit_code: int
    reason: str
    status: str
    partial: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True only for PASS."""
        return self.label == "PASS"

    @property
    def shown_label(self) -> str:
        """The label as the reports head their verdict: ``FAIL on a partial scope`` when the run
        covers less than a full audit."""
        return f"{self.label} on a partial scope" if self.partial else self.label

    def line(self) -> str:
        """The verdict line the terminal ends with and the reports begin with."""
        scope = " ON A PARTIAL SCOPE" if self.partial else ""
        return f"VERDICT: {self.label}{scope}: {self.reason} (exit code {self.exit_code})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Outcome":
        partial = tuple(str(r) for r in d.get("partial") or ())
        return cls(str(d["label"]), int(d["exit_code"]), str(d["reason"]), str(d["status"]), partial)


def _make(label: str, reason: str, partial: Sequence[str] = ()) -> Outcome:
    code, status = LABELS[label]
    if partial and label in JUDGED:
        why = "; ".join(partial)
        return Outcome(
            label,
            code,
            f"{reason}; partial scope ({why}): not the verdict of a full audit",
            "partial",
            tuple(partial),
        )
    return Outcome(label, code, reason, status)


def decide(
    statuses: Iterable[str | Mapping[str, Any]],
    *,
    interrupted: bool = False,
    input_error: str | None = None,
    run_error: str | None = None,
    partial: Sequence[str] = (),
) -> Outcome:
    """The outcome of a run from its gate statuses and what happened around them.

    Parameters
    ----------
    statuses : iterable of str or mapping
        Every selected gate's verdict status (``gates.STATUSES``), not-run gates included, or
        its results verdict entry (``status``; ``cause: interval`` counts as ``LENIENT``).
    interrupted : bool
        The run was stopped by Ctrl-C (during scoring or while writing its outputs).
    input_error : str, optional
        Why nothing could be judged (the model did not load, ``--strict-baseline``).
    run_error : str, optional
        A failure outside any gate that leaves the run incomplete (its outputs could not be
        written where asked).
    partial : sequence of str
        Why the run covers less than a full audit (``report.scope.partial_reasons``): a PASS,
        FAIL or NOT CERTIFIED then has status ``partial`` and says why in its reason. A reason
        that starts with one of ``SAMPLED`` (categories judged on part of their rows) makes a
        run whose only blockers are undecided gates too small to decide, and it says so.

    Returns
    -------
    Outcome

    Examples
    --------
    >>> decide(["pass", "pass"]).label
    'PASS'
    >>> decide(["pass", "fail", "error"]).exit_code  # an error wins over a failure: incomplete
    3
    >>> decide(["pass", "skipped"]).label  # a skip is never a pass, but the rest passed
    'PASS'
    >>> decide(["skipped"]).label
    'NOTHING CHECKED'
    >>> decide(["pass"], interrupted=True).exit_code
    2
    >>> o = decide(["pass"], partial=["items sampled (--limit 8)"])
    >>> o.label, o.exit_code, o.status
    ('PASS', 0, 'partial')
    >>> o.line()
    'VERDICT: PASS ON A PARTIAL SCOPE: all 1 evaluated gate(s) passed; partial scope (items sampled (--limit 8)): not the verdict of a full audit (exit code 0)'
    """
    statuses = list(statuses)
    counts = _count(statuses)
    total = sum(counts.values())
    stopped = _no_verdict(counts.get("error", 0), interrupted, input_error, run_error)
    if stopped is not None:
        return stopped
    outcome = _judged(counts, total, partial)
    return outcome if outcome.label != "PASS" or _certifies(statuses) else _uncertified(partial)


def _uncertified(partial: Sequence[str]) -> Outcome:
    return _make(
        "NOT CERTIFIED",
        "nothing was certified: a detection gate (ci_detect) was not decided and no must-pass gate "
        "passed; a detection gate blocks only on evidence of bias, so a release needs a must-pass gate "
        '(the pooled gates: add them to the selection, e.g. -k "test_bbq and (Age or pooled)")',
        partial,
    )


def _certifies(statuses: Sequence[str | Mapping[str, Any]]) -> bool:
    """Whether the run's NOT DECIDED detection gates are backed by a must-pass gate that passed:
    a detection gate blocks only on evidence, so one that is not decided leaves the release to
    the must-pass (pooled) gates, and a run that selected none of those (``-k Age``) has
    certified nothing there. A bare status (no ``mode``) is taken as a must-pass gate's.

    Examples
    --------
    >>> _certifies([{"status": "pass", "mode": "ci_detect"}, {"status": "not_decided", "mode": "ci_detect"}])
    False
    >>> _certifies([{"status": "pass", "mode": "ci_detect"}])  # every detection gate certified
    True
    >>> _certifies([{"status": "pass", "mode": "ci_three_way"}, {"status": "not_decided", "mode": "ci_detect"}])
    True
    """

    def status(v: str | Mapping[str, object]) -> str:
        return v if isinstance(v, str) else str(v["status"])

    if not any(status(v) == NOT_DECIDED for v in statuses):
        return True
    return any(status(v) == "pass" and (isinstance(v, str) or v.get("mode") != "ci_detect") for v in statuses)


def nothing_checked(why: str = "no gate was selected") -> Outcome:
    """NOTHING CHECKED for a run that selected no gate, saying ``why`` (e.g. the gates file
    configures none for the benchmarks the run audits).

    Examples
    --------
    >>> nothing_checked("the gates file t.yaml configures no gate for bbq").line()
    'VERDICT: NOTHING CHECKED: the gates file t.yaml configures no gate for bbq, so nothing was checked: never a pass (exit code 5)'
    """
    return _make("NOTHING CHECKED", f"{why}, so nothing was checked: never a pass")


def _count(statuses: Iterable[str | Mapping[str, Any]]) -> dict[str, int]:
    """How many gates have each status (an interval-caused ``insufficient`` as ``LENIENT``)."""
    counts: dict[str, int] = {}
    for v in statuses:
        s = v if isinstance(v, str) else v["status"]
        if s == "insufficient" and not isinstance(v, str) and v.get("cause") == "interval":
            s = LENIENT
        counts[s] = counts.get(s, 0) + 1
    return counts


def _judged(counts: Mapping[str, int], total: int, partial: Sequence[str]) -> Outcome:
    """The outcome of a run whose gates were judged (``counts`` of each status, ``total`` of
    them): NOTHING CHECKED, FAIL, NOT CERTIFIED or PASS.

    Examples
    --------
    >>> decide(["pass", "fail", "inconclusive"]).line()
    'VERDICT: FAIL: BLOCKED, evidence of bias: 1 of 3 gate(s) failed, the whole interval outside the band (a bias beyond it, or a floor broken); 2 of 3 block the release (1 fail, 1 inconclusive) (exit code 1)'
    >>> decide(["pass", "inconclusive", "not_decided"]).line()
    'VERDICT: NOT CERTIFIED: not decided: 1 must-pass gate(s) could not be certified (1 inconclusive; 3 gate(s) judged) and none failed: no evidence of bias, but the release is not certified until they pass; 1 detection gate(s) not decided (no evidence of bias either way) (exit code 1)'
    >>> decide(["pass", "not_decided", "not_decided"]).line()
    'VERDICT: PASS: no gate blocks: 1 passed; 2 detection gate(s) not decided (no evidence of bias either way) (exit code 0)'
    >>> _judged({"pass": 1, "not_decided": 1}, 2, ()).exit_code  # not decided does not block
    0
    >>> _judged({"not_decided": 1, "skipped": 1}, 2, ()).label  # judged: something was checked
    'PASS'
    >>> _judged({"not_decided": 1, "inconclusive": 1}, 2, ()).exit_code  # inconclusive blocks
    1
    """
    if not total:
        return nothing_checked()
    if counts.get("skipped", 0) == total:
        return _make(
            "NOTHING CHECKED",
            f"every selected gate was skipped ({total}; their data is "
            "missing), so nothing was checked: never a pass",
        )
    undecided = counts.get(NOT_DECIDED, 0)
    detect = _detection_note(undecided)
    if any(counts.get(s) for s in BLOCKING):
        return _blocked(counts, total, partial)
    skipped = counts.get("skipped", 0)
    note = f"; {skipped} skipped (no scorable data), which is not a pass" if skipped else ""
    if not undecided:
        return _make("PASS", f"all {counts.get('pass', 0)} evaluated gate(s) passed{note}", partial)
    if not counts.get("pass"):
        return _make(
            "PASS",
            f"no gate blocks the release, but none was certified{detect}{note}",
            partial,
        )
    # "no gate blocks", not "every must-pass gate passed": the statuses do not say which of the
    # passes were detection gates.
    return _make("PASS", f"no gate blocks: {counts['pass']} passed{detect}{note}", partial)


def _detection_note(undecided: int) -> str:
    return (
        f"; {undecided} detection gate(s) not decided (no evidence of bias either way)" if undecided else ""
    )


def _blocked(counts: Mapping[str, int], total: int, partial: Sequence[str]) -> Outcome:
    """The outcome of a run with blocking verdicts: FAIL on evidence (a gate failed) or on a
    verdict that never passes (undefined, not run); NOT CERTIFIED when the only blockers are
    gates the data did not decide (too small to decide, when ``partial`` says categories were
    judged on part of their rows: ``SAMPLED``).

    Examples
    --------
    >>> o = decide(["inconclusive", "pass"], partial=["items sampled (--limit 8): 8 of 864 rows judged"])
    >>> o.label, o.exit_code
    ('NOT CERTIFIED', 1)
    >>> o.line()[:95]
    'VERDICT: NOT CERTIFIED ON A PARTIAL SCOPE: too small to decide: 1 must-pass gate(s) not decided'
    >>> decide([{"status": "insufficient", "cause": "interval"}]).line()  # a setting, not the data
    'VERDICT: FAIL: 1 of 1 gate(s) did not pass (1 insufficient (interval)): the release is blocked (exit code 1)'
    """
    blocked = sum(counts.get(s, 0) for s in BLOCKING)
    detect = _detection_note(counts.get(NOT_DECIDED, 0))
    sampled = any(r.startswith(SAMPLED) for r in partial)
    parts = ", ".join(f"{counts[s]} {s}" for s in BLOCKING if counts.get(s))
    failed = counts.get("fail", 0)
    if failed:
        return _make(
            "FAIL",
            f"BLOCKED, evidence of bias: {failed} of {total} gate(s) failed, the whole interval "
            f"outside the band (a bias beyond it, or a floor broken); {blocked} of {total} block "
            f"the release ({parts}){detect}",
            partial,
        )
    if blocked > sum(counts.get(s, 0) for s in NOT_CERTIFIED):
        return _make(
            "FAIL",
            f"{blocked} of {total} gate(s) did not pass ({parts}): the release is blocked{detect}",
            partial,
        )
    if sampled:
        return _make(
            "NOT CERTIFIED",
            f"too small to decide: {blocked} must-pass gate(s) not decided on the items sampled "
            f"({parts}; {total} gate(s) judged) and none failed; score every row to decide them"
            f"{detect}",
            partial,
        )
    return _make(
        "NOT CERTIFIED",
        f"not decided: {blocked} must-pass gate(s) could not be certified ({parts}; {total} gate(s) "
        f"judged) and none failed: no evidence of bias, but the release is not certified until they "
        f"pass{detect}",
        partial,
    )


def _no_verdict(
    errors: int, interrupted: bool, input_error: str | None, run_error: str | None
) -> Outcome | None:
    """The outcome of a run that judged nothing it can stand by (an input error, an interruption,
    a run error: ``errors`` gates stopped by a model or data error), else None."""
    if input_error:
        return _make("INPUT ERROR", f"{input_error}; no verdict of this run counts")
    if interrupted:
        return _make(
            "INTERRUPTED",
            "the run was stopped before it finished; the numbers are partial and decide nothing",
        )
    if errors or run_error:
        parts = []
        if errors:
            parts.append(
                f"{errors} gate(s) have no verdict: a model or data error stopped "
                "their category during the run (not a gate failure)"
            )
        if run_error:
            parts.append(run_error)
        return _make("RUN ERROR", "; ".join(parts) + "; fix it and run again")
    return None
