"""The JSON objects of results.json that a lower floor writes and ``report/`` reads, declared
once: the writer (a model backend, a benchmark) and the reader (``report.schema``) sit on floors
that may not import each other (reports never reach the models or the benchmarks), so the shape
they share sits below both.

``report.schema`` reads them as part of a ``Results`` document.
"""

from __future__ import annotations

from typing import TypedDict


class EndpointAccounting(TypedDict):
    """One inference-server endpoint the run used, and what it computed
    (``models.pool.Endpoint.accounting``; results' ``model.server.endpoints``)."""

    base_url: str
    state: str
    reason: str
    requests: int
    scored: int
    generated: int
    tokens: int
    retries: int
    failures: int
    seconds: float
    groups: int
    stolen: int
    taken_out: int
    readmitted: int


class BenchmarkInfo(TypedDict, total=False):
    """``Benchmark.report_info``: what the report says of a configured benchmark besides its
    numbers (results' ``benchmark_info.<bench>``).

    Every key is optional, as the reports read it: a results file may predate a key (e.g.
    ``judged_unit``), and only a declared dataset has a ``family``. ``report_info`` writes every
    other key."""

    title: str
    limitations: list[str]
    chart_metrics: list[str]
    rate_metrics: list[str]
    bias_metrics: list[str]
    pooled_category: str | None
    metric_ranges: dict[str, list[float]]
    table_legend: list[str]
    judged_unit: str | None
    #: a declared dataset's BBQ family (``DeclaredBBQ``).
    family: str
