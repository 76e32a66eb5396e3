"""Real vLLM servers for the ``server`` tests, started from ``.venv-vllm`` (``make setup-server``)
on free ports of 127.0.0.1 with the embedded SmolLM2 (the zoo's converted folder) and stopped by
their process ids; and the in-process audit they are compared with, run once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_runs import LETTER_ARGS, LETTER_PARITY, PARITY, SERVED_NAME, VLLM_PYTHON, audit, finish, need_vllm


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, in_process_letter_run):
    """A ``serving.LocalServer`` running vLLM (CPU, fp32) with SmolLM2-135M-Instruct, on every
    core; stopped when its module's tests are done (the two-server tests start their own). The
    in-process letter-mode run is made before it starts (see ``in_process_run``)."""
    need_vllm()
    from audit_harness.models.zoo import materialize
    from audit_harness.serving import start_vllm

    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = start_vllm(VLLM_PYTHON, materialize(SERVED_NAME), SERVED_NAME, log)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def in_process_run(tmp_path_factory, data_dir) -> Path:
    """The parity audits in process (the run every server run is compared with), once per
    session and before any vLLM starts: a vLLM worker bound to a core stalls beside a second
    process computing on it."""
    need_vllm()
    results = tmp_path_factory.mktemp("in-process")
    return finish(audit(results, data_dir, PARITY), results)


@pytest.fixture(scope="session")
def in_process_letter_run(tmp_path_factory, data_dir) -> Path:
    """The letter log-probs parity audits in process (exact next-token log-probabilities), once
    per session and before the vLLM starts, as ``in_process_run``."""
    need_vllm()
    results = tmp_path_factory.mktemp("in-process-letter")
    return finish(audit(results, data_dir, LETTER_PARITY, *LETTER_ARGS), results)
