"""One audit run inside one process: the options, the model (loaded once, lazily), and each
(benchmark, category) outcome computed once however many gates read it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .benchmarks.base import Benchmark, CategoryData, MetricSettings, Record
from .data import resolve_data_dir
from .errors import AuditError, ConfigError, DataError, MissingDataError, ModelError
from .gates import Gate, Verdict


@dataclass(frozen=True)
class AuditOptions:
    """The command-line options of an audit (see ``pytest_plugin`` for their flags)."""

    model: str | None = None
    data_dir: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 16
    limit: int | None = None
    seed: int = 0
    n_resamples: int = 1000
    confidence: float = 0.95
    thresholds: str = "thresholds.yaml"
    results_dir: str = "audit-results"
    #: every gate's min_n when set (``--min-n``), else thresholds.yaml's.
    min_n: int | None = None
    #: stop at start-up when a data file is not the published release (``--require-published-data``).
    require_published_data: bool = False
    #: ``--strict-baseline``: a baseline that is not like for like is an input error (exit 4).
    strict_baseline: bool = False
    #: ``--allow-low-confidence``: a thresholds file may sign off below ``gates.CONFIDENCE_FLOOR``.
    allow_low_confidence: bool = False
    #: ``--sequential``: every gate is sequential (``audit_harness.sequential``), as
    #: thresholds.yaml's ``sequential: true`` makes the gates it names.
    sequential: bool = False
    #: ``--chat-template``: ``auto`` (the model's), ``none`` (plain text) or a template file.
    chat_template: str = "auto"
    #: ``{benchmark: {option: value}}`` passed to ``Benchmark.configure`` (e.g. KoBBQ's mode).
    benchmark_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: folder of the result cache (None: ``engine.cache.default_cache_dir()``); ``cache=False``
    #: (``--no-cache``) turns it off.
    cache_dir: str | None = None
    cache: bool = True
    #: ``engine.progress`` mode: ``bar``, ``lines`` or ``off``.
    progress: str = "off"
    #: ``backends``: ``hf`` (in process) or ``openai`` (the server(s) at ``base_url``: one URL,
    #: or several for a pool of replicas) and its settings.
    backend: str = "hf"
    base_url: tuple[str, ...] | None = None
    api_key_env: str = "OPENAI_API_KEY"
    tokenizer: str | None = None
    max_concurrency: int = 8
    request_timeout: float = 120.0
    max_retries: int = 5
    #: ``--backend replay``: the saved outputs, their field, how numbers count options, and
    #: whether a category the file covers only in part may be judged.
    predictions: str | None = None
    prediction_field: str | None = None
    index_base: int | None = None
    allow_partial: bool = False
    #: ``--plan``: a dry run with the model's tokenizer and config only (``models.plan``),
    #: counting what a run would compute; ``plan_params``: the parameter count to estimate time
    #: and FLOPs for (``--plan-params``; default the model's).
    plan: bool = False
    plan_params: float | None = None
    #: ``--audit-meta``: the audited system's description (``compliance.meta``), and
    #: ``--regulatory-mapping``: the clause mapping to use instead of the packaged one.
    audit_meta: str | None = None
    regulatory_mapping: str | None = None

    @property
    def metric_settings(self) -> MetricSettings:
        return MetricSettings(confidence=self.confidence, n_resamples=self.n_resamples, seed=self.seed)

    def validate(self) -> None:
        """Raises ConfigError on an out-of-range option, naming the flag."""
        if self.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {self.limit}")
        if self.n_resamples < 0:
            raise ConfigError(f"--bootstrap-resamples must be >= 0, got {self.n_resamples}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"--confidence must be in (0, 1), got {self.confidence}")
        if self.min_n is not None and self.min_n < 0:
            raise ConfigError(f"--min-n must be >= 0, got {self.min_n}")
        if self.chat_template not in ("auto", "none"):
            path = Path(self.chat_template)
            if not path.is_file():
                raise ConfigError(f"--chat-template {self.chat_template}: not auto, none or a template file")
            from .models.chat_template import check_template_file

            check_template_file(path)  # renders, with the user's message: else exit 4 here
        from .backends import validate

        validate(self)


@dataclass
class CategoryOutcome:
    """Everything one (benchmark, category) evaluation produced, JSON-ready via ``to_dict``."""

    benchmark: str
    category: str
    n_available: int
    n_scored: int
    metrics: dict[str, Any]
    excluded: dict[str, list[str]]
    notes: dict[str, int]
    files: list[dict[str, Any]]
    seconds: float
    records_path: str
    #: the engine's counters for this category (``EngineStats.to_dict``: requests, distinct,
    #: from_cache, computed, tokens_forwarded, forwards, oom_retries).
    requests: dict[str, int] = field(default_factory=dict)
    #: a few invalid / out-of-choice model outputs (``Benchmark.report_examples``).
    examples: list[dict[str, Any]] = field(default_factory=list)
    #: ``--backend replay``: ``{"predicted", "available", "predictions"}``, the items the saved
    #: outputs answer of those the category holds; None for a live run.
    coverage: dict[str, Any] | None = None
    #: Generate mode: ``{"answer_parsing": the other profile, "metrics": {name: metric dict}}``,
    #: every metric as the other parsing profile reads the outputs; None when nothing is parsed.
    sensitivity: dict[str, Any] | None = None
    #: ``--plan``: the category's counts (``planning.plan_row``); then nothing else in the
    #: outcome is a score (no metrics, no records written).
    plan: dict[str, Any] | None = None
    #: a category with sequential gates (``sequential.CategoryPlan.summary``): rounds, items
    #: scored and saved, and each gate's decision by test id; None when no gate is sequential.
    sequential: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class AuditSession:
    """Runs benchmarks for one process (the controller, or one pytest-xdist worker).

    Args:
        options: the run's options.
        benchmarks: ``{name: benchmark}`` registry (configured with ``options.benchmark_options``
            here).
        run_dir: folder of this run's outputs (records, results, JUnit XML).
        worker_index: pytest-xdist worker number (progress prefix, CPU thread share), or None.
    """

    def __init__(
        self,
        options: AuditOptions,
        benchmarks: dict[str, Benchmark],
        run_dir: Path,
        worker_index: int | None = None,
    ):
        self.options = options
        self.benchmarks = {
            name: b.configure(**options.benchmark_options.get(name, {})) for name, b in benchmarks.items()
        }
        if options.backend == "replay":
            # Saved outputs are read in generate mode: configure before the gates are expanded
            # (generate-mode gates end in -generate); a benchmark that cannot replay says so
            # when it is selected (``replay_of``).
            for name, b in self.benchmarks.items():
                try:
                    self.benchmarks[name] = b.for_saved_outputs()
                except ConfigError:
                    pass
        #: ``--plan``: the stand-in of KGQuiz's embedding model (``_plan_benchmarks``).
        self._plan_embedder = self._plan_benchmarks() if options.plan else None
        #: ``--backend replay``: the predictions joined to each benchmark's data (``replay_of``),
        #: and the one benchmark the run replays (set by the plugin from the selected gates).
        self._joined: dict[str, Any] = {}
        self.replay_benchmark: str | None = None
        #: Called before each plain progress line (``engine.progress.Progress``): the plugin sets
        #: pytest's ``ensure_newline`` in the controller.
        self.progress_line_start: Callable[[], None] | None = None
        self.run_dir = run_dir
        self.worker_index = worker_index
        self._model = None
        self._data_dir: Path | None = None
        self.outcomes: dict[tuple[str, str], CategoryOutcome] = {}
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
    def model(self):
        """The audited model, loaded on first use (each xdist worker loads its own)."""
        if self._model is None:
            from .backends import open_model

            self._share_cpu_threads()
            model = (
                self._replay_model()
                if self.options.backend == "replay"
                else open_model(self.options, device=self._device())
            )
            model.use_chat_template(self.options.chat_template)
            self._model = model
        return self._model

    @property
    def engine(self):
        """The run's one ``engine.executor.Engine`` over the backend, with the result cache
        (unless ``--no-cache``) and a memo, so identical requests of any items or benchmarks are
        computed once; benchmarks get it, never the backend."""
        if getattr(self, "_engine", None) is None:
            if self.options.plan:
                from .planning import PlanEngine

                self._engine = PlanEngine(self.model)
            else:
                from .engine.executor import Engine

                self._engine = Engine(self.model, cache=self.open_cache(), memo=True)
        return self._engine

    def _plan_benchmarks(self):
        """The benchmarks of a plan: KGQuiz's semantic match embeds answers with a second model
        (MiniLM), which a plan does not load either; a stand-in counts the texts instead.
        Returns the stand-in (``models.plan.PlanEmbedder``)."""
        import copy

        from .models.plan import PlanEmbedder

        embedder = PlanEmbedder()
        for name, b in self.benchmarks.items():
            # The benchmark protocol has no hook for this; KGQuiz takes its embedder as a
            # constructor argument, kept in ``_embedder``.
            if hasattr(b, "_embedder"):
                clone = copy.copy(b)
                clone._embedder = embedder
                self.benchmarks[name] = clone
        return embedder

    # -- saved outputs (--backend replay) -------------------------------------------------------
    def replay_of(self, benchmark: str):
        """The predictions file joined to ``benchmark``'s data (``predictions.join_predictions``),
        once per process; the benchmark is configured for saved outputs first
        (``Benchmark.for_saved_outputs``).

        Raises:
            ConfigError: the benchmark takes no saved outputs in this configuration.
            DataError: the file, row and reason of the first bad prediction row.
        """
        if benchmark not in self._joined:
            from .predictions import join_predictions

            bench = self.benchmarks[benchmark].for_saved_outputs()
            self._joined[benchmark] = join_predictions(
                bench,
                self.options.predictions,
                self.options.prediction_field,
                lambda category: self.load_data(benchmark, category),
                self.options.index_base,
            )
        return self._joined[benchmark]

    def _replay_model(self):
        from .models.base import ModelInfo
        from .models.replay import ReplayModel

        if self.replay_benchmark is None:
            raise ModelError("--backend replay: no benchmark selected to replay")
        joined = self.replay_of(self.replay_benchmark)
        path = self.options.predictions
        return ReplayModel(
            joined.outputs,
            ModelInfo(
                name=str(path),
                source=f"replay:{path}:{self.options.prediction_field}",
                fingerprint=f"sha256:{joined.sha256}",
                dtype="-",
                device="-",
                n_parameters=0,
                kind="replay",
            ),
        )

    def open_cache(self):
        """The run's result cache (None with ``--no-cache``), opened and checked once; the
        plugin calls it at start-up so a broken cache stops the run before anything is scored.

        Raises:
            ConfigError: the folder cannot be created, or its file is not a valid cache (naming
                the file and what to do).
        """
        if not self.options.cache or self.options.plan:  # a plan's placeholders are never stored
            return None
        if getattr(self, "_cache", None) is None:
            from .engine.cache import open_checked
            from .paths import scores_dir

            folder = Path(self.options.cache_dir) if self.options.cache_dir else scores_dir()
            self._cache = open_checked(folder)
        return self._cache

    def check_results_dir(self) -> None:
        """Create the run folder and write a probe file in it, so a ``--results-dir`` that is a
        file or unwritable stops the run at start-up instead of after scoring.

        Raises:
            ConfigError: naming the folder and the operating system's reason.
        """
        import tempfile

        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.run_dir):
                pass
        except OSError as e:
            raise ConfigError(
                f"--results-dir {self.options.results_dir}: cannot write the run "
                f"folder {self.run_dir} ({e.strerror or e})"
            ) from None

    @property
    def progress(self):
        """The run's ``engine.progress.Progress`` (one task per category)."""
        if getattr(self, "_progress", None) is None:
            from .engine.progress import Progress

            prefix = f"[gw{self.worker_index}] " if self.worker_index is not None else ""
            self._progress = Progress(
                self.options.progress, prefix=prefix, line_start=self.progress_line_start
            )
        return self._progress

    def expect_progress(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Tell the run's progress (``engine.progress.Progress.expect``) which categories it will
        score and how many items each: the ``--limit`` selection, or with ``--backend replay``
        the items the predictions answer. Categories whose data is absent (skipped) are left
        out. Called by the controller after the start-up checks have read the data."""
        totals: dict[str, float] = {}
        for bench, cat in pairs:
            try:
                data = self.load_data(bench, cat)
            except MissingDataError:
                continue
            if self.options.backend == "replay":
                answered = set(self.replay_of(bench).by_category.get(cat, ()))
                n = sum(it.item_id in answered for it in data.items)
            else:
                b, opts = self.benchmarks[bench], self.options
                n = len(b.select(data.items, opts.limit, opts.seed, salt=f"{bench}/{cat}"))
            totals[f"{bench}/{cat}"] = n
        self.progress.expect(totals)

    def _share_cpu_threads(self) -> None:
        # K xdist workers each using every core oversubscribe the CPU (2 workers x 2 threads on
        # 2 cores ran slower than one process); give each worker its share.
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
        if self.worker_index is not None and workers > 1:
            import torch

            torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))

    def _device(self) -> str:
        # An xdist worker of a GPU machine already sees only its own GPU (``devices.pin``), so
        # ``auto`` and ``cuda`` mean that one.
        return self.options.device

    def load_data(self, benchmark: str, category: str) -> CategoryData:
        """The category's validated data, read once per process.

        Raises:
            DataError: the loader's (file, line and field of the first malformed row).
        """
        key = (benchmark, category)
        if key not in self._data:
            self._data[key] = self.benchmarks[benchmark].load_category(self.data_dir, category)
        return self._data[key]

    def validate_data(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Read and validate every (benchmark, category) a run selected, before any model loads
        (parsing only), so a malformed row stops the run at start-up. With
        ``require_published_data``, every file read must be the published release
        (``sources.status_of``).

        Raises:
            DataError: the first malformed row (file:line: field), or the files that are not the
                published release, each with its status. A ``MissingDataError`` (a file absent
                upstream, KGQuiz) is not raised here: those gates are skipped and reported.
        """
        from .sources import status_of

        loaded = []
        for bench, cat in pairs:
            try:
                self.load_data(bench, cat)
            except MissingDataError:
                continue  # an absent file skips its gates (reported), it is not malformed data
            loaded.append((bench, cat))
        pairs = loaded
        if not self.options.require_published_data:
            return
        bad: dict[str, str] = {}
        for bench, cat in pairs:
            for f in self._data[(bench, cat)].files:
                status = status_of(f.path, f.sha256)
                if status != "published":
                    bad[f.path] = status if status != "unknown" else "not in the pinned source table"
        if bad:
            listed = "; ".join(f"{p}: {s}" for p, s in sorted(bad.items()))
            raise DataError(
                f"--require-published-data: {len(bad)} data file(s) in {self.data_dir} "
                f"are not the published release: {listed} (restore them with "
                "`bias-audit data fetch`, or drop the flag)"
            )

    def outcome(self, benchmark: str, category: str) -> CategoryOutcome:
        """Evaluate (once) and return the outcome of one category.

        Raises:
            AuditError: the evaluation failed (bad data, a model that cannot do what the
                benchmark needs); the message is kept in ``errors`` and raised again for every
                later gate of the category without re-running it.
            Exception: any other failure (a bug, a backend crash) is also kept in ``errors``
                (type and message) and re-raised.
        """
        key = (benchmark, category)
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

    def _evaluate(self, benchmark: str, category: str) -> CategoryOutcome:
        bench = self.benchmarks[benchmark]
        opts = self.options
        start = time.perf_counter()
        require = getattr(self.model, "require_scores", None)
        if require is not None:  # a server whose log-probabilities failed the alignment check
            require(bench.requires)
        missing = bench.requires - self.model.capabilities
        if missing:
            info = self.model.info
            raise ModelError(
                f"{benchmark} needs {', '.join(sorted(missing))}, which model "
                f"{info.name!r} ({info.kind} LM) cannot compute"
            )
        data = self.load_data(benchmark, category)
        coverage = None
        if opts.backend == "replay":
            joined = self.replay_of(benchmark)
            answered = set(joined.by_category.get(category, ()))
            if not answered:
                held = joined.held_out.get(category) or {}
                if held:  # rows that name items the loader leaves out: say which, with lines
                    listed = "; ".join(
                        f"{len(ids)} held out ({reason}): "
                        + ", ".join(f"{i} (line {joined.lines[i]})" for i in ids)
                        for reason, ids in held.items()
                    )
                    raise MissingDataError(
                        f"none of the predictions file's rows for "
                        f"{benchmark}/{category} can be scored: {listed}"
                    )
                raise MissingDataError(
                    f"the predictions file {joined.path} has no row for {benchmark}/{category}"
                )
            items = [it for it in data.items if it.item_id in answered]
            coverage = {
                "predicted": len(items),
                "available": len(data.items),
                "predictions": str(joined.path),
            }
        else:
            items = bench.select(data.items, opts.limit, opts.seed, salt=f"{benchmark}/{category}")
        todo = [it for it in items if (benchmark, it.item_id) not in self._records]
        engine = self.engine
        engine.reset_stats()
        if opts.plan:
            engine.take_counts()
            self._plan_embedder.take_texts()
        plan = self._sequential_plan(bench, benchmark, category, items)
        # The selection's order: records are kept and scored in it whatever order the rounds
        # scored them in, so a bootstrap interval over the same items is the same interval.
        selected = {it.item_id: i for i, it in enumerate(items)}
        with self.progress.task(f"{benchmark}/{category}", len(todo)) as task:
            engine.progress = task
            try:
                if plan is not None and plan.can_stop:
                    items = self._score_in_rounds(bench, benchmark, category, items, plan)
                else:
                    self._score(bench, benchmark, todo)
                    if plan is not None:
                        plan.scored_in_full(len(items))
            finally:
                engine.progress = None
        stats = engine.reset_stats().to_dict()
        items = sorted(items, key=lambda it: selected[it.item_id])
        records = [self._records[(benchmark, it.item_id)] for it in items]
        if opts.plan:
            return self._planned(benchmark, category, data, records, len(todo), stats, start)
        path = self.run_dir / "records" / benchmark / f"{category}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
        metrics = bench.metrics(records, opts.metric_settings)
        alt = bench.parse_sensitivity(records, opts.metric_settings)
        sensitivity = (
            None
            if alt is None
            else {
                "answer_parsing": alt["answer_parsing"],
                "metrics": {k: v.to_dict() for k, v in alt["metrics"].items()},
            }
        )
        excluded = dict(data.excluded)
        if coverage is not None:  # prediction rows whose item the loader leaves out
            for reason, ids in self.replay_of(benchmark).held_out.get(category, {}).items():
                excluded[f"{reason} (rows of the predictions file)"] = list(ids)
        for reason, ids in bench.exclusions(records).items():
            excluded.setdefault(reason, []).extend(ids)
        return CategoryOutcome(
            benchmark=benchmark,
            category=category,
            n_available=len(data.items),
            n_scored=len(records),
            metrics={k: v.to_dict() for k, v in metrics.items()},
            excluded=excluded,
            notes=data.notes,
            files=[f.__dict__ for f in data.files],
            seconds=time.perf_counter() - start,
            records_path=str(path.relative_to(self.run_dir)),
            requests=stats,
            examples=bench.report_examples(records),
            coverage=coverage,
            sensitivity=sensitivity,
            sequential=plan.summary() if plan is not None else None,
        )

    def _score(self, bench: Benchmark, benchmark: str, items: Sequence[Any]) -> None:
        """Score the ``items`` not scored yet in this process and keep their records."""
        todo = [it for it in items if (benchmark, it.item_id) not in self._records]
        if todo:
            for record in bench.evaluate(self.engine, todo):
                self._records[(benchmark, record.item_id)] = record

    def _sequential_plan(self, bench: Benchmark, benchmark: str, category: str, items: Sequence[Any]):
        """The category's ``sequential.CategoryPlan``, or None when no gate of it is sequential
        (or the run is a plan, which scores nothing)."""
        if self.options.plan or not self.category_gates:
            return None
        from .sequential import CategoryPlan

        gates = self.category_gates.get((benchmark, category), [])
        # Every gate of the run that may be decided sequentially (a few may turn out fixed-n:
        # counting them too only makes a PASS more demanding).
        family = sum(
            1 for gs in self.category_gates.values() for g in gs if self.options.sequential or g.sequential
        )
        return CategoryPlan.for_category(bench, gates, items, self.options.sequential, family=family)

    def _score_in_rounds(self, bench: Benchmark, benchmark: str, category: str, items, plan) -> list[Any]:
        """Score ``items`` in the plan's balanced rounds until every sequential gate is decided
        or the items run out; returns the items scored, in the order scored (the rounds are
        seeded, ``sequential.build_rounds``: that order can be rebuilt from the seed, so the
        records file keeps the selection's order and the sequences can still be recomputed)."""
        import dataclasses

        from .sequential import build_rounds

        # Each round needs only the metrics' values and n (the rule's min_n and defined checks);
        # the bootstrap intervals are computed once, on the items finally scored.
        quick = dataclasses.replace(self.options.metric_settings, n_resamples=0)
        scored: list[Any] = []
        salt = f"{benchmark}/{category}"
        for batch in build_rounds(items, bench.balance_key, self.options.seed, salt, plan.size):
            self._score(bench, benchmark, batch)
            scored.extend(batch)
            records = [self._records[(benchmark, it.item_id)] for it in scored]
            plan.update(records, bench.metrics(records, quick))
            if plan.done:
                break
        return scored

    def _planned(
        self, benchmark: str, category: str, data, records, new_items: int, stats, start: float
    ) -> CategoryOutcome:
        """A planned category: its counts, and nothing computed from the placeholder values the
        planning backend returned (no metrics, no records file)."""
        from .planning import plan_row

        return CategoryOutcome(
            benchmark=benchmark,
            category=category,
            n_available=len(data.items),
            n_scored=0,
            metrics={},
            excluded=dict(data.excluded),
            notes=data.notes,
            files=[f.__dict__ for f in data.files],
            seconds=time.perf_counter() - start,
            records_path="",
            requests=stats,
            plan=plan_row(
                len(records),
                stats,
                self.engine.take_counts(),
                self._plan_embedder.take_texts(),
                new_items=new_items,
            ),
        )

    def metric(self, benchmark: str, category: str, name: str):
        """The ``MetricResult`` of one metric of one category."""
        from bias_metrics.result import MetricResult

        return MetricResult.from_dict(self.outcome(benchmark, category).metrics[name])

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

    def category_document(self, benchmark: str, category: str) -> dict[str, Any]:
        """The part of this run's results document that concerns one evaluated category, as
        ``report.compare.comparability_notes`` reads it while the run goes on (a regression
        gate's own like-for-like check)."""
        from .data import sha256_file
        from .engine.cache import ENGINE_VERSION

        outcome = self.outcomes[(benchmark, category)]
        model = self.export()["model"]
        # A sequential category judges the value over every selected item, whatever it stopped
        # at: those are the items to compare with the baseline's.
        judged = outcome.sequential["population"] if outcome.sequential else outcome.n_scored
        return {
            "options": dict(self.options.__dict__),
            "model": model,
            "run": {
                "thresholds_sha256": sha256_file(Path(self.options.thresholds)),
                "engine_version": ENGINE_VERSION,
            },
            "protocols": {benchmark: self.protocol(benchmark, model)},
            "benchmarks": {benchmark: {category: {"n_scored": judged}}},
            "data_files": {f["path"]: {"sha256": f["sha256"]} for f in outcome.files},
        }

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


def overall_from_records(
    benchmarks: Mapping[str, Benchmark],
    outcomes: Sequence[Mapping[str, Any]],
    run_dir: Path,
    settings: MetricSettings,
) -> dict[str, dict[str, Any]]:
    """Per benchmark, its ``Benchmark.overall`` aggregates over the evaluated categories, from the
    records files the processes of the run wrote (each category's ``records_path`` under
    ``run_dir``), so pooled numbers come from the same records as the per-category ones.

    Returns:
        ``{benchmark: {"categories": [...], label: {metric: MetricResult dict}}}``.
    Raises:
        DataError: a records file is missing or unreadable.
    """
    from .errors import DataError

    by_bench: dict[str, dict[str, list[Record]]] = {}
    for o in outcomes:
        bench = benchmarks[o["benchmark"]]
        path = run_dir / o["records_path"]
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read records {path}: {e}") from None
        by_bench.setdefault(o["benchmark"], {})[o["category"]] = bench.read_records(rows)
    out: dict[str, dict[str, Any]] = {}
    for name, per_cat in sorted(by_bench.items()):
        aggregates = benchmarks[name].overall(per_cat, settings)
        out[name] = {
            "categories": sorted(per_cat),
            **{label: {k: v.to_dict() for k, v in metrics.items()} for label, metrics in aggregates.items()},
        }
    return out


def _progress_mode(config) -> str:
    from .engine.progress import progress_mode

    worker = getattr(config, "workerinput", {}).get("workerid")
    return progress_mode(quiet=config.getoption("verbose") < 0, worker=worker)


def options_from_config(config) -> AuditOptions:
    """``AuditOptions`` from a pytest config (flags already merged with environment defaults)."""
    from .backends import options_from_config as backend_options
    from .benchmarks import registry
    from .options import configured_options

    get = config.getoption
    opts = AuditOptions(
        model=get("audit_model"),
        data_dir=get("audit_data_dir"),
        device=get("audit_device"),
        dtype=get("audit_dtype"),
        batch_size=get("audit_batch_size"),
        limit=get("audit_limit"),
        seed=get("audit_seed"),
        n_resamples=get("audit_bootstrap"),
        confidence=get("audit_confidence"),
        thresholds=get("audit_thresholds"),
        results_dir=get("audit_results_dir"),
        min_n=get("audit_min_n"),
        require_published_data=get("audit_require_published"),
        strict_baseline=get("audit_strict_baseline"),
        allow_low_confidence=get("audit_allow_low_confidence"),
        sequential=get("audit_sequential"),
        chat_template=get("audit_chat_template"),
        benchmark_options=configured_options(config, registry()),
        cache_dir=get("audit_cache_dir"),
        cache=not get("audit_no_cache"),
        progress=_progress_mode(config),
        plan=get("audit_plan"),
        plan_params=get("audit_plan_params"),
        audit_meta=get("audit_meta"),
        regulatory_mapping=get("audit_regulatory_mapping"),
        **backend_options(config),
    )
    opts.validate()
    return opts
