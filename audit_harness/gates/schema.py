"""``thresholds.yaml``: schema and validation.

Schema (one section per benchmark)::

    min_n: 30                         # optional file-wide defaults: min_n, mode, confidence,
                                      # sequential
    confidence: 0.95                  # the interval level the gates are signed off at
    bbq:
      mode: point                     # optional section defaults: min_n, mode, max_regression,
                                      # confidence, sequential
      max_regression: 0.02
      defaults:                       # gates applied to every category of the benchmark
        bias_score_ambig: {abs_max: 0.05}
        acc_disambig: {min: 0.5}
      categories:                     # per-category overrides; `null` removes a default gate
        Age:
          bias_score_ambig: {abs_max: 0.08, mode: ci_inside}
          acc_disambig: null
      pooled:                         # gates on every item of the selected categories together
        diff_bias_ambig: {abs_max: 0.05, mode: ci_three_way}

A gate is any of ``min``, ``max``, ``abs_max``, or ``target`` with ``tolerance``, plus ``mode``
(``point``, ``ci_inside``, ``ci_overlap``, ``ci_three_way``, ``ci_detect``: ``gates.modes``), ``min_n`` (the fewest items in the
metric's denominator a verdict may rest on; below it the verdict is ``insufficient``) and
``max_regression`` (how much worse than a ``--baseline`` run the metric may get,
``gates.regression``), and ``sequential`` (``true``: decide the gate on a confidence sequence while
its category is scored in rounds, stopping early once every gate of the category is settled;
``gates.sequential``, docs/gates.md). A gate's key wins over its section's, which wins
over the file's. A ``pooled:`` section (metric -> gate, as a category's block) gates the
benchmark's pooled categories (``Benchmark.pooled_names``: ``pooled``, MBBQ's ``pooled_<lang>``),
each judged on the items of every selected category together, test id ``pooled-<metric>``; on a
benchmark that cannot pool, or with a metric it does not have, it is an error naming the line. The
old ``basis: point | ci`` is still read (``ci`` = ``ci_inside``) with a deprecation warning.

``confidence`` (file or section; default 0.95, at least ``CONFIDENCE_FLOOR`` = 0.9 unless the run
allows lower with ``--allow-low-confidence``) is the interval level the gates were signed off
at: a run whose intervals are more lenient than that, or rest on too few bootstrap resamples,
gets INSUFFICIENT instead of a verdict (``Gate.evaluate``). The file is read strictly: a key
written twice in one mapping is an error naming both lines (plain YAML keeps the last one).

Bounds are checked against the metric's declared range (``Benchmark.metric_range``), so a bound on
the wrong scale (``abs_max: 5`` on a fraction in [-1, 1], ``max: 10`` meaning 10 % of a rate in
[0, 1]) stops the run instead of making a gate that can never fail, or never pass.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Hashable, Mapping, Sequence, TypedDict, Union

import yaml

from ..errors import ConfigError
from ..option_spec import check_confidence
from .gate import BOUND_KEYS, CONFIDENCE_FLOOR, DEFAULT_CONFIDENCE, DEFAULT_MIN_N, Gate
from .modes import MODES

GATE_KEYS = BOUND_KEYS + ("mode", "min_n", "max_regression", "sequential", "basis")
SECTION_KEYS = (
    "defaults",
    "categories",
    "pooled",
    "min_n",
    "mode",
    "max_regression",
    "confidence",
    "sequential",
)
#: Keys of the file's top level besides the benchmark sections.
FILE_KEYS = ("min_n", "mode", "confidence", "sequential")
#: What an unknown section may be: a dataset of the user's own, not declared in this run.
_DECLARE = " (a BBQ-format dataset of your own is known once declared: --bbq-dataset FILE)"
#: ``basis`` values of the old schema and the mode each now means.
DEPRECATED_BASES = {"point": "point", "ci": "ci_inside"}
#: A metric's closed value range ``(low, high)`` (``Benchmark.metric_range``).
_Range = tuple[float, float]
#: A catalogue entry (``load_thresholds``): (categories, metrics[, ranges[, pooled names]]).
Known = Union[
    tuple[Sequence[str], Sequence[str]],
    tuple[Sequence[str], Sequence[str], Mapping[str, _Range]],
    tuple[Sequence[str], Sequence[str], Mapping[str, _Range], Sequence[str]],
]


class Inherited(TypedDict):
    """The settings a gate takes from its section, or the file, unless it sets them itself."""

    min_n: int
    mode: str
    max_regression: float
    confidence: float
    sequential: bool


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping. Plain YAML keeps the
    last one silently, which in a gates file deletes a whole section or loosens a bound."""


def _refuse_duplicates(
    loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False
) -> dict[Hashable, object]:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:` merges may be overridden by design
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in seen:
                raise ConfigError(
                    f"duplicated key {key!r} at lines {seen[key]} and {line}: YAML "
                    "would keep only the last one, silently replacing the first; a "
                    "gates file must say each key once"
                )
            seen[key] = line
        except TypeError:  # an unhashable key: SafeLoader's own error says so below
            continue
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _refuse_duplicates)


def read_yaml_strict(path: Path) -> object:
    """The YAML document at ``path``, refusing duplicated keys at any level.

    Raises
    ------
    ConfigError
        The file is missing, not valid YAML (with its line), or writes a key twice in one
        mapping (naming the key and both line numbers).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"thresholds file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the thresholds file: {e}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


class ThresholdsDeprecationWarning(FutureWarning):
    """A thresholds.yaml key that still works but will go (shown to users, not only developers)."""


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _min_n(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: min_n must be an integer >= 0, got {value!r}")
    return value


def _mode(value: object, where: str) -> str:
    if value not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, got {value!r}")
    return str(value)


def _confidence(value: object, where: str, allow_low: bool = False) -> float:
    level = _number(value, where)
    check_confidence(level, f"{where}: confidence", ", e.g. 0.95", f"{level:g}")
    # A lower level narrows every interval a gate is signed off at: at 0.01 a four-item interval
    # is a point and clears any band, so the file alone must not be able to lower it.
    if level < CONFIDENCE_FLOOR and not allow_low:
        raise ConfigError(
            f"{where}: confidence {level:g} is below the floor of {CONFIDENCE_FLOOR:g} a gates file "
            "may sign off at (a narrower interval passes more easily); raise it, or run with "
            "--allow-low-confidence, which the verdict then names"
        )
    return level


def _sequential(value: object, where: str) -> bool:
    # Only YAML booleans: a string such as "no" or "false" in quotes would be truthy in Python,
    # and a gate that silently became sequential (or did not) changes how it is decided.
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: sequential must be true or false, got {value!r}")
    return value


def _max_regression(value: object, where: str) -> float:
    regression = _number(value, where)
    if regression < 0:
        raise ConfigError(f"{where}: max_regression must be >= 0, got {regression:g}")
    return regression


def _range_text(lo: float, hi: float) -> str:
    return f"[{lo:g}, {hi:g}]"


def check_scale(
    bounds: Mapping[str, float],
    max_regression: float | None,
    value_range: tuple[float, float] | None,
    where: str,
) -> None:
    """Raise ConfigError when a bound cannot be meant for a metric whose values lie in
    ``value_range`` (``None``: unbounded, nothing to check): ``min`` or ``max`` outside it, an
    ``abs_max`` beyond its largest magnitude, a ``target`` outside it, or a ``tolerance`` or
    ``max_regression`` wider than it. Such a gate either never fails or never passes."""
    if value_range is None:
        return
    lo, hi = value_range
    span = _range_text(lo, hi)
    hint = f"the metric's values lie in {span}; a bound on another scale (percent vs fraction?)"
    problems = []
    for key in ("min", "max", "target"):
        if key in bounds and not lo <= bounds[key] <= hi:
            problems.append(f"{key} {bounds[key]:g} is outside {span}")
    if "abs_max" in bounds and bounds["abs_max"] > max(abs(lo), abs(hi)):
        problems.append(
            f"abs_max {bounds['abs_max']:g} exceeds every |value| in {span}, so the gate cannot fail"
        )
    for key, value in (("tolerance", bounds.get("tolerance")), ("max_regression", max_regression)):
        if value is not None and value > hi - lo:
            problems.append(f"{key} {value:g} is wider than {span}")
    if problems:
        raise ConfigError(f"{where}: {'; '.join(problems)}: {hint}")


def _parse_gate(
    spec: object,
    key: tuple[str, str, str],
    where: str,
    inherited: Inherited,
    value_range: tuple[float, float] | None,
) -> Gate:
    """The gate ``spec`` of ``key`` (benchmark, category, metric), with the settings it does not
    set itself from ``inherited`` (file and benchmark level)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: a gate is a mapping of {', '.join(GATE_KEYS[:-1])}, got {spec!r}")
    unknown = sorted(set(spec) - set(GATE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown gate key {unknown[0]!r}; allowed: {', '.join(GATE_KEYS[:-1])}")
    bounds = _gate_bounds(spec, where)
    mode = _gate_mode(spec, where, inherited["mode"])
    min_n = _min_n(spec["min_n"], f"{where}.min_n") if "min_n" in spec else inherited["min_n"]
    max_regression = (
        _max_regression(spec["max_regression"], f"{where}.max_regression")
        if "max_regression" in spec
        else inherited["max_regression"]
    )
    sequential = (
        _sequential(spec["sequential"], f"{where}.sequential")
        if "sequential" in spec
        else inherited["sequential"]
    )
    check_scale(bounds, max_regression, value_range, where)
    return Gate(
        *key,
        mode=mode,
        min_n=min_n,
        max_regression=max_regression,
        confidence=inherited["confidence"],
        sequential=sequential,
        min=bounds.get("min"),
        max=bounds.get("max"),
        abs_max=bounds.get("abs_max"),
        target=bounds.get("target"),
        tolerance=bounds.get("tolerance"),
    )


def _gate_bounds(spec: Mapping[str, object], where: str) -> dict[str, float]:
    """A gate's bounds (``BOUND_KEYS``), checked: at least one, target with tolerance, min not
    above max, no negative width."""
    bounds = {k: _number(spec[k], f"{where}.{k}") for k in BOUND_KEYS if k in spec}
    if ("target" in bounds) != ("tolerance" in bounds):
        raise ConfigError(f"{where}: 'target' and 'tolerance' go together")
    if not bounds:
        raise ConfigError(f"{where}: a gate needs at least one of min, max, abs_max, target")
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise ConfigError(f"{where}: min {bounds['min']} > max {bounds['max']}")
    for k in ("abs_max", "tolerance"):
        if k in bounds and bounds[k] < 0:
            raise ConfigError(f"{where}.{k}: must be >= 0, got {bounds[k]}")
    return bounds


def _gate_mode(spec: Mapping[str, object], where: str, mode: str) -> str:
    """A gate's decision mode: its ``mode``, or its deprecated ``basis`` (which warns), else the
    inherited ``mode``."""
    if "basis" in spec:
        if spec["basis"] not in DEPRECATED_BASES:
            raise ConfigError(
                f"{where}.basis: deprecated key; its values were point or ci, got "
                f"{spec['basis']!r}: use mode: {' | '.join(MODES)}"
            )
        mode = DEPRECATED_BASES[spec["basis"]]
        if "mode" in spec and spec["mode"] != mode:
            raise ConfigError(
                f"{where}: basis {spec['basis']!r} contradicts mode {spec['mode']!r}; keep mode only"
            )
        warnings.warn(
            ThresholdsDeprecationWarning(
                f"{where}.basis is deprecated: write `mode: {mode}` (modes: {', '.join(MODES)})"
            ),
            stacklevel=2,
        )
    if "mode" in spec:
        mode = _mode(spec["mode"], f"{where}.mode")
    return mode


def _check_known(
    path: Path, where: str, kind: str, block: Mapping[object, object], known: Sequence[str]
) -> dict[str, object]:
    """``block`` once each of its keys is one of ``known`` (so a name, not any YAML scalar)."""
    checked: dict[str, object] = {}
    for key, value in block.items():
        if not isinstance(key, str) or key not in known:
            raise ConfigError(f"{path}: {where}: unknown {kind} {key!r}; known: {', '.join(known)}")
        checked[key] = value
    return checked


def _mapping(value: object, where: str) -> Mapping[object, object]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping")
    return value


def load_thresholds(
    path: Path,
    catalogue: Mapping[str, Known],
    min_n: int | None = None,
    allow_low_confidence: bool = False,
) -> dict[str, list[Gate]]:
    """Read and validate a thresholds file.

    Parameters
    ----------
    path : Path
        The YAML file.
    catalogue : mapping
        ``{benchmark: (categories, metrics[, {metric: (low, high)}[, pooled names]])}``: the
        optional value ranges (``Benchmark.metric_range``) for the scale check, and the pooled
        categories a ``pooled:`` section makes (``Benchmark.pooled_names``; none: cannot pool).
    min_n : int, optional
        When given (``--min-n``), every gate's min_n, whatever the file says.
    allow_low_confidence : bool, default=False
        ``--allow-low-confidence``: accept a ``confidence`` below ``CONFIDENCE_FLOOR``.

    Returns
    -------
    dict
        ``{benchmark: [Gate, ...]}``: pooled gates, then by category, in the file's metric order.

    Raises
    ------
    ConfigError
        Unreadable YAML (with its line); a key written twice (both lines); an unknown benchmark,
        category, metric, key or mode; a bound on the wrong scale; a ``confidence`` below
        ``CONFIDENCE_FLOOR`` unless ``allow_low_confidence``; each named with its path in the file (e.g.
        ``bbq.categories.Agee``). A deprecated ``basis`` key warns
        (``ThresholdsDeprecationWarning``) instead.
    """
    raw = read_yaml_strict(path)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: the top level must map benchmark names to sections")
    file_level = _file_settings(path, raw, allow_low_confidence)
    gates: dict[str, list[Gate]] = {}
    for bench, section in raw.items():
        if bench in FILE_KEYS:
            continue
        if bench not in catalogue:
            raise ConfigError(
                f"{path}: unknown benchmark {bench!r}; known: {', '.join(sorted(catalogue))}{_DECLARE}"
            )
        if not isinstance(section, Mapping):
            raise ConfigError(f"{path}: {bench}: expected a mapping with 'defaults' and/or 'categories'")
        extra = sorted(set(section) - set(SECTION_KEYS))
        if extra:
            raise ConfigError(
                f"{path}: {bench}: unknown key {extra[0]!r}; allowed: {', '.join(SECTION_KEYS)}"
            )
        inherited = _section_settings(path, bench, section, file_level, allow_low_confidence)
        out = _section_gates(path, bench, section, catalogue[bench], inherited)
        gates[bench] = out if min_n is None else [dataclasses.replace(g, min_n=min_n) for g in out]
    return gates


def _file_settings(path: Path, raw: Mapping[object, object], allow_low: bool) -> Inherited:
    """The settings every gate inherits unless its benchmark or itself sets them: the file's
    own, else the defaults."""
    return {
        "min_n": _min_n(raw["min_n"], f"{path}: min_n") if "min_n" in raw else DEFAULT_MIN_N,
        "mode": _mode(raw["mode"], f"{path}: mode") if "mode" in raw else "point",
        "max_regression": 0.0,
        "confidence": (
            _confidence(raw["confidence"], f"{path}: confidence", allow_low)
            if "confidence" in raw
            else DEFAULT_CONFIDENCE
        ),
        "sequential": _sequential(raw["sequential"], f"{path}: sequential") if "sequential" in raw else False,
    }


def _section_settings(
    path: Path, bench: str, section: Mapping[object, object], file_level: Inherited, allow_low: bool
) -> Inherited:
    """The settings a benchmark's gates inherit: the file's, overridden by the section's own."""
    inherited = file_level.copy()
    if "min_n" in section:
        inherited["min_n"] = _min_n(section["min_n"], f"{path}: {bench}.min_n")
    if "mode" in section:
        inherited["mode"] = _mode(section["mode"], f"{path}: {bench}.mode")
    if "confidence" in section:
        inherited["confidence"] = _confidence(section["confidence"], f"{path}: {bench}.confidence", allow_low)
    if "sequential" in section:
        inherited["sequential"] = _sequential(section["sequential"], f"{path}: {bench}.sequential")
    if "max_regression" in section:
        inherited["max_regression"] = _max_regression(
            section["max_regression"], f"{path}: {bench}.max_regression"
        )
    return inherited


def _section_gates(
    path: Path, bench: str, section: Mapping[object, object], known: Known, inherited: Inherited
) -> list[Gate]:
    """A benchmark section's gates: its defaults for every category, as each category's block
    overrides them (``null`` removes one), in category order, then the file's metric order."""
    categories, metrics = known[:2]
    ranges = known[2] if len(known) > 2 else {}
    default_block = _mapping(section.get("defaults") or {}, f"{path}: {bench}.defaults")
    override_block = _mapping(section.get("categories") or {}, f"{path}: {bench}.categories")
    defaults = _check_known(path, f"{bench}.defaults", "metric", default_block, metrics)
    overrides: dict[str, dict[str, object]] = {}
    for cat, block in _check_known(
        path, f"{bench}.categories", "category", override_block, categories
    ).items():
        if not isinstance(block, Mapping):
            raise ConfigError(f"{path}: {bench}.categories.{cat}: expected a mapping of metrics")
        overrides[cat] = _check_known(path, f"{bench}.categories.{cat}", "metric", block, metrics)
    out = _pooled_gates(path, bench, section, known, inherited)
    for cat in categories:
        merged = dict(defaults)
        merged.update(overrides.get(cat) or {})
        for metric, spec in merged.items():
            if spec is None:  # an override of `null` removes the default gate
                continue
            origin = (
                f"{bench}.categories.{cat}.{metric}"
                if metric in (overrides.get(cat) or {})
                else f"{bench}.defaults.{metric}"
            )
            out.append(
                _parse_gate(spec, (bench, cat, metric), f"{path}: {origin}", inherited, ranges.get(metric))
            )
    return out


def _pooled_gates(
    path: Path, bench: str, section: Mapping[object, object], known: Known, inherited: Inherited
) -> list[Gate]:
    """A section's ``pooled:`` gates, one per pooled category of the benchmark (``known[3]``)
    and metric, or an error naming the file's line: a benchmark that cannot pool, a metric it
    does not have, a sequential pooled gate (its categories stop on their own gates' decisions,
    so their items together are no fixed sample)."""
    if section.get("pooled") is None:
        return []
    block = section["pooled"]
    names = tuple(known[3]) if len(known) > 3 else ()
    ranges = known[2] if len(known) > 2 else {}
    where = f"{path}:{_line_of(path, (bench, 'pooled'))}: {bench}.pooled"
    if not names:
        raise ConfigError(
            f"{where}: {bench} has no pooled categories to gate (its categories are not one "
            "population: a pair benchmark's `overall` category already pools every pair, and "
            "KGQuiz's tasks have different metrics); gate its categories instead"
        )
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where}: expected a mapping of metric -> gate")
    metrics = known[1]
    out: list[Gate] = []
    for name in names:
        for metric, spec in block.items():
            at = f"{path}:{_line_of(path, (bench, 'pooled', metric))}: {bench}.pooled.{metric}"
            if metric not in metrics:
                raise ConfigError(
                    f"{at}: unknown metric {metric!r}: {bench} cannot pool it; known: {', '.join(metrics)}"
                )
            if spec is None:
                continue
            gate = _parse_gate(spec, (bench, name, metric), at, inherited, ranges.get(metric))
            if gate.sequential:
                raise ConfigError(
                    f"{at}: a pooled gate cannot be sequential (its categories stop on their own "
                    "gates' decisions, so their items together are no fixed sample): set "
                    "`sequential: false` on it"
                )
            out.append(gate)
    return out


def _line_of(path: Path, keys: tuple[str, ...]) -> int | str:
    """The line (1-based) of the last of ``keys`` (a path of mapping keys) in the YAML file, or
    ``?`` where it cannot be found (a key reached through an alias or merge)."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return "?"
    line: int | str = "?"
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            return "?"
        found = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
        if found is None:
            return "?"
        line, node = found[0].start_mark.line + 1, found[1]
    return line


#: The gates file that ships with the suite (the repository's ``thresholds.yaml`` links to it).
PACKAGED_THRESHOLDS = Path(__file__).resolve().parents[1] / "thresholds.yaml"


def thresholds_provenance(path: Path) -> dict[str, str]:
    """Which gates a run used: the file's sha256 and whether it is the packaged file, byte for
    byte (results' ``run.thresholds_origin``). A custom file is legitimate, but a reviewer must
    see that the gates are not the shipped ones, as with a data file that is not the published
    release.

    Returns
    -------
    dict
        ``thresholds_sha256``, ``thresholds_origin`` (``"packaged"`` or ``"custom"``) and
        ``packaged_thresholds_sha256``.
    """
    import hashlib

    def sha(p: Path) -> str:
        return hashlib.sha256(Path(p).read_bytes()).hexdigest()

    mine, packaged = sha(path), sha(PACKAGED_THRESHOLDS)
    return {
        "thresholds_sha256": mine,
        "thresholds_origin": "packaged" if mine == packaged else "custom",
        "packaged_thresholds_sha256": packaged,
    }
