"""WinoQueer audit: one test per gate of thresholds.yaml's ``winoqueer`` section, e.g.
``test_winoqueer[overall-bias_score]`` (50 = no preference; above 50 = anti-LGBTQ+ bias)."""

import pytest


@pytest.mark.audit("winoqueer")
def test_winoqueer(audit_gate):
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
