"""The CI examples (examples/github-actions.yml, examples/gitlab-ci.yml) are valid YAML, call the
suite with options it has, archive JUnit XML and the reports, and gate the release on the audit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from audit_harness import cli, exit_codes

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = {"github": REPO / "examples" / "github-actions.yml", "gitlab": REPO / "examples" / "gitlab-ci.yml"}


def plugin_options() -> set[str]:
    from audit_harness.benchmarks import registry
    from audit_harness.cli import all_flags

    return all_flags(registry())


def commands(text: str, name: str) -> list[list[str]]:
    """The words after ``bias-audit NAME`` on each of its command lines in a CI file (line
    continuations joined, comments left out, a double-quoted word kept whole, the command ending
    at ``;``)."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = code.replace("\\\n", " ")
    return [
        re.findall(r'"[^"]*"|[^\s"]+', m.group(1).split(";")[0])
        for m in re.finditer(rf"bias-audit {name}\b(.*)", joined)
    ]


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_ci_example_runs_the_audit_archives_and_gates_the_release(kind):
    text = EXAMPLES[kind].read_text()
    doc = yaml.safe_load(text)
    runs = commands(text, "run")
    assert runs, "no `bias-audit run` line"
    known = plugin_options() | {"-n"}
    for words in runs:
        flags = [w for w in words if w.startswith("-") and not w.startswith("${{")]
        assert set(flags) <= known, set(flags) - known
        assert "--results-dir" in flags and "--model" in flags
    assert "--baseline baseline/results.json" in text  # the last release's results, when there are any
    compares = commands(text, "compare")
    assert compares and all(len([w for w in c if not w.startswith("-")]) == 2 for c in compares)
    cli.build_parser().parse_args(["compare", *compares[0][:2]])
    # The exit codes the file documents are the suite's.
    for code, meaning in (
        (exit_codes.OK, "every gate passed"),
        (exit_codes.GATE_FAILED, "a gate failed"),
        (exit_codes.RUN_ERROR, "a model or data error"),
        (exit_codes.USAGE_ERROR, "usage or input"),
        (exit_codes.NOTHING_SELECTED, "no audit"),
    ):
        assert f"{code} {meaning}" in text
    if kind == "github":
        audit, release = doc["jobs"]["audit"], doc["jobs"]["release"]
        assert release["needs"] == "audit"
        upload = next(
            s for s in audit["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
        )
        assert upload["if"] == "always()"
        paths = upload["with"]["path"]
        gate = next(s for s in audit["steps"] if s.get("name") == "Release gate")
        assert "exit 1" in gate["run"] and "3)" in gate["run"]
    else:
        job, release = doc["bias-audit"], doc["release"]
        assert release["needs"] == ["bias-audit"]
        assert job["artifacts"]["when"] == "always"
        assert job["artifacts"]["reports"]["junit"] == "audit-results/*/junit.xml"
        paths = "\n".join(job["artifacts"]["paths"])
        assert job["script"][-1] == "exit $code"
    for artefact in ("junit.xml", "report.html", "report.md", "results.json"):
        assert f"audit-results/*/{artefact}" in paths
