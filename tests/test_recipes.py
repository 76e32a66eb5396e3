"""The recipes of docs/development.md, followed literally: "A benchmark of a new shape" (the YesNo
example, four files) and "Adding a backend" (the shortest-answer toy, two files) are written into
a copy of the project from the guide's own code blocks, each block to the file its first line
names (``# <path>`` creates it, ``# appended to <path>`` appends to it), and the copy is audited
in a subprocess. A recipe that no longer works, or that needs a file it does not name, fails
here."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "development.md"
#: What a checkout holds that an audit run reads (``audits`` and ``thresholds.yaml`` are links).
PROJECT = ("audit_harness", "bias_metrics", "conftest.py", "pytest.ini", "audits", "thresholds.yaml")
#: A code block that writes a file: its first line names the file.
BLOCK = re.compile(r"^```(?:python|yaml)\n# (appended to )?(\S+)\n(.*?)^```$", re.M | re.S)
#: The toy data: per category (rows, rows whose stereotyped answer is "no", the shorter one).
ROWS = {"Age": (200, 100), "Gender": (200, 150)}


def section(heading: str) -> str:
    """The guide's section under ``heading`` (e.g. ``"## Adding a backend"``), up to the next
    heading of its level or above (a ``#`` line inside a code block is no heading)."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines(keepends=True)
    start = lines.index(heading + "\n")
    level, fenced = len(heading.split(" ")[0]), False
    for end in range(start + 1, len(lines)):
        fenced ^= lines[end].startswith("```")
        hashes = len(lines[end]) - len(lines[end].lstrip("#"))
        if not fenced and 1 <= hashes <= level and lines[end][hashes] == " ":
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


def recipe(heading: str) -> list[tuple[str, bool, str]]:
    """``(path, appended, text)`` of each file the guide's section ``heading`` writes, in order."""
    return [(m.group(2), bool(m.group(1)), m.group(3)) for m in BLOCK.finditer(section(heading))]


BENCHMARK_RECIPE = recipe("### A benchmark of a new shape")
BACKEND_RECIPE = recipe("## Adding a backend")


def files_of(root: Path) -> dict[str, str]:
    """``{path relative to root: sha256}`` of every file under ``root`` (links not followed)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def follow(root: Path, steps: list[tuple[str, bool, str]]) -> None:
    for path, appended, text in steps:
        target = root / path
        if appended:
            assert target.is_file(), f"the recipe appends to {path}, which the project lacks"
            with target.open("a", encoding="utf-8") as f:
                # after a blank line; two before a Python class, as ruff format writes it
                f.write("\n\n" + text if path.endswith(".py") else "\n" + text)
        else:
            assert not target.exists(), f"the recipe creates {path}, which exists already"
            target.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, str]]:
    """A copy of the project with both recipes followed: (its root, its files before, after)."""
    root = tmp_path_factory.mktemp("recipes") / "project"
    root.mkdir()
    for name in PROJECT:
        source = REPO / name
        if source.is_symlink():
            (root / name).symlink_to(os.readlink(source))
        elif source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    before = files_of(root)
    follow(root, BENCHMARK_RECIPE)
    follow(root, BACKEND_RECIPE)
    return root, before, files_of(root)


def audit(root: Path, data: Path, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", *args, "--backend", "shortest", "--data-dir", str(data)]
    cmd += ["--results-dir", str(results), "--no-cache", "-p", "no:cacheprovider"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUDIT_")}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval at 95% (z = the normal's 0.975 quantile), written out."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_each_recipe_touches_only_the_files_it_names(project):
    root, before, after = project
    touched = {path for path in after if before.get(path) != after[path]}
    benchmark = [path for path, _, _ in BENCHMARK_RECIPE]
    backend = [path for path, _, _ in BACKEND_RECIPE]
    # The counts the guide promises: a new shape in at most 4 files, a backend in at most 2.
    assert len(set(benchmark)) == len(benchmark) <= 4 and len(set(backend)) == len(backend) <= 2
    assert touched == set(benchmark) | set(backend)
    assert set(after) - set(before) == {
        "audit_harness/benchmarks/yesno.py",
        "audit_harness/audits/test_yesno.py",
        "audit_harness/models/shortest.py",
    }


def test_the_recipes_code_passes_the_linters(project):
    # What a newcomer pastes from the guide passes make lint's ruff steps as it stands.
    root, _, _ = project
    touched = [path for path, _, _ in BENCHMARK_RECIPE + BACKEND_RECIPE if path.endswith(".py")]
    config = ["--config", str(REPO / "pyproject.toml")]
    for step in (["check", *config], ["format", "--check", *config]):
        proc = subprocess.run(
            [sys.executable, "-m", "ruff", *step, *touched], cwd=root, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_new_benchmark_runs_on_the_new_backend(project, tmp_path):
    root, _, _ = project
    data = tmp_path / "data"
    (data / "yesno").mkdir(parents=True)
    rows, n = [], 0
    for category, (count, shorter) in ROWS.items():
        for i in range(count):
            n += 1
            stereotyped = "no" if i < shorter else "yes"
            rows.append(
                {"id": n, "category": category, "question": f"Question {n}?", "stereotyped": stereotyped}
            )
    (data / "yesno" / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = audit(root, data, tmp_path / "results", "audits/test_yesno.py")
    out = proc.stdout + proc.stderr
    # "no" is shorter than "yes", so the toy answers "no" to every question: the share of
    # stereotyped answers is the share of rows whose stereotyped answer is "no". Age: 100 of
    # 200, inside 0.5 +- 0.1 with its interval: PASS; Gender: 150 of 200, the whole interval
    # above 0.6: FAIL, so the run blocks (exit 1).
    assert proc.returncode == 1, out[-3000:]
    (run,) = (tmp_path / "results").iterdir()
    assert re.fullmatch(r"\d{8}T\d{6}Z-shortest-\d+", run.name), run.name
    results = json.loads((run / "results.json").read_text())
    assert results["model"]["name"] == "shortest" and results["options"]["backend"] == "shortest"
    assert "yesno" in results["regulatory_mapping"]["benchmarks"]
    verdicts = {g["category"]: g["status"] for g in results["gates"] if g["benchmark"] == "yesno"}
    assert verdicts == {"Age": "pass", "Gender": "fail"}
    for category, (count, shorter) in ROWS.items():
        metric = results["benchmarks"]["yesno"][category]["metrics"]["stereotype_rate"]
        assert (metric["value"], metric["n"]) == (shorter / count, count)
        assert metric["counts"] == {"stereotyped": shorter, "n": count}
        # Two codings of one formula in float64 (scipy and the closed form) agree to about 1e-15;
        # 1e-9 is that contract with room, far below any gate's resolution.
        assert metric["ci"] == pytest.approx(wilson(shorter, count), abs=1e-9)
    records = (run / "records" / "yesno" / "Age.jsonl").read_text().splitlines()
    assert len(records) == 200 and {json.loads(r)["answer"] for r in records} == {"no"}


def test_a_benchmark_the_new_backend_cannot_serve_is_refused_at_start_up(project, tmp_path, data_dir):
    root, _, _ = project
    data = tmp_path / "data"
    data.mkdir()
    (data / "crows_pairs").symlink_to(data_dir / "crows_pairs")
    proc = audit(root, data, tmp_path / "results", "audits/test_crows_pairs.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "--backend shortest cannot run crows_pairs: crows_pairs needs token_logprobs" in out
    assert "yesno" in out.split("it can run ", 1)[1]  # the new benchmark is one it can run
    assert not (tmp_path / "results").exists()  # refused before any run folder was made
