"""The confidence sequences of MBBQ's gate metrics (``Benchmark.sequential_form``): the BBQ
family's cell-based sequences (``bbq_family_sequential.cell_cs``) over the records a metric
rests on: the bias rows of all templates, one template's (``_p<k>``), or the control rows
(``control_acc_*``).
"""

from __future__ import annotations

import re
from typing import Protocol, Sequence

import numpy as np

from .base import SequentialForm
from .bbq_family_sequential import cell_cs, cells


class _Row(Protocol):
    """What a metric's rows are told apart by: an MBBQ item or record."""

    @property
    def control(self) -> bool: ...

    @property
    def prompt_id(self) -> int: ...


def mbbq_form(bench, metric: str) -> SequentialForm | None:
    """The sequence of ``metric`` (without the answer mode's suffix), or None (no form)."""
    control = metric.startswith("control_")
    base = metric.removeprefix("control_")
    template = re.fullmatch(r"(.+)_p(\d)", base)
    prompt = int(template.group(2)) if template else None
    made = cell_cs(bench.flavour, template.group(1) if template else base)
    if made is None:
        return None
    label, cs, table = made

    def keep(x: _Row) -> bool:
        return x.control == control and (prompt is None or x.prompt_id == prompt)

    def run(records, population, alpha):
        kept = [r for r in records if keep(r)]
        size = None if population is None else sum(1 for x in population if keep(x))
        return cs(cells(bench, kept), size, alpha)

    where = "control rows" if control else (f"template {prompt}" if prompt else "bias rows")
    return SequentialForm(
        f"{label}, over the {where}",
        run,
        values=None
        if table is None
        else (lambda rs: _masked(table[cells(bench, rs)], [keep(r) for r in rs])),
    )


def _masked(values: np.ndarray, kept: Sequence[bool]) -> np.ndarray:
    """``values`` with NaN for the records outside the metric's rows (outside its denominator)."""
    out = np.array(values, dtype=np.float64)
    out[~np.asarray(kept, dtype=bool)] = np.nan
    return out
