"""bias-audit export mlflow on a real run, into a local file: store: every metric with its
interval bounds and n, every gate verdict, the model and options as params, the run's files as
artifacts, read back with MlflowClient. Skipped without mlflow (the extra bias-audit[mlflow]),
except under CI=true, where `make setup` installs it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from test_report_html import audit

from audit_harness import cli
from audit_harness.errors import DataError
from audit_harness.report.mlflow_export import metrics_of, mlflow_key

HAS_MLFLOW = importlib.util.find_spec("mlflow") is not None
needs_mlflow = pytest.mark.skipif(
    not HAS_MLFLOW and os.environ.get("CI") != "true",
    reason="mlflow is not installed (pip install 'bias-audit[mlflow]'; CI installs it)",
)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, data_dir) -> Path:
    """A real run of two benchmarks on the tiny model (as test_report_html's)."""
    return audit(
        tmp_path_factory.mktemp("mlflow"),
        data_dir,
        "(test_bbq and (Religion or Age)) or (test_crows_pairs and (religion or overall))",
    )


def expected_metrics(results: dict) -> dict[str, float]:
    """Every metric the export must log, from results.json: value, interval bounds and n."""
    out = {}
    for bench, cats in results["benchmarks"].items():
        groups = [(cat, e["metrics"]) for cat, e in cats.items()]
        groups += [(k, v) for k, v in results["overall"].get(bench, {}).items() if k != "categories"]
        for group, metrics in groups:
            for name, m in metrics.items():
                if m["value"] is None:
                    continue
                key = f"{bench}/{group}/{name}"
                out[key] = m["value"]
                out[key + "_ci_low"], out[key + "_ci_high"] = m["ci"]
                out[key + "_n"] = m["n"]
    return out


@needs_mlflow
def test_export_logs_every_metric_gate_param_and_file(real_run, tmp_path, capsys, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the export opts in for file:
    uri = f"file:{tmp_path / 'mlruns'}"
    args = ["export", "mlflow", str(real_run), "--tracking-uri", uri, "--experiment", "audit-test"]
    assert cli.main(args) == 0, capsys.readouterr().err
    results = json.loads((real_run / "results.json").read_text())
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("audit-test").experiment_id])
    assert f"run {run.info.run_id}" in capsys.readouterr().out
    assert run.info.run_name == results["run_id"] and run.info.status == "FINISHED"
    expected = expected_metrics(results)
    assert len(expected) > 60
    assert run.data.metrics == expected
    # Each metric's history is its one value (not a curve).
    key = next(iter(expected))
    assert [m.value for m in client.get_metric_history(run.info.run_id, key)] == [expected[key]]
    gates = {k: v for k, v in run.data.tags.items() if k.startswith("gate/")}
    assert gates == {
        f"gate/{g['benchmark']}/{g['category']}/{g['metric']}": g["status"] for g in results["gates"]
    }
    assert run.data.tags["verdict"] == results["run"]["outcome"]["label"]
    assert run.data.tags["exit_code"] == str(results["run"]["outcome"]["exit_code"])
    undefined = [
        f"undefined/bbq/{cat}/{n}"
        for cat, e in results["benchmarks"]["bbq"].items()
        for n, m in e["metrics"].items()
        if m["value"] is None
    ]
    assert undefined and all(k in run.data.tags for k in undefined)
    params = run.data.params
    assert params["model.name"] == results["model"]["name"]
    assert params["model.fingerprint"] == results["model"]["fingerprint"]
    assert params["option.seed"] == str(results["options"]["seed"])
    assert params["option.limit"] == str(results["options"]["limit"])

    def artifacts(path=None):
        for a in client.list_artifacts(run.info.run_id, path):
            yield from artifacts(a.path) if a.is_dir else [a.path]

    on_disk = {p.relative_to(real_run).as_posix() for p in real_run.rglob("*") if p.is_file()}
    assert set(artifacts()) == on_disk and "results.json" in on_disk


def test_without_mlflow_the_error_says_what_to_install(real_run, tmp_path, capsys, monkeypatch):
    # A None entry in sys.modules makes `import mlflow...` fail as if it were not installed.
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")] + ["mlflow"]:
        monkeypatch.setitem(sys.modules, name, None)
    code = cli.main(["export", "mlflow", str(real_run), "--tracking-uri", f"file:{tmp_path}"])
    err = capsys.readouterr().err
    assert code == 4 and "pip install 'bias-audit[mlflow]'" in err
    assert not (tmp_path / "0").exists()


def test_export_of_a_bad_run_folder_is_exit_4(tmp_path, capsys):
    code = cli.main(["export", "mlflow", str(tmp_path), "--tracking-uri", f"file:{tmp_path / 'm'}"])
    assert code == 4 and f"{tmp_path / 'results.json'}: not found" in capsys.readouterr().err


def test_keys_keep_only_characters_mlflow_accepts():
    assert mlflow_key("bbq", "Gender_identity (names)", "bias_score_ambig") == (
        "bbq/Gender_identity _names_/bias_score_ambig"
    )
    assert mlflow_key("kobbq", "나이", "acc") == "kobbq/나이/acc"  # \w: MLflow takes any letter


def test_two_metrics_on_one_key_stop_the_export():
    metric = {"value": 0.5, "ci": [0.1, 0.9], "n": 10}
    doc = {"benchmarks": {"bbq": {"A (b)": {"metrics": {"m": metric}}, "A _b_": {"metrics": {"m": metric}}}}}
    with pytest.raises(DataError, match=r"bbq/A _b_/m: its MLflow key 'bbq/A _b_/m' is taken"):
        metrics_of(doc)
