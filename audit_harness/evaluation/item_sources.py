"""Where a category's items come from: a seeded ``--limit`` selection of the data
(``FixedSelection``), or the items a predictions file answers (``ReplayedItems``,
``--backend replay``). Either gives the pipeline a ``Selection``; sequential rounds then score
a selection in seeded, balanced rounds (``pipeline``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

from ..benchmarks.base import Benchmark, CategoryData, Item
from ..errors import MissingDataError
from ..gates.judge import Coverage

if TYPE_CHECKING:
    from ..predictions import JoinedPredictions


@dataclass(frozen=True)
class Selection:
    """The items a category scores, in the order its records are kept.

    Attributes:
        items: the selected items.
        coverage: what part of the category they are (replay), or None (a ``--limit`` sample,
            which the options already describe).
        excluded: ``{reason: [item ids]}`` left out besides the loader's own (replay: rows of
            the predictions file that name an item the loader leaves out).
    """

    items: Sequence[Item]
    coverage: Coverage | None = None
    excluded: dict[str, list[str]] = field(default_factory=dict)


class ItemSource(Protocol):
    """What the pipeline asks for a category's items."""

    def select(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> Selection:
        """The category's selection.

        Raises:
            MissingDataError: the source has nothing of this category (its gates are skipped).
        """
        ...

    def count(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> int:
        """How many items ``select`` gives (0 where it would raise), for the progress line."""
        ...


@dataclass(frozen=True)
class FixedSelection:
    """``--limit`` items per category, balanced as the benchmark defines and seeded
    (``Benchmark.select``), salted by benchmark and category; every item without a limit."""

    limit: int | None
    seed: int

    def select(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> Selection:
        return Selection(bench.select(data.items, self.limit, self.seed, salt=f"{benchmark}/{category}"))

    def count(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> int:
        return len(self.select(bench, benchmark, category, data).items)


@dataclass(frozen=True)
class ReplayedItems:
    """The items a predictions file answers (``predictions.JoinedPredictions``), in the data's
    order."""

    joined: JoinedPredictions

    def select(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> Selection:
        joined = self.joined
        answered = set(joined.by_category.get(category, ()))
        held = joined.held_out.get(category) or {}
        if not answered:
            if held:  # rows that name items the loader leaves out: say which, with lines
                listed = "; ".join(
                    f"{len(ids)} held out ({reason}): "
                    + ", ".join(f"{i} (line {joined.lines[i]})" for i in ids)
                    for reason, ids in held.items()
                )
                raise MissingDataError(
                    f"none of the predictions file's rows for {benchmark}/{category} can be scored: {listed}"
                )
            raise MissingDataError(
                f"the predictions file {joined.path} has no row for {benchmark}/{category}"
            )
        items = [it for it in data.items if it.item_id in answered]
        return Selection(
            items,
            Coverage(predicted=len(items), available=len(data.items), predictions=str(joined.path)),
            {f"{reason} (rows of the predictions file)": list(ids) for reason, ids in held.items()},
        )

    def count(self, bench: Benchmark, benchmark: str, category: str, data: CategoryData) -> int:
        answered = set(self.joined.by_category.get(category, ()))
        return sum(it.item_id in answered for it in data.items)
