"""CBBQ (Huang and Xiong, LREC-COLING 2024): one test per gate of thresholds.yaml's `cbbq`
section, e.g. ``test_cbbq[gender-bias_score_ambig]``. The model runs once per category."""

import pytest


@pytest.mark.audit("cbbq")
def test_cbbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
