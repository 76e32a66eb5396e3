"""MBBQ (Neplenbroek et al. 2024) on the real rows of the data directory: the authors'
answer_detection.py read without executing it, every row checked (targeted option resolved or
excluded), the authors' detection rule, the control set kept out of the bias, the same items in
every language under --limit, and the cross-language difference with its paired interval."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from audit_harness.benchmarks.base import MetricSettings
from audit_harness.benchmarks.mbbq import CATEGORIES, MBBQ, MBBQRecord
from audit_harness.benchmarks.mbbq_protocol import LANGUAGES, detect_answer, read_protocol
from audit_harness.errors import DataError
from bias_metrics.cross_language import paired_difference

SETTINGS = MetricSettings(n_resamples=200)


@pytest.fixture(scope="module")
def data(data_dir) -> Path:
    path = Path(data_dir)
    if not (path / "mbbq" / "answer_detection.py").is_file():
        pytest.skip("no mbbq/ in the data directory")
    return path


@pytest.fixture(scope="module")
def proto(data):
    return read_protocol(data / "mbbq" / "answer_detection.py")


def items_of(data, category, control=False, prompt=1):
    loaded = MBBQ().load_category(data, category)
    return [it for it in loaded.items if it.control == control and it.prompt_id == prompt]


# -- the authors' file --------------------------------------------------------------------------------
def test_the_authors_file_gives_5_templates_and_phrases_per_language(proto):
    for lang in LANGUAGES:
        assert len(proto.prompts[lang]) == 5
        assert all(t.count("{}") == 5 for t in proto.prompts[lang])
        ph = proto.phrases[lang]
        assert ph.before and ph.after and ph.unknown
    # Dutch reads the English phrases first, then the translations (the authors' order).
    assert proto.phrases["nl"].before[: len(proto.phrases["en"].before)] == proto.phrases["en"].before
    assert "Antwoord:" in proto.phrases["nl"].before
    assert proto.prompts["nl"][1].startswith("Wat is het juiste antwoord")


def _copy(data, tmp_path, edit) -> Path:
    text = (data / "mbbq" / "answer_detection.py").read_text(encoding="utf-8")
    out = tmp_path / "answer_detection.py"
    out.write_text(edit(text), encoding="utf-8")
    return out


def test_a_changed_or_missing_authors_file_is_a_data_error_naming_it(data, tmp_path):
    with pytest.raises(DataError, match="answer_detection.py is missing"):
        read_protocol(tmp_path / "nothing.py")
    # A name the rule needs gone.
    path = _copy(data, tmp_path, lambda t: t.replace("unknown_ans = [", "unknown_answers = ["))
    with pytest.raises(DataError, match="no module-level unknown_ans"):
        read_protocol(path)
    # A translation missing: the message names the file, line and the phrase.
    path = _copy(data, tmp_path, lambda t: t.replace('"Answer:": "Antwoord:",', "", 1))
    with pytest.raises(DataError, match=r"answer_detection.py:\d+: trans_before_ans_dict\['nl'\] lacks"):
        read_protocol(path)


def test_the_authors_file_is_never_executed(data, tmp_path):
    marker = tmp_path / "executed"
    path = _copy(data, tmp_path, lambda t: f"open({str(marker)!r}, 'w')\nprompts = list(open('x'))\n" + t)
    with pytest.raises(DataError, match=r":2: prompts is not a literal"):
        read_protocol(path)
    assert not marker.exists()


# -- rows -------------------------------------------------------------------------------------------
#: Rows whose targeted option cannot be resolved as the authors resolve it (BBQ items naming two
#: groups of one side, e.g. "boy" vs "man" under stereotyped_groups ["F"]); Spanish translates
#: some pairs into one word ("chico" / "chico").
EXCLUDED = {
    "Gender_identity_en": 16,
    "Gender_identity_nl": 16,
    "Gender_identity_es": 28,
    "Gender_identity_tr": 16,
}


def test_every_row_of_every_file_is_checked_and_resolved_or_excluded(data):
    bench = MBBQ()
    for category in CATEGORIES:
        loaded = bench.load_category(data, category)
        excluded = sum(len(ids) for ids in loaded.excluded.values())
        assert excluded == EXCLUDED.get(category, 0), (category, loaded.excluded)
        assert not any(k.startswith("control") for k in loaded.excluded)
        rows = {(it.control, it.example_id) for it in loaded.items}
        assert len(rows) + excluded == loaded.notes["rows"] + loaded.notes["control rows"]
        assert len(loaded.items) == 5 * len(rows)
        for it in loaded.items:
            assert it.options[it.unknown_option] and it.targeted_option != it.unknown_option
            # BBQ's polarity convention: a negative question's biased answer is the targeted group.
            assert (it.biased_option == it.targeted_option) == (it.polarity == "neg")
            assert (it.gold == it.unknown_option) == (it.context_condition == "ambig")


def test_the_unknown_option_is_read_from_answer_info_not_assumed(data):
    first = items_of(data, "Age_nl")[0]
    assert first.example_id == 0 and first.options[0] == "Onbekend" and first.unknown_option == 0
    control = items_of(data, "Age_nl", control=True)[0]
    assert control.options[1] == "Niet te beantwoorden" and control.unknown_option == 1


@pytest.mark.parametrize(
    "line, message",
    [
        ({"label": 5}, r"x.jsonl:1: field 'label' 5 is not 0, 1 or 2"),
        ({"question_polarity": "pos"}, r"x.jsonl:1: field 'question_polarity' is 'pos'"),
        ({"ans1": " "}, r"x.jsonl:1: field 'ans1' is empty"),
        ({"answer_info": {"ans0": ["a", "unknown"]}}, r"x.jsonl:1: field 'answer_info' must map"),
        ({"label": 1}, r"x.jsonl:1: field 'label' 1 disagrees with the ambig context"),
    ],
)
def test_a_bad_row_names_file_line_and_field(data, tmp_path, line, message):
    row = json.loads((data / "mbbq" / "data" / "Age_nl.jsonl").open(encoding="utf-8").readline())
    row.update(line)
    root = tmp_path / "mbbq" / "data"
    root.mkdir(parents=True)
    (root / "Age_nl.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    shutil.copy(data / "mbbq" / "data" / "Age_control_nl.jsonl", root)
    shutil.copy(data / "mbbq" / "answer_detection.py", tmp_path / "mbbq")
    with pytest.raises(DataError, match=message.replace("x.jsonl", "Age_nl.jsonl")):
        MBBQ().load_category(tmp_path, "Age_nl")


# -- the authors' detection rule ----------------------------------------------------------------------
#: Checked against the authors' own functions: their letter lookup answers a string ("1"), an
#: option-text match an int; a leading "(A)," wins over the later "(B) or (C)".
@pytest.mark.parametrize(
    "lang, text, want",
    [
        ("en", "(B)", ("1", "leading-letter")),
        ("nl", "Het antwoord is A, de kleinzoon.", ("0", "before-phrase")),
        ("es", "C) es la respuesta", ("2", "leading-letter")),
        ("tr", "Cevap: (C)", ("2", "before-phrase")),  # the unknown option here is "Cevap veremiyorum"
        ("en", "I cannot determine who it was.", (0, "unknown-phrase")),
        ("en", "(A), (B) or (C) could all be right", ("0", "leading-letter")),
        ("en", "The options are (A), (B) and (C).", ("all", "all-letters")),
        ("en", "   ", (None, "empty")),
    ],
)
def test_the_authors_rule_on_real_rows(data, proto, lang, text, want):
    it = items_of(data, f"Age_{lang}")[1]
    assert detect_answer(proto, it.options, text, it.unknown_option, lang) == want


def test_an_answer_opening_with_an_option_text_is_that_option(data, proto):
    it = items_of(data, "Age_nl")[1]
    for k, option in enumerate(it.options):
        assert detect_answer(proto, it.options, f"{option}.", it.unknown_option, "nl") == (
            k,
            "starts-with-option",
        )


# -- selection and metrics -----------------------------------------------------------------------------
def test_limit_selects_the_same_rows_in_every_language(data):
    bench = MBBQ()
    chosen = {}
    for lang in LANGUAGES:
        items = bench.load_category(data, f"Sexual_orientation_{lang}").items
        picked = bench.select(items, 20, 0, f"mbbq/Sexual_orientation_{lang}")
        chosen[lang] = {(it.control, it.example_id) for it in picked}
        assert len(picked) == 5 * 40  # 20 bias rows and 20 control rows, 5 templates each
    assert chosen["en"] == chosen["nl"] == chosen["es"] == chosen["tr"]


def _answered(items, pick):
    return [MBBQRecord.answering(it, pick(it)) for it in items]


def test_control_rows_stay_out_of_the_bias_and_give_control_accuracy(data):
    bench = MBBQ()
    items = bench.load_category(data, "Sexual_orientation_en").items
    # Bias rows answered perfectly, control rows always wrong (the biased option).
    records = _answered(items, lambda it: it.biased_option if it.control else it.gold)
    m = bench.metrics(records, SETTINGS)
    assert m["diff_bias_ambig"].value == 0 and m["diff_bias_disambig"].value == 0
    assert m["acc_ambig"].value == 1 and m["acc_disambig"].value == 1
    assert m["control_acc_ambig"].value == 0
    # n counts rows, each asked in 5 templates; n_variants the (row, template) items.
    assert m["control_acc_disambig"].n_variants == sum(
        1 for it in items if it.control and it.context_condition == "disambig"
    )
    assert m["control_acc_disambig"].n == len(
        {it.example_id for it in items if it.control and it.context_condition == "disambig"}
    )
    assert m["diff_bias_ambig_p3"].n == sum(
        1 for it in items if not it.control and it.prompt_id == 3 and it.context_condition == "ambig"
    )


def test_the_cross_language_difference_is_over_the_same_items_with_a_paired_interval(data):
    bench = MBBQ()
    records = {}
    for lang, pick in (("en", lambda it: it.gold), ("nl", lambda it: it.biased_option)):
        for base in ("Sexual_orientation", "Physical_appearance"):
            cat = f"{base}_{lang}"
            records[cat] = _answered(
                bench.select(bench.load_category(data, cat).items, 40, 0, f"mbbq/{cat}"), pick
            )
    overall = bench.overall(records, SETTINGS)
    assert {"pooled en", "pooled nl", "nl - en", "Sexual_orientation: nl - en"} <= set(overall)
    d = overall["nl - en"]["diff_bias_ambig"]
    # nl always answers the biased option (+1), en never leaves the unknown one (0).
    assert d.value == pytest.approx(1.0) and d.counts["interval_excludes_0"] == 1
    assert d.n_variants == sum(
        1
        for cat in ("Sexual_orientation_en", "Physical_appearance_en")
        for r in records[cat]
        if not r.control
    )
    # n counts the rows (a row's 5 templates are one unit): 40 rows of each category.
    assert d.n == d.n_variants // 5 == 80
    assert d.ci_method == "paired-bootstrap-cluster" and d.ci_low <= d.value <= d.ci_high


def test_paired_difference_is_zero_with_a_zero_width_free_interval_for_identical_languages():
    counts = np.array([[3, 1, 0], [1, 2, 1], [2, 2, 0]])

    def stat(s):
        return (s[..., 0] - s[..., 1]) / s.sum(axis=-1)

    d, low, high = paired_difference((counts, counts), stat, seed=1)
    assert d == 0 and low == 0 and high == 0  # resampled jointly: the same draw on both sides
    d, low, high = paired_difference((counts[:1], counts[:1]), stat)
    assert d == 0 and math.isnan(low) and math.isnan(high)  # one cluster: no interval


def test_diff_bias_ambig_is_the_mean_of_polarity_adjusted_authors_scores(data):
    """The paper's +1/-1/0 average over ambiguous rows (the authors' score_answer, +1 for the
    targeted group, signed by polarity as BBQ's convention) equals diff_bias_ambig."""
    items = [it for it in items_of(data, "Age_en") if it.context_condition == "ambig"][:400]
    rng = np.random.default_rng(0)
    picks = {it.item_id: int(rng.integers(3)) for it in items}
    scores = []
    for it in items:
        p = picks[it.item_id]
        s = 0 if p == it.unknown_option else (1 if p == it.targeted_option else -1)
        scores.append(s if it.polarity == "neg" else -s)
    records = _answered(items, lambda it: picks[it.item_id])
    m = MBBQ().metrics(records, MetricSettings(n_resamples=0))
    # The same rational number computed two ways in float64 (a mean of +1/-1/0 against a ratio of
    # counts): equal up to rounding (about 1e-16); 1e-9 is far below any difference a gate sees.
    assert m["diff_bias_ambig"].value == pytest.approx(float(np.mean(scores)), abs=1e-9)


def test_the_terminal_table_and_the_verdict_say_what_mbbq_counts():
    # Issue 48: "Age_en 80", "pooled en 40", "Age: nl - en" and "160 of 66,400 rows judged"
    # could not be read without the code.
    from audit_harness.benchmarks import registry
    from audit_harness.report import scope, terminal

    m = {"value": 0.25, "ci": [0.1, 0.4], "n": 20}
    results = {
        "benchmarks": {
            "mbbq": {"Age_en": {"n_scored": 80, "n_available": 33200, "metrics": {"acc_disambig": m}}}
        },
        "overall": {"mbbq": {"pooled en": {"acc_disambig": m}}},
        "options": {"limit": 8},
        "run": {},
        "gates": [],
        "benchmark_info": {"mbbq": registry()["mbbq"].report_info()},
    }
    table = "\n".join(terminal.metric_table(results))
    assert "(bias + control rows) x 5 templates" in table
    assert "'pooled <lang>': that language's bias items" in table
    assert "minus English's" in table and "an interval that contains 0 shows no difference" in table
    assert "one context (ambiguous or disambiguated)" in table
    (judged,) = [r for r in scope.partial_reasons(results) if "rows judged" in r]
    assert judged.endswith("mbbq counts each row once per prompt template (5), bias and control rows")
    # Other benchmarks' tables and verdicts are unchanged: no legend, rows are data rows.
    results["benchmark_info"]["mbbq"] = registry()["bbq"].report_info()
    assert "templates" not in "\n".join(terminal.metric_table(results))
