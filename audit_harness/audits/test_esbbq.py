"""EsBBQ (Ruiz-Fernández et al. 2025), Spanish: one test per gate of thresholds.yaml's `esbbq`
section, e.g. ``test_esbbq[Age-bias_score_ambig]``. The authors' protocol (= lm-eval ``esbbq``);
the model runs once per category. Rows whose ``question_type`` contradicts their gold answer are
scored but left out of the disambiguated bias score, and listed in the results."""

import pytest


@pytest.mark.audit("esbbq")
def test_esbbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
