"""Release gates: ``thresholds.yaml`` schema (``schema``), decision modes (``modes``), regression
checks against a baseline run (``regression``), and one gate with its verdict (``gate``).

A NaN metric never passes; only the ``pass`` status passes.
"""

from .gate import (
    BOUND_KEYS,
    DEFAULT_CONFIDENCE,
    DEFAULT_MIN_N,
    MIN_RESAMPLES,
    REGRESSION_SUFFIX,
    STATUSES,
    Baseline,
    Gate,
    Verdict,
)
from .modes import MODE_RULES, MODES, allowed_interval, decide
from .regression import add_regression_gates
from .schema import GATE_KEYS, ThresholdsDeprecationWarning, check_scale, load_thresholds

__all__ = [
    "BOUND_KEYS",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_MIN_N",
    "MIN_RESAMPLES",
    "GATE_KEYS",
    "MODES",
    "MODE_RULES",
    "REGRESSION_SUFFIX",
    "STATUSES",
    "Baseline",
    "Gate",
    "ThresholdsDeprecationWarning",
    "Verdict",
    "add_regression_gates",
    "allowed_interval",
    "check_scale",
    "decide",
    "load_thresholds",
]
