"""The BBQ-format datasets a user declares (``--bbq-dataset FILE``, docs/datasets.md): one test
per gate of the thresholds file's section named after each dataset, e.g.
``TestDeclared::test_mybbq[Age-diff_bias_ambig]``. The run adds a ``test_<name>`` to the class for
each declared dataset when it collects this module (``run.audit_run.AuditRun``); without
``--bbq-dataset`` the class holds no test."""

import pytest


@pytest.mark.audit_declared
class TestDeclared:
    """Filled at collection with one test per declared dataset (``audit_test``)."""


def audit_test(audit_gate):
    """The body of every declared dataset's test, as of a built-in benchmark's."""
    verdict = audit_gate.evaluate()
    assert verdict.passed, verdict.message
