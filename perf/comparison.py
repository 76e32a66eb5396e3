"""What the two side-by-side comparisons with lm-eval (``compare_lmeval.py``,
``compare_generation.py``) share: the command-line flags of a comparison and of our side's child
process, that child's command, its engine and its optional profile.

Each script adds its own flags (which items, which benchmark) to these parsers and its own
selection to the child's command; the rest is declared once here.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
#: Our side's flags a comparison passes through to its child, as (flag, attribute of its args).
_CHILD_FLAGS = (
    ("--model", "model"),
    ("--data-dir", "data_dir"),
    ("--batch-size", "batch_size"),
    ("--threads", "threads"),
)


def dispatch(
    argv: list[str] | None, ours_main: Callable[[list[str]], None], compare: Callable[[list[str]], int]
) -> int:
    """Run our side's child (``--_ours`` on the command line, exit 0) or else the comparison."""
    argv = sys.argv[1:] if argv is None else argv
    if "--_ours" in argv:
        ours_main(argv)
        return 0
    return compare(argv)


def comparison_parser(doc: str, model: str, threads_help: str, profile_help: str) -> argparse.ArgumentParser:
    """A comparison's parser with the flags both scripts take (model, batch size, threads, data,
    work folder, JSON summary, profile); the script adds its own selection before parsing."""
    ap = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=model, help="zoo name")
    ap.add_argument("--batch-size", type=int, default=16, help="ours and lm-eval's batch size")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help=threads_help)
    ap.add_argument(
        "--data-dir", default=os.environ.get("AUDIT_DATA_DIR") or str(REPO.parent / "shared" / "data")
    )
    ap.add_argument("--workdir", help="keep inputs, logs and outputs here (default: a temp dir)")
    ap.add_argument("--json-out", help="write the summary as JSON")
    ap.add_argument("--profile", action="store_true", help=profile_help)
    return ap


def our_side_parser() -> argparse.ArgumentParser:
    """Our side's child parser: ``--_ours OUT``, the flags of ``our_side_command`` and the result
    cache; the script adds the flags of its own selection."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--_ours", dest="out", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--profile", action="store_true")
    return ap


def our_side_command(
    script: Path, out: Path, args: argparse.Namespace, cache_dir: Path, selection: list[str]
) -> list[str]:
    """The command that runs ``script``'s our side into ``out``: this interpreter, the
    comparison's model, data, batch size and threads, ``cache_dir``, and the script's
    ``selection`` flags (its items, ``--profile``)."""
    cmd = [sys.executable, str(script.resolve()), "--_ours", str(out)]
    for flag, attribute in _CHILD_FLAGS:
        cmd += [flag, str(getattr(args, attribute))]
    return cmd + ["--cache-dir", str(cache_dir), *selection]


def our_engine(a: argparse.Namespace):
    """(torch, the model, an engine over a result cache in ``a.cache_dir``): our side's model
    in fp32 on the CPU with ``a.threads`` torch threads and ``a.batch_size``."""
    import torch

    torch.set_num_threads(a.threads)
    from audit_harness.engine.cache import ResultCache
    from audit_harness.engine.executor import Engine
    from audit_harness.models.zoo import load_model

    model = load_model(a.model, device="cpu", dtype="float32", batch_size=a.batch_size)
    return torch, model, Engine(model, cache=ResultCache(a.cache_dir))


@contextmanager
def profiled(on: bool, sort: str, lines: int) -> Iterator[None]:
    """cProfile of the block when ``on``, its ``lines`` costliest by ``sort`` printed to stderr
    (our side's log)."""
    if not on:
        yield
        return
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats(sort).print_stats(lines)
