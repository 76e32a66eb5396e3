"""The pytest plugin: options, the session-scoped model, one test per gate, JUnit properties,
pytest-xdist support and the per-run results file.

Audit test modules stay thin::

    @pytest.mark.audit("bbq")
    def test_bbq(audit_gate):
        verdict = audit_gate.evaluate()
        assert verdict.passed, verdict.message

and this plugin parametrizes ``audit_gate`` with every gate of ``thresholds.yaml`` for that
benchmark, with ids such as ``test_bbq[Age-bias_score_ambig]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import pytest

from . import exit_codes
from .errors import AuditError, ConfigError, MissingDataError
from .gates import Gate, Verdict, add_regression_gates, load_thresholds
from .report.results import read_results

#: The audit modules ship inside the package (the repository's ``audits/`` links here), so
#: ``bias-audit run`` works from any directory.
AUDITS_DIR = Path(__file__).resolve().parent / "audits"
#: The gates used when neither --thresholds nor ./thresholds.yaml gives any.
PACKAGED_THRESHOLDS = Path(__file__).resolve().parent / "thresholds.yaml"

_SESSION_KEY = pytest.StashKey["object"]()
_STATE_KEY = pytest.StashKey["dict"]()
_VERDICT_KEY = pytest.StashKey["object"]()


def _env_int(name: str):
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("bias-audit", "model bias audit")
    g.addoption("--model", dest="audit_model", default=os.environ.get("AUDIT_MODEL"),
                help="zoo name, local transformers folder or hub id (env AUDIT_MODEL; "
                     "default: the embedded smollm2-135m-instruct)")
    g.addoption("--data-dir", dest="audit_data_dir", default=os.environ.get("AUDIT_DATA_DIR"),
                help="folder holding bbq/, esbbq_cabbq/, ... (env AUDIT_DATA_DIR; default: "
                     "$BIAS_AUDIT_CACHE/data)")
    g.addoption("--fetch-data", dest="audit_fetch_data", action="store_true", default=False,
                help="fetch missing benchmark files from the authors' pinned sources first")
    g.addoption("--device", dest="audit_device", default=os.environ.get("AUDIT_DEVICE", "auto"),
                choices=["auto", "cpu", "cuda"] + [f"cuda:{i}" for i in range(16)],
                help="auto (CUDA when present), cpu or cuda[:N] (env AUDIT_DEVICE)")
    g.addoption("--dtype", dest="audit_dtype", default=os.environ.get("AUDIT_DTYPE", "auto"),
                choices=["auto", "float32", "bfloat16", "float16"],
                help="auto = bfloat16 on CUDA, float32 on CPU (env AUDIT_DTYPE)")
    g.addoption("--data-source", dest="audit_data_source", choices=["files", "hf"],
                default=os.environ.get("AUDIT_DATA_SOURCE", "files"),
                help="EsBBQ/CaBBQ rows from the pinned files in the data dir, or from the authors' "
                     "Hugging Face copy through `datasets` (env AUDIT_DATA_SOURCE)")
    g.addoption("--hf-dataset", dest="audit_hf_dataset", default=None, metavar="ID_OR_DIR",
                help="with --data-source hf: a Hub id or a local copy in the Hub layout "
                     "(default: BSC-LT/EsBBQ or BSC-LT/CaBBQ)")
    g.addoption("--batch-size", dest="audit_batch_size", type=int,
                default=_env_int("AUDIT_BATCH_SIZE") or 16, help="sequences per forward pass")
    g.addoption("--limit", dest="audit_limit", type=int, default=_env_int("AUDIT_LIMIT"),
                help="items per category, balanced as the benchmark defines (BBQ family: "
                     "context condition x polarity; KGQuiz true/false: the label), deterministic for a "
                     "given --seed (env AUDIT_LIMIT; default: all)")
    g.addoption("--seed", dest="audit_seed", type=int, default=_env_int("AUDIT_SEED") or 0,
                help="seed of --limit sampling and of bootstrap intervals")
    g.addoption("--bootstrap-resamples", dest="audit_bootstrap", type=int, default=1000, metavar="N",
                help="bootstrap resamples for confidence intervals (0 = none)")
    g.addoption("--confidence", dest="audit_confidence", type=float, default=0.95, metavar="LEVEL",
                help="confidence level of the intervals")
    g.addoption("--thresholds", dest="audit_thresholds",
                default=os.environ.get("AUDIT_THRESHOLDS"),
                help="gates file (env AUDIT_THRESHOLDS; default: ./thresholds.yaml when present, "
                     "else the packaged one)")
    g.addoption("--min-n", dest="audit_min_n", type=int, default=_env_int("AUDIT_MIN_N"),
                help="fewest items in a metric's denominator for any verdict, overriding the "
                     "thresholds file's min_n (below it: INSUFFICIENT, a failure)")
    g.addoption("--baseline", dest="audit_baseline", default=os.environ.get("AUDIT_BASELINE"),
                metavar="RESULTS", help="a previous run's results.json (or its folder): adds a "
                "test_<bench>[<cat>-<metric>-vs-baseline] per gate, failing when the metric got "
                "worse than there by more than the gate's max_regression (env AUDIT_BASELINE)")
    g.addoption("--strict-baseline", dest="audit_strict_baseline", action="store_true",
                default=False, help="with --baseline: stop with exit 4 when the baseline run is not "
                "like for like (another seed, interval settings, dtype, protocol, chat template, "
                "items scored, data or thresholds file) instead of marking its regression gates")
    g.addoption("--chat-template", dest="audit_chat_template",
                default=os.environ.get("AUDIT_CHAT_TEMPLATE", "auto"), metavar="auto|none|FILE",
                help="generation prompts (KoBBQ, KGQuiz): through the model's own chat template "
                     "(auto, the default), as plain text (none), or through the Jinja template in "
                     "FILE; recorded with its sha256 (env AUDIT_CHAT_TEMPLATE)")
    g.addoption("--require-published-data", dest="audit_require_published", action="store_true",
                default=False, help="stop (exit 4) unless every data file read is the authors' "
                                    "published release (sha256 of the pinned source table)")
    g.addoption("--bbq-protocol", dest="audit_bbq_protocol", choices=["default", "lmeval"],
                default=os.environ.get("AUDIT_BBQ_PROTOCOL"),
                help="BBQ scoring: default (argmax over the 3 options) or lmeval (lm-evaluation-"
                     "harness 0.4.13's bbq task: 2 group answers + 10 unknown phrasings)")
    g.addoption("--bbq-answer-mode", dest="audit_bbq_answer_mode", default=None,
                choices=["loglikelihood", "generate"],
                help="BBQ, EsBBQ, CaBBQ: loglikelihood (the papers' cloze scoring; default) or "
                     "generate (lettered options through the chat template, greedy text parsed; "
                     "gates end in -generate)")
    g.addoption("--answer-parsing", dest="audit_answer_parsing", default=None,
                choices=["authors", "robust"],
                help="how generated or saved answers are read: authors (each benchmark's "
                     "published post-processing) or robust (what chat models write); default: "
                     "authors where they published one (KoBBQ, KGQuiz), robust elsewhere. Every "
                     "metric is also reported under the other profile")
    g.addoption("--metric-flavour", dest="audit_metric_flavour", default=None,
                choices=["bbq", "kobbq", "esbbq"],
                help="BBQ-family metric definitions of another paper (default: each benchmark's own)")
    g.addoption("--bbq-split-names", dest="audit_bbq_split_names", action="store_true",
                default=None, help="BBQ: also report the name-proxy items as '<category> (names)' "
                                   "groups, as the paper does (results' overall section)")
    g.addoption("--results-json", dest="audit_results_json", default=None, metavar="PATH",
                help="also write the run's results.json to PATH")
    g.addoption("--cache-dir", dest="audit_cache_dir", default=os.environ.get("AUDIT_CACHE_DIR"),
                help="result cache folder (SQLite; env AUDIT_CACHE_DIR; default: "
                     "$BIAS_AUDIT_CACHE/scores): a repeated or resumed run recomputes only what is missing")
    g.addoption("--no-cache", dest="audit_no_cache", action="store_true", default=False,
                help="do not read or write the result cache")
    g.addoption("--results-dir", dest="audit_results_dir",
                default=os.environ.get("AUDIT_RESULTS_DIR", "audit-results"),
                help="each run writes <results-dir>/<run id>/ (results.json, records/, junit.xml)")
    g.addoption("--kobbq-mode", dest="audit_kobbq_mode", default=None,
                choices=["generate", "letter", "both"],
                help="KoBBQ answers: generate (upstream: greedy text, parsed; default), letter "
                     "(log-likelihood of each option letter) or both (letter gates end in -letter)")
    g.addoption("--kobbq-prompts", dest="audit_kobbq_prompts", default=None, metavar="IDS",
                help="KoBBQ prompt templates to run, e.g. 1,3 (default: all 5)")
    g.addoption("--kobbq-permutations", dest="audit_kobbq_permutations", default=None, metavar="IDS",
                help="KoBBQ option orders to run, e.g. 0,2 (default: all 3)")
    from .backends import add_options

    add_options(g)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "audit(benchmark): an audit test parametrized with the "
                                       "benchmark's gates from thresholds.yaml")
    from .benchmarks import registry
    from .session import AuditSession, options_from_config

    if config.getoption("audit_thresholds") is None:
        local = Path(config.invocation_params.dir) / "thresholds.yaml"
        config.option.audit_thresholds = str(local if local.is_file() else PACKAGED_THRESHOLDS)
    try:
        options = options_from_config(config)
        benchmarks = registry()
        catalogue = {name: (b.categories, b.metric_names, b.metric_ranges())
                     for name, b in benchmarks.items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gates = load_thresholds(Path(options.thresholds), catalogue, min_n=options.min_n)
        baseline_path = config.getoption("audit_baseline")
        baseline = baseline_file = None
        if baseline_path:
            baseline_file = Path(config.invocation_params.dir) / baseline_path
            baseline = read_results(baseline_file, "--baseline")[0]
            if baseline_file.is_dir():
                baseline_file = baseline_file / "results.json"
    except AuditError as e:
        raise pytest.UsageError(str(e)) from None
    if not hasattr(config, "workerinput"):  # a deprecated key warns once, in the controller
        for warning in {str(w.message): w.message for w in caught}.values():
            config.issue_config_time_warning(warning, stacklevel=2)
    # ...and is kept for the results and both reports, which outlive pytest's warnings summary.
    thresholds_warnings = list(dict.fromkeys(str(w.message) for w in caught))
    workerinput = getattr(config, "workerinput", None)
    gpus = _gpu_plan(config, options) if workerinput is None else None
    if workerinput is not None:
        from .devices import pin

        pin(workerinput.get("bias_audit_gpu"))  # before anything initializes CUDA
        run_id = workerinput["bias_audit_run_id"]
        worker_index = int(re.sub(r"\D", "", workerinput.get("workerid", "gw0")) or 0)
    else:
        named = (f"replay-{Path(options.predictions).stem}" if options.backend == "replay"
                 else Path(options.model or "smollm2-135m-instruct").name)
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", named)
        run_id = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{model}-{os.getpid()}"
        worker_index = None
    run_dir = Path(options.results_dir).resolve() / run_id
    try:
        session = AuditSession(options, benchmarks, run_dir, worker_index)
    except AuditError as e:
        raise pytest.UsageError(str(e)) from None
    config.stash[_SESSION_KEY] = session
    if workerinput is not None:
        session.replay_benchmark = workerinput.get("bias_audit_replay")
    gates = expand_gates(gates, session.benchmarks)
    if baseline is not None:
        gates = add_regression_gates(gates, baseline)
    config.stash[_STATE_KEY] = {"gates": gates, "run_id": run_id, "worker_outputs": [], "gpus": gpus,
                                "started": time.time(), "validated": False, "selected": None,
                                "baseline": baseline and _baseline_summary(baseline, baseline_path,
                                                                           baseline_file),
                                "baseline_doc": baseline, "thresholds_warnings": thresholds_warnings}
    # An audit run (audits on the command line) writes JUnit XML into its run folder unless the
    # user chose a path; a unit-test run writes nothing.
    if workerinput is None and _targets_audits(config):
        # Check what every gate needs before anything runs (and before xdist starts workers):
        # files present, model name usable, and every selected category's rows valid.
        audit = config.stash[_SESSION_KEY]
        selected = _selected_gates(config, gates)
        try:
            _check_inputs(audit, list(selected), config.getoption("audit_fetch_data"))
            pairs = _present_pairs(audit, selected, gates)
            audit.validate_data(pairs)
            if selected:
                _check_replay(audit, sorted(selected))
                _check_outputs(audit, config.stash[_STATE_KEY])
        except AuditError as e:
            raise pytest.UsageError(str(e)) from None
        state = config.stash[_STATE_KEY]
        state["validated"] = True
        state["selected"] = selected
        if not config.option.xmlpath:
            config.option.xmlpath = str(run_dir / "junit.xml")
            state["own_junit"] = True


def _baseline_summary(results: dict, path: str, file: Path) -> dict:
    """What the results file records about the ``--baseline`` run: where it was read, its sha256
    (so a reviewer can tell the baseline was not edited after the fact), run id, model."""
    from .data import sha256_file

    return {"path": str(path), "sha256": sha256_file(file), "run_id": results.get("run_id"),
            "model": (results.get("model") or {}).get("name"),
            "fingerprint": (results.get("model") or {}).get("fingerprint"),
            "created": results.get("created")}


def expand_gates(gates: dict[str, list[Gate]], benchmarks) -> dict[str, list[Gate]]:
    """Each thresholds.yaml gate once per metric it checks in this run's configuration
    (``Benchmark.gate_metrics``: KoBBQ ``both`` adds ``<metric>-letter`` gates), in file order."""
    return {name: [dataclasses.replace(g, metric=m) for g in gs
                   for m in benchmarks[name].gate_metrics(g.metric)]
            for name, gs in gates.items()}


def _check_inputs(audit, selected, fetch: bool = False) -> None:
    """Raise AuditError when the data directory lacks a selected benchmark's files (fetching them
    first with --fetch-data), the model name is unusable, or the model cannot compute what a
    selected benchmark needs."""
    from .models.zoo import check_capabilities, check_model_name
    from .sources.check import require_data

    require_data(audit.data_dir, selected, {b.data_folder for b in audit.benchmarks.values()},
                 fetch=fetch)
    if audit.options.backend == "hf":  # a server's model name is whatever it serves
        check_model_name(audit.options.model)
        check_capabilities(audit.options.model,
                           {name: b.requires for name, b in audit.benchmarks.items()}, selected)


def _check_replay(audit, benchmarks: list[str]) -> None:
    """With ``--backend replay``: the run replays one benchmark, and its predictions file joins
    to the data (every row checked at start-up, so a bad row stops the run before scoring).

    Raises:
        AuditError: several benchmarks selected, or the file's first bad row (file:line).
    """
    if audit.options.backend != "replay":
        return
    if len(benchmarks) != 1:
        raise ConfigError(f"--backend replay scores the saved outputs of one benchmark, but the "
                          f"run selects {', '.join(benchmarks)}: select one (its audit file, or -k)")
    audit.replay_benchmark = benchmarks[0]
    audit.replay_of(benchmarks[0])


def _check_outputs(audit, state: dict) -> None:
    """Before anything is scored: the result cache opens and is valid, the run folder can be
    written, and with ``--strict-baseline`` the options already show the baseline comparable.

    Raises:
        AuditError: naming the file or option and what to do.
    """
    baseline = state.get("baseline_doc")
    if baseline is not None and audit.options.strict_baseline:
        from .report.compare import comparability_notes, incomplete_notes

        from .engine.cache import ENGINE_VERSION

        mine = {"options": dict(audit.options.__dict__),
                "run": {"thresholds_sha256": _sha256_of(audit.options.thresholds),
                        "engine_version": ENGINE_VERSION}}
        unlike = comparability_notes(baseline, mine) + incomplete_notes({"baseline": baseline})
        if unlike:
            raise ConfigError(f"--strict-baseline: the baseline run is not like for like: "
                              f"{'; '.join(unlike)}")
    audit.open_cache()
    audit.check_results_dir()  # last: it creates the run folder


def _sha256_of(path) -> str:
    from .data import sha256_file

    return sha256_file(Path(path))


def _present_pairs(audit, selected: dict[str, list[str]], gates) -> list[tuple[str, str]]:
    """(benchmark, category) of the selected gate ids whose category the data dir holds (the
    gates ``pytest_generate_tests`` will create), in order."""
    pairs: list[tuple[str, str]] = []
    for bench, ids in selected.items():
        present = set(audit.benchmarks[bench].categories_in(audit.data_dir))
        by_id = {g.test_id: g.category for g in gates.get(bench, ())}
        for gate_id in ids:
            category = by_id.get(gate_id)
            if category in present and (bench, category) not in pairs:
                pairs.append((bench, category))
    return pairs


def _selected_gates(config: pytest.Config, gates) -> dict[str, list[str]]:
    """``{benchmark: [gate ids]}`` the command line selects (``selection.selected_gate_ids``)."""
    from .selection import selected_gate_ids

    return selected_gate_ids(AUDITS_DIR, config.args, Path(config.invocation_params.dir),
                             config.option.keyword,
                             {b: [g.test_id for g in gs] for b, gs in gates.items()})


def _targets_audits(config: pytest.Config) -> bool:
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = (Path(config.invocation_params.dir) / path).resolve()
        if path == AUDITS_DIR or AUDITS_DIR in path.parents:
            return True
    return False


def _gpu_plan(config: pytest.Config, options) -> list | None:
    """The GPU of each xdist worker (``devices.assign``), or None without ``-n``.

    Raises:
        pytest.UsageError: more workers than GPUs."""
    from .devices import assign, uses_gpus, visible_gpus

    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 1 or not uses_gpus(options.backend, options.device):
        return None
    try:  # an audit's workers each hold a whole model; the suite's own tests may share GPUs
        return assign(workers, visible_gpus(), options.device, share=not _targets_audits(config))
    except AuditError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own (a CPU count)
def pytest_xdist_auto_num_workers(config: pytest.Config):
    # `-n auto` with the in-process backend: one worker per GPU (None: xdist's CPU count).
    from .devices import auto_workers, visible_gpus

    backend, device = config.getoption("audit_backend"), config.getoption("audit_device")
    return auto_workers(backend, device, visible_gpus())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    from .devices import worker_number

    state = node.config.stash[_STATE_KEY]
    node.workerinput["bias_audit_run_id"] = state["run_id"]
    node.workerinput["bias_audit_replay"] = node.config.stash[_SESSION_KEY].replay_benchmark
    if state.get("gpus"):
        # A worker xdist starts again after a crash gets a new number: it takes a crashed one's GPU.
        gpus = state["gpus"]
        node.workerinput["bias_audit_gpu"] = gpus[worker_number(node.workerinput["workerid"]) % len(gpus)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "audit_gate" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("audit")
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test using audit_gate needs "
                                "@pytest.mark.audit('<benchmark>')")
    benchmark = marker.args[0]
    state = metafunc.config.stash[_STATE_KEY]
    session = metafunc.config.stash[_SESSION_KEY]
    if benchmark not in session.benchmarks:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: unknown benchmark {benchmark!r}; "
                                f"known: {', '.join(sorted(session.benchmarks))}")
    gates = _gates_for_data(session, benchmark, state["gates"].get(benchmark, []))
    metafunc.parametrize("audit_gate", gates, ids=[g.test_id for g in gates], indirect=True)


def _gates_for_data(session, benchmark: str, gates: list[Gate]) -> list[Gate]:
    """The gates whose category the data directory holds (WinoQueer: the subgroups of the file
    found, ``Benchmark.categories_in``); all of them when no data dir can be resolved (the
    start-up check reports that)."""
    try:
        present = set(session.benchmarks[benchmark].categories_in(session.data_dir))
    except AuditError:
        return gates
    return [g for g in gates if g.category in present]


_GATE_NODEID = re.compile(r"^(?P<func>.+)\[(?P<category>[^\[\]]+)-(?P<metric>[A-Za-z0-9_]+)\]$")
_PARAM_NODEID = re.compile(r"^(?P<func>.+)\[(?P<param>[^\[\]]+)\]$")


def category_scope(nodeid: str, gate_categories: dict[str, str] | None = None,
                   whole: frozenset[str] = frozenset()) -> str:
    """xdist scope of a test: ``<test function>[<category>]`` for a gate test, so all gates of a
    category share a worker and the model scores the category once; for the test functions in
    ``whole`` (benchmarks whose categories share items, ``Benchmark.shared_items``) the function
    itself, so every pair is scored once; the node id otherwise.

    ``gate_categories`` maps the run's gate test ids (``Gate.test_id``) to their categories: it
    settles ids whose metric part holds a ``-`` (``age-diff_bias_ambig-letter`` is category
    ``age``), which the fallback pattern (category, ``-``, a metric of ``[A-Za-z0-9_]``) cannot.
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


def gate_categories(gates: dict[str, list[Gate]]) -> dict[str, str]:
    """``{test id: category}`` of ``gates``, for ``category_scope``; an id that two benchmarks
    use for different categories is left to the fallback pattern."""
    seen: dict[str, set[str]] = {}
    for gs in gates.values():
        for g in gs:
            seen.setdefault(g.test_id, set()).add(g.category)
    return {tid: next(iter(cats)) for tid, cats in seen.items() if len(cats) == 1}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # With -n and no explicit --dist, schedule by category. (xdist's loadgroup would need node-id
    # rewriting, which pytest >= 9.2 no longer honours.) An explicit --dist is respected.
    explicit = any(a == "-d" or a.startswith("--dist") for a in config.invocation_params.args)
    if explicit or config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    categories = gate_categories(config.stash[_STATE_KEY]["gates"])
    # Audit modules name their test ``test_<benchmark>`` (see audits/).
    whole = frozenset(f"test_{name}" for name, b in config.stash[_SESSION_KEY].benchmarks.items()
                      if b.shared_items)

    class CategoryScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return category_scope(nodeid, categories, whole)

    return CategoryScheduling(config, log)


class GateFinding:
    """The failure report of a gate that ran and did not pass: a finding, not a bug, so its
    report is the verdict line (value, interval, n, bound, mode) instead of a traceback, printed
    once in the FAILURES section and carried as the JUnit failure text. It has no ``reprcrash``,
    so pytest's short summary lists the test id without repeating the line."""

    def __init__(self, message: str):
        self.message = message

    def __str__(self) -> str:
        return self.message

    def toterminal(self, tw) -> None:
        tw.line(self.message)


#: JUnit ``status`` values of a gate that was evaluated and did not pass.
_FINDINGS = frozenset({"fail", "undefined", "insufficient"})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    verdict = item.stash.get(_VERDICT_KEY, None)
    if verdict is not None and report.when == "call" and report.failed:
        report.longrepr = GateFinding(verdict.message)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report) -> None:
    # A report from an xdist worker arrives with its longrepr flattened to text: wrap it again
    # before the terminal and JUnit see it, so a parallel run prints a finding as a serial one.
    if (report.when == "call" and report.failed and isinstance(report.longrepr, str)
            and dict(report.user_properties).get("status") in _FINDINGS):
        report.longrepr = GateFinding(report.longrepr)


def _gate_of(item) -> Gate | None:
    gate = getattr(getattr(item, "callspec", None), "params", {}).get("audit_gate")
    return gate if isinstance(gate, Gate) else None


def _gate_of_nodeid(nodeid: str, gates) -> Gate | None:
    """The Gate a gate test's node id names (``...::test_<benchmark>[<Gate.test_id>]``)."""
    m = _PARAM_NODEID.match(nodeid)
    if not m:
        return None
    bench = m["func"].rsplit("::", 1)[-1].removeprefix("test_")
    return next((g for g in gates.get(bench, ()) if g.test_id == m["param"]), None)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    state = config.stash[_STATE_KEY]
    chosen = [g for g in map(_gate_of, session.items) if g is not None]
    state["gate_nodeids"] = {(g.benchmark, g.test_id): item.nodeid for item in session.items
                             if (g := _gate_of(item)) is not None}
    if chosen and state["validated"]:
        state["collected_gates"] = chosen
    if not chosen or state["validated"]:
        return
    # Gate tests selected without the audits folder on the command line: check inputs here.
    audit = config.stash[_SESSION_KEY]
    try:
        _check_inputs(audit, sorted({g.benchmark for g in chosen}), config.getoption("audit_fetch_data"))
        audit.validate_data(list(dict.fromkeys((g.benchmark, g.category) for g in chosen)))
        _check_replay(audit, sorted({g.benchmark for g in chosen}))
        _check_outputs(audit, state)
    except AuditError as e:
        pytest.exit(f"bias audit: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
    state["validated"] = True
    state["collected_gates"] = chosen


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    # With xdist the controller collects nothing: learn the selected gates from the workers, so
    # that gates never run (an interrupted run) are listed as NOT RUN.
    state = node.config.stash[_STATE_KEY]
    if "collected_gates" not in state:
        pairs = [(i, _gate_of_nodeid(i, state["gates"])) for i in ids]
        state["collected_gates"] = [g for _, g in pairs if g is not None]
        state["gate_nodeids"] = {(g.benchmark, g.test_id): i for i, g in pairs if g is not None}


def _partial_coverage(verdict: Verdict, outcome, allow_partial: bool) -> Verdict:
    """A judged verdict on a category the saved predictions cover only in part is no verdict:
    INSUFFICIENT (cause ``coverage``) unless ``--allow-partial``."""
    cov = outcome.coverage
    if (not cov or allow_partial or cov["predicted"] >= cov["available"]
            or verdict.status not in ("pass", "fail")):
        return verdict
    g = verdict.gate
    share = 100.0 * cov["predicted"] / cov["available"]
    return dataclasses.replace(
        verdict, status="insufficient", cause="coverage",
        message=(f"{g.benchmark}/{g.category}/{g.metric}: no verdict, the predictions cover "
                 f"{cov['predicted']:,} of {cov['available']:,} rows of the category ({share:.1f} %); "
                 f"a partial category decides nothing (--allow-partial judges the rows given; "
                 f"it would {'pass' if verdict.passed else 'fail'}: {verdict.message})"))


def skipped_verdict(gate: Gate, reason: str) -> dict:
    """The results-file verdict of a gate whose category could not be evaluated because its data
    file is missing: status ``skipped``, no value, ``reason`` as the message."""
    return Verdict.skipped(gate, reason).to_dict()


class GateCheck:
    """What an audit test receives: evaluates one gate on the (cached) category outcome and
    records value, n, interval and bounds as JUnit properties."""

    def __init__(self, gate: Gate, session, record_property, node):
        self.gate = gate
        self._session = session
        self._record = record_property
        self._node = node

    def evaluate(self):
        """Run (or reuse) the category's evaluation and return the gate's Verdict.

        Raises the suite's AuditError (bad data or model) as a test error with its message; a
        ``MissingDataError`` skips the test (``pytest.skip``) and records a ``skipped`` verdict.
        """
        g = self.gate
        capman = self._node.config.pluginmanager.getplugin("capturemanager")
        # Progress of a long category goes to the terminal, not into the test's captured output.
        show = capman is not None and self._session.options.progress != "off"
        try:
            with capman.global_and_fixture_disabled() if show else contextlib.nullcontext():
                outcome = self._session.outcome(g.benchmark, g.category)
            error = None
        except MissingDataError as e:
            # A category whose file is absent is skipped, and the skip is kept in the results so
            # the report lists the gate instead of silently dropping it.
            reason = f"{g.benchmark}/{g.category}: {e}"
            self._record("status", "skipped")
            self._record("reason", reason)
            self._session.verdicts.append(skipped_verdict(g, reason))
            pytest.skip(reason)
        except AuditError as e:
            error = f"{g.benchmark}/{g.category}: {e}"
            self._record_error(error)
            if getattr(e, "stops_run", False):  # every later gate would fail the same way
                self._session.model_error = str(e)
                self._node.session.shouldstop = f"bias audit: {e}"
            pytest.fail(error, pytrace=False)
        except Exception as e:  # a backend crash: recorded as this gate's ERROR, traceback kept
            self._record_error(f"{g.benchmark}/{g.category}: {type(e).__name__}: {e}")
            raise
        metric = self._session.metric(g.benchmark, g.category, g.metric)
        verdict = g.evaluate(metric, n_resamples=self._session.options.n_resamples)
        verdict = _partial_coverage(verdict, outcome, self._session.options.allow_partial)
        verdict = self._other_parse(verdict, outcome)
        baseline = self._node.config.stash[_STATE_KEY].get("baseline_doc")
        if g.baseline is not None and baseline is not None:
            from .report.compare import comparability_notes

            unlike = comparability_notes(baseline, self._session.category_document(g.benchmark, g.category),
                                         scope=(g.benchmark, g.category))
            if unlike:
                verdict = dataclasses.replace(
                    verdict, not_like_for_like=tuple(unlike),
                    message=f"{verdict.message} [not like for like: {'; '.join(unlike)}]")
        self._record("value", "nan" if not metric.defined else f"{metric.value:.6f}")
        self._record("n", metric.n)
        self._record("ci", f"{metric.ci_low:.6f},{metric.ci_high:.6f}")
        self._record("bounds", json.dumps(g.bounds()))
        self._record("mode", g.decision_mode)
        self._record("min_n", g.min_n)
        if g.baseline is not None:
            self._record("baseline_value", "nan" if g.baseline.value != g.baseline.value
                         else f"{g.baseline.value:.6f}")
            self._record("baseline_run", g.baseline.run_id)
            self._record("max_regression", g.max_regression)
            self._record("like_for_like", "false" if verdict.not_like_for_like else "true")
            if verdict.not_like_for_like:
                self._record("not_like_for_like", "; ".join(verdict.not_like_for_like))
        self._record("status", verdict.status)
        self._record("items_scored", outcome.n_scored)
        self._session.verdicts.append(verdict.to_dict())
        self._node.stash[_VERDICT_KEY] = verdict
        return verdict

    def _other_parse(self, verdict: Verdict, outcome) -> Verdict:
        """The same gate under the other answer-parsing profile (the parse sensitivity): its
        status, value and interval ride along with the verdict; the verdict itself is the run's
        profile's."""
        sens = outcome.sensitivity
        g = self.gate
        if not sens or g.baseline is not None or g.metric not in sens["metrics"]:
            return verdict
        from bias_metrics.result import MetricResult

        metric = MetricResult.from_dict(sens["metrics"][g.metric])
        alt = _partial_coverage(g.evaluate(metric, n_resamples=self._session.options.n_resamples),
                                outcome, self._session.options.allow_partial)
        self._record("other_parse_status", alt.status)
        return dataclasses.replace(verdict, other_parse={
            "answer_parsing": sens["answer_parsing"], "status": alt.status,
            "value": metric.to_dict()["value"], "ci": metric.to_dict()["ci"],
            "verdict_differs": alt.passed != verdict.passed})

    def _record_error(self, message: str) -> None:
        verdict = Verdict.error(self.gate, message)
        self._record("status", verdict.status)
        self._record("reason", message)
        self._session.verdicts.append(verdict.to_dict())


@pytest.fixture(scope="session")
def bias_audit(request: pytest.FixtureRequest):
    """The run's ``AuditSession`` (options, outcomes, verdicts)."""
    return request.config.stash[_SESSION_KEY]


@pytest.fixture(scope="session")
def audit_model(bias_audit, request):
    """The audited model, loaded once per process (CUDA when available, see --device)."""
    if bias_audit.model_error is None:
        try:
            return bias_audit.model
        except AuditError as e:
            bias_audit.model_error = str(e)
    # A model that cannot load makes every gate meaningless: fail this test with the one-line
    # message and stop the run (pytest.exit would print an internal traceback, and crash an
    # xdist worker); the results list every selected gate as ERROR and the exit code is 4.
    request.session.shouldstop = "bias audit: the model could not be loaded"
    pytest.fail(f"bias audit: {bias_audit.model_error}", pytrace=False)


@pytest.fixture
def audit_gate(request: pytest.FixtureRequest, bias_audit, record_property):
    """One gate of thresholds.yaml, ready to evaluate (parametrized by the plugin)."""
    g = request.param
    # The gate's identity goes into JUnit first, so a testcase names its gate whatever happens
    # next (a model that does not load, an ERROR, a skip), as a judged one does.
    for key, value in (("benchmark", g.benchmark), ("category", g.category),
                       ("metric", g.metric), ("kind", g.kind)):
        record_property(key, value)
    try:
        request.getfixturevalue("audit_model")
    except pytest.fail.Exception:
        record_property("status", "error")
        record_property("reason", f"bias audit: {bias_audit.model_error}")
        raise
    return GateCheck(g, bias_audit, record_property, request.node)


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter renders the traceback
def pytest_keyboard_interrupt(excinfo) -> None:
    _INTERRUPTS.append(True)
    # Python 3.11 can leave a traceback entry without a line number when Ctrl-C lands between
    # bytecodes; pytest's rendering of it then raises TypeError, which escapes pytest and turns
    # an interrupted run into exit 1. Drop such entries before anything renders them.
    try:
        excinfo.traceback = excinfo.traceback.filter(
            lambda entry: getattr(entry, "_rawentry", None) is None
            or entry._rawentry.tb_lineno is not None)
    except Exception:  # noqa: BLE001 - a pytest internal; never let this hook fail
        pass


#: Set when pytest reported a KeyboardInterrupt in this process (``pytest_keyboard_interrupt``):
#: the run is interrupted whatever exit status pytest goes on to report.
_INTERRUPTS: list[bool] = []


@pytest.hookimpl(tryfirst=True)  # before junitxml's own, which writes the file
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    config = session.config
    audit = config.stash.get(_SESSION_KEY, None)
    if audit is None:
        return
    state = config.stash[_STATE_KEY]
    if hasattr(config, "workerinput"):
        config.workeroutput["bias_audit"] = json.dumps(audit.export())
        return
    from .interrupts import deferred_interrupts

    # A Ctrl-C from here on is counted, not raised: the run's files are written whole, and say
    # the run was interrupted.
    with deferred_interrupts() as presses:
        _finish_run(session, exitstatus, audit, state, presses)


def _finish_run(session: pytest.Session, exitstatus, audit, state: dict, presses) -> None:
    config = session.config
    parts = [audit.export()] + [json.loads(p) for p in state["worker_outputs"]]
    outcomes = [o for p in parts for o in p["outcomes"]]
    verdicts = [v for p in parts for v in p["verdicts"]]
    errors = [e for p in parts for e in p.get("errors", [])]
    model_error = next((p["model_error"] for p in parts if p.get("model_error")), None)
    collected = state.get("collected_gates") or []
    if not (outcomes or verdicts or errors or collected):
        if model_error:
            session.exitstatus = exit_codes.USAGE_ERROR
        return  # not an audit run (or nothing selected): no results folder
    # (A model that cannot load stops the run through shouldstop, which pytest also reports as
    # INTERRUPTED: that is an input error, not a Ctrl-C.)
    interrupted = (exitstatus == pytest.ExitCode.INTERRUPTED or bool(_INTERRUPTS)) and not model_error
    # Every selected gate appears in the results: those never evaluated as NOT RUN, with why.
    seen = {(v["benchmark"], v["category"], v["metric"]) for v in verdicts}
    why = ("the run was interrupted" if interrupted
           else "the run stopped before it (-x/--maxfail, a skip, or a crash)")
    unrun = [g for g in collected if (g.benchmark, g.category, g.metric) not in seen]
    verdicts += [(Verdict.error(g, f"{g.benchmark}/{g.category}: {model_error}") if model_error
                  else Verdict.not_run(g, why)).to_dict() for g in unrun]
    _junit_unrun_gates(config, state, unrun, model_error or why, "error" if model_error else "not run")

    from .data import sha256_file
    from .engine.cache import ENGINE_VERSION
    from .report.results import build_results, suite_provenance

    model = next((p["model"] for p in parts if p["model"]), None)
    opts = dict(audit.options.__dict__)
    try:
        opts["data_dir"] = str(audit.data_dir)  # record the resolved path, not the flag as typed
    except AuditError:
        pass
    # Gates configured for the benchmarks this run touched: a BBQ-only run is complete when
    # all BBQ gates ran, whatever EsBBQ's section holds.
    touched = ({o["benchmark"] for o in outcomes} | {v["benchmark"] for v in verdicts}
               | {e["benchmark"] for e in errors})
    configured = sum(len(_gates_for_data(audit, b, g)) for b, g in state["gates"].items() if b in touched)
    args = list(config.invocation_params.args)
    run = {"invocation": args,
           "command_line": shlex.join(["pytest", *args]),
           "working_directory": str(config.invocation_params.dir),
           "started": datetime.fromtimestamp(state["started"], timezone.utc).isoformat(timespec="seconds"),
           "duration_s": round(time.time() - state["started"], 3),
           "suite": suite_provenance(),
           "engine_version": ENGINE_VERSION,
           "thresholds_sha256": sha256_file(Path(audit.options.thresholds)),
           "thresholds_warnings": state.get("thresholds_warnings") or [],
           "interval_floors": _interval_floors(audit, state),
           "gates_configured": configured}
    from .session import overall_from_records

    run_error = None
    try:
        overall = overall_from_records(audit.benchmarks, outcomes, audit.run_dir,
                                       audit.options.metric_settings)
    except AuditError as e:  # the records of a category went missing under the run
        overall, run_error = {}, f"the overall aggregates could not be computed ({e})"
    provenance = {name: audit.protocol(name, model) for name in touched}
    results = build_results(run_id=state["run_id"], options=opts, model=model, outcomes=outcomes,
                            verdicts=verdicts, thresholds_path=str(audit.options.thresholds),
                            overall=overall, provenance=provenance, run=run, errors=errors,
                            benchmark_info={n: audit.benchmarks[n].report_info() for n in touched},
                            baseline=state.get("baseline"))
    input_error = f"the model could not be loaded: {model_error}" if model_error else None
    if state.get("baseline_doc") is not None:
        # Regression gates are only meaningful like for like: say what differs from the baseline.
        from .report.compare import comparability_notes, incomplete_notes, model_notes

        unlike = (incomplete_notes({"baseline": state["baseline_doc"]})
                  + comparability_notes(state["baseline_doc"], results))
        results["baseline"]["not_like_for_like"] = unlike
        results["baseline"]["models"] = model_notes(state["baseline_doc"], results)
        if unlike and audit.options.strict_baseline and not input_error:
            input_error = (f"--strict-baseline: the baseline run is not like for like "
                           f"({'; '.join(unlike)})")
    state["results"] = results
    state["facts"] = {"interrupted": interrupted, "input_error": input_error, "run_error": run_error}
    _write_outputs(config, audit, state, presses)
    session.exitstatus = state["outcome"].exit_code


def _decide(state: dict, presses):
    """The run's one outcome decision (``outcome.decide``), stored in results.json's ``run``
    where the terminal, both reports and JUnit read it."""
    from .outcome import decide

    results, facts = state["results"], state["facts"]
    outcome = decide([v["status"] for v in results["gates"]],
                     interrupted=facts["interrupted"] or bool(presses),
                     input_error=facts["input_error"], run_error=facts["run_error"])
    results["run"]["outcome"] = outcome.to_dict()
    results["run"]["status"] = outcome.status
    results["run"]["exit_status"] = outcome.exit_code
    state["outcome"] = outcome
    return outcome


def _write_outputs(config, audit, state: dict, presses) -> None:
    """results.json, then report.md and report.html, into the run folder; where that fails, into
    a temporary folder the terminal names (a RUN ERROR: the results are not where asked). A
    Ctrl-C meanwhile makes the outcome INTERRUPTED and everything is written again to say so; a
    second one skips (and removes) the reports, which ``bias-audit report`` renders later."""
    import tempfile

    from .report.html import write_html
    from .report.markdown import write_markdown
    from .report.results import write_results

    folder = audit.run_dir
    while True:
        pressed = presses.count
        _decide(state, presses)
        try:
            write_results(folder / "results.json", state["results"])
        except OSError as e:
            if state.get("moved_to"):
                raise
            tmp = Path(tempfile.mkdtemp(prefix=f"bias-audit-{state['run_id']}-"))
            state["facts"]["run_error"] = (f"the run folder {folder} could not be written "
                                           f"({e.strerror or e}); this run's files are in {tmp}")
            state["moved_to"], folder = str(tmp), tmp
            continue
        state["results_path"] = folder / "results.json"
        for key, name, writer in (("report_path", "report.md", write_markdown),
                                  ("html_path", "report.html", write_html)):
            if presses.count >= 2:
                (folder / name).unlink(missing_ok=True)  # never a report of an older verdict
                state[key] = f"not written (interrupted; `bias-audit report {folder}` renders it)"
                continue
            try:
                state[key] = writer(folder / name, state["results"])
            except OSError as e:
                state[key] = f"not written ({e.strerror or e})"
        if presses.count == pressed:
            break
    copy = config.getoption("audit_results_json", None)
    if copy:
        try:
            state["results_copy"] = write_results(Path(config.invocation_params.dir) / copy,
                                                  state["results"])
        except OSError as e:
            state["results_copy"] = f"{copy}: not written ({e.strerror or e})"
    from .report.junit import add_outcome_properties

    add_outcome_properties(config, state["outcome"], {"run_id": state["run_id"],
                                                      "results": state["results_path"]})


def _junit_unrun_gates(config, state: dict, gates: list[Gate], why: str, status: str) -> None:
    """JUnit testcases for the selected gates that produced no test report (``report.junit``)."""
    from .report.junit import add_unreported_gates

    nodeids = state.get("gate_nodeids") or {}
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    # A gate counts as reported once its call ran, or its setup failed or skipped; a test
    # interrupted after a passing setup still needs its testcase.
    reported = {getattr(r, "nodeid", None) for reports in getattr(terminal, "stats", {}).values()
                for r in reports
                if getattr(r, "when", None) == "call" or (getattr(r, "when", None) == "setup"
                                                          and not getattr(r, "passed", False))}
    cases = []
    for g in gates:
        nodeid = nodeids.get((g.benchmark, g.test_id))
        if nodeid is None or nodeid in reported:
            continue
        props = {"benchmark": g.benchmark, "category": g.category, "metric": g.metric,
                 "kind": g.kind, "status": status, "reason": f"not run: {why}"}
        cases.append((nodeid, props, f"{g.benchmark}/{g.category}/{g.metric}: not run ({why})"))
    add_unreported_gates(config, cases)


def _interval_floors(audit, state: dict) -> dict:
    """The run's interval settings next to what its gates are signed off at (results.json)."""
    from .gates import MIN_RESAMPLES

    levels = sorted({g.confidence for gs in state["gates"].values() for g in gs})
    return {"confidence": audit.options.confidence, "n_resamples": audit.options.n_resamples,
            "signed_off_confidence": levels, "min_resamples": dict(MIN_RESAMPLES)}


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    # A run that selected nothing (or stopped before any gate) leaves no run folder: the JUnit
    # file this plugin chose for it is removed, and the folder with it when that empties it.
    if not state or "results" in state or not state.get("own_junit"):
        return
    junit = Path(config.option.xmlpath)
    junit.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        junit.parent.rmdir()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    output = getattr(node, "workeroutput", {}).get("bias_audit")
    if output:
        node.config.stash[_STATE_KEY]["worker_outputs"].append(output)


def _known_audits(config: pytest.Config) -> list[str]:
    """Lines naming every benchmark and the categories its gates cover (the ``-k`` hint)."""
    audit = config.stash[_SESSION_KEY]
    gates = config.stash[_STATE_KEY]["gates"]
    lines = []
    for name in sorted(audit.benchmarks):
        cats = list(dict.fromkeys(g.category for g in gates.get(name, ())))
        lines.append(f"  test_{name}: {', '.join(cats) if cats else '(no gates configured)'}")
    return lines


def _option(results: dict, key: str):
    """An option as results.json records it."""
    return (results.get("options") or {}).get(key)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, None)
    if not state:
        return
    tr = terminalreporter
    if state.get("selected") == {} and config.option.keyword:
        tr.section("bias audit")
        tr.write_line(f"-k {config.option.keyword!r} selects no audit gate. Gate tests are named "
                      "test_<benchmark>[<category>-<metric>]; the benchmarks and categories are:")
        for line in _known_audits(config):
            tr.write_line(line)
        return
    if "results" not in state:
        return
    from .report.results import gate_lines, metric_table

    results = state["results"]
    outcome = state["outcome"]
    tr.section("bias audit")
    if outcome.label == "INTERRUPTED":
        tr.write_line("INTERRUPTED: this run was stopped before it finished; gates that did not run "
                      "are listed as NOT RUN (and as errors in junit.xml)", red=True)
    if state.get("moved_to"):
        tr.write_line(f"RESULTS MOVED: {results['run']['outcome']['reason']}", red=True)
    floors = [v for v in results["gates"] if v.get("cause") == "interval"]
    if floors:
        tr.write_line(f"INTERVALS: {len(floors)} gate(s) INSUFFICIENT because the run's intervals "
                      f"(--confidence {_option(results, 'confidence')}, --bootstrap-resamples "
                      f"{_option(results, 'n_resamples')}) are more lenient than the gates are "
                      "signed off at, or rest on too few resamples (messages above)", red=True)
    from .report.markdown import modified_files

    modified = modified_files(results)
    if modified:
        tr.write_line(f"DATA: {len(modified)} file(s) MODIFIED, not the published release: "
                      f"{', '.join(modified)} (--require-published-data makes this an error)", red=True)
    for warning in results["run"].get("thresholds_warnings") or []:
        tr.write_line(f"THRESHOLDS: {warning}", yellow=True)
    from .report.results import coverage_lines

    for line in coverage_lines(results):
        tr.write_line(f"COVERAGE: {line}", red="INSUFFICIENT" in line)
    from .report.results import sensitivity_lines

    for line in sensitivity_lines(results):
        tr.write_line(f"PARSING: {line}", yellow=True)
    unlike = (results.get("baseline") or {}).get("not_like_for_like") or []
    if unlike:
        tr.write_line(f"BASELINE not like for like: {'; '.join(unlike)}", yellow=True)
    model = results["model"] or {}
    tr.write_line(f"model {model.get('name')} ({model.get('fingerprint', '')[:19]}…, "
                  f"{model.get('dtype')}, {model.get('device')})")
    for line in metric_table(results):
        tr.write_line(line)
    # One compact line per gate; the sentence of a gate that did not pass is printed once, in
    # pytest's FAILURES section (GateFinding), not again here.
    for line in gate_lines(results):
        tr.write_line(line)
    run_errors = results["gate_summary"].get("error", 0)
    if outcome.label == "RUN ERROR" and run_errors:
        tr.write_line(f"RUN ERROR: {run_errors} gate(s) have no verdict because a model or data "
                      "error stopped their category during the run (messages above); this is not "
                      f"a gate failure: exit code {exit_codes.RUN_ERROR}", red=True)
    counts = [c.get("requests", {}) for cats in results["benchmarks"].values() for c in cats.values()]
    if any(counts):
        tr.write_line(f"requests: {sum(c.get('distinct', 0) for c in counts)} distinct, "
                      f"{sum(c.get('from_cache', 0) for c in counts)} from the result cache, "
                      f"{sum(c.get('computed', 0) for c in counts)} computed")
    summary = ", ".join(f"{n} {s}" for s, n in sorted(results["gate_summary"].items()))
    tr.write_line(f"gates: {summary}")
    tr.write_line(outcome.line(), green=outcome.passed, red=not outcome.passed, bold=True)
    tr.write_line(f"results: {state['results_path']}")
    if state.get("results_copy"):
        tr.write_line(f"         {state['results_copy']} (--results-json)")
    tr.write_line(f"report:  {state['report_path']}")
    tr.write_line(f"html:    {state['html_path']}")
    if config.option.xmlpath:
        tr.write_line(f"junit:   {config.option.xmlpath}")
