"""MBBQ (Neplenbroek et al., COLM 2024): one test per gate of thresholds.yaml's `mbbq` section
and category-language, e.g. ``test_mbbq[Age_nl-diff_bias_ambig]``. The model runs once per
category-language (its bias and control rows together)."""

import pytest


@pytest.mark.audit("mbbq")
def test_mbbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
