"""Outputs of a run: the results JSON (and, later, the compliance report)."""
