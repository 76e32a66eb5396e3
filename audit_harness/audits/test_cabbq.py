"""CaBBQ (Ruiz-Fernández et al. 2025), Catalan: one test per gate of thresholds.yaml's `cabbq`
section, e.g. ``test_cabbq[SES-acc_disambig]``: EsBBQ's protocol and rules on the Catalan files
(= lm-eval ``cabbq``; test_esbbq.py says what they are)."""

import pytest


@pytest.mark.audit("cabbq")
def test_cabbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
