"""The type checker's ratchet: mypy's error count and the escapes from typing may only go down.

``make lint`` runs it after ``tools/check_architecture.py``. It runs mypy with the project's
configuration (``[tool.mypy]`` in ``pyproject.toml``: strict on ``bias_metrics``, ``gates/``,
``evaluation/`` and the seams a benchmark or backend author implements) and counts, in
``audit_harness`` and ``bias_metrics``:

- mypy's errors, in the strictly held modules and everywhere else;
- ``Any`` as a name in code (annotations, casts), and ``dict[str, Any]`` among them;
- ``# type: ignore`` comments. mypy reports an ignore that silences nothing
  (``warn_unused_ignores``) and one that names no error code (``ignore-without-code``), so each
  counted ignore is checked; the count keeps new ones from creeping in.

Run ``python tools/check_types.py`` to see every count (``-v`` lists mypy's errors); it exits 1
when a count is over its ceiling, naming the count. Lower a ceiling when a change lowers a count.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("audit_harness", "bias_metrics")
#: The modules held strictly (pyproject.toml's mypy override), as path prefixes.
STRICT = (
    "bias_metrics/",
    "audit_harness/gates/",
    "audit_harness/evaluation/",
    "audit_harness/benchmarks/base.py",
    "audit_harness/models/base.py",
    "audit_harness/engine/executor.py",
    "audit_harness/session.py",
)
#: Each count's ceiling. Counts above it fail ``make lint``.
CEILINGS = {
    "mypy errors in strictly held modules": 0,
    "mypy errors elsewhere": 196,
    "Any in code": 163,
    "dict[str, Any] in code": 41,
    "type: ignore comments": 35,
}
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(:\d+)?: error: ")
_IGNORE = re.compile(r"#\s*type:\s*ignore")


def mypy_errors() -> list[str]:
    """mypy's error lines (``path:line: error: ...``) for the configured files."""
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-pretty", "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode not in (0, 1):  # 2: mypy itself failed (a bad config, a crash)
        raise SystemExit(f"mypy failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
    return [line for line in run.stdout.splitlines() if _ERROR.match(line)]


def typing_escapes() -> dict[str, list[str]]:
    """``path:line`` of every ``Any`` name, ``dict[str, Any]`` and ``# type: ignore`` in code."""
    found: dict[str, list[str]] = {
        "Any in code": [],
        "dict[str, Any] in code": [],
        "type: ignore comments": [],
    }
    from check_architecture import sources  # this folder is the script's first import path

    for rel, text in sources(PACKAGES):
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            place = f"{rel}:{tok.start[0]}"
            if tok.type == tokenize.NAME and tok.string == "Any":
                found["Any in code"].append(place)
            elif tok.type == tokenize.COMMENT and _IGNORE.search(tok.string):
                found["type: ignore comments"].append(place)
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            found["dict[str, Any] in code"] += [f"{rel}:{number}"] * len(
                re.findall(r"dict\[str,\s*Any\]", code)
            )
    return found


def counts() -> dict[str, list[str]]:
    """Every count of :data:`CEILINGS`, with the places behind it."""
    errors = mypy_errors()
    strict = [e for e in errors if _ERROR.match(e)["path"].startswith(STRICT)]
    return {
        "mypy errors in strictly held modules": strict,
        "mypy errors elsewhere": [e for e in errors if e not in strict],
        **typing_escapes(),
    }


def main(argv: list[str]) -> int:
    from check_architecture import ratchet  # this folder is the script's first import path

    return ratchet(counts(), CEILINGS, "-v" in argv, "type ratchet", lambda name: name.startswith("mypy"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
