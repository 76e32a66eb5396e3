"""What every piece of the GPU check shares: where the repository and the bundle are, the
tolerances, the models' shapes, the GPUs' bf16 peaks and small helpers (sizes, hashes, the data
folder and the data files the check reads)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
#: The dry run's stand-in for SmolLM2's depth and width in the bf16 part.
SMALL_SMOLLM2 = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
#: The dry run's stand-in for Llama-3-8B: the same code path at a size a CPU runs in seconds.
SMALL_LLAMA = {**LLAMA3_8B, **SMALL_SMOLLM2}
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


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
