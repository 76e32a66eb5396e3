"""HF causal-LM backend (token boundary, batching, truncation, generation) and the model zoo."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from audit_harness.engine.executor import Engine
from audit_harness.errors import ModelError
from audit_harness.models import load_model
from audit_harness.models.base import GenerationRequest, check_token_positions
from audit_harness.models.hf import resolve_device, resolve_dtype
from audit_harness.models.zoo import ZOO

REQUESTS = [
    ("The grandfather and the grandson", " were trying to book a cab."),
    ("Who was not comfortable using the phone?\nA:", " Can't be determined"),
    ("La semana pasada vi a un nieto", " con su abuelo."),
    ("Answer:", " A"),
    ("", "Not enough information."),
]


def reference_loglikelihood(model, context: str, continuation: str) -> float:
    """One unbatched, unpadded forward over the whole sequence, summing the continuation's
    next-token log-probabilities: the definition the batched path must reproduce."""
    ctx, cont = model.encode_pair(context, continuation)
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logprobs = torch.log_softmax(model.model(ids).logits[0].float(), dim=-1)
    return sum(float(logprobs[len(ctx) + i - 1, tok]) for i, tok in enumerate(cont))


def test_batched_scores_equal_the_unbatched_definition(tiny_model):
    scores = Engine(tiny_model).loglikelihood(REQUESTS)
    expected = [reference_loglikelihood(tiny_model, c, x) for c, x in REQUESTS]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert all(s < 0 for s in scores)


def test_batch_size_does_not_change_scores(tiny_model):
    one = Engine(load_model("tiny-random-gpt2", device="cpu", batch_size=1)).loglikelihood(REQUESTS)
    assert Engine(tiny_model).loglikelihood(REQUESTS) == pytest.approx(one, abs=1e-4)


def test_trailing_space_of_the_context_moves_to_the_continuation(tiny_model):
    assert tiny_model.encode_pair("Answer: ", "A") == tiny_model.encode_pair("Answer:", " A")
    ctx, cont = tiny_model.encode_pair("Answer:", " A")
    whole = tiny_model.tokenizer("Answer: A", add_special_tokens=False)["input_ids"]
    assert ctx + cont == whole  # the canonical tokenization, split at the context boundary


def test_batched_tokenization_equals_one_pair_at_a_time(tiny_model, data_dir):
    # encode_pairs (one batched tokenizer call over distinct strings) is what the engine uses:
    # it must give exactly encode_pair's ids, on real rows and on the boundary cases.
    from audit_harness.benchmarks import registry

    requests = [("Answer: ", "A"), ("", "Hello"), ("Answer:", " A"), ("x", " y\n")]
    for name in ("bbq", "esbbq"):
        bench = registry()[name]
        category = bench.categories[0]
        for it in bench.load_category(data_dir, category).items[:6]:
            requests += [(bench.prompt(it), bench.delimiter + c) for c in bench.choices(it)]
    assert tiny_model.encode_pairs(requests) == [tiny_model.encode_pair(c, x) for c, x in requests]
    with pytest.raises(ValueError, match="empty continuation"):
        tiny_model.encode_pairs([("a", "")])


def test_empty_context_is_conditioned_on_the_bos_token(tiny_model):
    ctx, cont = tiny_model.encode_pair("", "Hello")
    assert ctx == [tiny_model.tokenizer.bos_token_id]
    assert cont == tiny_model.tokenizer("Hello", add_special_tokens=False)["input_ids"]


def test_empty_continuation_is_refused(tiny_model):
    with pytest.raises(ValueError, match="empty continuation"):
        Engine(tiny_model).loglikelihood([("context", "")])


def test_long_context_loses_tokens_from_the_left(tiny_model):
    context, continuation = "The grandfather and the grandson " * 12, " were here."
    ctx, cont = tiny_model.encode_pair(context, continuation)
    model = load_model("tiny-random-gpt2", device="cpu")
    model.max_length = 24
    kept = (ctx + cont)[-24:]
    ids = torch.tensor([kept])
    with torch.no_grad():
        lp = torch.log_softmax(model.model(ids).logits[0], dim=-1)
    expected = sum(float(lp[24 - len(cont) + i - 1, t]) for i, t in enumerate(cont))
    assert Engine(model).loglikelihood([(context, continuation)])[0] == pytest.approx(expected, abs=1e-4)


def test_generate_is_greedy_deterministic_and_cut_at_stop(tiny_model):
    reqs = [GenerationRequest("The grandfather", 6), GenerationRequest("Answer:", 6)]
    a = Engine(tiny_model).generate(reqs)
    b = Engine(tiny_model).generate(reqs)
    assert a == b and len(a) == 2 and all(isinstance(t, str) for t in a)
    stop = a[0][1:3]
    assert stop, a
    cut = Engine(tiny_model).generate([GenerationRequest("The grandfather", 6, stop=(stop,))])[0]
    assert stop not in cut and a[0].startswith(cut)


def test_batched_generation_equals_one_at_a_time(tiny_model):
    prompts = [
        "The grandfather and the grandson",
        "Answer:",
        "La semana pasada vi a un nieto con",
        "Who was not comfortable using the phone?",
    ]
    reqs = [GenerationRequest(p, 8) for p in prompts]
    one_by_one = [Engine(tiny_model).generate([r])[0] for r in reqs]
    assert Engine(tiny_model).generate(reqs) == one_by_one


def test_token_logprobs_equal_one_forward_per_prefix(tiny_model):
    """Per-token log-probabilities of whole sequences (batched, left-padded) equal a slow
    reference: one forward per prefix, the last position's next-token distribution."""
    sentences = [
        "The grandfather and the grandson were trying to book a cab.",
        "Answer: A",
        "No hay suficiente información.",
    ]
    encs = [tiny_model.encode_sentence(s) for s in sentences]
    positions = [list(range(1, len(e.ids))) for e in encs]
    got = Engine(tiny_model).token_logprobs([e.ids for e in encs], positions)
    for enc, pos, values in zip(encs, positions, got):
        assert enc.special[0] and not any(enc.special[1:])
        for p, v in zip(pos, values):
            with torch.no_grad():
                logits = tiny_model.model(torch.tensor([enc.ids[:p]])).logits[0, -1].float()
            assert v == pytest.approx(float(torch.log_softmax(logits, -1)[enc.ids[p]]), abs=1e-4)
    with pytest.raises(ValueError, match="position 0"):
        Engine(tiny_model).token_logprobs([encs[0].ids], [[0]])


@pytest.mark.parametrize(
    "sequences, positions, first, message",
    [
        ([[1, 2]], [], 0, r"1 sequences but 0 position lists"),
        ([[1, 2], [1] * 9], [[1], [1]], 0, r"sequence 1: 9 tokens exceed the model's 8-token window"),
        ([[1, 2, 3]], [[2, 3]], 0, r"sequence 0: position 3 is outside \[0, 3\)$"),
        (
            [[1, 2, 3]],
            [[0]],
            1,
            r"sequence 0: position 0 is outside \[1, 3\) \(position 0 has no left context\)",
        ),
    ],
)
def test_token_positions_are_checked_once_for_every_backend(sequences, positions, first, message):
    check_token_positions([[1, 2, 3]], [[first, 2]], 8, first=first)  # in range: no error
    with pytest.raises(ValueError, match=message):
        check_token_positions(sequences, positions, 8, first=first)


def test_unknown_model_lists_the_zoo():
    with pytest.raises(ModelError) as err:
        load_model("smollm-135m")
    for name in ZOO:
        assert name in str(err.value)


def test_model_info_and_fingerprint_are_recorded(tiny_model):
    info = tiny_model.info
    assert info.fingerprint.startswith("sha256:") and len(info.fingerprint) == 7 + 64
    assert (info.dtype, info.device) == ("float32", "cpu") and info.n_parameters > 100_000


def test_device_and_dtype_resolution():
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) is torch.bfloat16
    assert resolve_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="--dtype"):
        resolve_dtype("int3", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_two_processes_materialize_the_same_model_once(tmp_path):
    """Two xdist workers starting together must not corrupt the cached conversion."""
    env = dict(os.environ, BIAS_AUDIT_CACHE=str(tmp_path))
    code = (
        "from audit_harness.models.zoo import materialize, weights_fingerprint;"
        "print(weights_fingerprint(materialize('tiny-random-gpt2')))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    assert outs[0][0] == outs[1][0]
    folders = [p for p in (tmp_path / "models").iterdir() if p.is_dir()]
    assert [p.name for p in folders] == ["tiny-random-gpt2"]
