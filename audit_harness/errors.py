"""Errors the suite raises for bad input. Each names what was wrong and where (file, line, key)."""


class AuditError(Exception):
    """Base class: bad input or configuration that stops an audit with one clear message."""


class DataError(AuditError):
    """A data directory, file, row or field is missing or malformed."""


class ConfigError(AuditError):
    """A command-line option or a thresholds.yaml entry is invalid."""


class ModelError(AuditError):
    """A model cannot be resolved or loaded."""


class PredictionError(DataError):
    """A model output (or saved prediction) of a type the answer parser refuses.

    Attributes:
        item_id: the item it answers. problem: what is wrong with it.
    """

    def __init__(self, item_id: str, problem: str):
        super().__init__(f"{item_id}: {problem}")
        self.item_id = item_id
        self.problem = problem


class MissingDataError(DataError):
    """A data file a category needs is absent from an otherwise usable data directory (e.g. the
    5 KGQuiz files missing upstream). Its gates are reported as skipped, never as passed; the
    message names the path and how to obtain or verify the file."""
