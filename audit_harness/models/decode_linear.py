"""Linear layers for decoding steps on a CPU.

A decoding step feeds one token per row, so each linear layer multiplies a few rows by its whole
weight matrix. MKL's sgemm, which torch uses for float32 on x86, is slow at that shape: measured on
a 2-core AMD EPYC (AVX2) with Qwen2.5-0.5B's matrices, 12 rows through the 4864 x 896 MLP matrix
took 2.0 ms where one row took 0.7 ms, and through the 151,936 x 896 output head 111 ms where one
row took 35 ms. oneDNN, with the weight converted once, ran the same products in 1.8 and 51 ms, but
a prompt's hundreds of rows more slowly than sgemm (1,024 rows: 75 against 55 ms). So each linear
layer takes oneDNN's path for inputs of at most ``MAX_ROWS`` rows and keeps sgemm's for more:
prompt forwards and scoring are unchanged, decoding steps get faster (KoBBQ, 360 Qwen generations:
118 steps in 27 s instead of 43 s, the same 360 texts).

The two paths compute the same products in another order: values differ by float rounding (at
most 6e-6 on those matrices), as between batch sizes. The converted weights are a second copy of
every linear layer's weight (Qwen2.5-0.5B: 2.5 GB in float32), made when the model first decodes;
``enable`` declines when that copy would take more than half of the memory available.
"""

from __future__ import annotations

import os

import torch

#: Inputs of at most this many rows (tokens) take oneDNN's path (measured faster up to 32 rows,
#: slower from a few hundred).
MAX_ROWS = 32

#: The attribute that marks a model whose linear layers already dispatch by rows.
MARK = "_audit_decode_linears"


def available_bytes() -> int | None:
    """Memory available to new allocations (Linux's ``SC_AVPHYS_PAGES``), or None when unknown."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def applies(model) -> bool:
    """Whether ``enable`` can help ``model``: float32 weights on the CPU, and a torch with oneDNN."""
    try:
        param = next(model.parameters())
    except StopIteration:
        return False
    return (
        param.device.type == "cpu" and param.dtype == torch.float32 and torch.backends.mkldnn.is_available()
    )


def enable(model) -> int:
    """Make every ``torch.nn.Linear`` of ``model`` run inputs of at most ``MAX_ROWS`` rows through
    oneDNN with a converted copy of its weight (see the module doc). Idempotent.

    Returns:
        the number of layers that dispatch by rows (0 when it does not apply, or when the copies
        would take more than half of the available memory).
    """
    if getattr(model, MARK, None) is not None:
        return getattr(model, MARK)
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear] if applies(model) else []
    need = sum(m.weight.numel() * m.weight.element_size() for m in layers)
    free = available_bytes()
    if free is not None and need > free // 2:
        layers = []
    for layer in layers:
        with torch.no_grad():
            weight = layer.weight.detach().to_mkldnn()
            bias = layer.bias if layer.bias is not None else torch.zeros(layer.out_features)
            layer.forward = _dispatch(layer.forward, weight, bias.detach().to_mkldnn())
    setattr(model, MARK, len(layers))
    return len(layers)


def _dispatch(dense, weight, bias):
    """``dense`` (the layer's own forward) for more than ``MAX_ROWS`` rows, oneDNN for fewer (the
    linear product of ``torch.utils.mkldnn.MkldnnLinear``, without its TorchScript wrapper)."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if not 0 < rows <= MAX_ROWS or x.dtype != torch.float32 or x.device.type != "cpu":
            return dense(x)
        y = torch.ops.aten.mkldnn_linear(x.reshape(rows, x.shape[-1]).contiguous().to_mkldnn(), weight, bias)
        y = y.to_dense()
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return forward
