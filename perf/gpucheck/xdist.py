"""The ``xdist`` part: ``-n <GPUs + 1>`` stops at start-up and ``-n 1`` pins its worker to the
first GPU."""

from __future__ import annotations

import json
import os
import textwrap

from .context import Context, PartResult, audit_command, run_audits, run_folder

PROBE = textwrap.dedent("""
    # Written by perf/gpu_check.py: each pytest-xdist worker reports the GPU it was pinned to.
    import json, os
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        w = getattr(config, "workerinput", None)
        if w is not None:
            path = os.path.join(os.environ["GPU_CHECK_PROBE_DIR"], w["workerid"] + ".json")
            with open(path, "w") as f:
                json.dump({"visible": os.environ.get("CUDA_VISIBLE_DEVICES")}, f)
""")


def part_xdist(ctx: Context) -> PartResult:
    """More workers than GPUs stops an audit at start-up; one worker is pinned to the first GPU
    (``audit_harness/devices.py``). The dry run fakes one GPU through CUDA_VISIBLE_DEVICES, as
    tests/test_devices.py does."""
    from audit_harness import devices

    if ctx.dry_run:
        env_gpus = {"CUDA_VISIBLE_DEVICES": "0"}
    else:
        env_gpus = {}
    gpus = devices.visible_gpus({**os.environ, **env_gpus}) if env_gpus else devices.visible_gpus()
    if not gpus:
        return PartResult("xdist", False, ["no GPU visible: nothing to pin"])
    probe_dir = ctx.workdir / "probe"
    (probe_dir / "reports").mkdir(parents=True, exist_ok=True)
    (probe_dir / "gpu_check_probe.py").write_text(PROBE)
    env = ctx.env(**env_gpus, GPU_CHECK_PROBE_DIR=str(probe_dir / "reports"))
    env["PYTHONPATH"] = os.pathsep.join([str(probe_dir), env["PYTHONPATH"]])
    common = ["audits/test_bbq.py", "-k", "Age", "--model", "tiny-random-gpt2", "--device", "auto"]
    common += ["--limit", "4", "--data-dir", str(ctx.data_dir), "--no-cache", "--bootstrap-resamples", "0"]
    common += ["-p", "gpu_check_probe"]
    too_many = len(gpus) + 1
    runs = {
        "refused": audit_command(
            ctx, *common, "-n", str(too_many), "--results-dir", str(ctx.workdir / "xdist-refused")
        ),
        "pinned": audit_command(ctx, *common, "-n", "1", "--results-dir", str(ctx.workdir / "xdist-pinned")),
    }
    done = run_audits(ctx, runs, env=env)
    rc_refused, log_refused = done["refused"]
    rc_pinned, log_pinned = done["pinned"]
    expected = f"-n {too_many} asks for more workers than the {len(gpus)} visible GPU(s)"
    refused_ok = rc_refused == 4 and expected in log_refused
    reports = {p.stem: json.loads(p.read_text()) for p in (probe_dir / "reports").glob("gw*.json")}
    device = None
    if rc_pinned in (0, 1):
        device = json.loads((run_folder(ctx.workdir / "xdist-pinned") / "results.json").read_text())["model"][
            "device"
        ]
    # The pinned worker sees its GPU alone, so its model is on "cuda" (device 0 of one).
    want_device = "cpu" if ctx.dry_run else "cuda"
    on_device = device is not None and device.split(":")[0] == want_device
    pinned_ok = rc_pinned in (0, 1) and reports == {"gw0": {"visible": gpus[0]}} and on_device
    message = next((ln.strip() for ln in log_refused.splitlines() if expected in ln), None)
    lines = [
        f"visible GPUs: {','.join(gpus)}" + (" (faked: dry run)" if ctx.dry_run else ""),
        f"-n {too_many}: exit {rc_refused} (want 4), message "
        + (repr(message[:160]) if message else f"missing (want {expected!r})"),
        f"-n 1: exit {rc_pinned}, worker saw CUDA_VISIBLE_DEVICES={reports.get('gw0', {}).get('visible')!r} "
        f"(want {gpus[0]!r}), model on {device} (want {want_device})",
    ]
    if not refused_ok:
        lines += log_refused.splitlines()[-8:]
    if not pinned_ok:
        lines += log_pinned.splitlines()[-8:]
    return PartResult(
        "xdist",
        refused_ok and pinned_ok,
        lines,
        {
            "gpus": gpus,
            "refused_rc": rc_refused,
            "pinned_rc": rc_pinned,
            "workers": reports,
            "device": device,
        },
    )
