"""A plan (``--plan``, a dry run): what a run would compute, counted without computing anything.

``PlanEngine`` is the run's own engine (dedupe, memo, prefix trees, packed rows, batching,
generation batches) over the planning backend (``models.counting``: the tokenizer and config, no
weights), which besides counts what every request costs forwarded whole on its own, as a harness
without dedupe or prefix sharing (lm-evaluation-harness) feeds it. ``plan_row`` turns one
category's counts into a row of the plan, ``build_plan`` the rows into the plan document
(``plan.json`` and the terminal's table) with a time estimate and forward FLOPs.

The time estimate is a scaling estimate: throughputs measured once for one small model on one
machine (``MEASURED``), scaled by the ratio of parameter counts. The FLOPs are ``2 x parameters``
per token fed (prompt or scored tokens) and per token generated."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, TypedDict

from .engine.executor import Engine
from .models.base import GenerationRequest
from .report.schema import PlanCounts

if TYPE_CHECKING:
    from .models.counting import PlanCausalLM, PlanEmbedder, PlanMaskedLM
    from .models.zoo import FirstUse

#: The first line of every plan, and its last: nothing a plan prints is a score.
NOTHING_SCORED = "PLAN: nothing was scored"


#: Throughput of SmolLM2-135M-Instruct measured with ``perf/plan_rates.py`` on the development
#: machine (2 cores), tokens per second: ``forward`` of the packed scoring path
#: (``forward_packed``), ``prefill`` of generation prompts and ``decode`` of generated tokens
#: (``generate_tokens``, batches as the engine sends them). The machine was shared with other
#: jobs (load average 9-13), which makes wall-clock rates meaningless and spins idle OpenMP
#: threads; so the model ran on one torch thread and the figures are its tokens per CPU second
#: times 2 (both cores, taken to scale linearly).
class Measured(TypedDict):
    """Throughputs measured once for one model on one machine (``MEASURED``)."""

    model: str
    parameters: int
    forward_tokens_per_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    conditions: str


class Rates(TypedDict):
    """``MEASURED``'s throughputs scaled to the planned model (``rates_for``)."""

    forward_tokens_per_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    scale: float
    measured: Measured


class WholeTally(TypedDict):
    """``WholeCounts`` as ``PlanEngine.take_counts`` hands them on."""

    score_tokens: int
    generation_requests: int
    tokens_to_generate: int


class EngineCounts(TypedDict):
    """What ``PlanEngine.take_counts`` counted: the backend's ``PlanCounts`` and ``whole``."""

    generations: int
    generation_prompt_tokens: int
    tokens_to_generate: int
    prompt_tokens_whole: int
    masked_tokens: int
    masked_forwards: int
    whole: WholeTally


MEASURED: Measured = {
    "model": "smollm2-135m-instruct",
    "parameters": 134_515_008,
    "forward_tokens_per_s": 405.6,
    "prefill_tokens_per_s": 372.4,
    "decode_tokens_per_s": 154.6,
    "conditions": (
        "float32 on 2 AMD EPYC cores, batch 16; per CPU second of 1 torch thread x 2, the "
        "machine shared at load average 9-13; torch 2.13, transformers 5.24, 2026-12-02"
    ),
}


@dataclass
class WholeCounts:
    """What the requests cost forwarded whole, each on its own (no dedupe, no shared prefix).

    Attributes:
        score_tokens: scoring requests' tokens: ``(context + continuation)[:-1]`` of a scored
            continuation, cut to the window as lm-evaluation-harness feeds it; a sentence-pair
            sentence whole (a masked LM: once per scored position), as the authors' scripts do.
        generation_requests: generation requests, duplicates included.
        tokens_to_generate: their ``max_new_tokens``, summed.
    """

    score_tokens: int = 0
    generation_requests: int = 0
    tokens_to_generate: int = 0


class PlanEngine(Engine):
    """The engine of a plan: the real ``Engine`` over a planning backend, with no result cache
    (placeholders are never stored where a run could read them back), a memo (as a run with
    ``--no-cache``: a request repeated across categories and benchmarks runs once) and forwards
    sized by tokens alone (placeholder forwards take no time to pace by). Each public request
    also counts its whole-request cost (``WholeCounts``) before the engine runs it.

    Args:
        backend: a ``models.counting`` backend.
    """

    backend: PlanCausalLM | PlanMaskedLM

    def __init__(self, backend: PlanCausalLM | PlanMaskedLM, min_shared: int = 4):
        super().__init__(backend, cache=None, min_shared=min_shared, memo=True, forward_seconds=0)
        self.whole = WholeCounts()

    def loglikelihood_tokens(self, encoded, weights=None):
        window = self.backend.max_length
        self.whole.score_tokens += sum(min(len(c) + len(x), window + 1) - 1 for c, x in encoded)
        return super().loglikelihood_tokens(encoded, weights)

    def score_positions(self, requests, weights=None):
        masked = self.backend.info.kind == "masked"
        self.whole.score_tokens += sum(len(ids) * (len(pos) if masked else 1) for ids, pos in requests)
        return super().score_positions(requests, weights)

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        weights: Sequence[float] | None = None,
        first_step: Sequence[Sequence[str]] | None = None,
    ) -> list[str]:
        self.whole.generation_requests += len(requests)
        self.whole.tokens_to_generate += sum(r.max_new_tokens for r in requests)
        return super().generate(requests, weights, first_step)

    def take_counts(self) -> EngineCounts:
        """The backend's counts and the whole-request ones since the last call, both reset."""
        whole, self.whole = self.whole, WholeCounts()
        counts = self.backend.take_counts()
        return {
            "generations": counts.generations,
            "generation_prompt_tokens": counts.generation_prompt_tokens,
            "tokens_to_generate": counts.tokens_to_generate,
            "prompt_tokens_whole": counts.prompt_tokens_whole,
            "masked_tokens": counts.masked_tokens,
            "masked_forwards": counts.masked_forwards,
            "whole": {
                "score_tokens": whole.score_tokens,
                "generation_requests": whole.generation_requests,
                "tokens_to_generate": whole.tokens_to_generate,
            },
        }


class PlanMeter:
    """One category's counts in a plan: what the planning engine and the embedding stand-in
    (``models.counting.PlanEmbedder``) counted between ``start`` and ``row``."""

    def __init__(self, engine: PlanEngine, embedder: PlanEmbedder):
        self.engine = engine
        self.embedder = embedder

    def start(self) -> None:
        """Drop what earlier categories left counted."""
        self.engine.take_counts()
        self.embedder.take_texts()

    def row(self, items: int, stats: Mapping[str, int], new_items: int) -> dict[str, object]:
        """The category's row of the plan (``plan_row``) from the engine's counters, as the
        category's document keeps it."""
        return dict(
            plan_row(items, stats, self.engine.take_counts(), self.embedder.take_texts(), new_items=new_items)
        )


def plan_row(
    items: int,
    stats: Mapping[str, int],
    counts: EngineCounts,
    texts_to_embed: int = 0,
    new_items: int | None = None,
) -> PlanCounts:
    """One category of the plan from the engine's counters (``EngineStats.to_dict``) and
    ``PlanEngine.take_counts``.

    Args:
        items: the category's items; ``new_items``: those no earlier category of the run scored
            (a sentence-pair benchmark's ``overall`` holds its subgroups' pairs; default all).
    Returns:
        ``items``, ``new_items``, ``requests``, ``distinct``, ``computed`` and ``forwards``
        (the engine's);
        ``forward_tokens`` (tokens fed: scored sequences and generation prompts),
        ``score_tokens``, ``generation_prompt_tokens``, ``generations``,
        ``tokens_to_generate`` (an upper bound); ``whole``: the same fed and generated tokens
        with every request forwarded whole on its own (``forward_tokens``,
        ``score_tokens``, ``prompt_tokens``, ``generation_requests``, ``tokens_to_generate``);
        ``texts_to_embed`` (KGQuiz's semantic match, by its embedding model).
    """
    gen_prompt = counts["generation_prompt_tokens"]
    gen_new = counts["tokens_to_generate"]
    score = stats["tokens_forwarded"] - gen_prompt - gen_new + counts["masked_tokens"]
    whole = counts["whole"]
    return {
        "items": items,
        "new_items": items if new_items is None else new_items,
        "requests": stats["requests"],
        "distinct": stats["distinct"],
        "computed": stats["computed"],
        "forwards": stats["forwards"] + counts["masked_forwards"],
        "forward_tokens": score + gen_prompt,
        "score_tokens": score,
        "generation_prompt_tokens": gen_prompt,
        "generations": counts["generations"],
        "tokens_to_generate": gen_new,
        "whole": {
            "forward_tokens": whole["score_tokens"] + counts["prompt_tokens_whole"],
            "score_tokens": whole["score_tokens"],
            "prompt_tokens": counts["prompt_tokens_whole"],
            "generation_requests": whole["generation_requests"],
            "tokens_to_generate": whole["tokens_to_generate"],
        },
        "texts_to_embed": texts_to_embed,
    }


def _add(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, Mapping):
                total[key] = _add([total.get(key, {}), value])
            elif isinstance(value, (int, float)):
                total[key] = total.get(key, 0) + value
    return total


def rates_for(parameters: int, measured: Measured = MEASURED) -> Rates:
    """The measured throughputs scaled to a model of ``parameters`` parameters (time per token
    taken as proportional to the parameter count)."""
    scale = measured["parameters"] / parameters
    return {
        "forward_tokens_per_s": measured["forward_tokens_per_s"] * scale,
        "prefill_tokens_per_s": measured["prefill_tokens_per_s"] * scale,
        "decode_tokens_per_s": measured["decode_tokens_per_s"] * scale,
        "scale": scale,
        "measured": measured.copy(),
    }


def estimate(row: Mapping[str, Any], parameters: int, rates: Rates) -> dict[str, float]:
    """Seconds and forward FLOPs of ``row`` (``plan_row``, or a sum of rows), ours and with every
    request whole."""

    def seconds(score: float, prompts: float, new: float) -> float:
        return (
            score / rates["forward_tokens_per_s"]
            + prompts / rates["prefill_tokens_per_s"]
            + new / rates["decode_tokens_per_s"]
        )

    whole = row["whole"]
    return {
        "seconds": seconds(row["score_tokens"], row["generation_prompt_tokens"], row["tokens_to_generate"]),
        "flops": 2.0 * parameters * (row["forward_tokens"] + row["tokens_to_generate"]),
        "whole_seconds": seconds(whole["score_tokens"], whole["prompt_tokens"], whole["tokens_to_generate"]),
        "whole_flops": 2.0 * parameters * (whole["forward_tokens"] + whole["tokens_to_generate"]),
    }


def build_plan(
    outcomes: Sequence[Mapping[str, Any]],
    model: Mapping[str, Any] | None,
    parameters: int | None = None,
    measured: Measured = MEASURED,
) -> dict[str, object]:
    """The plan document from the planned categories (``CategoryOutcome.to_dict`` with a
    ``plan`` row each).

    Args:
        outcomes: the planned categories, any order (benchmarks and categories are sorted as
            the run listed them: first seen first).
        model: the planning backend's ``ModelInfo.to_dict``.
        parameters: the parameter count to estimate for (``--plan-params``); default the model's.
    Returns:
        ``parameters`` (and where they come from), ``rates`` (``rates_for``), ``benchmarks``
        (``{name: {"categories": {category: row}, "total": row}}``, each row with its
        ``estimate``), ``total`` and ``notes`` (what each number means).
    """
    n_model = int((model or {}).get("n_parameters") or 0)
    n = int(parameters or n_model or measured["parameters"])
    rates = rates_for(n, measured)
    benchmarks: dict[str, Any] = {}
    seconds = 0.0
    for o in outcomes:
        row = dict(o["plan"])
        row["seconds_planning"] = o.get("seconds", 0.0)
        seconds += row["seconds_planning"]
        row["estimate"] = estimate(row, n, rates)
        benchmarks.setdefault(o["benchmark"], {"categories": {}})["categories"][o["category"]] = row
    for section in benchmarks.values():
        rows = list(section["categories"].values())
        total = _add({k: v for k, v in r.items() if k != "estimate"} for r in rows)
        total["items"] = total["new_items"]  # an item in two categories is scored once
        total["estimate"] = estimate(total, n, rates)
        section["total"] = total
    grand = _add({k: v for k, v in s["total"].items() if k != "estimate"} for s in benchmarks.values())
    if grand:
        grand["estimate"] = estimate(grand, n, rates)
    return {
        "plan": NOTHING_SCORED,
        "parameters": n,
        "parameters_source": "--plan-params"
        if parameters
        else "the model's config (meta device, no weights)",
        "model_parameters": n_model,
        "rates": rates,
        "benchmarks": benchmarks,
        "total": grand,
        "seconds_planning": seconds,
        "notes": _notes(n, measured),
    }


def _notes(n: int, m: Measured) -> list[str]:
    """What each number of a plan for ``n`` parameters means (rates measured as ``m``)."""
    return [
        f"{NOTHING_SCORED}: requests were built and counted with the model's tokenizer and "
        "config; no weights were loaded and no gate was judged.",
        "forward tokens: tokens fed to the model (scored sequences through the prefix tree "
        "and packed rows, generation prompts with a shared prefix once per batch); 'whole': "
        "every request forwarded whole on its own, as lm-evaluation-harness does.",
        "tokens to generate: max_new_tokens per distinct generation, an upper bound "
        "(a batch stops when all its rows have ended).",
        f"time: a scaling estimate: {m['forward_tokens_per_s']:g} forward, "
        f"{m['prefill_tokens_per_s']:g} prompt and {m['decode_tokens_per_s']:g} decode "
        f"tokens/s measured for {m['model']} ({m['parameters']:,} parameters; "
        f"{m['conditions']}), scaled by {m['parameters']:,} / {n:,} parameters; model time "
        "only (tokenizing and the metrics come on top; this plan's own time is about the "
        "tokenizing; start-up, a first use's conversion and loading: 'a first run here').",
        "FLOPs: 2 x parameters x (tokens fed + tokens generated), forward only.",
    ]


#: What a first run costs besides the model's time, measured on the development machine (2
#: cores, idle): starting Python, torch, transformers and pytest and collecting the audits; and
#: converting a zoo model's GGUF file into its cached safetensors copy (SmolLM2-135M: 20-70 s,
#: the middle taken), once per machine. Loading a converted copy reads its float32 weights:
#: about a second per 500 MB.
STARTUP_S = 10.0
CONVERSION_S = 45.0
LOAD_BYTES_PER_S = 5e8


def machine_load() -> tuple[float, int]:
    """(the 1-minute load average, CPU cores this process may use); (0, cores) where the load
    average is unknown (not a Unix)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return load, cores


def load_factor(load: float, cores: int) -> float:
    """How much longer CPU-bound work takes on a shared machine than on an idle one: the rates
    assume ``cores`` idle cores; with ``load`` runnable threads besides the plan's own (one), a
    run's ``cores`` threads get ``cores / (others + cores)`` of them.

    Examples
    --------
    >>> load_factor(0.5, 2), load_factor(3.0, 2), load_factor(5.0, 2)
    (1.0, 2.0, 3.0)
    """
    others = max(0.0, load - 1.0)
    return (others + cores) / cores


class FirstRun(TypedDict):
    """What the first real run of a plan would take here (``first_run``)."""

    parts: list[tuple[str, float | None]]
    load: float
    cores: int
    factor: float
    seconds: float


def first_run(
    plan: Mapping[str, Any],
    model: str | None,
    first_use: FirstUse,
    load: float,
    cores: int,
) -> FirstRun:
    """What the first real run of the plan's selection would take here, first-use costs
    included: ``parts`` (name, seconds; each named even where it cannot be estimated, with
    ``None``), the machine's ``load`` and ``cores``, the ``factor`` CPU-bound parts are scaled
    by (``load_factor``; the model's multi-threaded forwards by its square) and the
    ``seconds`` in all. A heuristic: it names what a first run spends its time on and how a
    shared machine stretches it, within about 2x of the runs it was checked on.

    Args:
        plan: ``build_plan``'s document with ``seconds_planning`` (its tokenizing, already at
            this machine's load: not scaled again).
        model: the model's name.
        first_use: ``models.zoo.first_use(model)``: whether it converts, its weights' bytes.
    """
    factor = load_factor(load, cores)
    total = plan.get("total") or {}
    model_s = (total.get("estimate") or {}).get("seconds", 0.0)
    parts: list[tuple[str, float | None]] = [
        ("start-up (Python, torch, pytest, collecting)", STARTUP_S * factor)
    ]
    if first_use.get("converts"):
        parts.append(
            (f"converting {model}'s GGUF weights once (first use; 20-70 s idle)", CONVERSION_S * factor)
        )
    if first_use.get("downloads"):
        parts.append((f"downloading {model} (first use; not estimated)", None))
    weights = first_use.get("weight_bytes")
    parts.append(("loading the weights", weights / LOAD_BYTES_PER_S * factor if weights else None))
    parts.append(("tokenizing and prefix trees (as long as this plan's)", plan.get("seconds_planning", 0.0)))
    # The forwards run torch's threads, which meet at every operation: on a busy machine each
    # waits for a descheduled peer, so they slow by about the square of the machine's share
    # (measured: CBBQ religion --limit 8 took 56x its idle 9 s at load average 10 on 2 cores,
    # under nice; 5.2 squared is 27; the conversion, one thread mostly, 5x).
    parts.append((f"the model's forwards (the estimate above x {factor**2:.1f})", model_s * factor**2))
    return {
        "parts": parts,
        "load": load,
        "cores": cores,
        "factor": factor,
        "seconds": sum(s for _, s in parts if s is not None),
    }
