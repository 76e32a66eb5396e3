"""What an operator writes in ``--audit-meta`` reaches no rendered output live: the model card's
Markdown body (as python-markdown, like the Hub, renders it), report.md and report.html show a
script, an event handler, a javascript: link, a remote image, an iframe and a forged table cell
as text. A real oracle run on BBQ rows."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest
from huggingface_hub import ModelCard

from audit_harness import cli
from helpers import bias_audit_score

HOSTILE = {
    "system_name": "<script>alert(1)</script>",
    "system_version": "<img src=x onerror=alert(1)>",
    "intended_use": "[click me](javascript:alert(1))",
    "responsible_person": "![x](http://evil.example/x.png)",
    "organisation": "<iframe src=http://evil.example/></iframe>",
    "notes": "</td><td>PASS</td>",
}
#: What the escaped Markdown may render to: text, tables, lists and emphasis; no link, image,
#: script or frame.
TEXT_TAGS = {"h1", "h2", "h3", "p", "strong", "em", "code", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "hr", "blockquote", "br"}  # fmt: skip


class Elements(HTMLParser):
    """The elements of a page, and each table row's cell count."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[int] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th") and self.rows:
            self.rows[-1] += 1


def elements(page: str) -> Elements:
    parser = Elements()
    parser.feed(page)
    return parser


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, data_dir) -> Path:
    tmp = tmp_path_factory.mktemp("hostile")
    meta = tmp / "audit-meta.yaml"
    meta.write_text(
        "".join(f"{k}: '{v}'\n" for k, v in HOSTILE.items()) + "training_data_cutoff: 2024-06-30\n"
    )
    proc, doc, run_dir = bias_audit_score(
        tmp,
        "bbq",
        "--model-kind",
        "stereotyped",
        "--data-dir",
        data_dir,
        "--",
        "-k",
        "Religion",
        "--audit-meta",
        meta,
        command="oracle",
    )
    assert run_dir is not None and proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert doc["audit_meta"]["notes"] == HOSTILE["notes"]  # recorded as given
    return run_dir


def _inert_markdown(text: str) -> Elements:
    page = markdown.markdown(text, extensions=["tables"])
    found = elements(page)
    assert {t for t, _ in found.tags} <= TEXT_TAGS, page
    # Raw HTML never passes through; Markdown link and image syntax shows as its text (no <a>,
    # no <img> above).
    assert not [v for v in HOSTILE.values() if "<" in v and v in page]
    return found


def test_the_model_cards_body_shows_the_metadata_as_text(hostile_run, tmp_path):
    card = tmp_path / "README.md"
    assert cli.main(["model-card", str(hostile_run), "--output", str(card)]) == 0
    body = ModelCard.load(card).text
    found = _inert_markdown(body)
    page = markdown.markdown(body, extensions=["tables"])
    # Each value reads as the operator wrote it, in its own row of the two-column table.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "[click me](javascript&#58;alert(1))" in page  # an entity colon: reads as ":"
    assert "&lt;/td&gt;&lt;td&gt;PASS&lt;/td&gt;" in page
    assert set(found.rows) <= {2, 4, 7}  # audited system; data files; the benchmark table


def test_report_md_and_html_stay_escaped(hostile_run):
    _inert_markdown((hostile_run / "report.md").read_text(encoding="utf-8"))
    page = (hostile_run / "report.html").read_text(encoding="utf-8")
    assert not [v for v in HOSTILE.values() if "<" in v and v in page]
    assert "&lt;/td&gt;&lt;td&gt;PASS&lt;/td&gt;" in page  # shown, as text
    tags = elements(page).tags
    # The report's own charts are data: images; nothing else loads or runs.
    assert not [t for t, a in tags if t == "iframe" or "onerror" in a]
    assert not [a for t, a in tags if t == "img" and not (a.get("src") or "").startswith("data:image/png")]
    assert not [a for t, a in elements(page).tags if t == "a" and "javascript" in (a.get("href") or "")]
