"""Sequential release gates, the evaluation's side (issue 25): the balanced rounds a category's
selected items are scored in. After each round ``gates.sequential.CategoryPlan`` decides every
sequential gate (the rule, its reports); ``pipeline`` scores the rounds until it says stop.

The rounds hold the category's selected items in a seeded order that keeps the benchmark's
balance (``Benchmark.balance_key``): every prefix holds each cell in proportion to its share of
the selected items, and the items of a round are shuffled.

**The order.** The betting CS's guarantee (Waudby-Smith & Ramdas 2023, §6) is for items drawn in a
uniformly random order. Balanced rounds draw each cell's items in a uniformly random order and the
cells in proportion to their sizes: stratified sampling with proportional allocation, whose running
mean varies less around the category's value than a uniformly random order's. The proof is for the
uniform order; ``tests/test_sequential_run.py`` checks by simulation that the wrong-verdict rate of
balanced rounds stays below alpha where the cells differ most (cells of all-1 and all-0 items, the
value on the band's bound).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, TypeVar

from ..benchmarks.base import CellKey, sample_rng

T = TypeVar("T")

#: A category is scored in about this many rounds...
ROUNDS = 20
#: ...of at least this many items (fewer rounds for a small category: each round is one engine
#: call, and a gate's min_n rarely holds before a few dozen items anyway).
MIN_ROUND = 20


def round_size(population: int) -> int:
    """Items per round for a category of ``population`` selected items (``ROUNDS``, ``MIN_ROUND``)."""
    return max(MIN_ROUND, math.ceil(population / ROUNDS))


def build_rounds(
    items: Sequence[T], key: Callable[[T], CellKey], seed: int, salt: str, size: int
) -> list[list[T]]:
    """The category's items in seeded rounds of ``size`` (the last may be shorter), balanced over
    the cells ``key`` defines.

    Each cell's items are put in a seeded random order, and the k-th of a cell of n items is
    placed at position (k + 1/2) / n of the whole sequence (ties in a seeded order): every prefix
    then holds each cell in proportion to its size, within one item. The sequence is cut into
    rounds and each round shuffled, so no position inside a round depends on the cell.

    Parameters
    ----------
    items : sequence
        The category's selected items (the population the gates judge).
    key : callable
        ``Benchmark.balance_key``; cell keys must be sortable.
    seed : int
        The run's ``--seed``.
    salt : str
        ``"<benchmark>/<category>"``: decorrelates categories.
    size : int
        Items per round, >= 1.

    Returns
    -------
    list of list
        Every item exactly once.

    Raises
    ------
    ValueError
        ``size`` < 1.

    Examples
    --------
    A third of the items in one cell: each round of 3 holds one of them.

    >>> rounds = build_rounds(list(range(12)), lambda i: i % 3 == 0, 0, "x/y", 3)
    >>> [len(r) for r in rounds], sorted(i for r in rounds for i in r) == list(range(12))
    ([3, 3, 3, 3], True)
    >>> [sum(i % 3 == 0 for i in r) for r in rounds]
    [1, 1, 1, 1]
    """
    if size < 1:
        raise ValueError(f"a round holds at least one item, got size {size}")
    rng = sample_rng(seed, f"sequential/{salt}")
    cells: dict[CellKey, list[int]] = {}
    for i, it in enumerate(items):
        cells.setdefault(key(it), []).append(i)
    placed: list[tuple[float, float, int]] = []
    for k in sorted(cells):
        members = cells[k]
        for rank, j in enumerate(rng.permutation(len(members))):
            placed.append(((rank + 0.5) / len(members), float(rng.random()), members[int(j)]))
    order = [i for _, _, i in sorted(placed)]
    chunks = (order[start : start + size] for start in range(0, len(order), size))
    return [[items[chunk[int(j)]] for j in rng.permutation(len(chunk))] for chunk in chunks]
