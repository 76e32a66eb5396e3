"""One GPU per pytest-xdist worker for the in-process backend.

The controller lists the GPUs it may use (``CUDA_VISIBLE_DEVICES`` when set, else every GPU torch
counts), refuses more workers than GPUs, and hands worker *i* the *i*-th; the worker sets
``CUDA_VISIBLE_DEVICES`` to that one GPU before anything initializes CUDA, so its model, its
allocator and every library it loads see a single device, ``cuda:0``. ``-n auto`` then means one
worker per GPU. The server backend pins nothing: its workers share the server.
"""

from __future__ import annotations

import os
from typing import Mapping

from .errors import ConfigError

ENV = "CUDA_VISIBLE_DEVICES"


def visible_gpus(env: Mapping[str, str] | None = None, count=None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    Args:
        env: the environment (default ``os.environ``): a set ``CUDA_VISIBLE_DEVICES`` is the list
            (comma-separated indices or UUIDs; empty or ``-1`` means none).
        count: a function returning the number of GPUs when the variable is unset (default
            ``torch.cuda.device_count``, which does not initialize CUDA).
    Returns:
        e.g. ``["0", "1"]``, ``["GPU-5d1c..."]``, or ``[]`` on a machine without a GPU.
    """
    env = os.environ if env is None else env
    value = env.get(ENV)
    if value is not None:
        entries = [v.strip() for v in value.split(",") if v.strip()]
        # CUDA stops at the first invalid entry; -1 is the usual way to hide every GPU.
        out = []
        for v in entries:
            if v.startswith("-"):
                break
            out.append(v)
        return out
    if count is None:
        try:
            import torch

            count = torch.cuda.device_count
        except ImportError:
            return []
    return [str(i) for i in range(int(count()))]


def uses_gpus(in_process: bool, device: str) -> bool:
    """Whether workers of this run pin GPUs: a backend that runs the model in this process
    (``backends.in_process``) on ``auto`` or ``cuda`` (an explicit ``cuda:N`` or ``cpu`` is the
    user's choice for every worker)."""
    return in_process and device in ("auto", "cuda")


def assign(n_workers: int, gpus: list[str], device: str = "auto", share: bool = False) -> list[str | None]:
    """The GPU of each worker (``CUDA_VISIBLE_DEVICES`` value), or None each when there is none.
    ``share``: more workers than GPUs take them in turn (the suite's own tests, tiny models)
    instead of being an error.

    Raises:
        ConfigError: more workers than GPUs (each worker of an audit holds a whole model on its
            GPU), or ``--device cuda`` without a GPU.
    """
    if not gpus:
        if device == "cuda":
            raise ConfigError(
                "--device cuda with -n: no GPU is visible (CUDA_VISIBLE_DEVICES or "
                "the driver); use --device cpu"
            )
        return [None] * n_workers
    if n_workers > len(gpus) and share:
        return [gpus[i % len(gpus)] for i in range(n_workers)]
    if n_workers > len(gpus):
        raise ConfigError(
            f"-n {n_workers} asks for more workers than the {len(gpus)} visible GPU(s) "
            f"({','.join(gpus)}): each worker pins one GPU; use -n {len(gpus)} or "
            "-n auto (one worker per GPU), or --device cpu"
        )
    return list(gpus[:n_workers])


def check_device(device: str, n_gpus: int) -> None:
    """Refuse at start-up a ``--device`` that names a GPU this machine does not have: the run
    otherwise made its folder, then stopped when the model loaded (``model ... (not loaded)``,
    pytest counting one error where the audit counted every selected gate).

    Args:
        device: ``--device`` (``auto``, ``cpu``, ``cuda`` or ``cuda:N``).
        n_gpus: the CUDA devices torch can use here (``torch.cuda.device_count()``, which
            counts within ``CUDA_VISIBLE_DEVICES`` and is 0 without a driver).
    Raises:
        ConfigError: ``cuda`` or ``cuda:N`` without a visible GPU, or ``cuda:N`` past the last.

    Examples
    --------
    >>> check_device("cpu", 0), check_device("cuda:1", 2)
    (None, None)
    >>> check_device("cuda", 0)
    Traceback (most recent call last):
    ...
    audit_harness.errors.ConfigError: --device cuda: this machine has no CUDA device (torch sees no GPU; CUDA_VISIBLE_DEVICES and the driver decide): use --device cpu, or auto (the GPU when there is one)
    """
    if not device.startswith("cuda"):
        return
    if n_gpus < 1:
        raise ConfigError(
            f"--device {device}: this machine has no CUDA device (torch sees no GPU; "
            "CUDA_VISIBLE_DEVICES and the driver decide): use --device cpu, or auto (the GPU "
            "when there is one)"
        )
    index = device.partition(":")[2]
    if index.isdigit() and int(index) >= n_gpus:
        raise ConfigError(
            f"--device {device}: this machine has {n_gpus} visible CUDA device(s), "
            f"cuda:0 to cuda:{n_gpus - 1}"
        )


def worker_number(worker_id: str) -> int:
    """``gw3`` -> 3.

    Raises:
        ValueError: not an xdist worker id.
    """
    if not worker_id.startswith("gw") or not worker_id[2:].isdigit():
        raise ValueError(f"not a pytest-xdist worker id: {worker_id!r}")
    return int(worker_id[2:])


def pin(gpu: str | None, env: dict | None = None) -> None:
    """Make ``gpu`` the only visible GPU of this process (before CUDA initializes).

    Raises:
        RuntimeError: CUDA is already initialized here, so the pin would be ignored.
    """
    if gpu is None:
        return
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError(f"cannot pin GPU {gpu}: CUDA is already initialized in this process")
    (os.environ if env is None else env)[ENV] = gpu


def auto_workers(in_process: bool, device: str, gpus: list[str]) -> int | None:
    """The worker count of ``-n auto``: one per GPU when workers pin GPUs and there are any;
    None (xdist's own choice, the CPU count) otherwise."""
    if uses_gpus(in_process, device) and gpus:
        return len(gpus)
    return None


def share_cpu_threads(worker_index: int | None) -> None:
    """Give an xdist worker its share of the CPU's threads: K workers each using every core
    oversubscribe the CPU (2 workers x 2 threads on 2 cores ran slower than one process)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if worker_index is not None and workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
