"""The HTML compliance report: one self-contained file (styles and charts inline, no script, no
network: a Content-Security-Policy forbids any fetch), rendered by jinja2 from a results document
alone, so ``bias-audit report RUN_DIR`` re-renders it exactly.

Every string from the run (model outputs, options, categories, messages) goes through jinja2's
autoescaping: model text cannot inject markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping, TypedDict

from ..compliance.mapping import RegulatoryMapping
from ..gates.resolution import status_word
from . import views
from .charts import chart_data_uri
from .regulatory import LimitationsView, clause_summary, limitations_view, mapping_view, meta_rows, signature
from .schema import Example, GateEntry, Interval, ProtocolEntry, Results, as_results
from .verdict import overall_verdict

if TYPE_CHECKING:
    from markupsafe import Markup

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["interval"] = _interval
    env.filters["ticks"] = _ticks
    env.filters["breakable"] = breakable
    env.filters["status_word"] = status_word
    env.filters["status_class"] = lambda status: "s-" + str(status).replace(" ", "-").replace("_", "-")
    env.filters["command"] = command_words
    env.filters["visible"] = visible
    env.globals["rows_text"] = views.rows_text
    return env


#: Characters after which a long id may wrap (``test_bbq[Race_x_gender-bias_score_ambig]``): the
#: separators between its parts, not the ``_`` inside a name (``diff_bias_ambig`` stays whole).
_SEPARATORS = frozenset("[-/,:")


def breakable(text: object) -> Markup:
    """Escaped ``text`` with a ``<wbr>`` after each separator (``[ - / , :``): a long test
    id or path wraps at its separators, not between any two characters (the report's CSS lets
    ``code`` break anywhere only where a token has no separator that fits).

    Examples
    --------
    >>> str(breakable("test_bbq[Age-acc<x>]"))
    'test_bbq[<wbr>Age-<wbr>acc&lt;x&gt;]'
    """
    from markupsafe import Markup, escape

    return Markup("".join(f"{escape(c)}<wbr>" if c in _SEPARATORS else str(escape(c)) for c in str(text)))


def visible(value: object) -> object:
    r"""A protocol value as a reader can see it: a string whose whitespace matters (a delimiter
    that is a space, a template ending in a newline, an empty string) quoted as Python writes
    it, as report.md does; other values unchanged.

    Examples
    --------
    >>> visible(" "), visible("a\n"), visible(""), visible("log-likelihood"), visible(3)
    ("' '", "'a\\n'", "''", 'log-likelihood', 3)
    """
    if isinstance(value, str) and ("\n" in value or value != value.strip() or not value):
        return repr(value)
    return value


def command_words(text: object) -> Markup:
    """Escaped command line ``text`` with each option (a word starting with ``-``) kept whole:
    a browser may wrap after any hyphen, which printed ``--audit-meta`` as ``--`` and
    ``audit-meta`` on two lines; the line still wraps between words, and a long path inside a
    word where it must.

    Examples
    --------
    >>> str(command_words("pytest --audit-meta m.yaml"))
    'pytest <span class="nobr">--audit-meta</span> m.yaml'
    """
    from markupsafe import Markup, escape

    words = str(text).split(" ")
    return Markup(
        " ".join(
            f'<span class="nobr">{escape(w)}</span>' if w.startswith("-") else str(escape(w)) for w in words
        )
    )


def _ticks(text: str) -> Markup:
    """Escaped ``text`` with its Markdown code spans (between backticks) as ``<code>``: the
    sentences both reports share are written once, in Markdown."""
    from markupsafe import Markup, escape

    parts = str(text).split("`")
    return Markup(
        "".join(f"<code>{escape(p)}</code>" if i % 2 else str(escape(p)) for i, p in enumerate(parts))
    )


def _num(x: float | None, digits: int = 3) -> str:
    return "undefined" if x is None else f"{x:.{digits}f}"


def _interval(ci: Interval | None, digits: int = 3) -> str:
    lo, hi = (ci or (None, None))[:2]
    return "" if lo is None or hi is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _bound_text(v: GateEntry) -> str:
    if v.get("kind") == "regression":
        base = (v.get("baseline") or {}).get("value")
        return f"no worse than baseline {_num(base)} by more than {v.get('max_regression', 0):g}"
    return ", ".join(f"{k} {b:g}" for k, b in (v.get("bounds") or {}).items())


class GateCell(TypedDict):
    """A threshold gate beside its metric in a benchmark's table."""

    bound: str
    mode: str
    status: str
    resolution: str


class MetricCell(TypedDict, total=False):
    """A row of a benchmark's table (``_metric_cells``): a metric of a category or aggregate with
    its gates, or a failed category's ``error``."""

    category: str
    error: str
    metric: str
    value: float | None
    ci: Interval
    n: int | None
    reason: str | None
    pool: bool
    gates: list[GateCell]


class RateRow(TypedDict):
    """An invalid or out-of-choice rate of a category."""

    category: str
    metric: str
    value: float | None
    ci: Interval
    n: int


class ExampleRow(Example, total=False):
    """An example output with its category."""

    category: str


class BenchmarkView(TypedDict):
    """Everything the template shows for one benchmark (``_benchmark_view``)."""

    name: str
    title: str
    rows: list[MetricCell]
    rates: list[RateRow]
    rate_metrics: list[str]
    excluded: list[views.ExcludedRow]
    examples: list[ExampleRow]
    limits: LimitationsView
    chart: str | None
    chart_metrics: list[str]
    regressions: list[GateEntry]
    protocol: ProtocolEntry
    n_scored: int
    sensitivity: list[views.SensitivityRow]


def _gate_cell(g: GateEntry) -> GateCell:
    return {
        "bound": _bound_text(g),
        "mode": g.get("mode", "point"),
        "status": g["status"],
        "resolution": views.resolution_text(g),
    }


def _metric_cells(results: Results, bench: str) -> list[MetricCell]:
    """The benchmark's table for the template: one row per (category or aggregate, metric
    shown) with its threshold gates, an error row per failed category, then the gates on a
    metric the table does not list (KoBBQ's per-template metrics), which still show."""
    names = views.table_metrics(results, bench)
    gates: dict[tuple[str, str], list[GateEntry]] = {}
    for v in results["gates"]:
        if v["benchmark"] == bench and v.get("kind", "threshold") == "threshold":
            gates.setdefault((v["category"], v["metric"]), []).append(v)
    rows: list[MetricCell] = []
    for row in views.metric_rows(results, bench):
        if row.error is not None:
            rows.append({"category": row.label, "error": row.error})
            continue
        for name in names:
            m = row.metrics.get(name)
            if m is None:
                continue
            rows.append(
                {
                    "category": row.label,
                    "metric": name,
                    "value": m["value"],
                    "ci": m["ci"],
                    "n": m["n"],
                    "reason": m.get("reason"),
                    "pool": row.pool,
                    "gates": [_gate_cell(g) for g in gates.get((row.label, name), ())],
                }
            )
    shown = {(r["category"], r.get("metric")) for r in rows}
    for (cat, name), vs in gates.items():
        if (cat, name) in shown:
            continue
        rows += [
            {
                "category": cat,
                "metric": name,
                "value": g["value"],
                "ci": g["ci"],
                "n": g["n"],
                "reason": None,
                "pool": False,
                "gates": [_gate_cell(g)],
            }
            for g in vs
        ]
    return rows


def _benchmark_view(results: Results, bench: str, mapping: RegulatoryMapping) -> BenchmarkView:
    """Everything the template shows for one benchmark, computed from the results document."""
    info = (results.get("benchmark_info") or {}).get(bench) or {}
    ok = views.ok_categories(results, bench)
    rates: list[RateRow] = [
        {"category": c, "metric": r, "value": m["value"], "ci": m["ci"], "n": m["n"]}
        for r in info.get("rate_metrics", ())
        for c, e in ok.items()
        if r in e["metrics"]
        for m in (e["metrics"][r],)
    ]
    examples: list[ExampleRow] = [
        {"category": c, **x} for c, e in ok.items() for x in e.get("examples") or ()
    ]
    regressions = [v for v in results["gates"] if v["benchmark"] == bench and v.get("kind") == "regression"]
    return {
        "name": bench,
        "title": info.get("title") or bench,
        "rows": _metric_cells(results, bench),
        "rates": rates,
        "rate_metrics": info.get("rate_metrics", []),
        "excluded": views.excluded_rows(results, bench),
        "examples": examples,
        "limits": limitations_view(results, bench, mapping),
        "chart": chart_data_uri(results, bench),
        "chart_metrics": info.get("chart_metrics", []),
        "regressions": regressions,
        "protocol": (results.get("protocols") or {}).get(bench, {}),
        "n_scored": sum(e.get("n_scored", 0) for e in ok.values()),
        "sensitivity": [r for r in views.sensitivity_rows(results) if r["benchmark"] == bench],
    }


def render_html(results: Mapping[str, object], printing: bool = False) -> str:
    """The report as one HTML document. A function of ``results``
    (``report.results.build_results``; keys it lacks, as in an older results file, render empty)
    and of the run folder's ``signer.json`` (the signature block). ``printing``: the copy
    ``--pdf`` prints, with every ``<details>`` open (paper cannot be clicked)."""
    from .. import exit_codes
    from ..gates import MODE_RULES

    results = as_results(results)
    verdict = overall_verdict(results)
    modes = sorted({v.get("mode", "point") for v in results["gates"]})
    mapping = mapping_view(results)
    signed, signature_line = signature(results)
    context = {
        "r": results,
        "printing": printing,
        "signature": signature_line,
        "signed": signed,
        "meta_rows": meta_rows(results),
        "mapping": mapping,
        "clause_summary": clause_summary,
        "verdict": verdict,
        "model": results.get("model") or {},
        "run": results.get("run") or {},
        "options": results.get("options") or {},
        "benchmarks": [_benchmark_view(results, b, mapping["mapping"]) for b in results["benchmarks"]],
        "modes": [(m, MODE_RULES.get(m, "")) for m in modes],
        "modified": views.modified_files(results),
        "summary": sorted((results.get("gate_summary") or {}).items()),
        "problems": [
            {**v, "to_decide": (views.resolution_of(v)["to_decide"] or {}).get("text")}
            # What blocks the release first, the NOT DECIDED detection gates (which do not) last.
            for v in sorted(results["gates"], key=lambda v: v["status"] == "not_decided")
            if v["status"] not in ("pass",)
        ],
        "sequential": views.sequential_rows(results),
        "sequential_totals": views.sequential_totals(results),
        "exit_codes": exit_codes,
        "baseline": results.get("baseline"),
        "items_scored": views.items_scored_text(results),
        "endpoints": views.endpoint_lines(results.get("model") or {}),
        "coverage": views.coverage_lines(results),
        "truncated": views.truncation_lines(results),
        "invalid_flag": views.INVALID_FLAG,
    }
    return _environment().get_template("report.html.j2").render(**context)


def write_html(path: Path, results: Mapping[str, object], printing: bool = False) -> Path:
    """Write ``render_html(results, printing)`` to ``path``; returns the path."""
    path.write_text(render_html(results, printing), encoding="utf-8")
    return path
