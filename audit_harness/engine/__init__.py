"""Turns benchmark requests into model calls (batching lives in the backend; request shaping here)."""
