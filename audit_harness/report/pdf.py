"""report.pdf: the HTML report printed to PDF by headless Chromium (``bias-audit report RUN_DIR
--pdf``).

Chromium, not a Python HTML-to-PDF library: the suite's own tests already need it to check
report.html, it renders the inlined PNG charts and the report's ``@media print`` rules exactly
as a reviewer's browser prints them, and it adds no Python dependency. The page printed is the
HTML report rendered with every ``<details>`` open, written to a temporary folder for the time
of printing.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import ConfigError

#: Executable names tried in order on PATH (Debian's package, Ubuntu's snap wrapper, Google's).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Headless printing without the sandbox (CI runs as root), the GPU, or any network start-up.
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-pdf-header-footer",
)


def find_chromium() -> str:
    """The Chromium executable.

    Raises:
        ConfigError: none on PATH, naming what to install.
    """
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ConfigError(
        "--pdf prints report.html with headless Chromium, which is not installed: install it "
        "(Debian/Ubuntu: apt-get install chromium) or put one of "
        f"{', '.join(CHROMIUM_NAMES)} on PATH"
    )


def print_pdf(html: str, pdf: Path, timeout: float = 180.0) -> Path:
    """Print the HTML document ``html`` to ``pdf`` with headless Chromium; returns ``pdf``.

    Raises:
        ConfigError: Chromium is missing (``find_chromium``), fails, times out or writes no PDF;
            the message carries the end of its output.
    """
    exe = find_chromium()
    pdf = Path(pdf).resolve()
    pdf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bias-audit-pdf-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(html, encoding="utf-8")
        out = Path(tmp) / "report.pdf"
        cmd = [
            exe,
            *_FLAGS,
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--print-to-pdf={out}",
            page.as_uri(),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"--pdf: {exe} did not finish printing within {timeout:g} s") from None
        if proc.returncode != 0 or not out.is_file() or not out.read_bytes().startswith(b"%PDF"):
            tail = " ".join((proc.stderr or proc.stdout or "").split())[-500:]
            raise ConfigError(f"--pdf: {exe} wrote no PDF (exit {proc.returncode}): {tail}")
        shutil.move(str(out), pdf)
    return pdf
