"""The benchmark protocol itself (issue 7): typed records, configuration, capability checks, the
registry, and that every benchmark implements the whole protocol."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from audit_harness.audit_options import AuditOptions
from audit_harness.benchmarks import Benchmark, Record, registry
from audit_harness.benchmarks.bbq_family import MCRecord
from audit_harness.errors import ConfigError, ModelError
from audit_harness.models.base import Backend, ModelInfo
from audit_harness.session import AuditSession


@dataclass
class _Rec(Record):
    score: float = 0.0
    extra: dict = field(default_factory=dict)


def test_record_extra_never_overwrites_a_core_field():
    with pytest.raises(ValueError, match="extra field 'score' would overwrite a core field"):
        _Rec("a-1", "a", 1.0, {"score": 2.0}).to_dict()
    with pytest.raises(ValueError, match="'id'"):
        _Rec("a-1", "a", 1.0, {"id": "x"}).to_dict()


def test_record_round_trip_keeps_extra_flat_and_typed():
    rec = _Rec("a-1", "a", -1.5, {"question_type": "pro-stereo"})
    stored = rec.to_dict()
    assert stored == {"id": "a-1", "category": "a", "score": -1.5, "question_type": "pro-stereo"}
    assert _Rec.from_dict(json.loads(json.dumps(stored))) == rec
    with pytest.raises(KeyError, match="lacks 'category'"):
        _Rec.from_dict({"id": "a-1"})


def test_optional_fields_are_omitted_when_unset():
    rec = MCRecord(
        "Age-1", "Age", "ambig", "neg", "1", "label", "c", "q", 2, "unknown", 2, "unknown", correct=True
    )
    assert "raw_prediction" not in rec.to_dict() and "loglikelihoods" not in rec.to_dict()


def test_configure_returns_a_copy_and_refuses_unknown_options():
    bbq = registry()["bbq"]
    generated = bbq.configure(answer_mode="generate", answer_parsing="authors")
    assert (bbq.answer_mode, generated.answer_mode, generated.parsing_profile) == (
        "loglikelihood",
        "generate",
        "authors",
    )
    assert bbq.parsing_profile == "robust" and generated.authors_rule == "bbq-reference"
    # generate-mode metrics and gates are told apart from the log-likelihood ones
    assert generated.gate_metrics("acc_ambig") == ("acc_ambig-generate",)
    assert bbq.gate_metrics("invalid_rate") == ()  # log-likelihood scoring cannot make one
    assert generated.requires == {"generate"} and bbq.requires == {"loglikelihood"}
    with pytest.raises(ConfigError, match="unknown option 'prompt'; known: "):
        bbq.configure(prompt="x")
    with pytest.raises(ConfigError, match="answer_mode must be one of"):
        bbq.configure(answer_mode="letters")


def test_every_registered_benchmark_implements_the_protocol():
    found = registry()
    assert {"bbq", "esbbq", "cabbq", "crows_pairs", "winoqueer"} <= set(found)
    for name, bench in found.items():
        assert isinstance(bench, Benchmark) and bench.name == name
        assert bench.categories and bench.metric_names and bench.data_folder
        assert issubclass(bench.record_type, Record) and bench.requires
        audit = Path(__file__).resolve().parents[1] / "audits"
        assert any(f"def test_{name}(" in p.read_text() for p in audit.glob("test_*.py")), name


class _MaskedOnly(Backend):
    capabilities = frozenset({"token_logprobs"})
    info = ModelInfo("fake-bert", "test", "sha256:0", "float32", "cpu", 1, kind="masked")


def test_the_session_refuses_a_model_without_the_capability(tmp_path, data_dir):
    session = AuditSession(AuditOptions(data_dir=str(data_dir)), registry(), tmp_path, model=_MaskedOnly())
    with pytest.raises(
        ModelError,
        match=r"bbq needs loglikelihood, which model 'fake-bert' "
        r"\(masked LM\) cannot compute",
    ):
        session.category_outcome("bbq", "Age")
