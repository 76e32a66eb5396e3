"""Scoring saved predictions: predictions produced elsewhere (an API model, another harness, an old
log) run through the same pipeline as an audit, with the model replaced by a ``ReplayModel`` that
answers each item with its saved output, which the benchmark's generate mode maps to an option
with the suite's answer parser (``audit_harness.parsing``).

Input is JSONL, one object per line, carrying the item's id (field ``"id"`` = ``"<Category>-<row
id>"``, or the benchmark's own id fields, e.g. BBQ ``category`` + ``example_id``) and a prediction
field: an option index (0-2; -1 = no answer), a letter (A/B/C, any case, with or without
punctuation such as ``"(B)"``), or free text matched against the option texts.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from bias_metrics.result import MetricResult

from .benchmarks.base import Benchmark, CategoryData, MetricSettings, Record
from .errors import ConfigError, DataError, PredictionError
from .models.base import GENERATE, GenerationRequest, LanguageModel, ModelInfo
from .parsing import MATCH_KINDS, MATCH_MODES


class ReplayModel(LanguageModel):
    """A "model" whose generations are saved predictions: ``generate`` answers each request with
    the output saved for its ``item_id`` (a string, or an int option index, as saved).

    Args:
        outputs: ``{item id: saved output}``.
        info: provenance (``kind="replay"``; the fingerprint is the predictions file's sha256).
    Raises:
        KeyError: (``generate``) a request for an item without a saved output.
    """

    capabilities = frozenset({GENERATE})

    def __init__(self, outputs: Mapping[str, Any], info: ModelInfo):
        self.outputs = dict(outputs)
        self.info = info

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Any]:  # type: ignore[override]
        return [self.outputs[r.item_id] for r in requests]


def read_predictions(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """``[(line number, row)]`` of a JSONL file; blank lines are skipped.

    Raises:
        DataError: the file cannot be read, a line is not a JSON object, or there is no row;
            messages are ``"<file>:<line>: <reason>"``.
    """
    path = Path(path)
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{line_no}: malformed JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{line_no}: expected a JSON object, got "
                                    f"{type(row).__name__}")
                rows.append((line_no, row))
    except OSError as e:
        raise DataError(f"cannot read predictions {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason})") from None
    if not rows:
        raise DataError(f"{path}: no prediction rows")
    return rows


@dataclass
class ScoredPredictions:
    """Saved predictions run through a benchmark's pipeline.

    Attributes:
        benchmark: the benchmark as configured for the replay (generate mode, match mode, flavour).
        records: one record per scored prediction row, in file order (``raw_prediction`` and
            ``match`` set).
        lines: ``{item id: line number}`` of the predictions file.
        counts: ``rows``; matches per kind (``index``, ``letter``, ``text``, ``fallback``) and
            ``invalid`` (unmatched); ``excluded_by_data`` (rows whose item the loader leaves out,
            listed in ``excluded``).
        excluded: ``{reason: [ids]}`` of prediction rows left out, with the reason.
        categories: the categories the file covers, in benchmark order.
        data: the loaded ``CategoryData`` per category (provenance: files and hashes).
    """

    benchmark: Benchmark
    records: list[Record]
    lines: dict[str, int]
    counts: dict[str, int]
    excluded: dict[str, list[str]] = field(default_factory=dict)
    categories: list[str] = field(default_factory=list)
    data: dict[str, CategoryData] = field(default_factory=dict)


def score_predictions(benchmark: Benchmark, predictions: str | Path, prediction_field: str,
                      data_dir: str | Path, *, match: str | None = None,
                      flavour: str | None = None,
                      options: Mapping[str, Any] | None = None) -> ScoredPredictions:
    """Join a predictions JSONL to ``benchmark``'s data and score it through the benchmark.

    Only the categories the file mentions are loaded; a file may cover any subset of the items.

    Args:
        benchmark: a benchmark that takes saved predictions (``id_fields``; e.g. ``registry()["bbq"]``).
        predictions: path of the JSONL file (see module docstring for the row format).
        prediction_field: the field holding the prediction.
        data_dir: the data directory the benchmark's loader reads.
        match: ``"exact"`` or ``"bbq-reference"`` (None: the benchmark's own parser mode,
            ``exact`` for the BBQ family; KoBBQ has only its own, ``parsing.parse_choice``).
        flavour: another paper's metric definitions (None: the benchmark's own).
        options: further ``Benchmark.configure`` options (KoBBQ: the one ``prompts`` and
            ``permutations`` a file of outputs holds when its rows do not say).
    Returns:
        ``ScoredPredictions`` (records, counts, exclusions).
    Raises:
        ConfigError: unknown ``match`` mode or flavour, or a benchmark without saved predictions.
        DataError: naming ``<file>:<line>`` and the reason: malformed JSON, no id, an id or category
            of another benchmark, an id not in the data, a duplicated id, a missing prediction
            field, a prediction that is no index/letter/text, an index out of range, or a row whose
            own fields (condition, polarity, label, question, options) disagree with the item.
            The loader's own DataError for missing or malformed data files passes through.
    """
    if match is not None and match not in MATCH_MODES:
        raise ConfigError(f"--match must be one of {', '.join(MATCH_MODES)}, got {match!r}")
    if not benchmark.id_fields:
        raise ConfigError(f"{benchmark.name} does not score saved predictions (it has no answer "
                          "to save: its records come from model scores)")
    settings = {"answer_mode": "generate", "flavour": flavour, **dict(options or {})}
    if match is not None:
        settings["match"] = match
    bench = benchmark.configure(**settings)
    path = Path(predictions)
    raw_rows = read_predictions(path)

    parsed: list[tuple[int, dict[str, Any], str, str]] = []
    lines: dict[str, int] = {}
    for line_no, row in raw_rows:
        where = f"{path}:{line_no}"
        item_id, category = bench.prediction_item(row, where)
        if item_id in lines:
            raise DataError(f"{where}: duplicate id {item_id!r} (first at line {lines[item_id]})")
        lines[item_id] = line_no
        if prediction_field not in row:
            import difflib

            close = difflib.get_close_matches(prediction_field, [str(k) for k in row], n=1)
            raise DataError(f"{where}: missing prediction field {prediction_field!r}; the row's "
                            f"fields are {', '.join(map(repr, row))}"
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
        parsed.append((line_no, row, item_id, category))

    categories = [c for c in bench.categories if any(p[3] == c for p in parsed)]
    data = {c: bench.load_category(Path(data_dir), c) for c in categories}
    items = {it.item_id: it for d in data.values() for it in d.items}
    excluded_ids = {i: reason for d in data.values() for reason, ids in d.excluded.items()
                    for i in ids}

    excluded: dict[str, list[str]] = {}
    chosen: list[Any] = []
    # Items kept for scoring but held out of a metric by the loader (EsBBQ rows failing the
    # question_type check: in accuracy, not in the disambiguated bias score).
    partly = {i: reason for d in data.values() for reason, ids in d.excluded.items() for i in ids
              if i in items}
    outputs: dict[str, Any] = {}
    for line_no, row, item_id, category in parsed:
        where = f"{path}:{line_no}"
        item = items.get(item_id)
        if item is None:
            if item_id in excluded_ids:  # e.g. BBQ's 16 rows without target_loc: left out, counted
                excluded.setdefault(excluded_ids[item_id], []).append(item_id)
                continue
            raise DataError(f"{where}: id {item_id!r} is not in the {bench.name} data "
                            f"({', '.join(f.path for f in data[category].files[:1])})")
        bench.check_prediction_row(row, item, where)
        if item_id in partly:
            excluded.setdefault(partly[item_id], []).append(item_id)
        chosen.append(item)
        outputs[item_id] = row[prediction_field]

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    model = ReplayModel(outputs, ModelInfo(name=str(path), source=f"replay:{path}:{prediction_field}",
                                           fingerprint=f"sha256:{digest}", dtype="-", device="-",
                                           n_parameters=0, kind="replay"))
    try:
        records = bench.evaluate(model, chosen)
    except PredictionError as e:  # the parser refused a saved value: say where it is
        raise DataError(f"{path}:{lines[e.item_id]}: field {prediction_field!r}: {e.problem}") from None
    counts = {"rows": len(parsed), **{k: 0 for k in MATCH_KINDS},
              "excluded_by_data": len(parsed) - len(chosen)}
    for r in records:
        counts[r.match] += 1
    for reason, ids in bench.exclusions(records).items():
        excluded.setdefault(reason, []).extend(ids)
    return ScoredPredictions(bench, records, lines, counts, excluded, categories, data)


# --- metrics ------------------------------------------------------------------------------------
@dataclass
class ScoreReport:
    """Metrics of scored predictions.

    Attributes:
        flavour: the metric definitions used (the benchmark's ``flavour``).
        groups: ``{group: {metric: MetricResult}}``, groups being categories (or, with
            ``split_names``, BBQ's ``"<category> (names)"`` groups as the paper reports them).
        aggregates: the benchmark's ``overall`` over the groups (``pooled``; ``size_weighted``
            where the flavour defines it), only with more than one group.
    """

    flavour: str
    groups: dict[str, dict[str, MetricResult]]
    aggregates: dict[str, dict[str, MetricResult]]


def score_report(scored: ScoredPredictions, *, split_names: bool = False,
                 n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> ScoreReport:
    """Every metric of the benchmark per group (and its aggregates) over ``scored.records``.

    Intervals: as in an audit (``Benchmark.metrics``); ``n_resamples=0`` skips the bootstrap.
    Raises ConfigError on n_resamples < 0, a confidence outside (0, 1), or ``split_names`` for a
    benchmark without such groups.
    """
    if n_resamples < 0:
        raise ConfigError(f"--bootstrap-resamples must be >= 0, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    bench = scored.benchmark
    if split_names:
        if "split_names" not in bench.options:
            raise ConfigError(f"--split-names: {bench.name} has no name-proxy groups")
        bench = bench.configure(split_names=True)
    settings = MetricSettings(confidence=confidence, n_resamples=n_resamples, seed=seed)
    by_group: dict[str, list[Record]] = {}
    for r in scored.records:
        by_group.setdefault(bench.report_group(r), []).append(r)
    groups = {g: bench.metrics(by_group[g], settings) for g in sorted(by_group)}
    aggregates = bench.overall(by_group, settings) if len(groups) > 1 else {}
    return ScoreReport(getattr(bench, "flavour", bench.name), groups, aggregates)


def context_of(metric_name: str) -> str:
    """Context condition a metric describes: ``"disambig"``, ``"ambig"`` or ``"all"``."""
    if "disambig" in metric_name:
        return "disambig"
    if "ambig" in metric_name:
        return "ambig"
    return "all"


def report_json(scored: ScoredPredictions, report: ScoreReport, **meta: Any) -> dict[str, Any]:
    """JSON-ready dict of a scoring run (NaN -> null; ``meta`` is copied in first)."""

    def block(metrics: Mapping[str, MetricResult]) -> dict[str, Any]:
        return {name: {**m.to_dict(), "context_condition": context_of(name)}
                for name, m in metrics.items()}

    out: dict[str, Any] = dict(meta)
    out.update({
        "benchmark": scored.benchmark.name,
        "flavour": report.flavour,
        "counts": dict(scored.counts),
        "invalid_predictions": scored.counts["invalid"],
        # Which rows, so a reviewer can read what the model actually said.
        "invalid": [{"id": r.item_id, "line": scored.lines.get(r.item_id), "prediction": r.raw_prediction}
                    for r in scored.records if r.match == "invalid"],
        "excluded": {k: list(v) for k, v in scored.excluded.items()},
        "data_files": [{"path": f.path, "sha256": f.sha256, "rows": f.rows}
                       for d in scored.data.values() for f in d.files],
        "categories": {g: block(m) for g, m in report.groups.items()},
    })
    for label, metrics in report.aggregates.items():
        out[label] = block(metrics)
    return out


def held_out_lines(scored: ScoredPredictions) -> list[str]:
    """One line per reason and one per held-out prediction row (id and line number): rows left
    out of scoring or of a metric, as the reason says."""
    lines = []
    for reason, ids in scored.excluded.items():
        lines.append(f"held out ({reason}): {len(ids)} row(s)")
        lines += [f"  {i} (line {scored.lines.get(i)})" for i in ids]
    return lines


def format_report(scored: ScoredPredictions, report: ScoreReport) -> str:
    """Human-readable table: one line per (group, context, metric) with value, interval and n,
    preceded by the match counts and the number of invalid (unmatched) predictions."""
    c = scored.counts
    lines = [
        f"{scored.benchmark.name}: {c['rows']} prediction rows; matched by index {c['index']}, letter "
        f"{c['letter']}, text {c['text']}, fallback {c['fallback']}",
        f"invalid (unmatched) predictions: {c['invalid']} of {c['rows']}",
    ]
    invalid = [r for r in scored.records if r.match == "invalid"]
    for r in invalid[:10]:  # what the model said, so a reader can judge the matching
        lines.append(f"  invalid: {r.item_id} (line {scored.lines.get(r.item_id)}): "
                     f"{str(r.raw_prediction)[:60]!r}")
    if len(invalid) > 10:
        lines.append(f"  ... {len(invalid) - 10} more (all listed in --output)")
    lines += held_out_lines(scored)
    lines.append(f"metrics: flavour {report.flavour} (fractions, not x100)")
    header = f"{'category':<28} {'context':<9} {'metric':<32} {'value':>8}  {'interval':<19} {'n':>6}"
    lines.append(header)
    lines.append("-" * len(header))

    def emit(group: str, metrics: Mapping[str, MetricResult]) -> None:
        for name in sorted(metrics, key=lambda n: ({"ambig": 0, "disambig": 1}.get(context_of(n), 2))):
            m = metrics[name]
            if math.isnan(m.value):
                value, interval = "NaN", f"undefined: {m.reason}"
            else:
                value = f"{m.value:.4f}"
                if not math.isnan(m.ci_low):
                    interval = f"[{m.ci_low:.4f}, {m.ci_high:.4f}] {m.ci_method}"
                    if m.clusters is not None:
                        interval += f", {m.clusters} templates"
                elif m.ci_method and "bootstrap" in m.ci_method:
                    interval = "no interval (no defined resample)"
                else:
                    interval = "no interval (bootstrap off)" if not m.ci_method else ""
            lines.append(f"{group:<28} {context_of(name):<9} {name:<32} {value:>8}  {interval:<19} {m.n:>6}")

    for group, metrics in report.groups.items():
        emit(group, metrics)
    for label, metrics in report.aggregates.items():
        emit(f"(all, {label.replace('_', '-')})", metrics)
    return "\n".join(lines)
