"""Which backend runs the audited model, as a registry of declared backends (``REGISTRY``):
``hf`` (in this process, ``models/hf.py``), ``openai`` (any OpenAI-compatible inference server,
``models/openai_server.py``) and ``replay`` (outputs saved elsewhere, ``models/replay.py``:
``bias-audit score`` is this backend); ``--plan`` swaps ``hf`` for its planning twin
(``models/counting.py``: tokenizer and config, no weights). Each is a ``BackendSpec``: its options'
checks, how it is opened, and what the run asks of it (its engine, its item source, whether its
scores are placeholders); ``spec_for`` picks the run's. Also the backend options' flags (each a
field of ``option_values.BackendOptions``), registered with ``--backend``'s choices.

A new backend is its module under ``models/``, its ``@registered`` spec here (appended at the
end is enough), and a field of ``BackendOptions`` per flag of its own."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Mapping, TypeVar

from .errors import ConfigError, ModelError
from .option_spec import Option
from .option_values import ROWS, AuditOptions
from .option_values import base_urls as base_urls  # the --base-url reader, where it was

if TYPE_CHECKING:
    from .models.base import Backend
    from .models.counting import PlanEmbedder
    from .models.openai_server import OpenAIServerModel
    from .predictions import JoinedPredictions


def _unprepared(benchmark: str, category: str) -> object:
    raise ModelError(f"{benchmark}/{category}: the backend was not prepared (BackendSpec.prepare)")


class BackendSpec:
    """One backend as the run sees it, for one run's ``options`` (``AuditOptions``). Every
    method has the default of a backend that scores live; a backend overrides what differs.

    Attributes:
        name: its ``--backend`` name.
        in_process: the model runs in this process: ``--device``, the model's name and its
            capabilities are checked at start-up, and xdist workers each pin a GPU.
        placeholder_scores: what the backend returns are placeholders, not scores (a plan):
            nothing is stored, judged or written as results; the run counts and writes a plan.
        benchmark: the one benchmark the backend serves, when it serves one (replay: set by
            ``check_selection``, and handed to xdist workers).
    """

    name: ClassVar[str]
    #: what ``--backend <name>`` does, in ``--help``
    summary: ClassVar[str]
    in_process: ClassVar[bool] = False
    placeholder_scores: ClassVar[bool] = False

    def __init__(self, options: AuditOptions):
        self.options = options
        self.benchmark: str | None = None

    @staticmethod
    def check_flags(options: AuditOptions) -> None:
        """Raise ConfigError on a backend flag this backend does not take or lacks (default:
        no ``--base-url``, no replay flag)."""
        _refuse_base_url(options)
        _refuse_replay_flags(options)

    def prepare(self, benchmarks: dict, load_data: Callable) -> dict:
        """The run's benchmarks configured for this backend (default: as they are);
        ``load_data(benchmark, category)`` reads a category's data."""
        return benchmarks

    def check_selection(self, benchmarks: list[str]) -> None:
        """Raise ConfigError when the backend cannot run the selected ``benchmarks`` (default:
        it runs any)."""

    def capabilities(self, needed: frozenset[str]) -> frozenset[str] | None:
        """What the audited model computes (``models.base`` capability names: those its opened
        model's ``capabilities`` will hold), known before any item runs and without loading
        weights, for the start-up check (``check_capabilities``). Every backend declares it.

        Args:
            needed: what the selected benchmarks ask; a backend that must ask a server to tell
                asks only when ``needed`` holds more than every such backend computes.
        Returns:
            The capability names; None when they cannot be known before the model loads (a hub
            id not in the local cache: loading reports it, and the mid-run check stands).
        Raises:
            ModelError: the backend cannot be reached to tell (a server).
        """
        raise NotImplementedError(
            f"backend {self.name!r} declares no capabilities (BackendSpec.capabilities)"
        )

    def describe(self) -> str:
        """The audited model as the start-up capability check names it (after ``capabilities``)."""
        return f"the model of --backend {self.name}"

    def open(self) -> Backend:
        """The audited model (a ``models.base.Backend``), on ``--device`` where it runs here.

        Raises:
            ModelError: the model cannot be loaded, or the server cannot be used.
        """
        raise NotImplementedError

    def opening_notice(self) -> str | None:
        """What ``open`` is about to do, printed before it (``None``: nothing worth a line)."""
        return None

    def engine(self, model, cache):
        """The run's ``engine.executor.Engine`` over ``model``, with the result ``cache``."""
        from .engine.executor import Engine

        return Engine(model, cache=cache, memo=True)

    def meter(self, engine):
        """What counts a category when the scores are placeholders (``planning.PlanMeter``);
        None: the scores are real."""
        return None

    def item_source(self, benchmark: str):
        """Where ``benchmark``'s items come from (``evaluation.item_sources``): default the seeded
        ``--limit`` selection."""
        from .evaluation.item_sources import FixedSelection

        return FixedSelection(self.options.limit, self.options.seed)

    def run_label(self) -> str:
        """What the run folder's name says of the run, made path-safe: the backend and, when
        ``--model`` names it, the model (never the in-process default, which did not run)."""
        model = self.options.model
        return _path_safe(f"{self.name}-{Path(model).name}" if model else self.name)


#: The backends by ``--backend`` name, in ``--help``'s order: every ``@registered`` spec, in the
#: order this module defines them (a new one may be appended at its end: whatever reads the
#: registry reads it when asked, never a copy made at import).
REGISTRY: dict[str, type[BackendSpec]] = {}

SpecT = TypeVar("SpecT", bound=type[BackendSpec])


def registered(spec: SpecT) -> SpecT:
    """Class decorator: add ``spec`` to ``REGISTRY`` under its ``name``.

    Raises:
        ValueError: another spec already has that name.
    """
    if spec.name in REGISTRY:
        raise ValueError(
            f"two backends named {spec.name!r}: {REGISTRY[spec.name].__name__} and {spec.__name__}"
        )
    REGISTRY[spec.name] = spec
    return spec


@registered
class HFSpec(BackendSpec):
    """The model in this process (``models.zoo.load_model``)."""

    name = "hf"
    summary = "load the model in this process (default)"
    in_process = True

    def __init__(self, options):
        super().__init__(options)
        self._kind = "?"

    def capabilities(self, needed: frozenset[str]) -> frozenset[str] | None:
        """Those of the class the model's kind loads as, the kind read from the zoo table or the
        model's config (``zoo.kind_and_capabilities``: no weights)."""
        from .models.zoo import kind_and_capabilities

        found = kind_and_capabilities(self.options.model)
        if found is None:
            return None
        self._kind, capabilities = found
        return capabilities

    def describe(self) -> str:
        from .models.zoo import DEFAULT_MODEL

        return f"model {self.options.model or DEFAULT_MODEL!r} ({self._kind} LM)"

    def run_label(self) -> str:
        """The model's name (the embedded default when ``--model`` is not given)."""
        from .models.zoo import DEFAULT_MODEL

        return _path_safe(Path(self.options.model or DEFAULT_MODEL).name)

    def opening_notice(self) -> str | None:
        from .models.zoo import opening_notice

        return opening_notice(self.options.model)

    def open(self) -> Backend:
        from .models.zoo import load_model

        b = self.options.backend
        return load_model(self.options.model, device=b.device, dtype=b.dtype, batch_size=b.batch_size)


@registered
class OpenAISpec(BackendSpec):
    """An OpenAI-compatible server, or a pool of replicas (``models.openai_server.connect``)."""

    name = "openai"
    summary = "score and generate through an OpenAI-compatible server at --base-url (vLLM, SGLang, TGI)"

    @staticmethod
    def check_flags(options: AuditOptions) -> None:
        if not options.backend.base_url:
            raise ConfigError(
                "--backend openai needs --base-url (the server's API root, e.g. http://127.0.0.1:8000/v1)"
            )
        _refuse_replay_flags(options)

    def __init__(self, options: AuditOptions):
        super().__init__(options)
        self._benchmarks: dict = {}
        self._opened: OpenAIServerModel | None = (
            None  # the model opened by the start-up probe, handed to ``open``
        )

    def prepare(self, benchmarks: dict, load_data: Callable) -> dict:
        self._benchmarks = dict(benchmarks)
        return benchmarks

    def reads_letters(self, names=None) -> bool:
        """Whether a benchmark (of ``names``, default all) reads letter log-probs."""
        from .models.base import LETTER_LOGPROBS

        chosen = self._benchmarks if names is None else {n: self._benchmarks[n] for n in names}
        return any(LETTER_LOGPROBS in b.requires for b in chosen.values())

    def check_selection(self, benchmarks: list[str]) -> None:
        """A selected benchmark that reads letter log-probs: connect now, so a server that gives
        no chat log-probabilities stops the run at start-up (exit 4) instead of failing every
        gate (``OpenAIServerModel.check_chat_logprobs``).

        Raises:
            ModelError: the server cannot be reached or read so (naming the endpoint).
        """
        if self._opened is None and self.reads_letters([b for b in benchmarks if b in self._benchmarks]):
            self._opened = self.open()

    def capabilities(self, needed: frozenset[str]) -> frozenset[str] | None:
        """Generation alone needs nothing asked (every OpenAI-compatible server generates);
        anything more is what the server offers once connected (its alignment check and, for
        letter log-probs, its chat log-probabilities: ``OpenAIServerModel.capabilities``); the
        connection is kept for the run (``open``)."""
        from .models.base import GENERATE, LETTER_LOGPROBS

        if not needed - {GENERATE}:
            return frozenset({GENERATE})
        if self._opened is None:
            self._opened = self._connect(letters=LETTER_LOGPROBS in needed or self.reads_letters())
        return self._opened.capabilities

    def describe(self) -> str:
        model = self._opened
        if model is None:
            return f"the server at {self.options.backend.base_url[0]}"
        said = f"server {model.pool.describe()} serving {model.served_name!r}"
        if model.alignment is not None and not model.alignment.ok:
            said += (
                ", which failed the start-up alignment check of its prompt log-probabilities "
                f"({model.alignment.reason}): scores from it would be wrong, so it"
            )
        return said

    def open(self) -> OpenAIServerModel:
        if self._opened is not None:
            model, self._opened = self._opened, None
            return model
        return self._connect(letters=self.reads_letters())

    def _connect(self, letters: bool):
        from .models.openai_server import connect

        b = self.options.backend
        return connect(
            list(b.base_url),
            self.options.model,
            api_key_env=b.api_key_env,
            tokenizer=b.tokenizer,
            max_concurrency=b.max_concurrency,
            timeout=b.request_timeout,
            max_retries=b.max_retries,
            letters=letters,
        )


@registered
class ReplaySpec(BackendSpec):
    """Saved outputs (``models.replay.ReplayModel``) of one benchmark, joined to its data
    (``predictions.join_predictions``) once per process; its items are those the file answers."""

    name = "replay"
    summary = "answer from the saved outputs of --predictions"

    def __init__(self, options: AuditOptions):
        super().__init__(options)
        self._joined: dict[str, JoinedPredictions] = {}
        self._benchmarks: dict = {}
        # Set by ``prepare``, which the session calls before any benchmark is joined.
        self._load_data: Callable = _unprepared

    @staticmethod
    def check_flags(options: AuditOptions) -> None:
        _refuse_base_url(options)
        b = options.backend
        missing = [
            f
            for f, v in (("--predictions", b.predictions), ("--prediction-field", b.prediction_field))
            if not v
        ]
        if missing:
            raise ConfigError(
                f"--backend replay needs {' and '.join(missing)} (the saved outputs "
                "and the row field that holds them)"
            )
        if options.limit is not None:
            raise ConfigError(
                "--limit does not apply with --backend replay: the predictions file says which items are scored"
            )

    def prepare(self, benchmarks: dict, load_data: Callable) -> dict:
        # Saved outputs are read in generate mode: configure before the gates are expanded
        # (generate-mode gates end in -generate); a benchmark that cannot replay says so when
        # it is selected (``joined``).
        out = dict(benchmarks)
        for name, b in benchmarks.items():
            try:
                out[name] = b.for_saved_outputs()
            except ConfigError:
                pass
        self._benchmarks, self._load_data = out, load_data
        return out

    def check_selection(self, benchmarks: list[str]) -> None:
        """The run replays one benchmark, and its predictions file joins to the data (every row
        checked at start-up, so a bad row stops the run before scoring).

        Raises:
            AuditError: several benchmarks selected, or the file's first bad row (file:line).
        """
        if len(benchmarks) != 1:
            raise ConfigError(
                f"--backend replay scores the saved outputs of one benchmark, but the "
                f"run selects {', '.join(benchmarks)}: select one (its audit file, or -k)"
            )
        self.benchmark = benchmarks[0]
        self.joined(benchmarks[0])

    def joined(self, benchmark: str) -> JoinedPredictions:
        """The predictions file joined to ``benchmark``'s data (``predictions.join_predictions``),
        once per process; the benchmark is configured for saved outputs first
        (``Benchmark.for_saved_outputs``).

        Raises:
            ConfigError: the benchmark takes no saved outputs in this configuration.
            DataError: the file, row and reason of the first bad prediction row.
        """
        if benchmark not in self._joined:
            from .predictions import join_predictions

            path, field = self.saved()
            load = self._load_data
            self._joined[benchmark] = join_predictions(
                self._benchmarks[benchmark].for_saved_outputs(),
                path,
                field,
                lambda category: load(benchmark, category),
                self.options.backend.index_base,
            )
        return self._joined[benchmark]

    def capabilities(self, needed: frozenset[str]) -> frozenset[str] | None:
        """What saved outputs answer: generations (``ReplayModel.capabilities``), whatever the
        file holds; a benchmark reads them through ``Benchmark.for_saved_outputs``."""
        from .models.replay import ReplayModel

        return ReplayModel.capabilities

    def describe(self) -> str:
        return f"the saved outputs of {self.options.backend.predictions} (read as generations)"

    # Not annotated yet: the joined outputs are ``object`` (predictions.py) where ReplayModel
    # takes ``str | int``; typing that seam is the next step of the type ratchet.
    def open(self):
        from .models.base import ModelInfo
        from .models.replay import ReplayModel

        if self.benchmark is None:
            raise ModelError("--backend replay: no benchmark selected to replay")
        joined = self.joined(self.benchmark)
        path, field = self.saved()
        return ReplayModel(
            joined.outputs,
            ModelInfo(
                name=str(path),
                source=f"replay:{path}:{field}",
                fingerprint=f"sha256:{joined.sha256}",
                dtype="-",
                device="-",
                n_parameters=0,
                kind="replay",
            ),
        )

    def item_source(self, benchmark: str):
        from .evaluation.item_sources import ReplayedItems

        return ReplayedItems(self.joined(benchmark))

    def run_label(self) -> str:
        return _path_safe(f"replay-{Path(self.saved()[0]).stem}")

    def saved(self) -> tuple[str, str]:
        """``--predictions`` and ``--prediction-field``.

        Raises:
            ConfigError: one is missing (``check_flags`` refuses that at start-up).
        """
        b = self.options.backend
        if b.predictions is None or b.prediction_field is None:
            raise ConfigError("--backend replay needs --predictions and --prediction-field")
        return b.predictions, b.prediction_field


class PlanSpec(HFSpec):
    """``--plan``: the in-process backend's planning twin (``models.counting``), under the planning
    engine (``planning.PlanEngine``): counts, no scores."""

    placeholder_scores = True

    def __init__(self, options: AuditOptions):
        super().__init__(options)
        self.embedder: PlanEmbedder | None = None

    @staticmethod
    def check_flags(options: AuditOptions) -> None:
        """``--plan`` and ``--plan-params`` (checked whatever the backend)."""
        b = options.backend
        if b.plan and b.name != "hf":
            raise ConfigError(f"--plan plans an in-process run (--backend hf), not --backend {b.name}")
        if b.plan_params is not None:
            if not b.plan:
                raise ConfigError("--plan-params is only used with --plan")
            if not b.plan_params >= 1:
                raise ConfigError(f"--plan-params must be a parameter count >= 1, got {b.plan_params:g}")

    def prepare(self, benchmarks: dict, load_data: Callable) -> dict:
        # KGQuiz's semantic match embeds answers with a second model (MiniLM), which a plan does
        # not load either: a stand-in counts the texts instead.
        from .models.counting import PlanEmbedder

        self.embedder = PlanEmbedder()
        return {name: b.with_embedder(self.embedder) for name, b in benchmarks.items()}

    def opening_notice(self) -> str | None:
        return None  # a plan loads the tokenizer and config only: nothing slow to announce

    def open(self) -> Backend:
        from .models.counting import load_plan_model

        b = self.options.backend
        return load_plan_model(self.options.model, device=b.device, dtype=b.dtype, batch_size=b.batch_size)

    def engine(self, model, cache):
        from .planning import PlanEngine

        return PlanEngine(model)  # a plan's placeholders are never stored: no cache

    def meter(self, engine):
        from .planning import PlanMeter

        return PlanMeter(engine, self.embedder)

    def run_label(self) -> str:
        return f"{super().run_label()}-plan"  # a plan's folder is told apart from a run's at a glance


def spec_for(options: AuditOptions) -> BackendSpec:
    """The run's backend: ``--backend``'s, or with ``--plan`` the planning twin of ``hf``."""
    if options.backend.plan:
        return PlanSpec(options)
    return REGISTRY[options.backend.name](options)


def in_process(name: str) -> bool:
    """Whether backend ``name`` runs the model in this process (workers pin GPUs)."""
    spec = REGISTRY.get(name)
    return spec is not None and spec.in_process


def check_capabilities(
    spec: BackendSpec, requires: Mapping[str, frozenset[str]], selected: list[str]
) -> None:
    """Refuse, before any item runs, a backend that cannot compute what a selected benchmark
    needs (``BackendSpec.capabilities``): a usage error at start-up, not an error in every gate
    of those benchmarks later (``evaluation.pipeline.check_capabilities`` stays the backstop).

    Args:
        spec: the run's backend.
        requires: ``{benchmark: Benchmark.requires}`` for every known benchmark, as configured
            for this backend.
        selected: the benchmarks the run selected (keys of ``requires``).
    Raises:
        ModelError: naming the backend, each selected benchmark it cannot run with the
            capabilities it lacks, what the model computes, and the benchmarks it can run.
    """
    needed = frozenset().union(*(requires[b] for b in selected))
    capabilities = spec.capabilities(needed)
    if capabilities is None:
        return
    unable = {b: sorted(requires[b] - capabilities) for b in selected if requires[b] - capabilities}
    if not unable:
        return
    can = sorted(b for b, needs in requires.items() if needs <= capabilities)
    listed = "; ".join(f"{b} needs {', '.join(needs)}" for b, needs in sorted(unable.items()))
    hint = f'; it can run {", ".join(can)} (select them with -k "{" or ".join(can)}")' if can else ""
    raise ModelError(
        f"--backend {spec.name} cannot run {', '.join(sorted(unable))}: {listed}; {spec.describe()} "
        f"computes {', '.join(sorted(capabilities)) or 'nothing'} only{hint}"
    )


def validate(options: AuditOptions) -> None:
    """Raise ConfigError on a backend option that cannot work, naming the flag (the ranges of
    its values: ``AuditOptions.check``)."""
    b = options.backend
    if b.name not in REGISTRY:
        raise ConfigError(f"--backend must be one of {', '.join(REGISTRY)}, got {b.name!r}")
    REGISTRY[b.name].check_flags(options)
    PlanSpec.check_flags(options)


def _path_safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label)


def _refuse_base_url(options: AuditOptions) -> None:
    if options.backend.base_url:
        from .redact import redact_text

        shown = redact_text(" ".join(options.backend.base_url))
        raise ConfigError(f"--base-url {shown} is only used with --backend openai")


def _refuse_replay_flags(options: AuditOptions) -> None:
    b = options.backend
    for flag, value in (
        ("--predictions", b.predictions),
        ("--prediction-field", b.prediction_field),
        ("--index-base", b.index_base),
        ("--allow-partial", b.allow_partial or None),
    ):
        if value is not None:
            raise ConfigError(f"{flag} is only used with --backend replay")


def backend_help() -> str:
    """``--backend``'s help: every registered backend's name and summary."""
    return "; ".join(f"{name}: {spec.summary}" for name, spec in REGISTRY.items()) + " (env AUDIT_BACKEND)"


def backend_rows() -> tuple[Option, ...]:
    """The backend flags, each declared once (a field of ``option_values.BackendOptions``), in
    ``--help``'s order, ``--backend``'s help and choices filled from ``REGISTRY`` as it is now."""
    rows = [opt for opt in ROWS if opt.group == "backend"]
    return tuple(
        dataclasses.replace(opt, help=backend_help(), choices=tuple(REGISTRY))
        if opt.flag == "--backend"
        else opt
        for opt in rows
    )


def add_options(group) -> None:
    """Register the backend options (``backend_rows``) on the plugin's option group."""
    from .options import default_of, register

    for opt in backend_rows():
        register(group, opt, default_of(opt))
