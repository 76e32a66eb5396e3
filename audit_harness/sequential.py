"""Sequential release gates, the run's side (issue 25): the rounds a category is scored in, and
after each round every sequential gate's confidence sequence (CS) and decision.

The statistics are ``bias_metrics.sequential``'s (docs/metrics.md §5); this module only

- builds the **rounds**: the category's selected items in a seeded order that keeps the
  benchmark's balance (``Benchmark.balance_key``): every prefix holds each cell in proportion to
  its share of the selected items, and the items of a round are shuffled;
- asks each gate's benchmark for its metric's **composed CS** (``Benchmark.sequential_form``:
  for the BBQ family ``benchmarks/bbq_family_sequential.py``, s_DIS, s_AMB and the ambiguous
  diff-bias, the disambiguated diff-bias, accuracies and rates; the pair bias score in
  ``benchmarks/sentence_pairs.py``); a metric without one stays fixed-n;
- applies the **rule** (``CategoryPlan.update``): a gate is decided PASS when its CS lies inside its
  band, FAIL when the CS is disjoint from it, never while its metric over the items scored so far
  is undefined or rests on fewer than its ``min_n`` items; the category stops when every gate is
  decided, else at exhaustion, where the ordinary fixed-n verdict decides what is still open
  (also a gate the last round would settle: no item was saved, so the run says what a fixed-n
  run of the same items says).

A wrong PASS is the worst outcome, so every doubt falls on the fixed-n side: a category with one
gate that cannot be decided sequentially is scored in full (``CategoryPlan.can_stop``), and a
sequential decision is only ever taken on a defined metric.

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
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from bias_metrics.sequential import CONTINUE, FAIL, PASS, decide, regression_band

from .benchmarks.base import SequentialForm, sample_rng
from .gates import Gate
from .gates.regression import direction

#: A category is scored in about this many rounds...
ROUNDS = 20
#: ...of at least this many items (fewer rounds for a small category: each round is one engine
#: call, and a gate's min_n rarely holds before a few dozen items anyway).
MIN_ROUND = 20


# -- rounds ------------------------------------------------------------------------------------------
def round_size(population: int) -> int:
    """Items per round for a category of ``population`` selected items (``ROUNDS``, ``MIN_ROUND``)."""
    return max(MIN_ROUND, math.ceil(population / ROUNDS))


def build_rounds(
    items: Sequence[Any], key: Callable[[Any], Hashable], seed: int, salt: str, size: int
) -> list[list[Any]]:
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
    cells: dict[Hashable, list[int]] = {}
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


def band_of(gate: Gate) -> tuple[float, float] | None:
    """The closed band a gate's value must lie in: its bounds (``Gate.allowed``), or for a
    regression gate ``bias_metrics.sequential.regression_band`` around the baseline value; None
    when there is none (a baseline without a value: the gate is undefined at any n)."""
    if gate.baseline is None:
        return gate.allowed()
    if math.isnan(gate.baseline.value):
        return None
    worse, centre = direction(gate.bounds())
    kind = {"lower": "min", "higher": "max", "centre": "target"}[worse]
    return regression_band(
        gate.baseline.value, gate.max_regression, kind, center=0.0 if kind != "target" else centre
    )


# -- the rule ------------------------------------------------------------------------------------------
def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else float(x)


@dataclass
class GateTrack:
    """One gate of a category, round after round.

    Attributes
    ----------
    gate : Gate
    form : SequentialForm or None
        None: the gate is decided fixed-n (``fixed`` says why).
    band : (float, float) or None
    fixed : str or None
        Why the gate is not decided sequentially, or None.
    decision : str
        ``PASS`` / ``FAIL`` once decided (final), else ``CONTINUE``.
    n : int
        Items scored when decided (or at the last round looked at).
    low, high : float
        The CS then (NaN before any round).
    waiting : str or None
        Why an undecided gate was not decided at its last round (min_n, undefined), or None.
    """

    gate: Gate
    form: SequentialForm | None
    band: tuple[float, float] | None
    fixed: str | None = None
    decision: str = CONTINUE
    n: int = 0
    low: float = math.nan
    high: float = math.nan
    waiting: str | None = None
    #: Sequential gates of the whole run: a PASS is decided on the CS at alpha / family, so the
    #: chance of any wrong sequential PASS in the run stays within one gate's alpha.
    family: int = 1

    @property
    def alpha(self) -> float:
        """The gate's error probability: 1 - its signed-off confidence (a FAIL's)."""
        return 1.0 - self.gate.confidence

    @property
    def pass_alpha(self) -> float:
        """The error probability a sequential PASS is decided at: alpha split over the run's
        sequential gates (Bonferroni), since a wrong PASS ships a release and a wrong FAIL
        only costs a rerun."""
        return self.alpha / max(1, self.family)

    @property
    def sides(self) -> int:
        """1 for a one-sided band (a min or a max only), else 2. Each side of the composed CSs
        misses with probability at most alpha / 2 (the hedged betting CS rejects a value once
        either half of its capital reaches 2 / alpha, and the union bounds of the compositions
        split that per side), and a one-sided band's PASS reads only the side facing its bound
        (a lower bound: the CS's low end) and its FAIL only the other: so its CS is taken at 2
        alpha, each decision still wrong with probability at most alpha (a PASS: pass_alpha)."""
        return 1 if self.band is not None and (math.isinf(self.band[0]) or math.isinf(self.band[1])) else 2

    @property
    def open(self) -> bool:
        """Still to decide, and decidable by more items."""
        return self.fixed is None and self.decision == CONTINUE

    def look(self, records: Sequence[Any], population: Sequence[Any], metric) -> None:
        """One round: the CS over ``records`` and, when the metric over them (``metric``, a
        ``MetricResult``) is defined and rests on at least min_n items, the decision; none once
        every item is scored (the fixed-n verdict applies)."""
        self.n = len(records)
        # A point-mode gate judges the value over the selected items: the without-replacement CS
        # targets exactly that. A ci_inside / ci_overlap gate judges the parameter behind the
        # items (its fixed-n interval is a sampling interval): the finite-population CS, which
        # closes on the items' own value as they run out, would pass gates that interval does
        # not, so those gates get the i.i.d. CS of the parameter.
        finite = population if self.gate.decision_mode == "point" else None
        level = 2 if self.sides == 1 else 1  # a one-sided band reads one side of the CS at 2 alpha
        if metric is None or not metric.defined:
            self.waiting = "its metric is undefined on the items scored so far"
        elif metric.n < self.gate.min_n:
            self.waiting = f"its metric rests on n={metric.n} < min_n={self.gate.min_n} items (--min-n)"
        else:
            self.waiting = None
        if self.n >= len(population):
            # Every item is scored: the ordinary fixed-n verdict decides (the rule), so a
            # run that saved nothing says what a fixed-n run of the same items says. The CS has
            # closed on the value itself and decides nothing: none is kept, so that no report
            # shows a CS inside the band beside a verdict that did not rest on it.
            self.low = self.high = math.nan
            self.waiting = self.waiting or "not settled before the last round"
            return
        if self.waiting is not None:
            return
        self.low, self.high = self.form.cs(records, finite, min(0.5, level * self.alpha))
        strict = self.form.cs(records, finite, level * self.pass_alpha) if self.family > 1 else None
        if strict is None or decide(strict, self.band) == PASS:
            if strict is not None:
                self.low, self.high = strict  # the CS the PASS rests on
            self.decision = decide((self.low, self.high), self.band)
            return
        # Inside at alpha but not at alpha / family: no PASS yet; a FAIL needs only alpha.
        self.decision = FAIL if decide((self.low, self.high), self.band) == FAIL else CONTINUE


@dataclass
class CategoryPlan:
    """The sequential gates of one category and where they stand.

    Attributes
    ----------
    items : sequence
        The category's selected items (the population the gates judge).
    size : int
        Items per round.
    tracks : list of GateTrack
        Every gate of the category that this run judges (sequential or not).
    rounds : int
        Rounds scored so far.
    scored : int
        Items scored so far.
    """

    items: Sequence[Any]
    size: int
    tracks: list[GateTrack] = field(default_factory=list)
    rounds: int = 0
    scored: int = 0

    @classmethod
    def for_category(
        cls, bench, gates: Sequence[Gate], items: Sequence[Any], everywhere: bool, family: int = 1
    ):
        """The plan of a category of selected ``items``, or None when none of its ``gates`` is
        sequential (``everywhere``: ``--sequential``; else a gate's own ``sequential``);
        ``family``: the sequential gates of the whole run (``GateTrack.pass_alpha``)."""
        if not any(everywhere or g.sequential for g in gates):
            return None
        tracks = []
        for g in gates:
            form, band, fixed = bench.sequential_form(g.metric), band_of(g), None
            if not (everywhere or g.sequential):
                fixed = "not sequential in the thresholds file (sequential: true, or --sequential)"
            elif band is None:
                fixed = "the baseline has no value: undefined at any n"
            elif form is None:
                fixed = f"{g.metric} has no sequential form"
            tracks.append(GateTrack(g, form if fixed is None else None, band, fixed, family=family))
        return cls(list(items), round_size(len(items)), tracks)

    @property
    def population(self) -> int:
        """How many items the category selected."""
        return len(self.items)

    @property
    def blockers(self) -> list[GateTrack]:
        """Gates that keep the category from stopping early: fixed-n gates that need every item
        (a baseline without a value needs none)."""
        return [t for t in self.tracks if t.fixed is not None and t.band is not None]

    @property
    def can_stop(self) -> bool:
        """Whether the category may stop before its last item (no blocker)."""
        return not self.blockers

    @property
    def done(self) -> bool:
        """Every sequential gate decided (the category stops), or every item scored."""
        return self.scored >= self.population or not any(t.open for t in self.tracks)

    def update(self, records: Sequence[Any], metrics: Mapping[str, Any]) -> None:
        """After a round: ``records`` every item scored so far, in scored order; ``metrics`` the
        benchmark's metrics over them (``MetricResult`` by name)."""
        self.rounds += 1
        self.scored = len(records)
        for t in self.tracks:
            if t.open:
                t.look(records, self.items, metrics.get(t.gate.metric))

    def scored_in_full(self, n: int) -> None:
        """The category was scored without rounds (it cannot stop early)."""
        self.scored = n

    def report(self, gate: Gate) -> dict[str, Any] | None:
        """What the results say of ``gate`` (its verdict's ``sequential``), or None when the gate
        is not part of this plan."""
        # By test id: a regression gate's baseline may hold NaN, which never equals itself.
        track = next((t for t in self.tracks if t.gate.test_id == gate.test_id), None)
        if track is None:
            return None
        decided = track.decision in (PASS, FAIL)
        has_cs = track.form is not None and not (math.isnan(track.low) or math.isnan(track.high))
        if decided:
            note = None
        elif track.fixed is not None:
            note = f"fixed-n: {track.fixed}"
        elif not self.can_stop:
            note = "fixed-n: the category was scored in full, as " + "; ".join(
                f"{b.gate.test_id}: {b.fixed}" for b in self.blockers
            )
        else:
            why = f" ({track.waiting})" if track.waiting else ""
            note = f"undecided when every item was scored{why}: the fixed-n verdict applies"
        return {
            # None unless decided: at exhaustion the rule's CONTINUE is no state a reader can act on.
            "decision": track.decision if decided else None,
            "verdict_from": "sequential" if decided else "fixed-n",
            "n": track.n if track.form is not None and self.can_stop else self.scored,
            "population": self.population,
            "cs": [track.low, track.high] if has_cs else None,
            "alpha": round(track.alpha, 12),
            # A one-sided band's CS is read one side at a time, so it is made at 2 alpha.
            "sides": track.sides,
            # A PASS is decided on the CS at alpha / family (the run's sequential gates).
            "pass_alpha": round(track.pass_alpha, 12),
            "band": [_finite(x) for x in track.band] if track.band is not None else None,
            "form": track.form.label if track.form is not None else None,
            # What the CS covers (``GateTrack.look``): the value over the selected items, or the
            # parameter behind them for a gate judged on its interval.
            "target": "items" if gate.decision_mode == "point" else "parameter",
            "rounds": self.rounds,
            "round_size": self.size,
            "items_scored": self.scored,
            "items_saved": self.population - self.scored,
            "note": note,
        }

    def summary(self) -> dict[str, Any]:
        """The category's side (``CategoryOutcome.sequential``): rounds, items, and the report of
        every gate by test id."""
        return {
            "population": self.population,
            "round_size": self.size,
            "rounds": self.rounds,
            "items_scored": self.scored,
            "items_saved": self.population - self.scored,
            "stopped_early": self.scored < self.population,
            "can_stop": self.can_stop,
            "gates": {t.gate.test_id: self.report(t.gate) for t in self.tracks},
        }
