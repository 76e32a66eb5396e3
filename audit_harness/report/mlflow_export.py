"""A run's results logged to MLflow (``bias-audit export mlflow``; the optional extra
``bias-audit[mlflow]``).

One MLflow run per audit run (named by its run id), holding:

- every defined metric as ``<benchmark>/<category>/<metric>``, with ``..._ci_low``,
  ``..._ci_high`` (its interval bounds) and ``..._n`` beside it; aggregates use the label as the
  category (``bbq/pooled/bias_score_ambig``);
- every gate verdict as a tag ``gate/<benchmark>/<category>/<metric>`` (regression gates:
  ``.../<metric>-vs-baseline``) whose value is the status (``pass``, ``fail``, ``undefined``, ...;
  a tag, not a 1/0 metric, since a verdict has more than two states), and the run's verdict as
  the tags ``verdict`` and ``exit_code``;
- params: the model (``model.*``) and the run's options (``option.*``);
- the run folder's files as artifacts.

Undefined metrics have no value to log: each is a tag ``undefined/<key>`` holding its reason.
MLflow keys allow letters, digits and ``_-. :/`` only; other characters (the parentheses of
``Age (names)``) become ``_``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Mapping

from ..errors import DataError
from .schema import MetricEntry, Results, as_results
from .verdict import overall_verdict
from .views import aggregates

#: What the user installs when mlflow is missing.
INSTALL_HINT = "pip install 'bias-audit[mlflow]'"
#: MLflow caps a param value at 6000 characters; a longer option is cut with a note.
_PARAM_MAX = 6000
_UNSAFE = re.compile(r"[^\w\-. :/]")


class MlflowMissing(ImportError):
    """mlflow is not installed (it is the optional extra ``bias-audit[mlflow]``)."""


def mlflow_key(*parts: str) -> str:
    """A metric, param or tag key from ``parts`` joined by ``/``, with the characters MLflow
    refuses replaced by ``_``.

    Examples
    --------
    >>> mlflow_key("bbq", "Age (names)", "bias_score_ambig")
    'bbq/Age _names_/bias_score_ambig'
    """
    return "/".join(_UNSAFE.sub("_", str(p)) for p in parts)


def metrics_of(results: Results) -> tuple[dict[str, float], dict[str, str]]:
    """(every metric to log, the undefined ones with their reasons), keyed as the module says.

    Raises:
        DataError: two metrics of the run map to one key (names that differ only in characters
            MLflow refuses).
    """
    logged: dict[str, float] = {}
    undefined: dict[str, str] = {}
    for bench, cats in results["benchmarks"].items():
        groups: list[tuple[str, Mapping[str, MetricEntry]]] = [
            (cat, e.get("metrics") or {}) for cat, e in cats.items() if e.get("status", "ok") == "ok"
        ]
        groups += list(aggregates(results, bench).items())
        for group, metrics in groups:
            for name, m in metrics.items():
                key = mlflow_key(bench, group, name)
                if key in logged or key in undefined:
                    raise DataError(
                        f"results.json: {bench}/{group}/{name}: its MLflow key {key!r} is taken by another metric"
                    )
                value = m.get("value")
                if value is None:
                    undefined[key] = m.get("reason") or "undefined"
                    continue
                logged[key] = float(value)
                lo, hi = m.get("ci") or (None, None)
                if lo is not None and hi is not None:
                    logged[f"{key}_ci_low"], logged[f"{key}_ci_high"] = float(lo), float(hi)
                if m.get("n") is not None:
                    logged[f"{key}_n"] = float(m["n"])
    return logged, undefined


def gate_tags(results: Results) -> dict[str, str]:
    """Each gate's verdict as a tag, and the run's verdict (``verdict``, ``exit_code``)."""
    tags = {}
    for g in results.get("gates") or []:
        suffix = "-vs-baseline" if g.get("kind") == "regression" else ""
        tags[mlflow_key("gate", g["benchmark"], g["category"], g["metric"] + suffix)] = g["status"]
    verdict = overall_verdict(results)
    tags["verdict"] = verdict.label
    tags["exit_code"] = str(verdict.exit_code)
    return tags


def _flatten(prefix: str, value: object, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
        return
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > _PARAM_MAX:
        text = text[: _PARAM_MAX - 40] + " ... (cut; the whole value is in results.json)"
    out[mlflow_key(prefix)] = text


def params_of(results: Results) -> dict[str, str]:
    """The model's description (``model.*``) and the run's options (``option.*``), as strings."""
    out: dict[str, str] = {}
    for key, value in (results.get("model") or {}).items():
        _flatten(f"model.{key}", value, out)
    for key, value in (results.get("options") or {}).items():
        _flatten(f"option.{key}", value, out)
    return out


def _client(tracking_uri: str):
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as e:
        raise MlflowMissing(f"bias-audit export mlflow needs mlflow: {INSTALL_HINT} ({e})") from None
    if tracking_uri.startswith("file:"):
        # MLflow 3 keeps its file store in maintenance mode and refuses it unless this is set;
        # the user named a file: store, so that is the store they asked for.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=tracking_uri)


def export_run(results: Mapping[str, object], run_dir: Path, tracking_uri: str, experiment: str) -> str:
    """Log the run to MLflow at ``tracking_uri`` under ``experiment`` (created if missing);
    returns the MLflow run id.

    Raises:
        MlflowMissing: mlflow is not installed.
    """
    results = as_results(results)
    client = _client(tracking_uri)
    from mlflow.entities import Metric, Param, RunTag

    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(
        experiment_id, run_name=results["run_id"], tags={"bias_audit.run_id": results["run_id"]}
    )
    run_id = run.info.run_id
    try:
        logged, undefined = metrics_of(results)
        tags = {**gate_tags(results), **{mlflow_key("undefined", k): v for k, v in undefined.items()}}
        params = params_of(results)
        # A fixed timestamp and step: the values are one run's results, not a training curve.
        stamp = int(run.info.start_time)
        metrics = [Metric(k, v, stamp, 0) for k, v in logged.items()]
        # log_batch takes at most 1000 metrics, 100 params and 100 tags per call.
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i : i + 1000])
        items = [Param(k, v) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
        tag_items = [RunTag(k, v) for k, v in tags.items()]
        for i in range(0, len(tag_items), 100):
            client.log_batch(run_id, tags=tag_items[i : i + 100])
        client.log_artifacts(run_id, str(run_dir))
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return run_id
