"""Release gates: ``thresholds.yaml`` schema (``schema``), decision modes (``modes``), regression
checks against a baseline run (``regression``), and one gate with its verdict (``gate``).

A NaN metric never passes; only the ``pass`` status passes.
"""

from .gate import (
    BOUND_KEYS,
    CONFIDENCE_FLOOR,
    DEFAULT_CONFIDENCE,
    DEFAULT_MIN_N,
    MIN_RESAMPLES,
    REGRESSION_SUFFIX,
    STATUSES,
    Baseline,
    Gate,
    Verdict,
)
from .modes import (
    DETECT,
    MODE_RULES,
    MODES,
    THREE_WAY,
    allowed_interval,
    decide,
    decide_detect,
    decide_three_way,
)
from .regression import add_regression_gates
from .schema import (
    GATE_KEYS,
    PACKAGED_THRESHOLDS,
    ThresholdsDeprecationWarning,
    check_scale,
    load_thresholds,
    thresholds_provenance,
)

__all__ = [
    "BOUND_KEYS",
    "CONFIDENCE_FLOOR",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_MIN_N",
    "DETECT",
    "MIN_RESAMPLES",
    "GATE_KEYS",
    "MODES",
    "MODE_RULES",
    "PACKAGED_THRESHOLDS",
    "REGRESSION_SUFFIX",
    "THREE_WAY",
    "STATUSES",
    "Baseline",
    "Gate",
    "ThresholdsDeprecationWarning",
    "Verdict",
    "add_regression_gates",
    "allowed_interval",
    "check_scale",
    "decide",
    "decide_detect",
    "decide_three_way",
    "load_thresholds",
    "thresholds_provenance",
]
