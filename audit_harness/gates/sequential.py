"""Sequential release gates, the decisions (issue 25): after each round of a category
(``evaluation.sequential_rounds``), every sequential gate's confidence sequence (CS) and
decision, and what the results say of it (``GateReport``, ``SequentialSummary``).

The statistics are ``bias_metrics.sequential``'s (docs/metrics.md §5); this module

- asks each gate's benchmark for its metric's **composed CS** (``Benchmark.sequential_form``,
  read here through the ``SequentialForm`` protocol: for the BBQ family
  ``benchmarks/bbq_family_sequential.py``, s_DIS, s_AMB and the ambiguous diff-bias, the
  disambiguated diff-bias, accuracies and rates; the pair bias score in
  ``benchmarks/sentence_pairs.py``); a metric without one stays fixed-n;
- applies the **rule** (``CategoryPlan.update``): a gate is decided PASS when its CS lies inside its
  band, FAIL when the CS is disjoint from it, never while its metric over the items scored so far
  is undefined or rests on fewer than its ``min_n`` items; the category stops when every gate is
  decided, else at exhaustion, where the ordinary fixed-n verdict decides what is still open
  (also a gate the last round would settle: no item was saved, so the run says what a fixed-n
  run of the same items says).

A wrong PASS is the worst outcome, so every doubt falls on the fixed-n side: a category with one
gate that cannot be decided sequentially is scored in full (``CategoryPlan.can_stop``), and a
sequential decision is only ever taken on a defined metric. The order the items come in, and
why balanced rounds keep the CS's guarantee, is ``evaluation.sequential_rounds``'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Mapping, Protocol, Sequence

from bias_metrics.result import MetricResult
from bias_metrics.sequential import CONTINUE, FAIL, PASS, decide, regression_band

from .gate import Gate
from .regression import direction


class SequentialForm(Protocol):
    """How a gate metric's confidence sequence is made from the records scored so far: what
    ``benchmarks.base.SequentialForm`` provides (the gates never import the benchmarks)."""

    @property
    def label(self) -> str:
        """What the CS is, for reports (e.g. ``"s_DIS = 2 CS(p) - 1"``)."""
        ...

    @property
    def cs(self) -> Callable[[Sequence[object], Sequence[object] | None, float], tuple[float, float]]:
        """``cs(records, population, alpha) -> (low, high)`` on the metric's scale."""
        ...


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

    def look(
        self, records: Sequence[object], population: Sequence[object], metric: MetricResult | None
    ) -> None:
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
        if self.waiting is not None or self.form is None or self.band is None:
            return  # (a track without a form or a band is fixed-n, never looked at)
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

    items: Sequence[object]
    size: int
    tracks: list[GateTrack] = field(default_factory=list)
    rounds: int = 0
    scored: int = 0

    @classmethod
    def for_category(
        cls, tracks: Sequence[GateTrack], items: Sequence[object], size: int
    ) -> CategoryPlan | None:
        """The plan of a category of selected ``items`` scored in rounds of ``size``
        (``evaluation.sequential_rounds.round_size``) with its gates' ``tracks``
        (``tracks_for``), or None when it has none (no gate of it is sequential)."""
        return cls(list(items), size, list(tracks)) if tracks else None

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

    def update(self, records: Sequence[object], metrics: Mapping[str, MetricResult]) -> None:
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

    def report(self, gate: Gate) -> GateReport | None:
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
        return GateReport(
            # None unless decided: at exhaustion the rule's CONTINUE is no state a reader can act on.
            decision=track.decision if decided else None,
            verdict_from="sequential" if decided else "fixed-n",
            n=track.n if track.form is not None and self.can_stop else self.scored,
            population=self.population,
            cs=(track.low, track.high) if has_cs else None,
            alpha=round(track.alpha, 12),
            sides=track.sides,
            pass_alpha=round(track.pass_alpha, 12),
            band=(_finite(track.band[0]), _finite(track.band[1])) if track.band is not None else None,
            form=track.form.label if track.form is not None else None,
            target="items" if gate.decision_mode == "point" else "parameter",
            rounds=self.rounds,
            round_size=self.size,
            items_scored=self.scored,
            items_saved=self.population - self.scored,
            note=note,
        )

    def summary(self) -> SequentialSummary:
        """The category's side (``CategoryOutcome.sequential``): rounds, items, and the report of
        every gate by test id."""
        reports = {t.gate.test_id: self.report(t.gate) for t in self.tracks}
        return SequentialSummary(
            population=self.population,
            round_size=self.size,
            rounds=self.rounds,
            items_scored=self.scored,
            items_saved=self.population - self.scored,
            stopped_early=self.scored < self.population,
            can_stop=self.can_stop,
            gates={k: r for k, r in reports.items() if r is not None},
        )


def tracks_for(
    forms: Callable[[str], SequentialForm | None], gates: Sequence[Gate], everywhere: bool, family: int = 1
) -> list[GateTrack]:
    """A track for each of a category's ``gates``, or none when none of them is sequential
    (``everywhere``: ``--sequential``; else a gate's own ``sequential``): a gate that cannot be
    decided sequentially gets a fixed-n track saying why. ``forms``: the benchmark's
    ``sequential_form``; ``family``: the sequential gates of the whole run
    (``GateTrack.pass_alpha``)."""
    if not any(everywhere or g.sequential for g in gates):
        return []
    tracks = []
    for g in gates:
        form, band, fixed = forms(g.metric), band_of(g), None
        if not (everywhere or g.sequential):
            fixed = "not sequential in the thresholds file (sequential: true, or --sequential)"
        elif band is None:
            fixed = "the baseline has no value: undefined at any n"
        elif form is None:
            fixed = f"{g.metric} has no sequential form"
        tracks.append(GateTrack(g, form if fixed is None else None, band, fixed, family=family))
    return tracks


@dataclass(frozen=True)
class GateReport:
    """What the results say of one gate of a sequential category (its verdict's ``sequential``,
    ``CategoryPlan.report``); a dict only in ``to_dict``, when the results document is made."""

    #: ``PASS`` / ``FAIL``, or None unless decided (at exhaustion the rule's CONTINUE is no state
    #: a reader can act on).
    decision: str | None
    #: ``"sequential"`` when decided on the CS, else ``"fixed-n"``.
    verdict_from: str
    #: the items the decision rests on (every item scored for a fixed-n verdict).
    n: int
    population: int
    #: the CS the decision rests on, or None (none kept once every item is scored).
    cs: tuple[float, float] | None
    alpha: float
    #: 1 for a one-sided band, whose CS is read one side at a time, so made at 2 alpha.
    sides: int
    #: the alpha a PASS is decided at (alpha / the run's sequential gates).
    pass_alpha: float
    #: the band, an open end as None.
    band: tuple[float | None, float | None] | None
    form: str | None
    #: what the CS covers (``GateTrack.look``): ``"items"``, the value over the selected items,
    #: or ``"parameter"``, the parameter behind them for a gate judged on its interval.
    target: str
    rounds: int
    round_size: int
    items_scored: int
    items_saved: int
    #: why the verdict is fixed-n, or None when decided sequentially.
    note: str | None

    def to_dict(self) -> dict[str, object]:
        """The verdict's ``sequential`` in results.json (``cs`` and ``band`` as lists)."""
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["cs"] = list(self.cs) if self.cs is not None else None
        out["band"] = list(self.band) if self.band is not None else None
        return out


@dataclass(frozen=True)
class SequentialSummary:
    """A sequential category's side (``CategoryOutcome.sequential``): rounds, items, and each
    gate's ``GateReport`` by test id."""

    population: int
    round_size: int
    rounds: int
    items_scored: int
    items_saved: int
    stopped_early: bool
    can_stop: bool
    gates: dict[str, GateReport]

    def to_dict(self) -> dict[str, object]:
        """The category's ``sequential`` in results.json."""
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["gates"] = {k: r.to_dict() for k, r in self.gates.items()}
        return out
