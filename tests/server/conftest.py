"""The real vLLM server for the ``server`` tests: started once per session from ``.venv-vllm``
(``make setup-server``) on a free port of 127.0.0.1 with the embedded SmolLM2 (the zoo's
converted folder), stopped by its process id at the end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from audit_harness.models.zoo import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SERVED_NAME = DEFAULT_MODEL  # the embedded SmolLM2-135M-Instruct


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A ``serving.LocalServer`` running vLLM (CPU, fp32) with SmolLM2-135M-Instruct."""
    if not VLLM_PYTHON.exists():
        why = f"{VLLM_PYTHON.parent.parent.name} is absent: `make setup-server` installs vLLM (CPU) for these tests"
        if os.environ.get("CI") == "true":  # CI installs it: a missing one is a broken set-up
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    from audit_harness.models.zoo import materialize
    from audit_harness.serving import start_vllm

    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = start_vllm(VLLM_PYTHON, materialize(SERVED_NAME), SERVED_NAME, log)
    yield server
    server.stop()
