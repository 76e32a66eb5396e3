"""Issue 49, item 3: the run's identity (options, engine version, gates file) is built once
(``AuditSession.identity``) and is what the start-up ``--strict-baseline`` check, a regression
gate's like-for-like notes and results.json all read, so they cannot describe the run
differently: a changed thresholds file is seen by all three, in the same words."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from test_verdict_integrity import PASSING, audit, gates_file, only_run, out, results_of

from audit_harness.benchmarks import registry
from audit_harness.errors import ConfigError
from audit_harness.option_values import AuditOptions, OutputOptions
from audit_harness.run.startup import check_outputs
from audit_harness.session import AuditSession

#: The sentence every reader of the identity gives for another gates file.
THRESHOLDS_DIFFER = (
    "the thresholds files differ (sha256), so gates may have changed with them (old: custom, new: custom)"
)


def _session(tmp: Path, data_dir: Path, thresholds: Path) -> AuditSession:
    options = AuditOptions(
        data_dir=str(data_dir),
        thresholds=str(thresholds),
        strict_baseline=True,
        outputs=OutputOptions(results_dir=str(tmp / "results"), cache=False),
    )
    return AuditSession(options, registry(), tmp / "results" / "run")


def test_the_identity_is_built_once_and_the_startup_check_reads_it(tmp_path, data_dir):
    gates = gates_file(tmp_path, PASSING)
    session = _session(tmp_path, data_dir, gates)
    identity = session.identity
    assert session.identity is identity  # one object for the whole run
    assert identity.thresholds_sha256 == hashlib.sha256(gates.read_bytes()).hexdigest()
    assert identity.thresholds_origin == "custom"
    assert identity.options["data_dir"] == str(data_dir)  # resolved, as results.json records it
    # What it describes is fixed when the run starts: a gates file edited meanwhile changes
    # neither what the run is compared as nor what its results will say.
    gates.write_text(PASSING + "# edited\n")
    assert session.identity.thresholds_sha256 == identity.thresholds_sha256
    # The start-up check compares the baseline with that identity: the same document passes,
    # one with another gates file is refused before anything is scored, naming it.
    same = {**identity.document(), "gates": [{"status": "pass"}]}  # a complete run that passed
    check_outputs(session, same)
    other = json.loads(json.dumps(same))
    other["run"]["thresholds_sha256"] = "0" * 64
    with pytest.raises(ConfigError) as refused:
        check_outputs(_session(tmp_path / "b", data_dir, gates_file(tmp_path, PASSING, "b.yaml")), other)
    assert THRESHOLDS_DIFFER in str(refused.value)


def test_a_changed_thresholds_file_is_seen_by_the_regression_gates_and_the_results(tmp_path, data_dir):
    """End to end: a baseline run, then runs with the same gates in another file (a comment
    added). results.json's run, its baseline notes and every regression gate's own notes (made
    while the run went on) name the same difference; ``--strict-baseline`` refuses it at
    start-up with the same sentence (exit 4, no run folder)."""
    gates = ("--thresholds", str(gates_file(tmp_path, PASSING)))
    base, results = audit(tmp_path / "base", data_dir, *gates, keyword="Religion", cache=tmp_path / "cache")
    assert base.returncode == 0, out(base)[-3000:]
    changed = gates_file(tmp_path, PASSING + "# the same gates, another file\n", "changed.yaml")
    common = ("--thresholds", str(changed), "--baseline", str(only_run(results)))
    proc, new_results = audit(
        tmp_path / "new", data_dir, *common, keyword="Religion", cache=tmp_path / "cache"
    )
    assert proc.returncode in (0, 1), out(proc)[-3000:]
    doc = results_of(new_results)
    assert doc["run"]["thresholds_sha256"] == hashlib.sha256(changed.read_bytes()).hexdigest()
    assert doc["run"]["thresholds_origin"] == "custom"
    assert THRESHOLDS_DIFFER in doc["baseline"]["not_like_for_like"]
    regression = [v for v in doc["gates"] if v["kind"] == "regression"]
    assert regression and all(THRESHOLDS_DIFFER in v["not_like_for_like"] for v in regression)
    strict, strict_results = audit(
        tmp_path / "strict",
        data_dir,
        *common,
        "--strict-baseline",
        keyword="Religion",
        cache=tmp_path / "cache",
    )
    assert strict.returncode == 4, out(strict)[-3000:]
    assert f"--strict-baseline: the baseline run is not like for like: {THRESHOLDS_DIFFER}" in out(strict)
    assert not strict_results.exists()
