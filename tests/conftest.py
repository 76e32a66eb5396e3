"""Shared fixtures of the suite's own tests: the real data directory and a tiny random model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real benchmark data: $AUDIT_DATA_DIR, else ../shared/data beside the repo."""
    path = Path(os.environ.get("AUDIT_DATA_DIR") or REPO.parent / "shared" / "data").resolve()
    if not (path / "bbq").is_dir():
        pytest.fail(f"benchmark data not found at {path}: set AUDIT_DATA_DIR", pytrace=False)
    return path


@pytest.fixture(scope="session")
def tiny_model():
    """The 2-layer random GPT-2 of the zoo (built from a config, seed 0; about a second)."""
    from audit_harness.models import load_model

    return load_model("tiny-random-gpt2", device="cpu", dtype="float32", batch_size=4)
