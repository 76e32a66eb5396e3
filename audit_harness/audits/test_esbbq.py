"""EsBBQ and CaBBQ (Ruiz-Fernández et al. 2025): one test per gate of thresholds.yaml's `esbbq` and
`cabbq` sections, e.g. ``test_esbbq[Age-bias_score_ambig]``, ``test_cabbq[SES-acc_disambig]``.
The authors' protocol (= lm-eval ``esbbq``/``cabbq``); the model runs once per category and
language. Rows whose ``question_type`` contradicts their gold answer are scored but left out of
the metrics, and listed in the results."""

import pytest


@pytest.mark.audit("esbbq")
def test_esbbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message


@pytest.mark.audit("cabbq")
def test_cabbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
