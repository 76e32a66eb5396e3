"""Issue 11 end to end on real BBQ rows with the tiny random model: data errors stop the run at
start-up (exit 4, file:line:field), mid-run failures and interruptions stay visible in
results.json and report.md, provenance is complete, modified data is named, and `bias-audit`
works from any directory."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from audit_harness import cli
from audit_harness.benchmarks.bbq import PROMPT
from helpers import bias_audit_score

REPO = Path(__file__).resolve().parents[1]


def bbq_copy(tmp_path: Path, data_dir: Path) -> Path:
    """A data dir whose bbq/ files link to the real ones (break one with ``replace_lines``)."""
    out = tmp_path / "data"
    for src in (data_dir / "bbq").rglob("*"):
        if src.is_file():
            dst = out / src.relative_to(data_dir)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
    return out


def replace_line(data: Path, relpath: str, line_no: int, edit) -> None:
    """Replace line ``line_no`` (1-based) of a linked file by ``edit(line)``, as a real copy."""
    path = data / relpath
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[line_no - 1] = edit(lines[line_no - 1])
    path.unlink()
    path.write_text("\n".join(lines), encoding="utf-8")


def audit(
    tmp_path: Path,
    data: Path,
    *extra: str,
    cwd: Path = REPO,
    plugin: str | None = None,
    target: tuple[str, ...] = ("audits/test_bbq.py",),
) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path / "results"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), plugin and str(tmp_path)])),
        HF_HUB_OFFLINE="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *target,
        "--model",
        "tiny-random-gpt2",
        "--data-dir",
        str(data),
        "--results-dir",
        str(results),
        "-p",
        "no:cacheprovider",
        *(("-p", plugin) if plugin else ()),
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    return proc, results


def results_of(results: Path) -> tuple[dict, str, Path]:
    (run_dir,) = list(results.iterdir())
    return (json.loads((run_dir / "results.json").read_text()), (run_dir / "report.md").read_text(), run_dir)


# --- 1. data errors are input errors --------------------------------------------------------------
def test_truncated_line_stops_the_run_at_start_up(tmp_path, data_dir):
    data = bbq_copy(tmp_path, data_dir)
    replace_line(data, "bbq/data/SES.jsonl", 7, lambda line: line[: len(line) // 2])
    proc, results = audit(tmp_path, data, "--limit", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert f"{data}/bbq/data/SES.jsonl:7: malformed JSON" in out and "truncated" in out
    assert "Traceback" not in out and "passed" not in out
    assert not results.exists()  # stopped before any gate ran: no partial record


def test_row_missing_a_field_names_file_line_and_field(tmp_path, data_dir):
    data = bbq_copy(tmp_path, data_dir)

    def drop_question(line):
        row = json.loads(line)
        del row["question"]
        return json.dumps(row)

    replace_line(data, "bbq/data/Age.jsonl", 3, drop_question)
    # Only Religion's gates are selected: Age is not validated, and the run goes on.
    proc, _ = audit(tmp_path, data, "--limit", "4", "-k", "Religion", "--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout[-2000:]
    proc, _ = audit(tmp_path, data, "--limit", "4", "-k", "Age and not Race", "--collect-only", "-q")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "Age.jsonl:3: missing field 'question'" in out, out[-2000:]


_FAILING_PLUGIN = """
from audit_harness.benchmarks.bbq import BBQ

_evaluate = BBQ.evaluate


def evaluate(self, model, items):
    if items and items[0].category == "Religion":
        raise RuntimeError("CUDA error: device-side assert triggered (simulated)")
    return _evaluate(self, model, items)


BBQ.evaluate = evaluate
"""


def test_a_mid_run_failure_is_an_error_verdict_and_nothing_vanishes(tmp_path, data_dir):
    (tmp_path / "failing_model.py").write_text(_FAILING_PLUGIN)
    proc, results = audit(
        tmp_path,
        data_dir,
        "--limit",
        "8",
        "--min-n",
        "1",
        "-k",
        "Religion or Sexual_orientation",
        plugin="failing_model",
    )
    # A model failure mid-run is not a gate failure: exit 3, and the terminal says so.
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "RUN ERROR: 3 gate(s) have no verdict" in proc.stdout and "not a gate failure" in proc.stdout
    res, report, _ = results_of(results)
    religion = res["benchmarks"]["bbq"]["Religion"]
    assert religion["status"] == "error" and "device-side assert" in religion["error"]
    assert res["benchmarks"]["bbq"]["Sexual_orientation"]["status"] == "ok"
    by_cat = {}
    for v in res["gates"]:
        by_cat.setdefault(v["category"], set()).add(v["status"])
    assert by_cat["Religion"] == {"error"} and "error" not in by_cat["Sexual_orientation"]
    assert len(res["gates"]) == 6 and res["gate_summary"]["error"] == 3
    assert "**ERROR**" in report and "device-side assert" in report
    assert "ERROR" in proc.stdout
    # JUnit: an ERROR testcase names its gate and says why, as a judged one names its gate.
    import xml.etree.ElementTree as ET

    (junit,) = list(results.glob("*/junit.xml"))
    cases = {
        c.get("name"): {p.get("name"): p.get("value") for p in c.iter("property")}
        for c in ET.parse(junit).iter("testcase")
    }
    errored = cases["test_bbq[Religion-diff_bias_ambig]"]
    assert errored["status"] == "error" and errored["metric"] == "diff_bias_ambig"
    assert errored["benchmark"] == "bbq" and errored["category"] == "Religion"
    assert "device-side assert triggered" in errored["reason"]
    assert cases["test_bbq[Sexual_orientation-diff_bias_ambig]"]["status"] != "error"


# --- 2. interrupted runs --------------------------------------------------------------------------
_INTERRUPT_PLUGIN = """
import pytest


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if "Sexual_orientation-diff_bias_ambig" in item.nodeid:
        raise KeyboardInterrupt  # what Ctrl-C raises
"""


def test_an_interrupted_run_is_marked_and_lists_what_did_not_run(tmp_path, data_dir):
    (tmp_path / "ctrl_c.py").write_text(_INTERRUPT_PLUGIN)
    proc, results = audit(
        tmp_path,
        data_dir,
        "--limit",
        "8",
        "--min-n",
        "1",
        "-k",
        "Religion or Sexual_orientation",
        plugin="ctrl_c",
    )
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]  # pytest's INTERRUPTED
    res, report, _ = results_of(results)
    assert res["run"]["status"] == "interrupted"
    not_run = [(v["category"], v["metric"]) for v in res["gates"] if v["status"] == "not run"]
    assert sorted(not_run) == [
        ("Sexual_orientation", "acc_disambig"),
        ("Sexual_orientation", "diff_bias_disambig"),
    ]
    assert len(res["gates"]) == 6
    assert "INTERRUPTED RUN" in report and report.count("**NOT RUN**") == 2
    assert "INTERRUPTED" in proc.stdout


# --- 3/4/5. min_n, provenance, data pinning --------------------------------------------------------
@pytest.fixture(scope="module")
def modified_run(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("modified")
    data = bbq_copy(tmp, data_dir)
    # A local "typo fix": still valid JSON, but no longer the published file.
    replace_line(data, "bbq/data/SES.jsonl", 1, lambda line: line.replace("  ", " ", 1) + " ")
    proc, results = audit(tmp, data, "--limit", "12", "-k", "SES and not Race")
    return proc, results, data, tmp


def test_default_min_n_makes_tiny_audits_insufficient(modified_run):
    """Below the default min_n no gate is judged: a must-pass gate is INSUFFICIENT, a detection
    gate (the shipped per-category gates) NOT DECIDED, and the run is never a pass."""
    proc, results, _, _ = modified_run
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    res, report, _ = results_of(results)
    for v in res["gates"]:
        assert v["status"] == ("not_decided" if v["mode"] == "ci_detect" else "insufficient"), v
    assert all(v["min_n"] == 30 and "more needed" in v["message"] for v in res["gates"])
    assert "NOT CERTIFIED" in report


def test_results_carry_the_full_provenance(modified_run):
    _, results, _, _ = modified_run
    res, report, run_dir = results_of(results)
    protocol = res["protocols"]["bbq"]
    assert protocol["prompt_template"] == PROMPT and protocol["delimiter"] == " "
    assert protocol["chat_template"] == "none" and protocol["answer_mode"] == "loglikelihood"
    assert protocol["protocol_version"] and "ans0" in protocol["choices"]
    run = res["run"]
    assert shlex.split(run["command_line"]) == ["pytest", *run["invocation"]]
    assert "'SES and not Race'" in run["command_line"]  # pastes as it ran
    commit = run["suite"]["git_commit"]
    assert commit == "not a git checkout" or len(commit) == 40
    assert run["duration_s"] > 0 and run["status"] == "partial"  # -k and --limit
    for key in ("prompt_template", "chat_template", "delimiter", commit, run["command_line"]):
        assert str(protocol.get(key, key)).split("\n")[0] in report
    records = [
        json.loads(x)
        for x in (run_dir / res["benchmarks"]["bbq"]["SES"]["records_path"]).read_text().splitlines()
    ]
    for r in records:
        prompt = PROMPT.format(context=r["context"], question=r["question"])
        assert r["prompt_sha256"] == hashlib.sha256(prompt.encode("utf-8")).hexdigest()
    ses = res["benchmarks"]["bbq"]["SES"]["metrics"]["bias_score_disambig"]
    assert ses["clusters"] is None or ses["clusters"] >= 1


def test_a_modified_data_file_is_named(modified_run):
    _, results, _, _ = modified_run
    res, report, _ = results_of(results)
    files = res["data_files"]
    assert files["bbq/data/SES.jsonl"]["status"].startswith("MODIFIED (sha256 ")
    assert files["bbq/supplemental/additional_metadata.csv"]["status"] == "published release"
    assert "MODIFIED (sha256" in report and "published release" in report


def test_require_published_data_turns_a_mismatch_into_exit_4(modified_run):
    _, _, data, tmp = modified_run
    proc, _ = audit(
        tmp / "strict", data, "--limit", "4", "-k", "SES and not Race", "--require-published-data"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "bbq/data/SES.jsonl: MODIFIED (sha256" in out and "not the published release" in out


# --- 6. bias-audit ---------------------------------------------------------------------------------
def test_run_works_from_any_directory_with_the_packaged_thresholds(tmp_path, data_dir):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "audit_harness.cli",
            "run",
            "-k",
            "test_bbq and Religion",
            "--model",
            "tiny-random-gpt2",
            "--data-dir",
            str(data_dir),
            "--limit",
            "4",
            "--results-dir",
            str(tmp_path / "results"),
            "-p",
            "no:cacheprovider",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # INSUFFICIENT at n=4
    res, _, _ = results_of(tmp_path / "results")
    assert Path(res["thresholds"]).resolve() == (REPO / "audit_harness" / "thresholds.yaml").resolve()
    assert {v["category"] for v in res["gates"]} == {"Religion"}


def test_a_k_that_selects_nothing_lists_benchmarks_and_categories(tmp_path, data_dir):
    proc, _ = audit(tmp_path, data_dir, "-k", "test_bbq and Agee", target=("audits",))
    assert proc.returncode == 5  # pytest's "no tests collected"
    assert "selects no audit gate" in proc.stdout
    assert "test_bbq: Age, Disability_status" in proc.stdout and "test_esbbq:" in proc.stdout
    assert (
        "VERDICT: NOTHING CHECKED: no gate was selected, so nothing was checked: never a pass (exit code 5)"
        in (proc.stdout)
    )


def test_a_hub_model_that_cannot_load_says_what_was_tried(tmp_path, data_dir):
    proc, results = audit(tmp_path, data_dir, "--limit", "4", "-k", "Religion")
    proc2 = subprocess.run(
        [a if a != "tiny-random-gpt2" else "no-org/no-such-model" for a in proc.args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1"),
    )
    out = proc2.stdout + proc2.stderr
    assert proc2.returncode == 4, out[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("bias audit: cannot load model"))
    assert "not a zoo name" in line and "no local folder" in line and "offline mode ON" in line
    assert "_pytest.outcomes.Exit" not in out and "Traceback" not in out


def test_run_help_shows_the_audit_options_first(capsys):
    assert cli.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.index("--model") < out.index("--data-dir") < out.index("pytest options:")
    assert out.index("--min-n") < out.index("pytest options:") < out.index("--maxfail")


def test_backend_help_names_every_registered_backend(monkeypatch):
    # A backend added to the registry is offered by --help without a second, hand-written list.
    from audit_harness import backends

    flag = next(opt for opt in backends.backend_rows() if opt.flag == "--backend")
    assert flag.help == backends.backend_help() and flag.choices == tuple(backends.REGISTRY)

    class ToySpec(backends.BackendSpec):
        name, summary = "toy", "every option scores -1.0"

    monkeypatch.setitem(backends.REGISTRY, "toy", ToySpec)
    help_text = backends.backend_help()
    assert "toy: every option scores -1.0" in help_text
    for name, spec in backends.REGISTRY.items():
        assert f"{name}: {spec.summary}" in help_text


def test_run_help_says_why_it_cannot_list_the_options(tmp_path, monkeypatch, capsys):
    (tmp_path / "thresholds.yaml").write_text("bbq:\n  defaults: {}\nbbq:\n  defaults: {}\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--help"]) == 4
    assert "duplicated key 'bbq' at lines 1 and 3" in capsys.readouterr().err


def test_no_sub_command_prints_the_usage(capsys):
    assert cli.main([]) == 4  # a usage error, as an audit's
    err = capsys.readouterr().err
    assert "usage: bias-audit" in err and "score" in err and "run" in err


def test_score_checks_nothing_when_every_row_is_held_out_and_lists_them(tmp_path, data_dir):
    # The 16 Gender_identity rows without target_loc in the metadata.
    from audit_harness.benchmarks import registry

    excluded = registry()["bbq"].load_category(data_dir, "Gender_identity").excluded
    (ids,) = excluded.values()
    rows = [{"id": i, "pred": "A"} for i in ids[:3]]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc, _, run_dir = bias_audit_score(
        tmp_path, "bbq", "--predictions", path, "--prediction-field", "pred", "--data-dir", data_dir
    )
    out = proc.stdout + proc.stderr
    # Nothing could be scored: never a pass, and the rows are named with their lines.
    assert proc.returncode == 5, out[-3000:]
    assert "VERDICT: NOTHING CHECKED" in out
    for line_no, r in enumerate(rows, start=1):
        assert f"{r['id']} (line {line_no})" in out


def test_score_lists_esbbq_rows_held_out_of_the_disambiguated_score(tmp_path, data_dir):
    from audit_harness.benchmarks import registry

    bench = registry()["esbbq"]
    data = bench.load_category(data_dir, "PhysicalAppearance")
    (held,) = data.excluded.values()
    rows = [{"id": it.item_id, "pred": "ABC"[it.gold]} for it in data.items[:30]]
    rows += [{"id": i, "pred": "A"} for i in held if i not in {r["id"] for r in rows}]
    path = tmp_path / "es.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc, _, run_dir = bias_audit_score(
        tmp_path,
        "esbbq",
        "--predictions",
        path,
        "--prediction-field",
        "pred",
        "--data-dir",
        data_dir,
        "--allow-partial",
        "--",
        "-k",
        "PhysicalAppearance",
    )
    assert proc.returncode in (0, 1), (proc.stdout + proc.stderr)[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    excluded = results["benchmarks"]["esbbq"]["PhysicalAppearance"]["excluded"]
    ((reason, listed),) = [(k, v) for k, v in excluded.items() if "disambiguated bias score" in k]
    assert set(held) <= set(listed)
    assert "left out of the disambiguated bias score" in (run_dir / "report.md").read_text()
