"""Every documentation page the code cites exists in the repository, and every section number it
cites (``docs/metrics.md §1.6``) is a heading of that page: a docstring never points outside the
repository or at a section that moved."""

from __future__ import annotations

import re
from pathlib import Path

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
