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
FAIL               1     a gate failed, was undefined, insufficient, inconclusive, or did not
                         run (``-x``)
PASS               0     every selected gate ran and passed
=================  ====  ==================================================================

A PASS or FAIL of a run that covers less than a full audit (``--limit``, ``-k``, ``--min-n``,
skipped gates: ``report.scope.partial_reasons``) keeps its label and exit code, since a smoke run
is a legitimate use, but its status is ``partial`` and its reason and verdict line say so and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

from . import exit_codes

#: Gate statuses that block a release although the gate was judged (or should have been).
BLOCKING = ("fail", "undefined", "insufficient", "inconclusive", "not run")
#: ``label: (exit code, run status)``.
LABELS = {
    "PASS": (exit_codes.OK, "complete"),
    "FAIL": (exit_codes.GATE_FAILED, "complete"),
    "INTERRUPTED": (exit_codes.INTERRUPTED, "interrupted"),
    "RUN ERROR": (exit_codes.RUN_ERROR, "incomplete"),
    "INPUT ERROR": (exit_codes.USAGE_ERROR, "input error"),
    "NOTHING CHECKED": (exit_codes.NOTHING_SELECTED, "nothing checked"),
}


@dataclass(frozen=True)
class Outcome:
    """What a run decided.

    Attributes
    ----------
    label : str
        One of ``LABELS``: ``PASS``, ``FAIL``, ``INTERRUPTED``, ``RUN ERROR``, ``INPUT ERROR``,
        ``NOTHING CHECKED``.
    exit_code : int
        The process's exit code for that label (``exit_codes``).
    reason : str
        One sentence a release manager can act on.
    status : str
        results.json's ``run.status``: ``complete``, ``partial``, ``interrupted``,
        ``incomplete``, ``input error`` or ``nothing checked``.
    partial : tuple of str
        Why a PASS or FAIL is not the verdict of a full audit; empty when it is (or when the
        label is neither).
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
    if partial and label in ("PASS", "FAIL"):
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
    statuses: Iterable[str],
    *,
    interrupted: bool = False,
    input_error: str | None = None,
    run_error: str | None = None,
    partial: Sequence[str] = (),
) -> Outcome:
    """The outcome of a run from its gate statuses and what happened around them.

    Parameters
    ----------
    statuses : iterable of str
        Every selected gate's verdict status (``gates.STATUSES``), not-run gates included.
    interrupted : bool
        The run was stopped by Ctrl-C (during scoring or while writing its outputs).
    input_error : str, optional
        Why nothing could be judged (the model did not load, ``--strict-baseline``).
    run_error : str, optional
        A failure outside any gate that leaves the run incomplete (its outputs could not be
        written where asked).
    partial : sequence of str
        Why the run covers less than a full audit (``report.scope.partial_reasons``): a PASS or
        FAIL then has status ``partial`` and says why in its reason.

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
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    total = sum(counts.values())
    stopped = _no_verdict(counts.get("error", 0), interrupted, input_error, run_error)
    if stopped is not None:
        return stopped
    return _judged(counts, total, partial)


def nothing_checked(why: str = "no gate was selected") -> Outcome:
    """NOTHING CHECKED for a run that selected no gate, saying ``why`` (e.g. the gates file
    configures none for the benchmarks the run audits).

    Examples
    --------
    >>> nothing_checked("the gates file t.yaml configures no gate for bbq").line()
    'VERDICT: NOTHING CHECKED: the gates file t.yaml configures no gate for bbq, so nothing was checked: never a pass (exit code 5)'
    """
    return _make("NOTHING CHECKED", f"{why}, so nothing was checked: never a pass")


def _judged(counts: Mapping[str, int], total: int, partial: Sequence[str]) -> Outcome:
    """The outcome of a run whose gates were judged (``counts`` of each status, ``total`` of
    them): NOTHING CHECKED, FAIL or PASS."""
    if not total:
        return nothing_checked()
    if counts.get("skipped", 0) == total:
        return _make(
            "NOTHING CHECKED",
            f"every selected gate was skipped ({total}; their data is "
            "missing), so nothing was checked: never a pass",
        )
    blocked = sum(counts.get(s, 0) for s in BLOCKING)
    if blocked:
        parts = ", ".join(f"{counts[s]} {s}" for s in BLOCKING if counts.get(s))
        return _make(
            "FAIL", f"{blocked} of {total} gate(s) did not pass ({parts}): the release is blocked", partial
        )
    skipped = counts.get("skipped", 0)
    note = f"; {skipped} skipped (no scorable data), which is not a pass" if skipped else ""
    return _make("PASS", f"all {counts.get('pass', 0)} evaluated gate(s) passed{note}", partial)


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
