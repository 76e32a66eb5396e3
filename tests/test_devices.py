"""GPU pinning of pytest-xdist workers (audit_harness/devices.py), with the GPUs faked through
CUDA_VISIBLE_DEVICES and a device count: this machine has no GPU. The real multi-GPU run is
for a machine that has them (see docs/running.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from audit_harness import devices
from audit_harness.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0,1,3", ["0", "1", "3"]),
        ("", []),
        ("-1", []),
        ("2,-1,3", ["2"]),
        ("GPU-5d1c2b7e, GPU-aa01", ["GPU-5d1c2b7e", "GPU-aa01"]),
    ],
)
def test_visible_gpus_from_the_environment(value, expected):
    assert devices.visible_gpus({"CUDA_VISIBLE_DEVICES": value}, count=lambda: 8) == expected


def test_visible_gpus_from_the_device_count_when_unset(monkeypatch):
    assert devices.visible_gpus({}, count=lambda: 4) == ["0", "1", "2", "3"]
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.visible_gpus() == ["0", "1"]


def test_each_worker_gets_its_own_gpu_and_more_workers_than_gpus_is_an_error():
    assert devices.assign(2, ["4", "6", "7"]) == ["4", "6"]
    assert devices.assign(2, []) == [None, None]  # a CPU machine: nothing to pin
    with pytest.raises(ConfigError, match=r"-n 3 asks for more workers than the 2 visible GPU\(s\) \(0,1\)"):
        devices.assign(3, ["0", "1"])
    with pytest.raises(ConfigError, match="--device cuda with -n: no GPU is visible"):
        devices.assign(2, [], device="cuda")
    assert devices.assign(3, ["0", "1"], share=True) == ["0", "1", "0"]  # not an audit: in turn


def test_auto_is_one_worker_per_gpu_for_the_in_process_backend_only():
    from audit_harness.backends import in_process

    assert devices.auto_workers(in_process("hf"), "auto", ["0", "1", "2"]) == 3
    assert devices.auto_workers(in_process("hf"), "auto", []) is None  # xdist's CPU count
    assert devices.auto_workers(in_process("hf"), "cpu", ["0", "1"]) is None
    assert devices.auto_workers(in_process("openai"), "auto", ["0", "1"]) is None  # workers share the server
    assert not devices.uses_gpus(in_process("hf"), "cuda:1")


def test_pin_sets_the_variable_and_refuses_after_cuda_started(monkeypatch):
    env: dict = {"CUDA_VISIBLE_DEVICES": "0,1"}
    devices.pin("1", env)
    assert env == {"CUDA_VISIBLE_DEVICES": "1"}
    devices.pin(None, env)
    assert env == {"CUDA_VISIBLE_DEVICES": "1"}
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="already initialized"):
        devices.pin("0", env)


def test_worker_number():
    assert devices.worker_number("gw11") == 11
    with pytest.raises(ValueError):
        devices.worker_number("master")


def _run_workers(tmp_path: Path, visible: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """pytest -n ... on a throw-away test folder whose workers report the CUDA_VISIBLE_DEVICES
    they see once the plugin configured them."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(f"""
        import json, os, pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            w = getattr(config, "workerinput", None)
            if w is not None:
                path = os.path.join({str(tmp_path)!r}, w["workerid"] + ".json")
                with open(path, "w") as f:
                    json.dump({{"visible": os.environ.get("CUDA_VISIBLE_DEVICES")}}, f)
    """)
    )
    (tmp_path / "test_nothing.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(6)))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-p",
            "audit_harness.pytest_plugin",
            "--rootdir",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    seen = {p.stem: json.loads(p.read_text())["visible"] for p in tmp_path.glob("gw*.json")}
    return proc, seen


def test_xdist_workers_pin_one_gpu_each(tmp_path):
    proc, seen = _run_workers(tmp_path, "3,5", "-n", "2")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert seen == {"gw0": "3", "gw1": "5"}


def test_n_auto_starts_one_worker_per_gpu(tmp_path):
    proc, seen = _run_workers(tmp_path, "6", "-n", "auto")  # 2 CPUs here, 1 "GPU"
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert seen == {"gw0": "6"}


def test_more_workers_than_gpus_stops_an_audit(tmp_path, data_dir):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "audits/test_bbq.py",
            "-n",
            "3",
            "--data-dir",
            str(data_dir),
            "--results-dir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 4
    assert "-n 3 asks for more workers than the 2 visible GPU(s)" in proc.stdout + proc.stderr
    # The suite's own tests (tiny models) share the GPUs in turn instead.
    proc, seen = _run_workers(tmp_path / "own", "0,1", "-n", "3")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(seen.values()) == ["0", "0", "1"]


def test_server_backend_workers_share_the_server_and_pin_nothing(tmp_path):
    proc, seen = _run_workers(
        tmp_path, "0", "-n", "2", "--backend", "openai", "--base-url", "http://127.0.0.1:1/v1"
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert seen == {"gw0": "0", "gw1": "0"}
