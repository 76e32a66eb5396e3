"""``thresholds.yaml``: schema, validation and verdicts.

Schema (one section per benchmark)::

    bbq:
      defaults:                       # gates applied to every category of the benchmark
        bias_score_ambig: {abs_max: 0.05}
        acc_disambig: {min: 0.5}
      categories:                     # per-category overrides; `null` removes a default gate
        Age:
          bias_score_ambig: {abs_max: 0.08}
          acc_disambig: null

A gate is any of ``min``, ``max``, ``abs_max``, or ``target`` with ``tolerance``, plus
``basis: point`` (default: the point estimate must satisfy the bounds) or ``basis: ci`` (the
whole confidence interval must, a stricter release gate), and ``min_n``: the fewest items in the
metric's denominator a verdict may rest on (below it the verdict is ``insufficient``, which
fails). ``min_n`` defaults to the file's top-level ``min_n`` (else ``DEFAULT_MIN_N``), a
benchmark section may set its own, and a gate overrides both::

    min_n: 30
    bbq:
      min_n: 50
      defaults:
        acc_disambig: {min: 0.5, min_n: 100}

A NaN metric never passes.

Verdict statuses: ``pass``, ``fail``, ``undefined`` (NaN metric), ``insufficient`` (n < min_n),
``error`` (the category could not be evaluated: a model failure), ``not run`` (selected but never
evaluated: an interrupted or ``-x`` run), ``skipped`` (its data file is missing upstream; written by
the plugin). Only ``pass`` passes.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from bias_metrics.result import MetricResult

from .errors import ConfigError

BOUND_KEYS = ("min", "max", "abs_max", "target", "tolerance")
GATE_KEYS = BOUND_KEYS + ("basis", "min_n")
BASES = ("point", "ci")
#: Items in a metric's denominator below which no gate passes, when thresholds.yaml sets none.
DEFAULT_MIN_N = 30
STATUSES = ("pass", "fail", "undefined", "insufficient", "error", "not run", "skipped")


@dataclass(frozen=True)
class Gate:
    """One (benchmark, category, metric) release gate.

    Attributes:
        benchmark, category, metric: what is gated (metric names are the benchmark's flavour's).
        min, max, abs_max, target, tolerance: bounds; ``None`` when not set.
        basis: ``"point"`` or ``"ci"``.
        min_n: fewest items in the metric's denominator (``MetricResult.n``) a verdict may rest on.
    """

    benchmark: str
    category: str
    metric: str
    min: float | None = None
    max: float | None = None
    abs_max: float | None = None
    target: float | None = None
    tolerance: float | None = None
    basis: str = "point"
    min_n: int = DEFAULT_MIN_N

    @property
    def test_id(self) -> str:
        """The pytest parameter id, e.g. ``Age-bias_score_ambig``."""
        return f"{self.category}-{self.metric}"

    def describe(self) -> str:
        """Bounds as text, e.g. ``|x| <= 0.05``."""
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        if self.abs_max is not None:
            parts.append(f"|x| <= {self.abs_max:g}")
        if self.target is not None:
            parts.append(f"{self.target:g} +- {self.tolerance:g}")
        text = " and ".join(parts)
        return text + (" (whole CI)" if self.basis == "ci" else "")

    def bounds(self) -> dict[str, float]:
        """Set bounds as a dict (for JUnit properties and results)."""
        return {k: getattr(self, k) for k in BOUND_KEYS if getattr(self, k) is not None}

    def _holds(self, x: float) -> bool:
        if self.min is not None and x < self.min:
            return False
        if self.max is not None and x > self.max:
            return False
        if self.abs_max is not None and abs(x) > self.abs_max:
            return False
        if self.target is not None and abs(x - self.target) > self.tolerance:
            return False
        return True

    def evaluate(self, metric: MetricResult) -> "Verdict":
        """Verdict of this gate on ``metric``: ``undefined`` when the value (or, with basis ci,
        the interval) is NaN; else ``insufficient`` when ``metric.n < min_n``; else ``pass`` or
        ``fail``."""
        bound = self.describe()
        where = f"{self.benchmark}/{self.category}/{self.metric}"
        # Undefined first: when the denominator is empty for a reason a larger sample may never
        # fix (every answer out-of-choice), "raise --limit" would be the wrong advice.
        if not metric.defined:
            return Verdict(self, "undefined", metric,
                           f"{where} is undefined ({metric.reason or 'NaN'}; n={metric.n}); "
                           f"an undefined metric never passes the gate {bound}")
        if metric.n < self.min_n:
            return Verdict(self, "insufficient", metric,
                           f"{where} = {metric.value:.4f} rests on n={metric.n} items, fewer than "
                           f"min_n={self.min_n}: {self.min_n - metric.n} more needed in its "
                           f"denominator (raise --limit, or lower min_n in the thresholds file) "
                           f"before the gate {bound} can pass")
        if self.basis == "ci":
            lo, hi = metric.ci_low, metric.ci_high
            if math.isnan(lo) or math.isnan(hi):
                return Verdict(self, "undefined", metric,
                               f"{where} = {metric.value:.4f} has no confidence interval "
                               f"(n={metric.n}); the gate {bound} needs one")
            ok = self._holds(lo) and self._holds(hi) and self._holds(metric.value)
            shown = f"{metric.value:.4f} (CI {lo:.4f} .. {hi:.4f})"
        else:
            ok = self._holds(metric.value)
            shown = f"{metric.value:.4f}"
        status = "pass" if ok else "fail"
        return Verdict(self, status, metric,
                       f"{where} = {shown}, n={metric.n}: {'within' if ok else 'violates'} {bound}")


@dataclass(frozen=True)
class Verdict:
    """Outcome of one gate: ``status`` is one of ``STATUSES``; ``metric`` is None for ``error``
    and ``not run``."""

    gate: Gate
    status: str
    metric: MetricResult | None
    message: str

    @classmethod
    def error(cls, gate: Gate, message: str) -> "Verdict":
        """The verdict of a gate whose category could not be evaluated (``message`` says why)."""
        return cls(gate, "error", None, message)

    @classmethod
    def not_run(cls, gate: Gate, why: str) -> "Verdict":
        """The verdict of a selected gate that was never evaluated (``why``: interrupted, ...)."""
        return cls(gate, "not run", None, f"{gate.benchmark}/{gate.category}/{gate.metric}: not run ({why})")

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def __repr__(self) -> str:  # short, as pytest prints it under a failed assertion
        return f"Verdict({self.status})"

    def to_dict(self) -> dict[str, Any]:
        m = self.metric.to_dict() if self.metric is not None else None
        return {"benchmark": self.gate.benchmark, "category": self.gate.category,
                "metric": self.gate.metric, "status": self.status, "bounds": self.gate.bounds(),
                "basis": self.gate.basis, "min_n": self.gate.min_n,
                "value": m["value"] if m else None, "ci": m["ci"] if m else [None, None],
                "clusters": m.get("clusters") if m else None, "n": m["n"] if m else None,
                "message": self.message}


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _min_n(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: min_n must be an integer >= 0, got {value!r}")
    return value


def _parse_gate(spec: Any, benchmark: str, category: str, metric: str, where: str,
                min_n: int = DEFAULT_MIN_N) -> Gate:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: a gate is a mapping of {', '.join(GATE_KEYS)}, got {spec!r}")
    unknown = sorted(set(spec) - set(GATE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown gate key {unknown[0]!r}; allowed: {', '.join(GATE_KEYS)}")
    bounds = {k: _number(spec[k], f"{where}.{k}") for k in BOUND_KEYS if k in spec}
    basis = spec.get("basis", "point")
    if basis not in BASES:
        raise ConfigError(f"{where}.basis: must be one of {BASES}, got {basis!r}")
    if ("target" in bounds) != ("tolerance" in bounds):
        raise ConfigError(f"{where}: 'target' and 'tolerance' go together")
    if not bounds:
        raise ConfigError(f"{where}: a gate needs at least one of min, max, abs_max, target")
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise ConfigError(f"{where}: min {bounds['min']} > max {bounds['max']}")
    for k in ("abs_max", "tolerance"):
        if k in bounds and bounds[k] < 0:
            raise ConfigError(f"{where}.{k}: must be >= 0, got {bounds[k]}")
    if "min_n" in spec:
        min_n = _min_n(spec["min_n"], f"{where}.min_n")
    return Gate(benchmark, category, metric, basis=basis, min_n=min_n, **bounds)


def _check_known(path: Path, where: str, kind: str, keys, known: tuple[str, ...]) -> None:
    for key in keys:
        if key not in known:
            raise ConfigError(f"{path}: {where}: unknown {kind} {key!r}; known: {', '.join(known)}")


def load_thresholds(path: Path, catalogue: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]],
                    min_n: int | None = None) -> dict[str, list[Gate]]:
    """Read and validate a thresholds file.

    Args:
        path: the YAML file.
        catalogue: ``{benchmark: (categories, metric names)}`` of the benchmarks the suite knows.
        min_n: when given (``--min-n``), every gate's min_n, whatever the file says.
    Returns:
        ``{benchmark: [Gate, ...]}`` in category order, then the file's metric order.
    Raises:
        ConfigError: unreadable YAML (with its line), or an unknown benchmark, category, metric or
            gate key, each named with its path in the file (e.g. ``bbq.categories.Agee``).
    """
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"thresholds file not found: {path}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: the top level must map benchmark names to sections")
    gates: dict[str, list[Gate]] = {}
    file_min_n = _min_n(raw["min_n"], f"{path}: min_n") if "min_n" in raw else DEFAULT_MIN_N
    for bench, section in raw.items():
        if bench == "min_n":
            continue
        if bench not in catalogue:
            raise ConfigError(f"{path}: unknown benchmark {bench!r}; known: {', '.join(sorted(catalogue))}")
        categories, metrics = catalogue[bench]
        if not isinstance(section, Mapping):
            raise ConfigError(f"{path}: {bench}: expected a mapping with 'defaults' and/or 'categories'")
        extra = sorted(set(section) - {"defaults", "categories", "min_n"})
        if extra:
            raise ConfigError(f"{path}: {bench}: unknown key {extra[0]!r}; allowed: defaults, "
                              "categories, min_n")
        bench_min_n = (_min_n(section["min_n"], f"{path}: {bench}.min_n") if "min_n" in section
                       else file_min_n)
        defaults = section.get("defaults") or {}
        overrides = section.get("categories") or {}
        for where, block in ((f"{bench}.defaults", defaults), (f"{bench}.categories", overrides)):
            if not isinstance(block, Mapping):
                raise ConfigError(f"{path}: {where}: expected a mapping")
        _check_known(path, f"{bench}.defaults", "metric", defaults, metrics)
        _check_known(path, f"{bench}.categories", "category", overrides, categories)
        for cat, block in overrides.items():
            if not isinstance(block, Mapping):
                raise ConfigError(f"{path}: {bench}.categories.{cat}: expected a mapping of metrics")
            _check_known(path, f"{bench}.categories.{cat}", "metric", block, metrics)
        out: list[Gate] = []
        for cat in categories:
            merged = dict(defaults)
            merged.update(overrides.get(cat) or {})
            for metric, spec in merged.items():
                if spec is None:  # an override of `null` removes the default gate
                    continue
                origin = (f"{bench}.categories.{cat}.{metric}" if metric in (overrides.get(cat) or {})
                          else f"{bench}.defaults.{metric}")
                gate = _parse_gate(spec, bench, cat, metric, f"{path}: {origin}", bench_min_n)
                out.append(gate if min_n is None else dataclasses.replace(gate, min_n=min_n))
        gates[bench] = out
    return gates
