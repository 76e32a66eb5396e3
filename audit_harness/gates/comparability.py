"""Whether two runs' numbers are like for like (``comparability_notes``): the settings, protocols,
items and data files that must agree before a change between them means anything. A regression
gate's verdict carries its notes (``gates.judge``); ``bias-audit compare`` and the report list
them (``report.compare``)."""

from __future__ import annotations

from typing import Any, Mapping

#: Options whose difference makes two runs' numbers not directly comparable, with their names.
_COMPARABLE_OPTIONS = (
    ("seed", "seed"),
    ("confidence", "confidence (--confidence)"),
    ("n_resamples", "bootstrap resamples (--bootstrap-resamples)"),
)
#: How each recorded answer mode reads the model (docs/running.md, "Three ways to read a
#: model"): runs that read a benchmark differently measure different things.
READS = {
    "loglikelihood": "option log-likelihood",
    "generate": "generated text",
    "letter": "letter log-probs",
    "both": "generated text and letter log-probs",
}


def judged_items(results: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """Per (benchmark, category) of the document, the items its verdicts stand for: the items
    scored, or for a sequential category every item it selected (its population), wherever it
    stopped; the category entry or its gates' sequential reports say how many (a pair
    benchmark's entries carry none).

    Examples
    --------
    >>> judged_items({"benchmarks": {"bbq": {"Age": {"n_scored": 60}}},
    ...               "gates": [{"benchmark": "bbq", "category": "Age",
    ...                          "sequential": {"population": 400}}]})
    {('bbq', 'Age'): 400}
    """
    population: dict[tuple[str, str], int] = {}
    for g in results.get("gates") or []:
        n = (g.get("sequential") or {}).get("population")
        if n is not None:
            key = (g.get("benchmark"), g.get("category"))
            population[key] = max(population.get(key, 0), int(n))
    out = {}
    for bench, cats in (results.get("benchmarks") or {}).items():
        for cat, e in cats.items():
            if "n_scored" not in e:
                continue
            seq = (e.get("sequential") or {}).get("population")
            out[(bench, cat)] = seq or population.get((bench, cat)) or e["n_scored"]
    return out


def _model(r: Mapping[str, Any]) -> Mapping[str, Any]:
    return r.get("model") or {}


def _differs(notes: list[str], what: str, a: Any, b: Any) -> None:
    if a != b:
        notes.append(f"{what} differs: {a!r} (old) vs {b!r} (new)")


def comparability_notes(
    old: Mapping[str, Any], new: Mapping[str, Any], scope: tuple[str, str] | None = None
) -> list[str]:
    """Why two runs' numbers are not like for like, one sentence per difference; empty when they
    are comparable. The models may differ (that is the point: ``model_notes`` says how).

    Compared: seed and interval settings; the model's dtype and device type; the engine
    version; the thresholds file (sha256); per benchmark both ran, its options and every key of
    its protocol (prompt template, answer mode, answer parsing, chat template, ...); per category
    both scored, the number of items actually scored (so ``--limit 100000`` on an 864-row
    category equals a run without ``--limit``); every data file both read (sha256). A value one
    run records and the other does not is a difference too: it cannot be shown to agree.

    Parameters
    ----------
    old, new : mapping
        Results documents (``new`` may be partial: a gate's own category while the run goes on).
    scope : (benchmark, category), optional
        Compare only what concerns this category (a regression gate's own notes).
    """
    notes = _setting_notes(old, new)
    o_bench, n_bench = old.get("benchmarks") or {}, new.get("benchmarks") or {}
    benches = sorted(set(o_bench) & set(n_bench))
    if scope is not None:
        benches = [b for b in benches if b == scope[0]]
    o_judged, n_judged = judged_items(old), judged_items(new)
    for bench in benches:
        notes += _read_notes(old, new, bench)
        notes += _protocol_notes(old, new, bench)
        cats = sorted(set(o_bench[bench]) & set(n_bench[bench]))
        if scope is not None:
            cats = [c for c in cats if c == scope[1]]
        for cat in cats:
            # A sequential category stands for every item it selected, wherever it stopped.
            a, b = o_judged.get((bench, cat)), n_judged.get((bench, cat))
            if a != b:
                notes.append(f"{bench}/{cat}: {a} item(s) scored (old) vs {b} (new)")
    files_old, files_new = old.get("data_files") or {}, new.get("data_files") or {}
    for path in sorted(set(files_old) & set(files_new)):
        if files_old[path].get("sha256") != files_new[path].get("sha256"):
            notes.append(f"data file {path} differs between the runs (sha256)")
    return notes


def _setting_notes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The run-wide differences: seed and interval settings, dtype, device type, engine version
    and the thresholds file."""
    notes: list[str] = []
    o_opts, n_opts = old.get("options") or {}, new.get("options") or {}
    for key, label in _COMPARABLE_OPTIONS:
        _differs(notes, label, o_opts.get(key), n_opts.get(key))
    for key, label in (("dtype", "model dtype"), ("device", "device type")):
        a, b = _model(old).get(key), _model(new).get(key)
        if key == "device":
            a, b = (None if x is None else str(x).split(":")[0] for x in (a, b))
        if _model(old) and _model(new):
            _differs(notes, label, a, b)
    _differs(
        notes,
        "engine version",
        (old.get("run") or {}).get("engine_version"),
        (new.get("run") or {}).get("engine_version"),
    )
    sha = [(r.get("run") or {}).get("thresholds_sha256") for r in (old, new)]
    if sha[0] != sha[1]:
        origin = [(r.get("run") or {}).get("thresholds_origin") or "?" for r in (old, new)]
        notes.append(
            "the thresholds files differ (sha256), so gates may have changed with them "
            f"(old: {origin[0]}, new: {origin[1]})"
        )
    return notes


def read_of(results: Mapping[str, Any], bench: str) -> str | None:
    """How a run read ``bench``'s model: its protocol's answer mode as ``READS`` names it.

    Examples
    --------
    >>> read_of({"protocols": {"bbq": {"answer_mode": "letter"}}}, "bbq")
    'letter log-probs'
    """
    mode = ((results.get("protocols") or {}).get(bench) or {}).get("answer_mode")
    return None if mode is None else READS.get(mode, str(mode))


def _read_notes(old: Mapping[str, Any], new: Mapping[str, Any], bench: str) -> list[str]:
    """A benchmark read another way (option log-likelihood, letter log-probs, generated text):
    not like for like, whatever the numbers."""
    a, b = read_of(old, bench), read_of(new, bench)
    if a == b:
        return []
    return [f"{bench}: the model was read by {a} (old) vs {b} (new): another answer mode, not like for like"]


def _protocol_notes(old: Mapping[str, Any], new: Mapping[str, Any], bench: str) -> list[str]:
    """A benchmark both runs ran: its options and every key of its protocol that differ."""
    notes: list[str] = []
    o_bopts = (old.get("options") or {}).get("benchmark_options") or {}
    n_bopts = (new.get("options") or {}).get("benchmark_options") or {}
    _differs(notes, f"{bench} options", o_bopts.get(bench) or {}, n_bopts.get(bench) or {})
    a = (old.get("protocols") or {}).get(bench) or {}
    b = (new.get("protocols") or {}).get(bench) or {}
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            notes.append(
                f"{bench} protocol {key} differs: {_short(a.get(key))} (old) vs {_short(b.get(key))} (new)"
            )
    return notes


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    # Keep a string's closing quote so the eye sees where it was cut.
    if len(text) <= width:
        return text
    return text[: width - 2] + "…" + text[-1] if isinstance(value, str) else text[: width - 1] + "…"


def model_notes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """How the two runs' models differ (name, weights fingerprint): what a comparison compares,
    so it is stated, not counted as a set-up difference. Empty when both are the same model."""
    a, b = _model(old), _model(new)
    if a.get("fingerprint") == b.get("fingerprint") and a.get("name") == b.get("name"):
        return []
    return [
        f"model: {a.get('name')!r} (weights {str(a.get('fingerprint'))[:23]}…, old) vs "
        f"{b.get('name')!r} (weights {str(b.get('fingerprint'))[:23]}…, new)"
    ]
