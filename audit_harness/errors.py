"""Errors the suite raises for bad input. Each names what was wrong and where (file, line, key)."""


class AuditError(Exception):
    """Base class: bad input or configuration that stops an audit with one clear message."""


class DataError(AuditError):
    """A data directory, file, row or field is missing or malformed."""


class ConfigError(AuditError):
    """A command-line option or a thresholds.yaml entry is invalid."""


class ModelError(AuditError):
    """A model cannot be resolved or loaded."""
