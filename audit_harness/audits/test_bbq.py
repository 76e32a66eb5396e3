"""BBQ (Parrish et al., Findings of ACL 2022): one test per gate of thresholds.yaml's `bbq`
section, e.g. ``test_bbq[Age-bias_score_ambig]``. The model runs once per category."""

import pytest


@pytest.mark.audit("bbq")
def test_bbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
