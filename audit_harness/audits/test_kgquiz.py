"""KGQuiz (Bai et al., WWW 2024): knowledge floors per (task, domain), one test per gate of
thresholds.yaml's `kgquiz` section, e.g. ``test_kgquiz[Task1-ConceptNet-accuracy]``. The model
runs once per category. A category whose data file is missing (5 of 15 upstream) is SKIPPED with
the missing path and its upstream blob hash, never passed."""

import pytest


@pytest.mark.audit("kgquiz")
def test_kgquiz(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
