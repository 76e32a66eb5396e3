"""The architecture's ratchet: counts that may only go down, checked by ``make lint``.

What it counts, in ``audit_harness`` and ``bias_metrics`` (docstrings count as lines):

- functions longer than 60 lines, and longer than 100 (none allowed); the same apart for the
  measuring and developer scripts in ``perf/`` and ``tools/``;
- ``hasattr``/``getattr`` probes of a backend outside ``audit_harness/models/``: the engine and
  the run call the methods ``models.base.Backend`` declares instead of asking whether they exist;
- branches on a backend's or a mode's name (``backend ==``, ``options.plan``) outside
  ``models/`` and the backend registry (``backends.py``);
- the lines of ``session.py``;
- the modules of ``audit_harness`` that no import-linter layers contract places (a new module
  must say where it sits, or nothing stops it importing upwards);
- ruff's complexity findings (C901, too complex; PLR0913, too many arguments), whose ceilings
  are the counts the last clean-up left.

Run ``python tools/check_architecture.py`` to see every count and the places behind it; it exits
1 when a count is over its ceiling, naming the count. Lower a ceiling when a change lowers a
count, so that it cannot creep back.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("audit_harness", "bias_metrics")
#: The scripts beside the packages, held to the same function lengths under their own ceiling.
SCRIPTS = ("perf", "tools")
#: Each count's ceiling. Counts above it fail ``make lint``.
CEILINGS = {
    "functions over 100 lines": 0,
    "functions over 60 lines": 6,
    "perf/ and tools/ functions over 100 lines": 0,
    "perf/ and tools/ functions over 60 lines": 10,
    "backend probes outside models/": 0,
    "backend or mode branches outside models/ and backends.py": 0,
    "session.py lines": 300,
    "audit_harness modules in no layers contract": 0,
    "ruff C901 (too complex)": 12,
    "ruff PLR0913 (too many arguments)": 40,
}
# The object of a probe that is a backend: `m`, `b`, `backend`, `model`, `self.backend`, ...
_BACKEND_NAME = re.compile(r"(^|\.)(m|b|backend|model|_model|_backend)$")
_MODE_BRANCH = re.compile(r"\bbackend\s*[!=]=|\boptions\.plan\b")
_MODE_BRANCH_HOMES = ("audit_harness/models/", "audit_harness/backends.py")


def sources(folders: tuple[str, ...] = PACKAGES):
    """``(path relative to the repository, text)`` of every Python file below ``folders``."""
    for package in folders:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def long_functions(limit: int, folders: tuple[str, ...] = PACKAGES) -> list[str]:
    """``path:line name (N lines)`` for every function below ``folders`` longer than ``limit`` lines."""
    found = []
    for rel, text in sources(folders):
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    return found


def backend_probes() -> list[str]:
    """``hasattr``/``getattr`` calls on a backend outside ``models/``."""
    found = []
    for rel, text in sources():
        if rel.startswith("audit_harness/models/"):
            continue
        for node in ast.walk(ast.parse(text, rel)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr")
                and node.args
                and _BACKEND_NAME.search(ast.unparse(node.args[0]))
            ):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node)}")
    return found


def mode_branches() -> list[str]:
    """Lines that branch on a backend's or a mode's name outside its homes."""
    found = []
    for rel, text in sources():
        if rel.startswith(_MODE_BRANCH_HOMES):
            continue
        for i, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if _MODE_BRANCH.search(code):
                found.append(f"{rel}:{i} {line.strip()}")
    return found


def unlayered_modules() -> list[str]:
    """Top-level modules and packages of ``audit_harness`` that no layers contract names."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: import-linter brings tomli
        import tomli as tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    named = set()
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("type") == "layers":
            for layer in contract["layers"]:
                named.update(m.strip() for m in re.split(r"[|:]", layer))
    package = ROOT / "audit_harness"
    modules = sorted(
        p.stem if p.is_file() else p.name
        for p in package.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())
    )
    return [f"audit_harness.{m}" for m in modules if f"audit_harness.{m}" not in named]


def ruff_findings(rule: str) -> list[str]:
    """ruff's findings of one rule over the whole tree (tests, perf and tools too)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--select",
            rule,
            "--output-format",
            "json",
            "--exit-zero",
            ".",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = json.loads(out or "[]")
    return [f"{Path(r['filename']).relative_to(ROOT)}:{r['location']['row']} {r['message']}" for r in rows]


def counts() -> dict[str, list[str]]:
    """Every count of :data:`CEILINGS`, with the places behind it."""
    session = ROOT / "audit_harness" / "session.py"
    n_session = len(session.read_text(encoding="utf-8").splitlines()) if session.is_file() else 0
    return {
        "functions over 100 lines": long_functions(100),
        "functions over 60 lines": long_functions(60),
        "perf/ and tools/ functions over 100 lines": long_functions(100, SCRIPTS),
        "perf/ and tools/ functions over 60 lines": long_functions(60, SCRIPTS),
        "backend probes outside models/": backend_probes(),
        "backend or mode branches outside models/ and backends.py": mode_branches(),
        "session.py lines": ["audit_harness/session.py"] * n_session,
        "audit_harness modules in no layers contract": unlayered_modules(),
        "ruff C901 (too complex)": ruff_findings("C901"),
        "ruff PLR0913 (too many arguments)": ruff_findings("PLR0913"),
    }


def ratchet(
    found: dict[str, list[str]], ceilings: dict[str, int], verbose: bool, what: str, listed=lambda name: True
) -> int:
    """Print every count of ``found`` against its ceiling (with its places when ``verbose`` or
    over, for the counts ``listed`` names) and return 1 when any is over, naming it as ``what``:
    the one report of this ratchet and of ``check_types.py``'s."""
    over = []
    for name, places in found.items():
        ceiling = ceilings[name]
        mark = "ok" if len(places) <= ceiling else "OVER"
        print(f"{mark:4} {name}: {len(places)} (ceiling {ceiling})")
        if len(places) > ceiling:
            over.append(name)
        if (verbose or len(places) > ceiling) and listed(name):
            for place in dict.fromkeys(places):
                print(f"       {place}")
    if over:
        print(f"{what}: over the ceiling: {'; '.join(over)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    return ratchet(counts(), CEILINGS, "-v" in argv, "architecture ratchet")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
