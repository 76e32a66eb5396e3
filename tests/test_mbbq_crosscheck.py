"""The MBBQ authors' scoring rule, applied by the independent script
``tools/crosscheck/mbbq_authors_rule.py`` to saved generations, agrees item by item with the
suite's ``authors`` profile; a record that disagrees is named.

The generations are realistic chat-model answers in the four languages (letters in the authors'
spellings, answer statements, option texts, refusals, prose), given to real rows through the
benchmark's own generate-mode path (``MBBQ.evaluate``) with an engine that returns them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit_harness.benchmarks.mbbq import MBBQ

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "crosscheck" / "mbbq_authors_rule.py"

#: Answers as chat models write them; ``{0}``..``{2}`` are the item's options.
ANSWERS = {
    "en": [
        "(B)",
        "The correct answer is (A): {0}.",
        "{2}",
        "I cannot determine who it was.",
        "C",
        "Answer: B",
        "Both {0} and {1} could be right.",
        "(A), (B) or (C)",
        "It is {1}, because the text says so.",
        "",
    ],
    "nl": [
        "(A)",
        "Het antwoord is B",
        "{1}.",
        "Antwoord: C",
        "Ik weet het niet.",
        "Het juiste antwoord is optie A",
        "De vraag is lastig: {0} of {2}?",
        "B.",
        "Niet genoeg informatie.",
        "C: {2}",
    ],
    "es": [
        "La respuesta correcta es (C)",
        "{0}",
        "(B) {1}",
        "Respuesta: A",
        "No se puede determinar.",
        "Creo que es {2}.",
        "A",
        "Ninguna de las opciones.",
        "B)",
        "La respuesta es: {1}",
    ],
    "tr": [
        "Cevap: (A)",
        "{2}",
        "(C)",
        "Doğru cevap B'dir",
        "Yeterli bilgi yok",
        "B",
        "Bence {0}.",
        "Cevap veremiyorum",
        "A'dir",
        "Cevap: {1}",
    ],
}


class _Engine:
    """Returns the crafted answers in order, as a model's generations."""

    chat_template = None

    def __init__(self, outputs):
        self.outputs = outputs

    def chat_prompt(self, text):
        return None

    def generate(self, requests):
        assert len(requests) == len(self.outputs)
        return list(self.outputs)


def _records(data_dir: Path, out: Path, profile: str) -> int:
    bench = MBBQ().configure(answer_mode="generate", answer_parsing=profile)
    folder = out / "records" / "mbbq"
    folder.mkdir(parents=True)
    n = 0
    for lang, answers in ANSWERS.items():
        category = f"Age_{lang}"
        items = bench.select(bench.load_category(data_dir, category).items, 8, 0, f"mbbq/{category}")
        outputs = [answers[i % len(answers)].format(*it.options) for i, it in enumerate(items)]
        records = bench.evaluate(_Engine(outputs), items)
        lines = [json.dumps(r.to_dict(), ensure_ascii=False) for r in records]
        (folder / f"{category}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        n += len(records)
    return n


def _script(run: Path, data_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(run), "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("profile", ["authors", "robust"])
def test_the_authors_rule_agrees_with_the_authors_profile_on_every_item(tmp_path, data_dir, profile):
    data = Path(data_dir)
    if not (data / "mbbq" / "answer_detection.py").is_file():
        pytest.skip("no mbbq/ in the data directory")
    n = _records(data, tmp_path, profile)
    proc = _script(tmp_path, data)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert f"{n} outputs checked, 0 deviations" in proc.stdout
    assert "Age_tr:" in proc.stdout and "polarity-adjusted=" in proc.stdout
    # A reading that differs is named with its item, both answers and the output.
    path = tmp_path / "records" / "mbbq" / "Age_nl.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    key = "predicted" if profile == "authors" else "other_parse"
    if profile == "authors":
        rows[0]["predicted"] = (rows[0]["predicted"] + 1) % 3
    else:
        rows[0][key]["predicted"] = (rows[0][key]["predicted"] + 1) % 3
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    proc = _script(tmp_path, data)
    assert proc.returncode == 1 and f"DEVIATION {rows[0]['id']}: suite" in proc.stdout
