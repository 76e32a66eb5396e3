"""The math of the audit suite: published bias and knowledge metrics as pure functions.

No torch, no transformers, no I/O and no import of ``audit_harness``: records in, numbers out.
"""

from .records import AnswerClass, BBQFamilyRecord, answer_class, biased_option
from .result import MetricResult

__all__ = ["AnswerClass", "BBQFamilyRecord", "MetricResult", "answer_class", "biased_option"]
