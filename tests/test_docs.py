"""Every documentation page the code cites exists in the repository, and every section number it
cites (``docs/metrics.md §1.6``) is a heading of that page: a docstring never points outside the
repository or at a section that moved."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = [
    p
    for d in ("audit_harness", "bias_metrics", "tests", "perf", "tools")
    for p in (REPO / d).rglob("*")
    if p.suffix in (".py", ".yaml") and p.is_file()
]
CITATION = re.compile(r"docs/([\w-]+\.md)(?:\s+§\s*([0-9]+(?:\.[0-9]+)?))?")


def _sections(page: Path) -> set[str]:
    """Section numbers of a page: ``## 1. Definitions`` -> ``1``, ``### 1.6 WinoQueer`` -> ``1.6``."""
    return {m[1] for m in re.finditer(r"^#{2,4}\s+([0-9]+(?:\.[0-9]+)*)\.?\s", page.read_text(), re.M)}


def test_cited_pages_and_sections_exist():
    cited = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for m in CITATION.finditer(text):
            cited.append((path.relative_to(REPO), m[1], m[2]))
    assert len(cited) > 50, "the code cites the metric definitions throughout"
    problems = []
    for where, page, section in cited:
        target = REPO / "docs" / page
        if not target.is_file():
            problems.append(f"{where}: docs/{page} does not exist")
        elif section and section not in _sections(target):
            problems.append(f"{where}: docs/{page} has no section {section}")
    assert not problems, "\n".join(problems)


def test_no_citation_of_a_metrics_file_outside_docs():
    bare = re.compile(r"(?<![\w/])metrics\.md")
    stray = [
        f"{p.relative_to(REPO)}:{i}"
        for p in SOURCES
        if p != Path(__file__).resolve()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if bare.search(line)
    ]
    assert not stray, stray


def test_the_strict_docs_build_fails_on_a_broken_anchor(tmp_path):
    # `make docs` builds with mkdocs --strict and the project's own `validation:` settings: a link
    # to a heading that does not exist (a renamed section) must fail that build, not pass with an
    # INFO line. A two-page site with the project's settings and one broken anchor shows it.
    mkdocs = pytest.importorskip("mkdocs")
    del mkdocs
    yaml = pytest.importorskip("yaml")
    settings = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the metric](metrics.md#no-such-heading).\n")
    (docs / "metrics.md").write_text("# Metrics\n\n## 1.9 MBBQ\n")
    site = {"site_name": "t", "docs_dir": "docs", "validation": settings["validation"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(site))

    def build() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    broken = build()
    assert broken.returncode != 0 and "no-such-heading" in broken.stderr, broken.stderr
    (docs / "index.md").write_text("# Home\n\nSee [the metric](metrics.md#19-mbbq).\n")
    fixed = build()
    assert fixed.returncode == 0, fixed.stderr
