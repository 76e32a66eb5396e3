"""What each backend declares it computes (``BackendSpec.capabilities``, read at start-up before
any item runs) is what the model it opens reports (``Backend.capabilities``), for every
registered backend and the planning twin, so the declaration cannot drift from the model; and
the start-up check refuses a backend that cannot serve a selected benchmark, naming the backend,
the benchmark and the capability (a plug-in backend too). And the run folder is named after the
model actually audited, never the in-process default. The fake server is ``fake_openai.py``'s."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeServer

from audit_harness import backends
from audit_harness.audit_options import AuditOptions, BackendOptions
from audit_harness.benchmarks import registry
from audit_harness.errors import ModelError
from audit_harness.models import load_model
from audit_harness.models.base import GENERATE, LETTER_LOGPROBS, LOGLIKELIHOOD, TOKEN_LOGPROBS
from audit_harness.models.zoo import DEFAULT_MODEL
from audit_harness.run import startup
from audit_harness.session import AuditSession

REPO = Path(__file__).resolve().parents[2]
#: Everything a benchmark can ask: a backend that must ask its server asks it all.
EVERYTHING = frozenset({GENERATE, LETTER_LOGPROBS, LOGLIKELIHOOD, TOKEN_LOGPROBS})


#: The served model: one with a chat template, so letter log-probs can be probed.
SERVED = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def servers():
    model = load_model(SERVED, device="cpu", dtype="float32", batch_size=4)
    made = {"aligned": FakeServer(model, SERVED), "shifted": FakeServer(model, SERVED, shift=True)}
    yield made
    for server in made.values():
        server.stop()


@pytest.fixture(scope="module")
def predictions(tmp_path_factory, data_dir):
    items = registry()["bbq"].load_category(data_dir, "Religion").items[:3]
    path = tmp_path_factory.mktemp("replay") / "bbq.jsonl"
    path.write_text("".join(json.dumps({"id": it.item_id, "pred": "A"}) + "\n" for it in items))
    return path


def _options(data_dir, model, benchmark_options=None, **backend) -> AuditOptions:
    b = dict(device="cpu", dtype="float32", batch_size=4) | backend
    return AuditOptions(
        model=model,
        data_dir=str(data_dir),
        benchmark_options=benchmark_options or {},
        backend=BackendOptions(**b),
    )


#: A run with a benchmark that reads letter log-probs: the server's chat log-probabilities are
#: probed when it opens, as when the declaration is asked for everything.
READS_LETTERS = {"kobbq": {"answer_mode": "letter"}}


#: (case id, backend, how its options are made): every registered backend and ``--plan``.
CASES = [
    ("hf-causal", "hf", lambda d, fx: _options(d, "tiny-random-gpt2")),
    ("hf-masked", "hf", lambda d, fx: _options(d, "tiny-random-bert")),
    ("plan-causal", "plan", lambda d, fx: _options(d, "tiny-random-gpt2", plan=True)),
    ("plan-masked", "plan", lambda d, fx: _options(d, "tiny-random-bert", plan=True)),
    *(
        (
            f"openai-{kind.replace(' ', '-')}",
            "openai",
            lambda d, fx, kind=kind: _options(
                d, SERVED, READS_LETTERS, name="openai", base_url=(fx["servers"][kind].url,)
            ),
        )
        for kind in ("aligned", "shifted")
    ),
    (
        "replay",
        "replay",
        lambda d, fx: _options(
            d, None, name="replay", predictions=str(fx["predictions"]), prediction_field="pred"
        ),
    ),
]


def _spec(options, tmp_path, selected="bbq"):
    """The backend of a session over ``options``, prepared and checked as at start-up."""
    session = AuditSession(options, registry(), tmp_path)
    spec = session.backend_spec
    spec.check_selection([selected])
    return spec


def test_the_cases_cover_every_registered_backend():
    # A backend added to the registry without a case here fails, so its declaration is tested.
    assert {backend for _, backend, _ in CASES} == {*backends.REGISTRY, "plan"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_declared_capabilities_are_what_the_opened_model_reports(case, tmp_path, data_dir, request):
    _, backend, make = case
    needs = {"openai": ("servers",), "replay": ("predictions",)}.get(backend, ())
    options = make(data_dir, {name: request.getfixturevalue(name) for name in needs})
    declared = _spec(options, tmp_path / "declared").capabilities(EVERYTHING)
    opened = _spec(options, tmp_path / "opened").open()
    assert declared is not None and declared == opened.capabilities, (declared, opened.capabilities)


def test_the_shifted_server_declares_generation_only(servers, tmp_path, data_dir):
    # What the drift test compares is not trivially everything: the alignment check's outcome.
    options = _options(data_dir, SERVED, name="openai", base_url=(servers["shifted"].url,))
    assert _spec(options, tmp_path).capabilities(EVERYTHING) == {GENERATE, LETTER_LOGPROBS}


def test_a_generation_only_run_does_not_connect_to_know(servers, tmp_path, data_dir):
    server = servers["aligned"]
    options = _options(data_dir, SERVED, name="openai", base_url=(server.url,))
    before = len(server.requests)
    assert _spec(options, tmp_path, "kgquiz").capabilities(frozenset({GENERATE})) == {GENERATE}
    assert len(server.requests) == before


def test_the_start_up_check_names_backend_benchmark_and_capability(servers, tmp_path, data_dir):
    options = _options(data_dir, SERVED, name="openai", base_url=(servers["shifted"].url,))
    session = AuditSession(options, registry(), tmp_path)
    with pytest.raises(ModelError) as caught:
        startup.check_backend(session, ["bbq", "kgquiz"])
    said = str(caught.value)
    assert said.startswith("--backend openai cannot run bbq: bbq needs loglikelihood; server ")
    assert "which failed the start-up alignment check" in said and "shifted by -1 position" in said
    assert "so it computes generate only; it can run " in said
    startup.check_backend(session, ["kgquiz"])  # generation only: it runs


def test_replay_declares_generations_only(predictions, tmp_path, data_dir):
    # Saved outputs answer as generations: a benchmark configured to need log-likelihoods (as a
    # live CrowS-Pairs under lm-eval's protocol is) cannot be replayed, whatever the file holds.
    options = _options(data_dir, None, name="replay", predictions=str(predictions), prediction_field="pred")
    session = AuditSession(options, registry(), tmp_path)
    spec = session.backend_spec
    requires = {"bbq": session.benchmarks["bbq"].requires, "crows_pairs": frozenset({LOGLIKELIHOOD})}
    backends.check_capabilities(spec, requires, ["bbq"])
    with pytest.raises(ModelError, match=r"^--backend replay cannot run crows_pairs: crows_pairs needs "):
        backends.check_capabilities(spec, requires, ["crows_pairs"])


class _ToySpec(backends.BackendSpec):
    """A plug-in backend: one entry in the registry, declaring generation only."""

    name, summary = "toy", "answers every prompt with 'A'"

    def capabilities(self, needed):
        return frozenset({GENERATE})


def test_a_plug_in_backend_is_checked_at_start_up(monkeypatch, tmp_path, data_dir):
    monkeypatch.setitem(backends.REGISTRY, "toy", _ToySpec)
    session = AuditSession(_options(data_dir, "toy-model", name="toy"), registry(), tmp_path)
    with pytest.raises(ModelError, match=r"^--backend toy cannot run bbq: bbq needs loglikelihood; "):
        startup.check_backend(session, ["bbq"])
    startup.check_backend(session, ["kgquiz"])


def test_a_backend_that_declares_nothing_says_so(monkeypatch, tmp_path, data_dir):
    class Undeclared(backends.BackendSpec):
        name, summary = "undeclared", "-"

    with pytest.raises(NotImplementedError, match="backend 'undeclared' declares no capabilities"):
        Undeclared(_options(data_dir, None)).capabilities(EVERYTHING)


# --- the run folder's name ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", [*backends.REGISTRY, "toy"])
def test_no_backend_but_hf_files_its_run_under_the_default_model(backend, monkeypatch, data_dir, tmp_path):
    monkeypatch.setitem(backends.REGISTRY, "toy", _ToySpec)
    extra = {
        "openai": {"base_url": ("http://127.0.0.1:9/v1",)},
        "replay": {"predictions": str(tmp_path / "answers.jsonl"), "prediction_field": "pred"},
    }.get(backend, {})
    unnamed = backends.spec_for(_options(data_dir, None, name=backend, **extra))
    named = backends.spec_for(_options(data_dir, "org/My Model", name=backend, **extra))
    label, with_model = unnamed.run_label(), named.run_label()
    assert re.fullmatch(r"[A-Za-z0-9._-]+", label) and re.fullmatch(r"[A-Za-z0-9._-]+", with_model)
    if backend == "hf":
        assert label == DEFAULT_MODEL and with_model == "My_Model"
    elif backend == "replay":
        assert label == with_model == "replay-answers"  # the saved outputs are what is audited
    else:
        assert label == backend and with_model == f"{backend}-My_Model"


def test_a_server_run_without_model_is_filed_under_the_backend_and_records_the_served_name(
    servers, tmp_path, data_dir
):
    # Before: <time>-smollm2-135m-instruct-<pid>, the in-process default's name, whatever the
    # server served. The served name is known once connected; the folder is named before that.
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "pytest", "audits/test_bbq.py", "--backend", "openai"]
    cmd += ["--base-url", servers["aligned"].url, "--limit", "2", "-k", "Religion", "--no-cache"]
    cmd += ["--data-dir", str(data_dir), "--results-dir", str(results), "-p", "no:cacheprovider"]
    cmd += ["--bootstrap-resamples", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode in (0, 1), (proc.stdout + proc.stderr)[-3000:]
    (run,) = results.iterdir()
    assert re.fullmatch(r"\d{8}T\d{6}Z-openai-\d+", run.name), run.name
    assert json.loads((run / "results.json").read_text())["model"]["name"] == SERVED
