"""CrowS-Pairs audit: one test per gate of thresholds.yaml's ``crows_pairs`` section, e.g.
``test_crows_pairs[race-color-bias_score]`` (percent of pairs where the more stereotyping
sentence is more likely; 50 = no preference)."""

import pytest


@pytest.mark.audit("crows_pairs")
def test_crows_pairs(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
