"""``--plan``: the dry run counts what a real run computes, loads no weights, judges no gate and
writes nothing that reads as results. End to end through ``pytest audits`` with the tiny random
GPT-2: the same selection planned (from a copy of the model folder without its weight file) and
run for real (no result cache, forwards sized by tokens as the plan sizes them)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]

TARGETS = [f"audits/test_{b}.py" for b in ("bbq", "crows_pairs", "winoqueer", "kobbq", "kgquiz")]
#: One category each: scored continuations (BBQ), sentence pairs (CrowS-Pairs, WinoQueer),
#: generations with letters scored from their first step (KoBBQ --kobbq-mode both) and
#: generations of two budgets (KGQuiz true/false and short answers, embedded).
KEYWORD = (
    "(test_bbq and Age) or (test_crows_pairs and religion) or (test_winoqueer and masc_femm_name) "
    "or (test_kobbq and age) or (test_kgquiz and (Task1-ConceptNet or Task3-ConceptNet))"
)
GENERATING = {("kobbq", "age"), ("kgquiz", "Task1-ConceptNet"), ("kgquiz", "Task3-ConceptNet")}


def audit(tmp_path: Path, data_dir: Path, name: str, *extra: str, targets=TARGETS, keyword=KEYWORD):
    """``pytest audits/...`` in a subprocess, as a user runs it; (process, run folder or None)."""
    results = tmp_path / name
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *targets,
        "--data-dir",
        str(data_dir),
        "--limit",
        "4",
        "--kobbq-prompts",
        "1",
        "--kobbq-mode",
        "both",
        "--results-dir",
        str(results),
        "--bootstrap-resamples",
        "0",
        "--min-n",
        "1",
        "-p",
        "no:cacheprovider",
        "-k",
        keyword,
        *extra,
    ]
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        BIAS_AUDIT_FORWARD_SECONDS="0",
    )
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    runs = [p for p in results.iterdir() if p.is_dir()] if results.exists() else []
    return proc, (runs[0] if len(runs) == 1 else None)


@pytest.fixture(scope="module")
def weightless(tmp_path_factory) -> Path:
    """The tiny model's folder without its weights: config and tokenizer files only."""
    from audit_harness.models.zoo import materialize

    src = materialize("tiny-random-gpt2")
    out = tmp_path_factory.mktemp("weightless") / "tiny-random-gpt2"
    out.mkdir()
    for f in src.iterdir():
        if f.is_file() and f.suffix not in (".safetensors", ".bin") and not f.name.startswith("."):
            shutil.copy(f, out / f.name)
    return out


@pytest.fixture(scope="module")
def planned(tmp_path_factory, data_dir, weightless):
    proc, run_dir = audit(
        tmp_path_factory.mktemp("plan"), data_dir, "results", "--plan", "--model", str(weightless)
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, run_dir, json.loads((run_dir / "plan.json").read_text())


@pytest.fixture(scope="module")
def real(tmp_path_factory, data_dir):
    proc, run_dir = audit(
        tmp_path_factory.mktemp("real"), data_dir, "results", "--no-cache", "--model", "tiny-random-gpt2"
    )
    assert run_dir is not None, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((run_dir / "results.json").read_text())


def _rows(plan: dict):
    return {(b, c): row for b, s in plan["benchmarks"].items() for c, row in s["categories"].items()}


def test_plan_counts_what_a_real_run_computes(planned, real):
    _, _, plan = planned
    rows = _rows(plan)
    ran = {(b, c): v["requests"] for b, cats in real["benchmarks"].items() for c, v in cats.items()}
    assert (
        set(rows)
        == set(ran)
        == {
            ("bbq", "Age"),
            ("crows_pairs", "religion"),
            ("winoqueer", "masc_femm_name"),
            *GENERATING,
        }
    )
    for key, row in rows.items():
        stats = ran[key]
        for field in ("requests", "distinct", "computed", "forwards"):
            assert row[field] == stats[field], (key, field, row[field], stats[field])
        assert row["items"] == real["benchmarks"][key[0]][key[1]]["n_scored"], key
        if key in GENERATING:
            assert row["generations"] > 0 and row["tokens_to_generate"] > 0, key
            # A generation ends at most at its budget and runs at least one step.
            assert row["forward_tokens"] + row["generations"] <= stats["tokens_forwarded"], key
            assert stats["tokens_forwarded"] <= row["forward_tokens"] + row["tokens_to_generate"], key
        else:
            assert row["generations"] == row["tokens_to_generate"] == 0, key
            assert row["forward_tokens"] == stats["tokens_forwarded"], key


def test_generation_budgets_are_each_benchmarks(planned):
    from audit_harness.benchmarks import registry

    _, _, plan = planned
    rows = _rows(plan)
    benchmarks = registry()
    kobbq = rows[("kobbq", "age")]
    # 4 rows x 1 template x 3 option orders, each with KoBBQ's budget.
    assert kobbq["generations"] == kobbq["whole"]["generation_requests"] == 12
    assert kobbq["tokens_to_generate"] == 12 * benchmarks["kobbq"].max_new_tokens
    budgets = benchmarks["kgquiz"].protocol.max_new_tokens
    assert rows[("kgquiz", "Task1-ConceptNet")]["tokens_to_generate"] == 4 * budgets["Task1"]
    assert rows[("kgquiz", "Task3-ConceptNet")]["tokens_to_generate"] == 4 * budgets["Task3"]
    # KoBBQ's letters are scored too: every single-token variant of the 3 letters (SmolLM2: A
    # and ' A', parsing.letters), 6 requests a generation (read from its first step).
    assert kobbq["requests"] == 12 + 6 * 12
    # Task3's answers and golds go to the embedding model, which the plan does not load.
    assert rows[("kgquiz", "Task3-ConceptNet")]["texts_to_embed"] == 2 * 4


def test_whole_requests_cost_more_than_the_shared_tree(planned):
    _, _, plan = planned
    for key, row in _rows(plan).items():
        assert row["whole"]["forward_tokens"] >= row["forward_tokens"], key
    bbq = _rows(plan)[("bbq", "Age")]
    assert bbq["whole"]["forward_tokens"] > 2 * bbq["forward_tokens"]  # 3 choices share a prompt


def test_plan_says_nothing_was_scored_and_writes_no_results(planned):
    proc, run_dir, plan = planned
    out = proc.stdout
    assert "PLAN: nothing was scored" in out
    assert "VERDICT" not in out and "results:" not in out and "junit" not in out.lower()
    assert "PLAN: nothing was scored; exit code 0" in out
    assert sorted(p.name for p in run_dir.iterdir()) == ["plan.json"]
    assert plan["exit_status"] == 0 and plan["plan"].startswith("PLAN: nothing was scored")
    assert "-plan-" in run_dir.name
    # Every gate is reported as skipped (not judged), none as passed or failed.
    assert " passed" not in out.splitlines()[-1] and " failed" not in out.splitlines()[-1]
    assert "skipped" in out.splitlines()[-1]
    # The plan's model was read from the weightless folder: nothing to fingerprint.
    assert plan["model"]["fingerprint"].startswith("none")
    assert plan["model"]["n_parameters"] > 0


def test_estimates_scale_with_the_parameter_count(planned):
    from audit_harness.planning import MEASURED, build_plan

    _, _, plan = planned
    outcomes = [
        {
            "benchmark": b,
            "category": c,
            "plan": {k: v for k, v in row.items() if k not in ("estimate", "seconds_planning")},
        }
        for (b, c), row in _rows(plan).items()
    ]
    small = build_plan(outcomes, plan["model"], MEASURED["parameters"])
    big = build_plan(outcomes, plan["model"], 60 * MEASURED["parameters"])
    total = small["total"]
    fed = total["forward_tokens"] + total["tokens_to_generate"]
    assert small["total"]["estimate"]["flops"] == 2.0 * MEASURED["parameters"] * fed
    assert big["total"]["estimate"]["seconds"] == pytest.approx(60 * total["estimate"]["seconds"])
    assert big["total"]["estimate"]["flops"] == pytest.approx(60 * total["estimate"]["flops"])
    assert any("scaling estimate" in n for n in small["notes"])
    assert any("upper bound" in n for n in small["notes"])


def test_plan_params_is_reported(tmp_path, data_dir, weightless):
    proc, run_dir = audit(
        tmp_path,
        data_dir,
        "results",
        "--plan",
        "--plan-params",
        "8.03e9",
        "--model",
        str(weightless),
        targets=["audits/test_bbq.py"],
        keyword="Age",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["parameters"] == 8_030_000_000 and plan["parameters_source"] == "--plan-params"
    assert "estimated for 8,030,000,000 parameters (--plan-params)" in proc.stdout


def test_plan_options_are_checked_at_start_up(tmp_path, data_dir, weightless):
    proc, run_dir = audit(
        tmp_path,
        data_dir,
        "results",
        "--model",
        str(weightless),
        "--plan-params",
        "8e9",
        targets=["audits/test_bbq.py"],
        keyword="Age",
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--plan-params is only used with --plan" in proc.stderr + proc.stdout
    assert run_dir is None


@pytest.mark.parametrize(
    "options, message",
    [
        (
            {"plan": True, "name": "openai", "base_url": ("http://127.0.0.1:9/v1",)},
            "--plan plans an in-process run",
        ),
        (
            {"plan": True, "name": "replay", "predictions": "p.jsonl", "prediction_field": "a"},
            "in-process",
        ),
        ({"plan_params": 8e9}, "--plan-params is only used with --plan"),
        ({"plan": True, "plan_params": 0.0}, "--plan-params must be a parameter count"),
    ],
)
def test_plan_options(options, message):
    from audit_harness.audit_options import AuditOptions, BackendOptions, validate
    from audit_harness.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        validate(AuditOptions(backend=BackendOptions(**options)))


# -- in process -----------------------------------------------------------------------------------


def test_the_planning_backend_reads_no_weight_file(weightless):
    """Whatever would read weights fails here; the backend still opens, on the meta device, with
    the parameter count the loaded model has."""
    import safetensors.torch
    import torch
    import transformers.modeling_utils

    from audit_harness.models import load_model
    from audit_harness.models.counting import PlanCausalLM, load_plan_model

    def refuse(*_, **__):
        raise AssertionError("a plan read weights")

    # transformers binds the readers at import (imported above, so the patches do not stick).
    readers = [
        "safetensors.safe_open",
        "safetensors.torch.load_file",
        "transformers.modeling_utils.safe_open",
        "transformers.modeling_utils.load_state_dict",
        "transformers.PreTrainedModel.from_pretrained",
        "torch.load",
    ]
    assert safetensors.torch and transformers.modeling_utils
    with contextlib.ExitStack() as stack:
        for name in readers:
            stack.enter_context(mock.patch(name, refuse))
        plan = load_plan_model(str(weightless), device="cpu", dtype="float32")
    assert isinstance(plan, PlanCausalLM)
    assert all(p.device == torch.device("meta") for p in plan.model.parameters())
    real = load_model("tiny-random-gpt2", device="cpu", dtype="float32")
    assert plan.info.n_parameters == real.info.n_parameters
    assert (plan.max_length, plan.vocab_size, plan.can_pack, plan.can_share) == (
        real.max_length,
        real.vocab_size,
        real.can_pack,
        real.can_share,
    )
    assert plan.packed_row_tokens == real.packed_row_tokens
    assert plan.encode_pair("The grandfather was", " tired") == real.encode_pair(
        "The grandfather was", " tired"
    )


def test_generation_prompt_tokens_match_the_real_backend(weightless, tiny_model):
    """With one new token each (so no row stops early), the real backend runs exactly the prompt
    tokens the plan counts plus one per row, prefix sharing included."""
    from audit_harness.models.counting import load_plan_model

    plan = load_plan_model(str(weightless), device="cpu", dtype="float32")
    base = "Answer with A, B or C. The grandfather and the grandson were trying to book a cab. "
    prompts = [
        tiny_model.encode_prompt(base + q)
        for q in (
            "Who was not comfortable?",
            "Who was comfortable?",
            "Who was there?",
            "Not enough information.",
        )
    ] + [tiny_model.encode_prompt("La semana pasada vi a un nieto con su abuelo.")]
    texts, forwarded, _ = tiny_model.generate_tokens(prompts, 1)
    _, planned, _ = plan.generate_tokens(prompts, 1)
    assert planned == forwarded
    counts = plan.take_counts()
    assert counts.generations == 5 and counts.tokens_to_generate == 5
    assert counts.generation_prompt_tokens == forwarded - 5 < sum(len(p) for p in prompts)


def test_the_plan_engine_counts_whole_requests(weightless):
    from audit_harness.models.counting import load_plan_model
    from audit_harness.planning import PlanEngine

    backend = load_plan_model(str(weightless), device="cpu", dtype="float32")
    engine = PlanEngine(backend)
    requests = [
        ("The grandfather was", " tired"),
        ("The grandfather was", " fine"),
        ("The grandfather was", " tired"),
    ]
    values = engine.loglikelihood(requests)
    assert values == [0.0, 0.0, 0.0]  # placeholders, not scores
    encoded = [backend.encode_pair(c, x) for c, x in requests]
    assert engine.whole.score_tokens == sum(len(c) + len(x) - 1 for c, x in encoded)
    assert (engine.stats.requests, engine.stats.distinct, engine.stats.computed) == (3, 2, 2)
    # The shared context is fed once.
    assert engine.stats.tokens_forwarded < sum(len(c) + len(x) - 1 for c, x in encoded[:2])
    assert engine.cache is None


def test_an_item_in_two_categories_is_counted_once_in_the_total():
    """A sentence-pair benchmark's ``overall`` holds its subgroups' pairs, scored once."""
    from audit_harness.planning import build_plan

    def row(items, new_items, tokens):
        counts = {
            "generations": 0,
            "generation_prompt_tokens": 0,
            "tokens_to_generate": 0,
            "prompt_tokens_whole": 0,
            "masked_tokens": 0,
            "masked_forwards": 0,
            "whole": {"score_tokens": 2 * tokens, "generation_requests": 0, "tokens_to_generate": 0},
        }
        stats = {"requests": 2 * new_items, "distinct": 2 * new_items, "computed": 2 * new_items}
        stats.update(tokens_forwarded=tokens, forwards=1 if tokens else 0)
        from audit_harness.planning import plan_row

        return plan_row(items, stats, counts, new_items=new_items)

    outcomes = [
        {"benchmark": "crows_pairs", "category": "age", "plan": row(3, 3, 30)},
        {"benchmark": "crows_pairs", "category": "religion", "plan": row(2, 2, 20)},
        {"benchmark": "crows_pairs", "category": "overall", "plan": row(5, 0, 0)},
    ]
    plan = build_plan(outcomes, {"n_parameters": 1000})
    total = plan["benchmarks"]["crows_pairs"]["total"]
    assert total["items"] == 5 and total["forward_tokens"] == 50 and total["requests"] == 10
    assert plan["total"]["items"] == 5
    assert plan["total"]["estimate"]["flops"] == 2.0 * 1000 * 50


def test_plan_rates_measures_forward_prefill_and_decode_through_the_engine(data_dir):
    """perf/plan_rates.py, the source of planning.MEASURED, runs end to end on real rows: every
    rate it prints rests on tokens actually forwarded and generated (the decode measure patches
    the batch path, which continuous batching bypasses unless it is switched off)."""
    script = Path(__file__).resolve().parents[1] / "perf" / "plan_rates.py"
    done = subprocess.run(
        [sys.executable, str(script), "--model", "tiny-random-gpt2", "--threads", "1",
         "--bbq-items", "1", "--kobbq-rows", "1", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rates = json.loads(done.stdout)
    for key in ("forward_tokens_per_s", "prefill_tokens_per_s", "decode_tokens_per_s"):
        assert rates[key] > 0, (key, rates)
    generations, decoded = re.match(
        r"(\d+) KoBBQ generations .*?, (\d+) decode tokens", rates["measured_on"]["decode"]
    ).groups()
    assert int(generations) > 0 and int(decoded) > 0, rates["measured_on"]


def test_a_plan_that_leaves_categories_out_says_so_on_its_last_line(tmp_path, data_dir, weightless):
    # KGQuiz's Task2 files exist nowhere upstream: the category is skipped, and a plan that exits
    # 0 ends on a line that says which categories it left out and why.
    proc, run_dir = audit(
        tmp_path,
        data_dir,
        "results",
        "--plan",
        "--model",
        str(weightless),
        targets=["audits/test_kgquiz.py"],
        keyword="Task1-ConceptNet or Task2-ConceptNet",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # The plan section's last line (pytest's list of skips and its count follow it).
    ours = proc.stdout.split("bias audit plan", 1)[1].split("short test summary", 1)[0].splitlines()
    last = [line for line in ours if line.strip() and not line.startswith("=")][-1]
    assert last == (
        "PLAN: nothing was scored; exit code 0; 1 category skipped: data files missing: "
        "kgquiz/Task2-ConceptNet"
    ), ours
    assert json.loads((run_dir / "plan.json").read_text())["skipped"][0]["category"] == "Task2-ConceptNet"


def test_a_plan_names_each_skip_s_reason_and_the_data_directory_given(tmp_path, data_dir, weightless):
    # Issue 48: CBBQ's physical_appearance has both files but no scorable row; the last line
    # filed it under "data files missing". And a data directory given through a symlink was
    # named by its resolved path, which the user never typed.
    given = tmp_path / "my-data"
    given.symlink_to(data_dir, target_is_directory=True)
    proc, run_dir = audit(
        tmp_path,
        given,
        "results",
        "--plan",
        "--model",
        str(weightless),
        targets=["audits/test_cbbq.py"],
        keyword="physical_appearance or age or religion",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ours = proc.stdout.split("bias audit plan", 1)[1].split("short test summary", 1)[0].splitlines()
    last = [line for line in ours if line.strip() and not line.startswith("=")][-1]
    assert last == (
        "PLAN: nothing was scored; exit code 0; 2 categories skipped: data files missing: cbbq/age; "
        "no scorable row: cbbq/physical_appearance"
    ), ours
    (age,) = [line for line in ours if line.startswith("not planned: cbbq/age")]
    assert f"in {given} " in age, age
    # The first real run's estimate names its first-use costs and the machine's load.
    (first,) = [line for line in ours if line.startswith("a first run here: about ")]
    assert "start-up" in first and "loading the weights" in first and "load average" in first, first
    plan = json.loads((run_dir / "plan.json").read_text())
    est = plan["first_run"]
    assert est["seconds"] > plan["total"]["estimate"]["seconds"] and est["factor"] >= 1.0


def test_a_first_run_estimate_adds_the_first_use_costs_scaled_by_the_machine_s_load():
    from audit_harness.planning import CONVERSION_S, STARTUP_S, first_run

    plan = {"total": {"estimate": {"seconds": 9.0}}, "seconds_planning": 3.0}
    idle = first_run(plan, "smollm2-135m-instruct", {"converts": True, "weight_bytes": 5e8}, 0.0, 2)
    assert idle["factor"] == 1.0
    assert idle["seconds"] == pytest.approx(STARTUP_S + CONVERSION_S + 1.0 + 3.0 + 9.0)
    assert any("converting smollm2-135m-instruct" in name for name, _ in idle["parts"])
    # Load average 5 on 2 cores: 4 other threads beside the plan's; a run's 2 threads get a
    # third of the machine, so the CPU-bound parts take 3x, the model's forwards 9x; the
    # tokenizing was measured here.
    busy = first_run(plan, "smollm2-135m-instruct", {"converts": False, "weight_bytes": 5e8}, 5.0, 2)
    assert busy["factor"] == 3.0
    # The forwards' threads wait for each other: the square of the factor.
    assert busy["seconds"] == pytest.approx(3 * (STARTUP_S + 1.0) + 9 * 9.0 + 3.0)
    hub = first_run(plan, "org/model", {"downloads": True, "weight_bytes": 0}, 0.0, 2)
    assert ("downloading org/model (first use; not estimated)", None) in hub["parts"]
