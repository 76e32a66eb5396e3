"""Which benchmarks a pytest run will audit, known before collection (so that missing data stops the
run at start-up, before xdist starts workers).

From the command line's paths under the audits folder (each audit module names its benchmarks in
``@pytest.mark.audit("<name>")``) and the ``-k`` expression evaluated, as pytest does, against the
gate test names the plugin will generate (``test_bbq[Age-bias_score_ambig]``). Conservative: when
anything cannot be read, the benchmark counts as selected.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

_AUDIT_TEST = re.compile(
    r"@pytest\.mark\.audit\(\s*['\"](?P<bench>[\w-]+)['\"]\s*\)\s*\n\s*def\s+(?P<func>test_\w+)"
)


#: The class of the declared datasets' tests (audits/test_declared.py): a test_<name> per dataset.
_DECLARED_CLASS = re.compile(r"@pytest\.mark\.audit_declared\s*\n\s*class\s+\w+")


def audit_functions(module: Path, declared: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(benchmark, test function)`` pairs declared in one audit module; a module holding the
    declared datasets' class has a ``test_<name>`` for each of ``declared``."""
    try:
        text = module.read_text(encoding="utf-8")
    except OSError:
        return []
    found = [(m["bench"], m["func"]) for m in _AUDIT_TEST.finditer(text)]
    if _DECLARED_CLASS.search(text):
        found += [(name, f"test_{name}") for name in declared]
    return found


def _declared(audits_dir: Path, gate_ids: Mapping[str, Iterable[str]]) -> list[str]:
    """The benchmarks with gates that no audit module names: the declared datasets
    (``--bbq-dataset``), whose tests the declared datasets' class holds."""
    named = {bench for module in Path(audits_dir).glob("test_*.py") for bench, _ in audit_functions(module)}
    return [bench for bench in gate_ids if bench not in named]


def _candidates(
    audits_dir: Path, args: Iterable[str], invocation_dir: Path, declared: Sequence[str] = ()
) -> list[tuple[str, str, str]]:
    """``(benchmark, test function, module file name)`` of the audit tests the paths name
    (``declared``: the run's declared datasets)."""
    audits_dir = audits_dir.resolve()
    candidates: list[tuple[str, str, str]] = []
    for arg in args:
        raw_path, _, rest = arg.partition("::")
        path = (Path(invocation_dir) / raw_path).resolve()
        if path != audits_dir and audits_dir not in path.parents:
            continue
        modules = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
        # The last part names the function (``TestDeclared::test_mybbq``); a class alone keeps all.
        only = rest.split("[", 1)[0].split("::")[-1] if rest else None
        for module in modules:
            found = audit_functions(module, declared)
            if only is not None and only.startswith("Test") and only not in {f for _, f in found}:
                only = None
            for bench, func in found:
                if only is None or only == func:
                    candidates.append((bench, func, module.name))
    return candidates


def selected_gate_ids(
    audits_dir: Path,
    args: Iterable[str],
    invocation_dir: Path,
    keyword: str | None,
    gate_ids: Mapping[str, Iterable[str]],
) -> dict[str, list[str]]:
    """Per benchmark whose audit test the paths name, the gate ids (``Age-bias_score_ambig``)
    the ``-k`` expression keeps, in ``gate_ids`` order; a benchmark without gates maps to ``[]``
    when its test function itself matches. Arguments as ``selected_benchmarks``."""
    matcher = _keyword_filter(keyword)
    out: dict[str, list[str]] = {}
    dirname = audits_dir.resolve().name
    for bench, func, module in _candidates(audits_dir, args, invocation_dir, _declared(audits_dir, gate_ids)):
        ids = list(gate_ids.get(bench, ()))
        if not ids:
            if matcher([func, module, dirname, "audit"]):
                out.setdefault(bench, [])
            continue
        kept = [i for i in ids if matcher([f"{func}[{i}]", module, dirname, "audit"])]
        if kept:
            have = out.setdefault(bench, [])
            have.extend(i for i in kept if i not in have)
    return out


def selected_benchmarks(
    audits_dir: Path,
    args: Iterable[str],
    invocation_dir: Path,
    keyword: str | None,
    gate_ids: Mapping[str, Iterable[str]],
) -> list[str]:
    """Benchmarks whose gate tests the run may select.

    Args:
        audits_dir: the audits folder (the package's ``audit_harness/audits``; the repository's
            ``audits/`` links to it).
        args: pytest's positional arguments (paths, optionally ``::test_name[...]``).
        invocation_dir: where pytest was started (relative paths are resolved from it).
        keyword: the ``-k`` expression, or None/empty.
        gate_ids: per benchmark, the ids of its gates (``Age-bias_score_ambig``).
    """
    return list(selected_gate_ids(audits_dir, args, invocation_dir, keyword, gate_ids))


def _keyword_filter(keyword: str | None):
    """A predicate over an item's names that mirrors ``-k`` (case-insensitive substrings)."""
    if not keyword:
        return lambda names: True
    try:
        from _pytest.mark.expression import Expression

        expr = Expression.compile(keyword)
    except Exception:  # a private API or a syntax error pytest itself will report: select all
        return lambda names: True

    def match(names: list[str]) -> bool:
        lowered = [n.lower() for n in names]

        def has(sub: str, **_kwargs) -> bool:
            return any(sub.lower() in n for n in lowered)

        try:
            return expr.evaluate(has)
        except Exception:
            return True

    return match
