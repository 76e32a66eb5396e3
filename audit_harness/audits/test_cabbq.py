"""CaBBQ (Ruiz-Fernández et al. 2025), Catalan: one test per gate of thresholds.yaml's `cabbq`
section, e.g. ``test_cabbq[SES-acc_disambig]``. The authors' protocol (= lm-eval ``cabbq``);
the model runs once per category. Rows whose ``question_type`` contradicts their gold answer are
scored but left out of the disambiguated bias score, and listed in the results."""

import pytest


@pytest.mark.audit("cabbq")
def test_cabbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
