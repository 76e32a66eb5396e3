"""Models built from a config (random weights) and the BBQ items the bf16 and throughput parts
score with them."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from .common import BF16_PER_CATEGORY, BF16_SALT, TOKENIZER_MODEL


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
        "items": dict(zip(item_ids(items), lls)),
    }


def item_ids(items) -> list[str]:
    return [it.item_id for it in items]
