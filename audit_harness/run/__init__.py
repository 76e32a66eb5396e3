"""One pytest run of the audits: ``AuditRun`` owns it (options, gates, start-up checks,
scheduling, the end), ``GateCheck`` judges one gate, ``finish`` writes the outcome and files."""

from __future__ import annotations

import pytest

from .audit_run import AuditRun, BaselineRun
from .gate_check import GateCheck, GateFinding

#: Where the config keeps the run (``config.stash[RUN_KEY]``).
RUN_KEY = pytest.StashKey[AuditRun]()

__all__ = ["RUN_KEY", "AuditRun", "BaselineRun", "GateCheck", "GateFinding"]
