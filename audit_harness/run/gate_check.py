"""One gate, checked: what an audit test receives (``GateCheck``). It gets the category's (cached)
outcome, has the gate judged on it with what only the run knows (``gates.judge``: the sequential
decision, the coverage of saved predictions, the other parsing profile, a baseline's
comparability), records the JUnit properties, and turns a finding into a verdict line instead of
a traceback (``GateFinding``)."""

from __future__ import annotations

import contextlib
import json

import pytest

from ..errors import AuditError, MissingDataError
from ..gates import Gate, Verdict
from ..gates.judge import Evidence, judge, regression_notes
from ..gates.resolution import UNDECIDED, of_entry

#: Where a gate test's verdict is kept for its report (``GateFinding``).
VERDICT_KEY = pytest.StashKey["Verdict"]()
#: JUnit ``status`` values of a gate that was evaluated and did not pass.
FINDINGS = frozenset({"fail", "undefined", "insufficient", "inconclusive"})


class GateFinding:
    """The failure report of a gate that ran and did not pass: a finding, not a bug, so its
    report is the verdict line (value, interval, n, bound, mode) instead of a traceback, printed
    once in the FAILURES section and carried as the JUnit failure text. It has no ``reprcrash``,
    so pytest's short summary lists the test id without repeating the line."""

    def __init__(self, message: str):
        self.message = message

    def __str__(self) -> str:
        return self.message

    def toterminal(self, tw) -> None:
        tw.line(self.message)


def finding_text(verdict: Verdict) -> str:
    """What a gate that did not pass reports (its FAILURES entry, its JUnit message): the
    verdict's sentence, and for a gate the data left undecided what would decide it
    (``gates.resolution``)."""
    if verdict.metric is None or verdict.status not in UNDECIDED:
        return verdict.message
    todo = of_entry(verdict.to_dict())["to_decide"]
    return verdict.message if todo is None else f"{verdict.message}. To decide it: {todo['text']}"


class GateCheck:
    """What an audit test receives: evaluates one gate on the (cached) category outcome and
    records value, n, interval and bounds as JUnit properties."""

    def __init__(self, gate: Gate, session, record_property, node, baseline=None):
        self.gate = gate
        self._session = session
        self._record = record_property
        self._node = node
        self._baseline = baseline  # the --baseline run's results document, or None

    def evaluate(self):
        """Run (or reuse) the category's evaluation and return the gate's Verdict.

        Raises the suite's AuditError (bad data or model) as a test error with its message; a
        ``MissingDataError`` skips the test (``pytest.skip``) and records a ``skipped`` verdict.
        """
        g = self.gate
        capman = self._node.config.pluginmanager.getplugin("capturemanager")
        # Progress of a long category goes to the terminal, not into the test's captured output.
        show = capman is not None and self._session.options.outputs.progress != "off"
        try:
            with capman.global_and_fixture_disabled() if show else contextlib.nullcontext():
                outcome = self._session.category_outcome(g.benchmark, g.category)
            error = None
        except MissingDataError as e:
            # A category whose file is absent is skipped, and the skip is kept in the results so
            # the report lists the gate instead of silently dropping it.
            reason = f"{g.benchmark}/{g.category}: {e}"
            self._record("status", "skipped")
            self._record("reason", reason)
            self._session.verdicts.append(Verdict.skipped(g, reason))
            pytest.skip(reason)
        except AuditError as e:
            error = f"{g.benchmark}/{g.category}: {e}"
            self._record_error(error)
            if getattr(e, "stops_run", False):  # every later gate would fail the same way
                self._session.model_error = str(e)
                self._node.session.shouldstop = f"bias audit: {e}"
            pytest.fail(error, pytrace=False)
        except Exception as e:  # a backend crash: recorded as this gate's ERROR, traceback kept
            self._record_error(f"{g.benchmark}/{g.category}: {type(e).__name__}: {e}")
            raise
        if self._session.backend_spec.placeholder_scores:
            # A plan's values are placeholders: the gate is not judged, whatever they say.
            from ..planning import NOTHING_SCORED

            self._record("status", "planned")
            pytest.skip(f"{NOTHING_SCORED} (--plan: a dry run, no gate judged)")
        metric = self._session.metric(g.benchmark, g.category, g.metric)
        opts = self._session.options
        verdict = judge(
            g,
            metric,
            self._evidence(outcome),
            n_resamples=opts.metrics.n_resamples,
            allow_partial=opts.backend.allow_partial,
        )
        self._record_verdict(verdict, outcome.n_scored)
        self._session.verdicts.append(verdict)
        self._node.stash[VERDICT_KEY] = verdict
        return verdict

    def _record_verdict(self, verdict: Verdict, items_scored: int) -> None:
        """JUnit properties of a judged gate: value, n, interval, bounds, mode, the baseline of a
        regression gate, the status and the sequential report."""
        g, metric = self.gate, verdict.metric
        if verdict.other_parse is not None:
            self._record("other_parse_status", verdict.other_parse["status"])
        self._record("value", "nan" if not metric.defined else f"{metric.value:.6f}")
        self._record("n", metric.n)
        if metric.n_variants is not None:  # n counts rows, each asked in several variants
            self._record("n_variants", metric.n_variants)
        self._record("ci", f"{metric.ci_low:.6f},{metric.ci_high:.6f}")
        self._record("bounds", json.dumps(g.bounds()))
        self._record_resolution(verdict)
        self._record("mode", g.decision_mode)
        self._record("min_n", g.min_n)
        if g.baseline is not None:
            self._record(
                "baseline_value", "nan" if g.baseline.value != g.baseline.value else f"{g.baseline.value:.6f}"
            )
            self._record("baseline_run", g.baseline.run_id)
            self._record("max_regression", g.max_regression)
            self._record("like_for_like", "false" if verdict.not_like_for_like else "true")
            if verdict.not_like_for_like:
                self._record("not_like_for_like", "; ".join(verdict.not_like_for_like))
        self._record("status", verdict.status)
        self._record("items_scored", items_scored)
        if verdict.sequential is not None:
            self._record_sequential(verdict.sequential)

    def _record_resolution(self, verdict: Verdict) -> None:
        """JUnit properties of what the gate can resolve (``gates.resolution``): ``half_width``,
        ``certifiable_band`` (JSON, in the bounds' keys) and, for an undecided gate, ``to_decide``
        (the sentence)."""
        res = of_entry(verdict.to_dict())
        hw = res["half_width"]
        self._record("half_width", "nan" if hw is None else f"{hw:.6f}")
        self._record("certifiable_band", json.dumps(res["certifiable_band"]))
        if res["to_decide"] is not None:
            self._record("to_decide", res["to_decide"]["text"])

    def _evidence(self, outcome) -> Evidence:
        """What the run knows of the gate's category besides its metric, for ``gates.judge``."""
        g, measures = self.gate, outcome.measures
        sens = measures.sensitivity
        other = None
        if sens is not None and g.metric in sens.metrics:
            other = (sens.answer_parsing, sens.metrics[g.metric])
        return Evidence(
            coverage=measures.coverage,
            sequential=outcome.sequential.gates.get(g.test_id) if outcome.sequential else None,
            other_parse=other,
            unlike=regression_notes(
                g, self._baseline, lambda: self._session.category_document(g.benchmark, g.category)
            ),
        )

    def _record_sequential(self, info) -> None:
        """JUnit properties of a sequential gate: where its verdict comes from, the decision, the
        n it was decided at, the confidence sequence there and the items saved."""
        self._record("sequential_verdict_from", info["verdict_from"])
        self._record("sequential_decision", info["decision"] or "none")
        self._record("sequential_n", info["n"])
        self._record("sequential_population", info["population"])
        if info["cs"] is not None:
            self._record("sequential_cs", f"{info['cs'][0]:.6f},{info['cs'][1]:.6f}")
        self._record("sequential_items_saved", info["items_saved"])
        if info["note"]:
            self._record("sequential_note", info["note"])

    def _record_error(self, message: str) -> None:
        verdict = Verdict.error(self.gate, message)
        self._record("status", verdict.status)
        self._record("reason", message)
        self._session.verdicts.append(verdict)
