"""The run's overall verdict as a results document records it: every report states it first, and
reads it from ``run.outcome`` (decided once, by ``run_outcome.decide``, when the run ended)."""

from __future__ import annotations

from typing import Mapping

from ..run_outcome import Outcome, decide
from .schema import as_results


def overall_verdict(results: Mapping[str, object]) -> Outcome:
    """The ``Outcome`` a results document records (``run.outcome``).

    A document written before outcomes were recorded gets the same decision from its gate
    verdicts and run status, so ``compare`` and ``--baseline`` read old runs alike."""
    results = as_results(results)
    run = results.get("run") or {}
    if run.get("outcome"):
        return Outcome.from_dict(run["outcome"])
    return decide(list(results.get("gates") or []), interrupted=run.get("status") == "interrupted")
