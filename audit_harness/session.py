"""One audit run inside one process: the options, the backend (opened once, lazily), the
loaded data, and each (benchmark, category) outcome evaluated once (``evaluation``) however many
gates read it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from bias_metrics.result import MetricResult

from .audit_options import AuditOptions
from .backends import spec_for
from .benchmarks.base import Benchmark, CategoryData, Record
from .data import resolve_data_dir
from .devices import share_cpu_threads
from .errors import AuditError, MissingDataError
from .evaluation import CategoryOutcome, Scoring, check_capabilities, evaluate_category, write_records
from .evaluation.category_outcome import pooled_outcome
from .gates import Gate, Verdict
from .gates.identity import RunIdentity

if TYPE_CHECKING:
    from .engine.cache import ResultCache
    from .engine.executor import Engine
    from .engine.progress import Progress
    from .models.base import Backend


class AuditSession:
    """Runs benchmarks for one process (the controller, or one pytest-xdist worker).

    Args:
        options: the run's options.
        benchmarks: ``{name: benchmark}`` registry (configured with ``options.benchmark_options``
            here, then for the backend: ``backends.BackendSpec.prepare``).
        run_dir: folder of this run's outputs (records, results, JUnit XML).
        worker_index: pytest-xdist worker number (progress prefix, CPU thread share), or None.
        model: an already opened backend to audit instead of opening the options' (tests).
    """

    def __init__(
        self,
        options: AuditOptions,
        benchmarks: dict[str, Benchmark],
        run_dir: Path,
        worker_index: int | None = None,
        model: Backend | None = None,
    ) -> None:
        self.options = options
        #: the run's backend (``backends.BackendSpec``): how the model opens, its engine, where
        #: each category's items come from, and whether its scores are placeholders (a plan).
        self.backend_spec = spec_for(options)
        configured = {
            name: b.configure(**options.benchmark_options.get(name, {})) for name, b in benchmarks.items()
        }
        self.benchmarks = self.backend_spec.prepare(configured, self.load_data)
        #: Called before each plain progress line (``engine.progress.Progress``): the plugin sets
        #: pytest's ``ensure_newline`` in the controller.
        self.progress_line_start: Callable[[], None] | None = None
        self.run_dir = run_dir
        self.worker_index = worker_index
        self._model = model
        self._engine: Engine | None = None
        self._cache: ResultCache | None = None
        self._progress: Progress | None = None
        self._data_dir: Path | None = None
        self._identity: RunIdentity | None = None
        self.outcomes: dict[tuple[str, str], CategoryOutcome] = {}
        #: pooled categories' outcomes (``_pooled``): read by their gates, not exported.
        self.pooled: dict[tuple[str, str], CategoryOutcome] = {}
        # Loaded (validated) data per (benchmark, category): read once, at start-up where the
        # plugin validates it, and reused by the evaluation.
        self._data: dict[tuple[str, str], CategoryData] = {}
        #: why the model could not be loaded (then every gate of the run is an ERROR), or None.
        self.model_error: str | None = None
        #: ``{(benchmark, category): message}`` of categories whose evaluation failed mid-run.
        self.errors: dict[tuple[str, str], str] = {}
        # Records by (benchmark, item id): categories that share items (a pair benchmark's
        # ``overall``) score each item once per process.
        self._records: dict[tuple[str, str], Record] = {}
        #: this process's gate verdicts, objects until the results file is written.
        self.verdicts: list[Verdict] = []
        #: ``{(benchmark, category): [Gate]}`` the run judges (``use_gates``): a category with
        #: sequential gates stops once all of them are decided. None: not known (no gate test).
        self.category_gates: dict[tuple[str, str], list[Gate]] | None = None

    def use_gates(self, gates: Sequence[Gate]) -> None:
        """The gates this process judges (its selected gate tests), grouped by category."""
        by_category: dict[tuple[str, str], list[Gate]] = {}
        for g in gates:
            by_category.setdefault((g.benchmark, g.category), []).append(g)
        self.category_gates = by_category

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            self._data_dir = resolve_data_dir(self.options.data_dir)
        return self._data_dir

    @property
    def identity(self) -> RunIdentity:
        """The run's ``gates.identity.RunIdentity``, built on first use (the controller's at
        start-up): one object for the baseline check, the regression gates and the results."""
        if self._identity is None:
            from .engine.cache import ENGINE_VERSION

            self._identity = RunIdentity.of(self.options, lambda: self.data_dir, ENGINE_VERSION)
        return self._identity

    @property
    def model(self) -> Backend:
        """The audited model, opened on first use (each xdist worker opens its own)."""
        if self._model is None:
            share_cpu_threads(self.worker_index)
            model = self.backend_spec.open()
            model.use_chat_template(self.options.chat_template)
            self._model = model
        return self._model

    @property
    def model_loaded(self) -> bool:
        """Whether the model is open already (``model`` returns at once)."""
        return self._model is not None

    @property
    def engine(self) -> Engine:
        """The run's one ``engine.executor.Engine`` over the backend, with the result cache
        (unless ``--no-cache``) and a memo, so identical requests of any items or benchmarks are
        computed once; benchmarks get it, never the backend."""
        if self._engine is None:
            self._engine = self.backend_spec.engine(self.model, self.open_cache())
        return self._engine

    def open_cache(self) -> ResultCache | None:
        """The run's result cache (None with ``--no-cache``), opened and checked once; the
        plugin calls it at start-up so a broken cache stops the run before anything is scored.

        Raises:
            ConfigError: the folder cannot be created, or its file is not a valid cache (naming
                the file and what to do).
        """
        outputs = self.options.outputs
        if not outputs.cache or self.backend_spec.placeholder_scores:  # placeholders are never stored
            return None
        if self._cache is None:
            from .engine.cache import open_checked
            from .paths import scores_dir

            self._cache = open_checked(Path(outputs.cache_dir) if outputs.cache_dir else scores_dir())
        return self._cache

    @property
    def progress(self) -> Progress:
        """The run's ``engine.progress.Progress`` (one task per category)."""
        if self._progress is None:
            from .engine.progress import Progress

            prefix = f"[gw{self.worker_index}] " if self.worker_index is not None else ""
            self._progress = Progress(
                self.options.outputs.progress, prefix=prefix, line_start=self.progress_line_start
            )
        return self._progress

    def load_data(self, benchmark: str, category: str) -> CategoryData:
        """The category's validated data, read once per process.

        Raises:
            DataError: the loader's (file, line and field of the first malformed row).
        """
        key = (benchmark, category)
        if key not in self._data:
            self._data[key] = self.benchmarks[benchmark].load_category(self.data_dir, category)
        return self._data[key]

    def category_outcome(self, benchmark: str, category: str) -> CategoryOutcome:
        """Evaluate (once) and return the outcome of one category.

        Raises:
            AuditError: the evaluation failed (bad data, a model that cannot do what the
                benchmark needs); the message is kept in ``errors`` and raised again for every
                later gate of the category without re-running it.
            Exception: any other failure (a bug, a backend crash) is also kept in ``errors``
                (type and message) and re-raised.
        """
        key = (benchmark, category)
        if category in self.benchmarks[benchmark].pooled_names:
            return self._pooled(benchmark, category)
        if key in self.errors:
            raise AuditError(self.errors[key])
        if key not in self.outcomes:
            try:
                self.outcomes[key] = self._evaluate(benchmark, category)
            except MissingDataError:
                raise  # the gate is skipped (and recorded as such), not an evaluation error
            except AuditError as e:
                self.errors[key] = str(e)
                raise
            except Exception as e:
                self.errors[key] = f"{type(e).__name__}: {e}"
                raise
        return self.outcomes[key]

    def _pooled(self, benchmark: str, category: str) -> CategoryOutcome:
        """A pooled category's outcome (``evaluation.pooled_outcome``), once, over the categories
        it pools that have data (the others' gates are skipped); an error in one is its error."""
        key = (benchmark, category)
        if key not in self.pooled:
            members = []
            for cat in self.benchmarks[benchmark].pooled_members(self.data_dir).get(category, ()):
                try:
                    members.append(self.category_outcome(benchmark, cat))
                except MissingDataError:
                    continue
            if not members:
                raise MissingDataError(f"no category {category} pools has data")
            bench, settings = self.benchmarks[benchmark], self.options.metric_settings
            self.pooled[key] = pooled_outcome(bench, category, members, self.run_dir, settings)
        return self.pooled[key]

    def _evaluate(self, benchmark: str, category: str) -> CategoryOutcome:
        start = time.perf_counter()
        bench = self.benchmarks[benchmark]
        check_capabilities(self.model, bench)
        data = self.load_data(benchmark, category)
        source = self.backend_spec.item_source(benchmark)
        engine = self.engine
        scoring = Scoring(
            engine,
            self.options.metric_settings,
            self._records,
            self.progress,
            gates=self.category_gates,
            sequential=self.options.metrics.sequential,
            meter=self.backend_spec.meter(engine),
        )
        evaluation = evaluate_category(scoring, bench, category, data, source)
        path = write_records(self.run_dir, benchmark, category, evaluation)
        return CategoryOutcome.of(benchmark, category, evaluation, path, time.perf_counter() - start)

    def metric(self, benchmark: str, category: str, name: str) -> MetricResult:
        """The ``MetricResult`` of one metric of one category."""
        return self.category_outcome(benchmark, category).measures.metrics[name]

    def export(self) -> dict[str, Any]:
        """This process's outcomes and verdicts, for the controller's results file."""
        model = None
        if self._model is not None:
            import hashlib

            model = self._model.info.to_dict()
            template = self._model.chat_template
            model["chat_template_sha256"] = (
                hashlib.sha256(template.encode("utf-8")).hexdigest() if template else None
            )
            model["chat_template_source"] = self._model.chat_template_source
        return {
            "outcomes": [o.to_dict() for o in self.outcomes.values()],
            "verdicts": [v.to_dict() for v in self.verdicts],
            "errors": [{"benchmark": b, "category": c, "message": m} for (b, c), m in self.errors.items()],
            "model": model,
            "model_error": self.model_error,
        }

    def category_document(self, benchmark: str, category: str) -> dict[str, object]:
        """This run's results document as far as one evaluated category goes (``identity``, its
        model, protocol, items, data files): what a regression gate's like-for-like check reads."""
        outcome = self.outcomes.get((benchmark, category)) or self.pooled[(benchmark, category)]
        model = self.export()["model"]
        # A sequential category stands for every item it selected, wherever it stopped.
        judged = outcome.sequential.population if outcome.sequential else outcome.n_scored
        return self.identity.document(
            model=model,
            protocols={benchmark: self.protocol(benchmark, model)},
            benchmarks={benchmark: {category: {"n_scored": judged}}},
            data_files={f["path"]: {"sha256": f["sha256"]} for f in outcome.files},
        )

    def protocol(self, benchmark: str, model: Mapping[str, Any] | None) -> dict[str, Any]:
        """What produced a benchmark's numbers besides model and data (results' ``protocols``):
        protocol name and version, prompt template, delimiter, choices, answer mode
        (``Benchmark.provenance``) and the chat template used: ``"none"``, or the sha256 of the
        model's template (``model``: the exported model info) when the benchmark prompts through
        it."""
        bench = self.benchmarks[benchmark]
        out: dict[str, Any] = {"protocol_version": bench.protocol_version, **bench.provenance()}
        note = out.pop("chat_template", None)
        digest = (model or {}).get("chat_template_sha256") if bench.uses_chat_template else None
        # The same value the records hold (``chat_template_sha256``): the template's hash when
        # prompts went through one, else none.
        out["chat_template"] = f"sha256:{digest}" if digest else "none"
        if bench.uses_chat_template:
            source = (model or {}).get("chat_template_source", "model")
            out["chat_template_source"] = source if digest or source != "model" else "model (has none)"
            if note:
                out["chat_template_note"] = note
        return out
