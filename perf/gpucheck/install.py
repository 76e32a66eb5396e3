"""The GPU machine's environment: the bundled wheels it lacks installed offline, and the
imports the check needs probed before any part runs (``preflight``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from .common import canonical_name, say


def wheel_dist(wheel: str) -> str:
    """The canonical distribution name of a wheel file.

    >>> wheel_dist("gguf-0.19.0-py3-none-any.whl")
    'gguf'
    >>> wheel_dist("pytest_xdist-3.8.0-py3-none-any.whl")
    'pytest-xdist'
    """
    return canonical_name(Path(wheel).name.split("-")[0])


def _is_installed(name: str) -> bool:
    import importlib.metadata as md

    try:
        md.distribution(name)
        return True
    except md.PackageNotFoundError:
        return False


def wheel_requirements(wheel: Path) -> list[str]:
    """Canonical names a wheel requires (its METADATA's Requires-Dist, extras off, markers
    evaluated for this Python)."""
    import zipfile

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                out.append(canonical_name(req.name))
    return out


def wheels_to_install(
    wheels: Sequence[Path], installed: Callable[[str], bool] = _is_installed
) -> tuple[list[Path], dict[str, list[str]]]:
    """(the wheels whose package this Python lacks and whose own requirements it has or the
    bundle brings, {wheel: its unmet requirements} for those left out). A package already here
    keeps its version (the machine's image was built and tested with it); a wheel installed with
    ``--no-deps`` over missing requirements would only break at import, so it stays out (the
    check imports none of the project's optional paths)."""
    missing = [w for w in wheels if not installed(wheel_dist(w.name))]
    bundled = {wheel_dist(w.name) for w in missing}
    todo, left = [], {}
    for w in missing:
        unmet = [r for r in wheel_requirements(w) if r not in bundled and not installed(r)]
        if unmet:
            left[w.name] = unmet
        else:
            todo.append(w)
    return todo, left


def install_bundle(bundle: Path, workdir: Path) -> Path | None:
    """Install, offline, the bundled wheels this Python lacks into ``workdir/site``, a folder the
    check then puts on ``PYTHONPATH``; None when there is nothing to install.

    Not a venv with ``--system-site-packages``: the GPU image's python3 is itself a venv, and a
    venv made from a venv sees the base interpreter's packages, not torch's. Not into this
    Python either: the machine's packages stay as its image has them."""
    todo, left = wheels_to_install(sorted((bundle / "wheels").glob("*.whl")))
    for name, unmet in left.items():
        say(
            f"install: not {name} (needs {', '.join(unmet)}: neither here nor bundled; the check does not use it)"
        )
    if not todo:
        say("install: nothing to install (every bundled package the check can use is already here)")
        return None
    site = workdir / "site"
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    cmd += ["--disable-pip-version-check", "--target", str(site), "--find-links", str(bundle / "wheels")]
    proc = subprocess.run([*cmd, *map(str, todo)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"offline install of {[w.name for w in todo]} failed:\n{proc.stderr[-2000:]}")
    say(f"install: {', '.join(w.name for w in todo)} into {site} (offline), on PYTHONPATH")
    return site


class SetupError(Exception):
    """The check cannot start (exit 2)."""


#: What the check itself imports, with the distribution to name when one is missing.
REQUIRED_IMPORTS = (
    ("torch", "torch"),
    ("transformers", "transformers"),
    ("tokenizers", "tokenizers"),
    ("safetensors", "safetensors"),
    ("numpy", "numpy"),
    ("scipy", "scipy"),
    ("yaml", "pyyaml"),
    ("jinja2", "jinja2"),
    ("matplotlib", "matplotlib"),
    ("filelock", "filelock"),
    ("tqdm", "tqdm"),
    ("httpx", "httpx"),
    ("pytest", "pytest"),
    ("xdist", "pytest-xdist"),
)


def preflight() -> dict[str, str]:
    """Versions of what the check imports; SetupError naming every missing one."""
    import importlib
    import importlib.metadata as md

    missing, versions = [], {}
    for module, dist in REQUIRED_IMPORTS:
        try:
            importlib.import_module(module)
        except ImportError as e:
            missing.append(f"{dist} ({e})")
            continue
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            versions[dist] = "?"
    if missing:
        raise SetupError(
            "missing on this machine: "
            + "; ".join(missing)
            + ". A compiled package must come as a wheel built for this Python (see docs/engine.md, GPU check)"
        )
    return versions
