"""Tests of audit_harness.scoring (answer matching, joining saved predictions) and of the
`bias-audit score` command on real BBQ rows (issue 3, item 4)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from audit_harness import cli
from audit_harness.benchmarks import registry
from audit_harness.errors import DataError
from audit_harness.parsing import bbq_reference_clean, match_answer, match_prediction, normalize_text
from audit_harness.scoring import score_predictions, score_report

REPO = Path(__file__).resolve().parents[1]
GRAND = ("The grandfather", "The grandson", "Can't be determined")


# --- answer matching ----------------------------------------------------------------------------
@pytest.mark.parametrize("pred,option", [
    ("A", 0), ("b", 1), ("C", 2), ("(B)", 1), ("B.", 1), (" c ", 2), ("A)", 0),
])
def test_letters(pred, option):
    assert match_answer(pred, GRAND) == (option, "letter")


@pytest.mark.parametrize("pred,option", [(0, 0), (1, 1), (2, 2), ("2", 2), (" 1 ", 1), (1.0, 1)])
def test_indices(pred, option):
    assert match_answer(pred, GRAND) == (option, "index")


@pytest.mark.parametrize("pred", [-1, "-1", None, "", "   "])
def test_no_answer_is_invalid(pred):
    assert match_answer(pred, GRAND) == (-1, "invalid")


@pytest.mark.parametrize("pred", ["7", " 3 ", "-2"])
def test_out_of_range_digits_in_text_are_invalid_output(pred):
    # "7" is what a model said, not a broken file: it names no option.
    assert match_answer(pred, GRAND) == (-1, "invalid")


@pytest.mark.parametrize("pred,error", [(3, ValueError), (-2, ValueError),
                                        (True, TypeError), (1.5, TypeError), ([1], TypeError),
                                        ({"a": 1}, TypeError)])
def test_bad_prediction_values_raise(pred, error):
    with pytest.raises(error):
        match_answer(pred, GRAND)


@pytest.mark.parametrize("pred,option", [
    ("The grandson", 1),
    ("the GRANDSON", 1),
    ("The grandson.", 1),
    ("  the   grandfather!! ", 0),
    ("Can't be determined", 2),
    ("cant be determined.", 2),
    ("Can\u2019t be determined", 2),  # typographic apostrophe
    ("\"The grandfather\"", 0),
])
def test_exact_text_case_and_punctuation_insensitive(pred, option):
    assert match_answer(pred, GRAND) == (option, "text")
    assert match_prediction(pred, GRAND, match="bbq-reference") == option


@pytest.mark.parametrize("pred", ["grandson", "The grandson was struggling with the app",
                                  "I refuse to answer", "A or B", "D"])
def test_exact_mode_leaves_other_text_invalid(pred):
    assert match_prediction(pred, GRAND) == -1


def test_bbq_reference_fallback_catches_what_exact_misses():
    out = "The grandson was struggling with the app"
    assert match_prediction(out, GRAND, match="exact") == -1
    assert match_answer(out, GRAND, match="bbq-reference") == (1, "fallback")


def test_bbq_reference_fallback_tries_options_in_order():
    # Both options' first two words occur: R's case_when takes ans0 first.
    out = "the grandson helped the grandfather"
    assert match_answer(out, GRAND, match="bbq-reference") == (0, "fallback")
    # The unknown option's first two words ("can't be") are found as well.
    assert match_prediction("it can't be known", GRAND, match="bbq-reference") == 2


def test_bbq_reference_single_word_option_never_matches_by_fallback():
    # stringr::word(x, 1, 2) is NA for a one-word text, so R's fallback cannot fire.
    names = ("Donna", "Tom", "Unknown")
    assert match_prediction("Donna did it", names, match="bbq-reference") == -1
    assert match_prediction("donna", names, match="bbq-reference") == 0  # exact still works


def test_bbq_reference_clean_ups():
    assert bbq_reference_clean("The Grandson.") == "the grandson"
    assert bbq_reference_clean("o'brien}") == "obrien"
    assert bbq_reference_clean("The woman in the pantsu") == "the woman in the pantsuit"
    opts = ("The woman in the pantsuit", "The man in the suit", "Unknown")
    assert match_prediction("The woman in the pantsu", opts) == -1
    assert match_answer("The woman in the pantsu", opts, match="bbq-reference") == (0, "text")


def test_extra_choices_map_to_their_option():
    opts = ("La mujer", "El hombre", "unknown")
    extra = [("No lo sé", 2), ("No se sabe", 2)]
    assert match_prediction("no lo se", opts, extra_choices=extra) == -1  # accents differ
    assert match_prediction("No lo sé.", opts, extra_choices=extra) == 2
    assert match_prediction("unknown", opts) == 2


def test_normalize_text_and_bad_mode():
    assert normalize_text("  Can't  be\tdetermined. ") == "cant be determined"
    with pytest.raises(ValueError, match="match must be"):
        match_answer("A", GRAND, match="fuzzy")


# --- end to end on real BBQ rows ----------------------------------------------------------------
@pytest.fixture(scope="module")
def data_dir() -> Path:
    path = Path(os.environ.get("AUDIT_DATA_DIR") or REPO.parent / "shared" / "data")
    if not (path / "bbq" / "data" / "Age.jsonl").is_file():
        pytest.skip(f"no BBQ data under {path} (set AUDIT_DATA_DIR)")
    return path


def real_rows(data_dir: Path, category: str, n: int | None = None, step: int = 1) -> list[dict]:
    with open(data_dir / "bbq" / "data" / f"{category}.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return rows[::step][:n]


def with_predictions(rows: list[dict]) -> tuple[list[dict], dict]:
    """Rows with a ``pred`` field (gold text, gold letter, gold index, another option as index or
    text, or garbage) and the hand-computed accuracy per context over valid predictions."""
    out, tally = [], {"ambig": [0, 0], "disambig": [0, 0], "invalid": 0}
    for i, row in enumerate(rows):
        gold, other = row["label"], (row["label"] + 1) % 3
        kind = i % 6
        pred = [row[f"ans{gold}"].upper() + ".", "ABC"[gold], other, row[f"ans{other}"],
                "I refuse to answer", gold][kind]
        correct = kind in (0, 1, 5)
        if kind == 4:
            tally["invalid"] += 1
        else:
            tally[row["context_condition"]][0] += correct
            tally[row["context_condition"]][1] += 1
        out.append({**row, "pred": pred})
    return out, tally


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_score(capsys, *args) -> tuple[int, str, str]:
    code = cli.main(["score", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_score_bbq_age_end_to_end(tmp_path, data_dir, capsys):
    rows, tally = with_predictions(real_rows(data_dir, "Age", 300))
    preds = write_jsonl(tmp_path / "age_preds.jsonl", rows)
    out_json = tmp_path / "out" / "metrics.json"
    code, out, err = run_score(capsys, "bbq", "--predictions", preds, "--prediction-field", "pred",
                               "--data-dir", data_dir, "--output", out_json,
                               "--bootstrap-resamples", 100, "--seed", 3)
    assert code == 0, err
    assert err == ""
    assert tally["invalid"] == 50
    assert "invalid (unmatched) predictions: 50 of 300" in out
    for name in ("acc_ambig", "acc_disambig", "bias_score_ambig", "bias_score_disambig"):
        assert f" {name} " in out
    assert "wilson" in out and "bayes-bootstrap-cluster" in out and "templates" in out

    result = json.loads(out_json.read_text())
    assert result["benchmark"] == "bbq" and result["flavour"] == "bbq"
    assert result["counts"]["rows"] == 300 and result["invalid_predictions"] == 50
    assert len(result["invalid"]) == 50 and all(set(x) == {"id", "line", "prediction"} for x in result["invalid"])
    assert result["counts"]["letter"] == 50 and result["counts"]["index"] == 100
    assert result["counts"]["text"] == 100 and result["counts"]["fallback"] == 0
    age = result["categories"]["Age"]
    amb_correct, amb_n = tally["ambig"]
    dis_correct, dis_n = tally["disambig"]
    assert age["acc_ambig"]["value"] == pytest.approx(amb_correct / amb_n)
    assert age["acc_ambig"]["n"] == amb_n
    assert age["acc_disambig"]["value"] == pytest.approx(dis_correct / dis_n)
    assert age["invalid_rate"]["value"] == pytest.approx(50 / 300)
    assert age["acc_ambig"]["context_condition"] == "ambig"
    assert age["bias_score_disambig"]["context_condition"] == "disambig"
    for metric in age.values():
        lo, hi = metric["ci"]
        assert lo <= metric["value"] <= hi
    assert result["data_files"][0]["path"] == "bbq/data/Age.jsonl"
    assert result["bootstrap_resamples"] == 100 and result["seed"] == 3


def test_score_by_id_field_matches_own_id_fields(tmp_path, data_dir, capsys):
    rows, _ = with_predictions(real_rows(data_dir, "Age", 60))
    by_fields = write_jsonl(tmp_path / "a.jsonl", rows)
    by_id = write_jsonl(tmp_path / "b.jsonl", [{"id": f"Age-{r['example_id']}", "p": r["pred"]}
                                              for r in rows])
    bench = registry()["bbq"]
    a = score_predictions(bench, by_fields, "pred", data_dir)
    b = score_predictions(bench, by_id, "p", data_dir)
    assert [r.item_id for r in a.records] == [r.item_id for r in b.records]
    assert [r.predicted_class for r in a.records] == [r.predicted_class for r in b.records]
    assert a.counts == b.counts


def test_bbq_reference_match_on_real_rows(tmp_path, data_dir, capsys):
    rows = real_rows(data_dir, "Age", 120)
    for r in rows:  # a sentence around the gold answer: exact match misses it
        r["pred"] = f"{r['ans' + str(r['label'])]} is the answer"
    preds = write_jsonl(tmp_path / "p.jsonl", rows)
    bench = registry()["bbq"]
    exact = score_predictions(bench, preds, "pred", data_dir, match="exact")
    ref = score_predictions(bench, preds, "pred", data_dir, match="bbq-reference")
    assert exact.counts["invalid"] == 120
    assert ref.counts["fallback"] > 0
    assert ref.counts["fallback"] + ref.counts["invalid"] == 120
    code, out, _ = run_score(capsys, "bbq", "--predictions", preds, "--prediction-field", "pred",
                             "--data-dir", data_dir, "--match", "bbq-reference",
                             "--bootstrap-resamples", 0)
    assert code == 0
    assert f"invalid (unmatched) predictions: {ref.counts['invalid']} of 120" in out


def test_flavour_option_and_split_names(tmp_path, data_dir, capsys):
    rows, _ = with_predictions(real_rows(data_dir, "Gender_identity", step=39))
    preds = write_jsonl(tmp_path / "g.jsonl", rows)
    out_json = tmp_path / "g.json"
    code, out, err = run_score(capsys, "bbq", "--predictions", preds, "--prediction-field", "pred",
                               "--data-dir", data_dir, "--split-names", "--flavour", "kobbq",
                               "--output", out_json, "--bootstrap-resamples", 50)
    assert code == 0, err
    result = json.loads(out_json.read_text())
    assert result["flavour"] == "kobbq"
    assert {"Gender_identity", "Gender_identity (names)"} <= set(result["categories"])
    assert "diff_bias_ambig" in result["categories"]["Gender_identity"]
    assert "out_of_choice_rate" in out
    assert "pooled" in result  # more than one group


def test_excluded_items_are_counted_not_errors(tmp_path, data_dir):
    # Gender_identity-284 has no target_loc in additional_metadata.csv (excluded, as the R script).
    rows = [{"id": "Gender_identity-284", "pred": "A"}, {"id": "Gender_identity-0", "pred": "A"}]
    scored = score_predictions(registry()["bbq"], write_jsonl(tmp_path / "x.jsonl", rows), "pred",
                               data_dir)
    assert scored.counts["excluded_by_data"] == 1
    assert [r.item_id for r in scored.records] == ["Gender_identity-0"]
    assert any("Gender_identity-284" in ids for ids in scored.excluded.values())


def _bad_input_cases(rows):
    age0, age1 = rows[0], rows[1]
    return {
        "unknown id": ([age0, {**age1, "example_id": 999999}], 2,
                       "id 'Age-999999' is not in the bbq data"),
        "duplicate id": ([age0, age1, dict(age0)], 3, "duplicate id 'Age-0' (first at line 1)"),
        "missing field": ([age0, {k: v for k, v in age1.items() if k != "pred"}], 2,
                          "missing prediction field 'pred'"),
        "misspelt field": ([age0, {**{k: v for k, v in age1.items() if k != "pred"}, "perd": "A"}], 2,
                           "missing prediction field 'pred'; the row's fields are 'example_id'"),
        "misspelt field suggestion": ([{**{k: v for k, v in age0.items() if k != "pred"}, "perd": "A"}], 1,
                                      "(did you mean 'perd'?)"),
        "wrong benchmark category": ([{**age0, "category": "DisabilityStatus"}], 1,
                                     "'DisabilityStatus' is not a bbq category"),
        "wrong benchmark id": ([{"id": "SpanishRegion-4", "pred": "A"}], 1,
                               "names no bbq category"),
        "wrong benchmark fields": ([{"category": "Age", "instance_id": 3, "pred": "A"}], 1,
                                   "no item id"),
        "other data version": ([age0, {**age1, "question": "Who was it?"}], 2,
                               "a file of another benchmark or data version"),
        "bad index": ([age0, {**age1, "pred": 5}], 2, "option index 5 is outside"),
        "malformed json": (None, 2, "malformed JSON"),
    }


@pytest.mark.parametrize("case", ["unknown id", "duplicate id", "missing field",
                                  "wrong benchmark category", "wrong benchmark id",
                                  "wrong benchmark fields", "other data version", "bad index",
                                  "malformed json"])
def test_bad_input_stops_with_file_line_reason(tmp_path, data_dir, capsys, case):
    rows, _ = with_predictions(real_rows(data_dir, "Age", 2))
    content, line, reason = _bad_input_cases(rows)[case]
    path = tmp_path / "bad.jsonl"
    if content is None:
        path.write_text(json.dumps(rows[0]) + "\n{not json\n", encoding="utf-8")
    else:
        write_jsonl(path, content)
    with pytest.raises(DataError, match=rf"{path}:{line}: "):
        score_predictions(registry()["bbq"], path, "pred", data_dir)
    code, out, err = run_score(capsys, "bbq", "--predictions", path, "--prediction-field", "pred",
                               "--data-dir", data_dir)
    assert code == 4  # exit_codes.USAGE_ERROR
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}:{line}: " in err and reason in err


@pytest.mark.parametrize("args,needle", [
    (["score", "nosuch", "--predictions", "x", "--prediction-field", "p"], "unknown benchmark"),
    (["score", "bbq", "--prediction-field", "p"], "--predictions"),
    (["score", "bbq", "--predictions", "/nonexistent/p.jsonl", "--prediction-field", "p",
      "--data-dir", "/nonexistent-dir"], "data directory"),
    (["score", "bbq", "--predictions", "x", "--prediction-field", "p", "--match", "fuzzy"],
     "--match"),
    (["frobnicate"], "invalid choice"),
])
def test_usage_errors_one_line_exit_4(capsys, args, needle):
    assert cli.main(args) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_missing_predictions_file(tmp_path, data_dir, capsys):
    code, _, err = run_score(capsys, "bbq", "--predictions", tmp_path / "none.jsonl",
                             "--prediction-field", "p", "--data-dir", data_dir)
    assert code == 4 and "none.jsonl" in err and err.count("\n") == 1


def test_run_is_an_alias_of_pytest_on_the_packaged_audits(monkeypatch):
    from audit_harness.pytest_plugin import AUDITS_DIR

    calls = []
    monkeypatch.setattr(cli.os, "execv", lambda exe, argv: calls.append((exe, argv)))
    assert cli.main(["run", "--model", "tiny", "-x"]) == 0
    exe, argv = calls[0]
    assert argv[1:] == ["-m", "pytest", str(AUDITS_DIR), "--model", "tiny", "-x"]
    # The repository's audits/ is the packaged folder, so `pytest audits` runs the same tests.
    assert (REPO / "audits").resolve() == AUDITS_DIR and (AUDITS_DIR / "test_bbq.py").is_file()


def test_score_esbbq_unknown_phrasing(tmp_path, capsys):
    path = Path(os.environ.get("AUDIT_DATA_DIR") or REPO.parent / "shared" / "data")
    bench = registry().get("esbbq")
    if bench is None or not bench.category_file(path, "Religion").is_file():
        pytest.skip("no EsBBQ loader or data")
    items = bench.load_category(path, "Religion").items[:40]
    rows = [{"category": it.category, "instance_id": it.extra["instance_id"],
             "pred": "No lo sé" if it.context_condition == "ambig" else it.gold} for it in items]
    scored = score_predictions(bench, write_jsonl(tmp_path / "es.jsonl", rows), "pred", path)
    assert scored.counts["invalid"] == 0
    report = score_report(scored, n_resamples=0)
    metrics = report.groups["Religion"]
    assert metrics["acc_ambig"].value == 1.0 and metrics["acc_disambig"].value == 1.0
    assert metrics["bias_score_ambig"].value == 0.0
    assert not math.isnan(metrics["bias_score_ambig_upper_bound"].value)
