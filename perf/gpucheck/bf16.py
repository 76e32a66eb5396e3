"""The ``bf16`` part: fp32 against bf16 on CUDA, projected onto real SmolLM2's log-likelihoods."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .common import AGREEMENT_MIN, SMALL_SMOLLM2
from .context import Context, PartResult
from .models import bf16_items, build_model, item_ids, make_backend, score_items


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
    if ctx.dry_run and not any(i in ref for i in item_ids(items)):
        # No real numbers for these items here: a second random model stands in, so the dry run
        # still goes through the projection.
        ref = dict(
            zip(
                item_ids(items),
                score_items(
                    bench,
                    make_backend(build_model(config, "cpu", torch.float32, seed=1), tok, "stand-in"),
                    items,
                ),
            )
        )
        source = "a stand-in random model (dry run)"
    real = [ref.get(i) for i in item_ids(items)]
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
