"""One chart per benchmark for the HTML report: each charted metric (its bias scores) by category,
with its confidence interval and the gate's band of allowed values, as an inline PNG.

matplotlib draws on its Agg canvas through ``matplotlib.figure.Figure`` (no pyplot state, no
display), so rendering works in a CI container and in any thread.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Mapping, Sequence, TypedDict

from .schema import Interval, MetricEntry, Results
from .views import aggregates

_COLOURS = ("#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#2ca02c", "#8c564b")
_BAND = "#2ca02c"


class ChartPoint(TypedDict):
    """One (category, charted metric) of a chart (``chart_points``)."""

    category: str
    metric: str
    value: float | None
    ci: Interval
    band: Interval | None


def chart_points(results: Results, bench: str) -> tuple[list[str], list[ChartPoint]]:
    """The categories and the points of ``bench``'s chart, from a results document.

    Returns
    -------
    categories : list of str
        The evaluated categories in report order, then ``pooled`` when the benchmark has it.
    points : list of dict
        One per (category, charted metric): ``category``, ``metric``, ``value`` (None when
        undefined), ``ci`` ([low, high] or Nones) and ``band`` ([low, high] allowed by the
        category's threshold gate on that metric, None ends open; None without a gate).
    """
    info = (results.get("benchmark_info") or {}).get(bench) or {}
    cats = {
        c: e for c, e in (results["benchmarks"].get(bench) or {}).items() if e.get("status", "ok") == "ok"
    }
    rows: dict[str, Mapping[str, MetricEntry]] = {c: e["metrics"] for c, e in cats.items()}
    pooled = aggregates(results, bench).get("pooled")
    if pooled:
        rows["pooled"] = pooled
    present = {m for metrics in rows.values() for m in metrics}
    metrics = [m for m in info.get("chart_metrics", ()) if m in present]
    bands = {
        (v["category"], v["metric"]): v.get("allowed")
        for v in results.get("gates", ())
        if v["benchmark"] == bench and v.get("kind", "threshold") == "threshold"
    }
    points: list[ChartPoint] = []
    for cat, values in rows.items():
        for metric in metrics:
            m = values.get(metric)
            if m is None:
                continue
            points.append(
                {
                    "category": cat,
                    "metric": metric,
                    "value": m.get("value"),
                    "ci": list(m.get("ci") or [None, None]),
                    "band": bands.get((cat, metric)),
                }
            )
    return list(rows), points


def _limits(points: Sequence[ChartPoint], value_range: Sequence[float] | None) -> tuple[float, float]:
    """y limits covering every value, interval and finite band end, clipped to the metric's range
    and then widened by 3% of the span, so a marker at the range's end (a bias score of exactly 1)
    is drawn inside the frame rather than on it."""
    ys = [y for p in points for y in [p["value"], *p["ci"], *(p["band"] or ())] if y is not None]
    if not ys:
        lo, hi = tuple(value_range) if value_range else (-1.0, 1.0)
        return lo - 0.03 * (hi - lo), hi + 0.03 * (hi - lo)
    lo, hi = min(ys), max(ys)
    pad = max((hi - lo) * 0.08, 1e-3 * max(1.0, abs(hi), abs(lo)))
    lo, hi = lo - pad, hi + pad
    if value_range:
        lo, hi = max(lo, value_range[0]), min(hi, value_range[1])
    margin = 0.03 * (hi - lo)
    return lo - margin, hi + margin


def render_chart(results: Results, bench: str) -> bytes | None:
    """PNG bytes of ``bench``'s chart, or None when it has no charted metric with a value.

    Each metric is one marker per category with its interval as an error bar; undefined values are
    written as "undefined" at the bottom; the green band behind a marker is the range of values its
    threshold gate allows (open ends reach the plot's edge).
    """
    from matplotlib.figure import Figure

    categories, points = chart_points(results, bench)
    if not points:
        return None
    info = (results.get("benchmark_info") or {}).get(bench) or {}
    metrics = list(dict.fromkeys(p["metric"] for p in points))
    ranges = info.get("metric_ranges") or {}
    value_range = None
    known = [ranges[m] for m in metrics if m in ranges]
    if known:
        value_range = (min(r[0] for r in known), max(r[1] for r in known))
    y_lo, y_hi = _limits(points, value_range)
    frame = _Frame({c: i for i, c in enumerate(categories)}, 0.8 / len(metrics), y_lo, y_hi)
    fig = Figure(figsize=(max(6.0, 0.55 * len(categories) * max(1, len(metrics) / 2) + 2.5), 3.8), dpi=100)
    ax = fig.subplots()
    banded = False
    for j, metric in enumerate(metrics):
        banded |= _plot_metric(ax, frame, j, metric, [p for p in points if p["metric"] == metric])
    if y_lo < 0 < y_hi:
        ax.axhline(0.0, color="#888888", lw=0.6, zorder=0)
    if banded:
        ax.add_patch(_rectangle(0, 0, 0, 0, label="gate: allowed values"))
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=40, ha="right", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    confidence = _confidence(results, bench)
    ax.set_title(f"{bench} by category" + (f", {confidence:.0%} intervals" if confidence else ""), fontsize=9)
    ax.legend(fontsize=7, loc="best", framealpha=0.8)
    ax.grid(axis="y", lw=0.3, alpha=0.5)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


@dataclass(frozen=True)
class _Frame:
    """Where a chart's markers go: each category's x, the width of one metric's slot, the y
    limits."""

    x_of: Mapping[str, int]
    slot: float
    y_lo: float
    y_hi: float


def _plot_metric(ax, frame: _Frame, j: int, metric: str, points: Sequence[ChartPoint]) -> bool:
    """The ``j``-th metric's markers, intervals, gate bands and "undefined" notes; whether it
    drew a band."""
    colour = _COLOURS[j % len(_COLOURS)]
    slot, y_lo, y_hi = frame.slot, frame.y_lo, frame.y_hi
    offset = -0.4 + slot * (j + 0.5)
    banded = False
    xs, ys, err_lo, err_hi = [], [], [], []
    for p in points:
        x = frame.x_of[p["category"]] + offset
        if p["band"] is not None:
            lo = y_lo if p["band"][0] is None else max(p["band"][0], y_lo)
            hi = y_hi if p["band"][1] is None else min(p["band"][1], y_hi)
            if hi > lo:
                ax.add_patch(_rectangle(x - slot / 2, lo, slot, hi - lo))
                banded = True
        if p["value"] is None:
            ax.annotate(
                "undefined",
                (x, y_lo),
                xytext=(0, 3),
                textcoords="offset points",
                rotation=90,
                fontsize=6,
                color=colour,
                ha="center",
                va="bottom",
            )
            continue
        ci_lo, ci_hi = p["ci"]
        xs.append(x)
        ys.append(p["value"])
        err_lo.append(0.0 if ci_lo is None else max(p["value"] - ci_lo, 0.0))
        err_hi.append(0.0 if ci_hi is None else max(ci_hi - p["value"], 0.0))
    ax.errorbar(xs, ys, yerr=[err_lo, err_hi], fmt="o", ms=4, capsize=2, lw=1, color=colour, label=metric)
    return banded


def _rectangle(x: float, y: float, w: float, h: float, label: str | None = None):
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=_BAND, alpha=0.18, edgecolor="none", zorder=0, label=label)


def _confidence(results: Results, bench: str) -> float | None:
    for entry in (results["benchmarks"].get(bench) or {}).values():
        for m in (entry.get("metrics") or {}).values():
            c = m.get("confidence")
            if c is not None and not math.isnan(c):
                return float(c)
    return None


def chart_data_uri(results: Results, bench: str) -> str | None:
    """``data:image/png;base64,...`` of ``render_chart``, or None when there is no chart."""
    png = render_chart(results, bench)
    return None if png is None else "data:image/png;base64," + base64.b64encode(png).decode("ascii")
