"""KoBBQ (Jin et al. 2024): one test per gate of thresholds.yaml's `kobbq` section, e.g.
``test_kobbq[age-diff_bias_ambig]``; with ``--kobbq-mode both`` each gate also runs on the
letter-mode metrics, ``test_kobbq[age-diff_bias_ambig-letter]``. Every selected test row is asked
under each prompt template and option order; the model runs once per category."""

import pytest


@pytest.mark.audit("kobbq")
def test_kobbq(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
