"""pytest-xdist scheduling of an audit: all gates of a category on one worker, so the model scores
the category once (a benchmark whose categories share items stays whole on one worker)."""

from __future__ import annotations

import re
from typing import Mapping

_GATE_NODEID = re.compile(r"^(?P<func>.+)\[(?P<category>[^\[\]]+)-(?P<metric>[A-Za-z0-9_]+)\]$")
_PARAM_NODEID = re.compile(r"^(?P<func>.+)\[(?P<param>[^\[\]]+)\]$")


def category_scope(
    nodeid: str, gate_categories: dict[str, str] | None = None, whole: frozenset[str] = frozenset()
) -> str:
    """xdist scope of a test: ``<test function>[<category>]`` for a gate test, so all gates of a
    category share a worker and the model scores the category once; for the test functions in
    ``whole`` (benchmarks whose categories share items, ``Benchmark.shared_items``) the function
    itself, so every pair is scored once; the node id otherwise.

    ``gate_categories`` maps the run's gate test ids (``Gate.test_id``) to their categories: it
    settles ids whose metric part holds a ``-`` (``age-diff_bias_ambig-letter`` is category
    ``age``), which the fallback pattern (category, ``-``, a metric of ``[A-Za-z0-9_]``) cannot.

    Examples
    --------
    >>> category_scope("audits/test_bbq.py::test_bbq[Age-acc_ambig]")
    'audits/test_bbq.py::test_bbq[Age]'
    """
    m = _PARAM_NODEID.match(nodeid)
    if m and gate_categories and m["param"] in gate_categories:
        func, category = m["func"], gate_categories[m["param"]]
    else:
        g = _GATE_NODEID.match(nodeid)
        if not g:
            return nodeid
        func, category = g["func"], g["category"]
    return func if func.rsplit("::", 1)[-1] in whole else f"{func}[{category}]"


def gate_categories(gates: Mapping[str, list]) -> dict[str, str]:
    """``{test id: category}`` of ``gates``, for ``category_scope``; an id that two benchmarks
    use for different categories is left to the fallback pattern."""
    seen: dict[str, set[str]] = {}
    for gs in gates.values():
        for g in gs:
            seen.setdefault(g.test_id, set()).add(g.category)
    return {tid: next(iter(cats)) for tid, cats in seen.items() if len(cats) == 1}


def category_scheduler(config, log, gates: Mapping[str, list], whole: frozenset[str]):
    """xdist's ``LoadScopeScheduling`` scoped by ``category_scope``."""
    from xdist.scheduler import LoadScopeScheduling

    categories = gate_categories(gates)

    class CategoryScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return category_scope(nodeid, categories, whole)

    return CategoryScheduling(config, log)


def gate_of_nodeid(nodeid: str, gates: Mapping[str, list]):
    """The Gate a gate test's node id names (``...::test_<benchmark>[<Gate.test_id>]``)."""
    m = _PARAM_NODEID.match(nodeid)
    if not m:
        return None
    bench = m["func"].rsplit("::", 1)[-1].removeprefix("test_")
    return next((g for g in gates.get(bench, ()) if g.test_id == m["param"]), None)
