"""The ``bias-audit`` console script.

Subcommands:

- ``bias-audit score BENCHMARK --predictions FILE --prediction-field FIELD [--index-base 0|1]
  [--allow-partial] [--data-dir DIR] [--bbq-dataset FILE] [--require-published-data] [--answer-parsing authors|robust]
  [--flavour bbq|kobbq|esbbq] [--split-names] [--output FILE] [--kobbq-prompt K]
  [--kobbq-permutation J] [--bootstrap-resamples N] [--seed S] [--confidence C] [-- PYTEST ARGS]``:
  score saved predictions. It is ``pytest audits/test_<benchmark>.py --backend replay ...`` (the
  process is replaced by that run): the same records, gates, results.json, JUnit XML, reports and
  exit codes as a live audit, with each category's coverage (rows answered of rows held) checked.
- ``bias-audit oracle BENCHMARK --model-kind KIND [--seed N] [--predictions-out FILE] [score
  options] [-- PYTEST ARGS]``: write the predictions of an oracle model built from the data
  (``audit_harness.oracles``: perfect, stereotyped, anti_stereotyped, always_unknown,
  always_first_option, random, tie) for every item, then run what ``score`` runs on them.
- ``bias-audit data fetch|verify ...``: bring the benchmark files from the authors' pinned commits,
  or check a data folder against them (``audit_harness.sources.cli``).
- ``bias-audit run [PYTEST ARGS...]``: ``pytest <the packaged audits> [PYTEST ARGS...]`` from any
  directory (the process is replaced by pytest, so its exit code is the audit's, ``exit_codes``);
  ``run --help`` shows the audit options first, then pytest's.
- ``bias-audit report RUN_DIR [--output-dir DIR] [--pdf]``: render ``report.md`` and
  ``report.html`` again from the run's ``results.json`` (and its ``signer.json``); ``--pdf`` also
  prints ``report.pdf`` with headless Chromium (module ``report.pdf``).
- ``bias-audit compare OLD NEW [--output-dir DIR]``: every metric's change between two runs (folders
  or results.json files) with both intervals, marking those whose intervals do not overlap, and
  the gates whose verdict changed; printed and written as
  ``compare-<old run id>-vs-<new run id>.md``/``.json`` (default: into the folder holding NEW's run
  folder, never into a run folder; an output inside a signed run folder is refused, exit 4).
- ``bias-audit keygen``, ``sign``, ``verify``: an Ed25519 key pair; a run folder signed (signer.json,
  the reports rendered again naming the signer, manifest.json and manifest.sig); its check, which
  exits 1 naming the first file that differs (``compliance.signing``, docs/signing.md).
- ``bias-audit model-card RUN_DIR [--output FILE]``: a Hugging Face model card of the run
  (``report.model_card``); ``bias-audit export mlflow RUN_DIR --tracking-uri URI``: the run logged
  to MLflow (``report.mlflow_export``, the extra ``bias-audit[mlflow]``).

``bias-audit`` alone prints the usage. Bad input ends with one line on stderr and exit code 4
(``exit_codes.USAGE_ERROR``, as an audit's), never a traceback; ``score`` and ``run`` exit with
the audit's own code.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Sequence

from .exit_codes import USAGE_ERROR as EXIT_ERROR
from .option_spec import Option


class _Error(Exception):
    """A usage or input error already phrased for the user."""


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line (no usage block) and exit code 4."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise _Error(f"{self.prog}: {message}")


#: ``_add_argument``: the option must be given.
REQUIRED = object()
_ORACLE_OPTIONS = (
    Option(
        "--model-kind",
        "perfect, stereotyped, anti_stereotyped, always_unknown, always_first_option, "
        "random or tie (sentence pairs); docs/oracles.md",
        default=REQUIRED,
        metavar="KIND",
    ),
    Option(
        "--seed",
        "the random oracle's seed (default 0; the bootstrap's: -- --seed N)",
        default=0,
        type=int,
    ),
    Option(
        "--predictions-out",
        "where to write the oracle's predictions (default: a new temporary folder)",
        type=Path,
        metavar="FILE",
    ),
)
#: ``--kobbq-prompt`` and ``--kobbq-permutation``: one template or order for the rows that do not
#: name theirs, passed on as the run's ``--kobbq-prompts`` / ``--kobbq-permutations``.
_KOBBQ_ONE = (
    (
        Option(
            "--kobbq-prompt",
            "kobbq: the prompt template (1-5) of rows without a prompt_id field",
            type=int,
            metavar="K",
        ),
        "--kobbq-prompts",
    ),
    (
        Option(
            "--kobbq-permutation",
            "kobbq: the option order (0-2) of rows without a permutation field",
            type=int,
            metavar="J",
        ),
        "--kobbq-permutations",
    ),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; ``score`` and ``oracle`` get their run options only when
    ``command`` is theirs (those are read from the benchmarks' declarations, which the other
    subcommands need not import)."""
    parser = _Parser(prog="bias-audit", description="Audit language models for social bias.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("run", help="run the audits: an alias of `pytest audits ARGS...`", add_help=False)
    sub.add_parser("data", help="fetch or verify benchmark data (bias-audit data --help)", add_help=False)
    _add_scoring_parsers(sub, run_options=command in ("score", "oracle"))
    _add_folder_parsers(sub)
    return parser


def _add_scoring_parsers(sub, run_options: bool) -> None:
    """``score`` and ``oracle``, with the run options they pass on (``_run_options``) when
    ``run_options``."""
    score = sub.add_parser(
        "score",
        help="score saved predictions: an audit run with the replay "
        "backend (same records, gates, results and reports)",
    )
    score.add_argument(
        "benchmark", help="benchmark name, e.g. bbq, esbbq, cabbq, kobbq, cbbq, mbbq, kgquiz, crows_pairs"
    )
    oracle = sub.add_parser(
        "oracle",
        help="score an oracle model built from the data (perfect, stereotyped, ...): the "
        "predictions file is written, then scored as `score` scores it",
    )
    oracle.add_argument("benchmark", help="benchmark name, e.g. bbq, kobbq, crows_pairs, kgquiz")
    for opt in _ORACLE_OPTIONS:
        _add_argument(oracle, opt)
    for p, oracle_run in ((score, False), (oracle, True)):
        p.epilog = "After --, further options for the audit run (e.g. -- -k Age --min-n 10)."
        for opt, _ in _run_options(oracle_run) if run_options else ():
            _add_argument(p, opt, passed_on=True)


def _add_argument(p: argparse.ArgumentParser, opt: Option, passed_on: bool = False) -> None:
    """``opt`` on ``p`` as its declaration says; required when its default is ``REQUIRED``. An
    option ``passed_on`` to the audit run is None unset (False for a switch), so that only those
    given are passed: the run's own default stands for the rest."""
    kwargs = opt.parser_kwargs()
    if opt.default is REQUIRED:
        kwargs["required"] = True
    elif not opt.switch:
        kwargs["default"] = None if passed_on else opt.default
    p.add_argument(opt.flag, **kwargs)


def _run_options(oracle: bool) -> tuple[tuple[Option, str], ...]:
    """The options ``score`` (or ``oracle``) passes on to its audit run: ``(declaration as the
    subcommand parses it, the run's flag)``. Each is the run's own declaration (the suite's, the
    replay backend's, a benchmark's), under the subcommand's spelling where it differs
    (``--flavour`` for ``--metric-flavour``...). ``oracle``'s ``--seed`` is its own (the bootstrap
    seed goes after ``--``), and it writes its own predictions."""
    from .backends import backend_rows
    from .benchmarks.base import ANSWER_PARSING, METRIC_FLAVOUR
    from .benchmarks.bbq import SPLIT_NAMES
    from .benchmarks.bbq_family import BBQ_ANSWER_MODE
    from .options import SUITE

    def spelled(opt: Option, flag: str) -> tuple[Option, str]:
        return dataclasses.replace(opt, flag=flag), opt.flag

    # score is the replay backend: its options' help needs no "with --backend replay".
    replay = {
        o.flag: dataclasses.replace(o, help=o.help.removeprefix("with --backend replay: "))
        for o in backend_rows()
    }
    saved = [
        dataclasses.replace(replay[f], default=REQUIRED) for f in ("--predictions", "--prediction-field")
    ]
    own = () if oracle else tuple((opt, opt.flag) for opt in (*saved, replay["--index-base"]))
    same = [
        replay["--allow-partial"],
        SUITE["--allow-low-confidence"],
        SUITE["--data-dir"],
        SUITE["--bbq-dataset"],
        SUITE["--require-published-data"],
        ANSWER_PARSING,
        BBQ_ANSWER_MODE,
    ]
    later = [SUITE["--bootstrap-resamples"]] + ([] if oracle else [SUITE["--seed"]])
    later += [SUITE["--confidence"], SUITE["--thresholds"], SUITE["--results-dir"]]
    return (
        *own,
        *((opt, opt.flag) for opt in same),
        *_KOBBQ_ONE,
        spelled(METRIC_FLAVOUR, "--flavour"),
        spelled(SPLIT_NAMES, "--split-names"),
        spelled(SUITE["--results-json"], "--output"),
        *((opt, opt.flag) for opt in later),
    )


def _run_folder(help: str = "a run folder (or its results.json)", name: str = "run_dir") -> Option:
    return Option(name, help, type=Path, metavar=name.upper())


def _output_dir(help: str) -> Option:
    return Option("--output-dir", help, type=Path, metavar="DIR")


def _key_file(flag: str, help: str, metavar: str = "PATH", required: bool = False) -> Option:
    return Option(flag, help, default=REQUIRED if required else None, type=Path, metavar=metavar)


_PASSPHRASE = Option(
    "--passphrase-env",
    "encrypt (keygen) or unlock (sign) the private key with the passphrase held in environment variable NAME",
    metavar="NAME",
)
#: The subcommands that read a run folder again or file something beside it (docs/signing.md):
#: ``(name, help, arguments)``, in ``--help``'s order.
_FOLDER_COMMANDS = (
    (
        "report",
        "render report.md and report.html again from a run's results.json",
        (
            _run_folder(),
            _output_dir("where to write the reports (default: the run folder)"),
            Option(
                "--pdf",
                "also print report.html to report.pdf with headless Chromium (docs/compliance.md)",
                switch=True,
            ),
        ),
    ),
    (
        "compare",
        "compare two runs: metric changes with intervals, gates that changed verdict",
        (
            _run_folder("the earlier run (folder or results.json)", "old"),
            _run_folder("the later run (folder or results.json)", "new"),
            _output_dir(
                "where to write compare-<old run id>-vs-<new run id>.md/.json (default: the folder "
                "holding NEW's run folder; a signed run folder is refused)"
            ),
        ),
    ),
    (
        "keygen",
        "make an Ed25519 key pair to sign runs with; prints its fingerprint",
        (
            _key_file(
                "--out",
                "write DIR/bias-audit-signing-key.pem and DIR/bias-audit-signing-key.pub.pem",
                "DIR",
            ),
            _key_file("--private-key", "the private key's file"),
            _key_file("--public-key", "the public key's file"),
            _PASSPHRASE,
        ),
    ),
    (
        "sign",
        "sign a run folder: signer.json, the reports rendered again naming the signer, "
        "manifest.json (every file's sha256) and manifest.sig",
        (
            _run_folder("the run folder"),
            _key_file("--key", "the private key (PEM)", "KEY", required=True),
            Option("--signer", "the responsible person's name", default=REQUIRED, metavar="NAME"),
            _PASSPHRASE,
        ),
    ),
    (
        "verify",
        "check a signed run folder: the signature, every file's hash, no file added or removed",
        (
            _run_folder("the run folder"),
            _key_file("--public-key", "the signer's public key (PEM)", "PUB", required=True),
        ),
    ),
    (
        "model-card",
        "write a Hugging Face model card (README.md) from a run's results",
        (
            _run_folder(),
            _key_file("--output", "where to write it (default: RUN_DIR/README.md)", "FILE"),
        ),
    ),
)
#: ``export mlflow``'s arguments.
_MLFLOW = (
    _run_folder(),
    Option(
        "--tracking-uri",
        "MLflow tracking URI (file:DIR, http://HOST:PORT, ...)",
        default=REQUIRED,
        metavar="URI",
    ),
    Option("--experiment", "experiment (default bias-audit)", default="bias-audit", metavar="NAME"),
)


def _add_folder_parsers(sub) -> None:
    """``_FOLDER_COMMANDS``, then ``export mlflow``: what a reviewer reads or files beside a run."""
    for name, help, arguments in _FOLDER_COMMANDS:
        p = sub.add_parser(name, help=help)
        for opt in arguments:
            _add_argument(p, opt)
    export = sub.add_parser(
        "export", help="log a run to an experiment tracker (bias-audit export mlflow --help)"
    )
    targets = export.add_subparsers(
        dest="target", metavar="TARGET (mlflow)", required=True, parser_class=_Parser
    )
    mlflow = targets.add_parser(
        "mlflow", help="log metrics, intervals, gate verdicts, params and the run's files to MLflow"
    )
    for opt in _MLFLOW:
        _add_argument(mlflow, opt)


def _audits_dir() -> str:
    from .run.startup import AUDITS_DIR

    return str(AUDITS_DIR)


def _run_pytest(args: Sequence[str]) -> None:
    """Replace this process by ``python -m pytest <packaged audits> ARGS``."""
    _run_pytest_args([_audits_dir(), *args])


def _run_pytest_args(args: Sequence[str]) -> None:
    """Replace this process by ``python -m pytest ARGS`` (its exit code is the audit's)."""
    argv = [sys.executable, "-m", "pytest", *args]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def all_flags(benchmarks) -> set[str]:
    """Every flag of an audit run (the suite's, the backends', the benchmarks'), as the plugin
    registers them; e.g. for checking the CI examples' command lines."""
    from .backends import add_options
    from .options import add_benchmark_options, add_suite_options

    class Collect:
        def __init__(self):
            self.flags: set[str] = set()

        def addoption(self, *names, **_):
            self.flags.update(names)

    c = Collect()
    add_suite_options(c)
    add_options(c)
    add_benchmark_options(c, benchmarks)
    return c.flags


def run_help(pytest_help: str) -> str:
    """``bias-audit run --help``: the audit options (pytest's "model bias audit" group) first,
    then the rest of pytest's help, from the text of ``pytest --help``."""
    lines = pytest_help.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("model bias audit")), None)
    head = [
        "usage: bias-audit run [audit options] [pytest options] [-k EXPRESSION]",
        "",
        "Runs the audits (one pytest test per gate of the thresholds file) from any directory;",
        "exit codes: 0 every gate passed, 1 a gate failed, undefined, INSUFFICIENT or INCONCLUSIVE, 2 interrupted,",
        "3 a model or data error during the run, 4 usage or input error, 5 no audit selected.",
        "",
    ]
    if start is None:
        return "\n".join(head + lines)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines)
    )
    while end > start and not lines[end - 1].strip():
        end -= 1
    section = lines[start:end]
    rest = lines[:start] + lines[end:]
    return "\n".join(head + ["audit options:"] + section[1:] + ["", "pytest options:", *rest])


def _print_run_help() -> int:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", _audits_dir(), "--help"], capture_output=True, text=True
    )
    print(run_help(proc.stdout))
    if proc.returncode != 0:  # e.g. a bad thresholds.yaml: say why the options are missing
        print(proc.stderr.strip() or proc.stdout.strip()[-2000:], file=sys.stderr)
    return 0 if proc.returncode == 0 else proc.returncode


def score_args(ns: argparse.Namespace) -> list[str]:
    """The ``pytest`` arguments ``bias-audit score`` runs: the benchmark's audit module with the
    replay backend and the options given (``bias-audit score`` is an alias of that run).

    Raises:
        _Error: an unknown benchmark, one without saved outputs, or a KoBBQ flag elsewhere.
    """
    from .benchmarks import registry

    benchmarks = registry(declarations(ns))
    name = ns.benchmark
    if name not in benchmarks:
        raise _Error(
            f"bias-audit score: unknown benchmark {name!r}; known: {', '.join(sorted(benchmarks))} "
            "(a BBQ-format dataset of your own: --bbq-dataset FILE)"
        )
    if not benchmarks[name].id_fields:
        raise _Error(
            f"bias-audit score: {name} does not score saved outputs (its records come "
            "from model scores: there is no answer to save)"
        )
    for opt, _ in _KOBBQ_ONE:
        if _given(ns, opt) is not None and name != "kobbq":
            raise _Error(f"bias-audit score: {opt.flag} applies to kobbq only")
    _answer_mode(ns, benchmarks[name], "score")
    args = [_audit_test(name, benchmarks), "--backend", "replay"]
    for opt, run_flag in _run_options(oracle=False):
        value = _given(ns, opt)
        if value is True and opt.switch:
            args.append(run_flag)
        elif value is not None and opt.repeat:
            args += [a for v in value for a in (run_flag, str(v))]
        elif value is not None and not opt.switch:
            args += [run_flag, str(value)]
    return args + list(ns.pytest_args)


def declarations(ns: argparse.Namespace) -> list[str]:
    """The declared datasets of ``score``/``oracle``: ``AUDIT_BBQ_DATASETS``'s, then each
    ``--bbq-dataset`` (the run they pass on to reads the same)."""
    from .options import SUITE, default_of

    return [*(default_of(SUITE["--bbq-dataset"]) or ()), *(getattr(ns, "bbq_dataset", None) or ())]


def _audit_test(name: str, benchmarks) -> str:
    """The audit test of benchmark ``name``: its module, or a declared dataset's test."""
    from .benchmarks.declared import declared_names

    if name in declared_names(benchmarks):
        return f"{Path(_audits_dir()) / 'test_declared.py'}::TestDeclared::test_{name}"
    return str(Path(_audits_dir()) / f"test_{name}.py")


def _answer_mode(ns: argparse.Namespace, bench, command: str) -> str | None:
    """``--bbq-answer-mode`` as given (None: not given): ``letter`` reads saved letter reads,
    any other value saved text. A benchmark without that flag refuses it rather than ignore it.

    Raises:
        _Error: the flag given for a benchmark outside the BBQ family.
    """
    from .benchmarks.bbq_family import BBQ_ANSWER_MODE

    mode = _given(ns, BBQ_ANSWER_MODE)
    if mode is not None and BBQ_ANSWER_MODE not in bench.settings:
        raise _Error(f"bias-audit {command}: --bbq-answer-mode does not apply to {bench.name}")
    return mode


def _given(ns: argparse.Namespace, opt: Option):
    """The value of ``opt`` in ``ns`` (argparse's attribute of its flag)."""
    return getattr(ns, opt.flag.lstrip("-").replace("-", "_"))


def _score(ns: argparse.Namespace) -> int:
    _run_pytest_args(score_args(ns))
    return 0  # only reached when execv is replaced (tests)


def oracle_args(ns: argparse.Namespace, folder: Path | None = None) -> list[str]:
    """``bias-audit oracle``: write the oracle's predictions for every item of the benchmark's
    data (``audit_harness.oracles``), print where, and return the ``pytest`` arguments that
    ``bias-audit score`` would run on that file.

    ``folder``: where to write the predictions without ``--predictions-out`` (default a new
    temporary folder).

    Raises:
        _Error: an unknown benchmark, or one that takes no saved outputs.
        AuditError: an unknown kind, a kind that applies to no item, or bad data (exit 4).
    """
    import tempfile

    from .benchmarks import registry
    from .data import resolve_data_dir
    from .oracles import PREDICTION_FIELD, describe, write_oracle

    benchmarks = registry(declarations(ns))
    if ns.benchmark not in benchmarks:
        raise _Error(
            f"bias-audit oracle: unknown benchmark {ns.benchmark!r}; known: {', '.join(sorted(benchmarks))} "
            "(a BBQ-format dataset of your own: --bbq-dataset FILE)"
        )
    bench = benchmarks[ns.benchmark]
    mode = _answer_mode(ns, bench, "oracle")
    bench = (bench.configure(answer_mode=mode) if mode else bench).for_saved_outputs()
    if ns.benchmark == "kobbq" and (ns.kobbq_prompt is not None or ns.kobbq_permutation is not None):
        narrowed = {"prompts": ns.kobbq_prompt, "permutations": ns.kobbq_permutation}
        bench = bench.configure(**{k: str(v) for k, v in narrowed.items() if v is not None})
    path = ns.predictions_out or (
        (folder or Path(tempfile.mkdtemp(prefix="bias-audit-oracle-")))
        / f"{ns.benchmark}-{ns.model_kind}-seed{ns.seed}.jsonl"
    )
    written = write_oracle(bench, resolve_data_dir(ns.data_dir), ns.model_kind, Path(path), ns.seed)
    for line in describe(written):
        print(line)
    # The rows carry full ids (KoBBQ: template and order), so no --kobbq-prompt is needed to
    # join them; the oracle's --seed is its own, not the bootstrap's.
    scored = argparse.Namespace(**vars(ns))
    scored.predictions, scored.prediction_field, scored.index_base = written.path, PREDICTION_FIELD, None
    scored.seed = None
    return score_args(scored)


def _oracle(ns: argparse.Namespace) -> int:
    if ns.predictions_out:  # the user keeps the file: the run replaces this process
        _run_pytest_args(oracle_args(ns))
        return 0  # only reached when execv is replaced (tests)
    # The predictions go to a temporary folder (a few MB), removed once the run has read them:
    # the run is a child here, not an execv, so that something is left to remove it.
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="bias-audit-oracle-"))
    try:
        return _pytest_child(oracle_args(ns, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _pytest_child(args: Sequence[str]) -> int:
    """Run ``python -m pytest ARGS`` as a child and return its exit code (the audit's)."""
    import subprocess

    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen([sys.executable, "-m", "pytest", *args])
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue  # Ctrl-C reached the child too: it ends its run and gives its exit code


def render_reports(ns: argparse.Namespace, being_signed: bool = False) -> int:
    """``bias-audit report``: report.md and report.html (and report.pdf with ``--pdf``) rendered
    from the run's results.json into ``--output-dir`` (default: the run folder); ``being_signed``
    when ``sign`` renders them again naming the signer."""
    from .report.html import write_html
    from .report.markdown import write_markdown
    from .report.results import ResultsDocument

    results = ResultsDocument.read(ns.run_dir)
    results.being_signed = being_signed
    out = ns.output_dir or results.folder
    out.mkdir(parents=True, exist_ok=True)
    print(f"wrote {write_markdown(out / 'report.md', results)}")
    print(f"wrote {write_html(out / 'report.html', results)}")
    if ns.pdf:
        from .report.html import render_html
        from .report.pdf import print_pdf

        print(f"wrote {print_pdf(render_html(results, printing=True), out / 'report.pdf')}")
    return 0


def _compare(ns: argparse.Namespace) -> int:
    from .report.compare import compare_results, output_folder, render_comparison, write_comparison
    from .report.results import ResultsDocument

    old = ResultsDocument.read(ns.old)
    new = ResultsDocument.read(ns.new)
    folder = output_folder(new.folder, ns.output_dir)  # refused before anything is printed
    comparison = compare_results(old, new)
    print(render_comparison(comparison))
    for path in write_comparison(comparison, folder):
        print(f"wrote {path}")
    return 0


def _passphrase(env_name: str | None) -> bytes | None:
    """The passphrase held in environment variable ``env_name`` (never on the command line,
    where other users and the shell history would see it)."""
    if env_name is None:
        return None
    value = os.environ.get(env_name)
    if not value:
        raise _Error(f"bias-audit: --passphrase-env {env_name}: the environment variable is unset or empty")
    return value.encode("utf-8")


def _keygen(ns: argparse.Namespace) -> int:
    from .compliance.signing import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, generate_key_pair

    if ns.out is not None:
        if ns.private_key or ns.public_key:
            raise _Error("bias-audit keygen: give --out DIR or --private-key and --public-key, not both")
        if ns.out.exists() and not ns.out.is_dir():
            raise _Error(f"bias-audit keygen: --out {ns.out}: not a folder")
        ns.out.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new key folder: the owner's only
        private, public = ns.out / PRIVATE_KEY_NAME, ns.out / PUBLIC_KEY_NAME
    elif ns.private_key and ns.public_key:
        private, public = ns.private_key, ns.public_key
    else:
        raise _Error("bias-audit keygen: give --out DIR, or both --private-key PATH and --public-key PATH")
    fp = generate_key_pair(private, public, _passphrase(ns.passphrase_env))
    print(f"wrote {private} (private key, mode 0600: keep it secret)")
    print(f"wrote {public} (public key: give it to whoever verifies)")
    print(f"fingerprint: {fp}")
    return 0


def _rerender_reports(run_dir: Path) -> None:
    """Render the run's reports again through ``bias-audit report`` itself (``render_reports``, given
    the options its own parser makes), so a signed run's reports name their signer; a run folder
    holding report.pdf has it printed again too (``report --pdf``)."""
    args = ["report", str(run_dir)] + (["--pdf"] if (run_dir / "report.pdf").exists() else [])
    render_reports(build_parser().parse_args(args), being_signed=True)


def _sign(ns: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from .compliance.signer import Signer
    from .compliance.signing import fingerprint, load_private_key, sign_run
    from .report.results import ResultsDocument

    results = ResultsDocument.read(ns.run_dir)  # a run folder, or stop before writing anything
    run_dir = results.folder
    key = load_private_key(ns.key, _passphrase(ns.passphrase_env))
    if not ns.signer.strip():
        raise _Error("bias-audit sign: --signer: give the responsible person's name")
    date = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    signer = Signer(name=ns.signer.strip(), date=date, key_fingerprint=fingerprint(key.public_key()))
    print(f"wrote {signer.write(run_dir)}")
    _rerender_reports(run_dir)
    manifest, signature = sign_run(run_dir, key, signer)
    print(f"wrote {manifest}")
    print(f"wrote {signature}")
    print(f"signed by {signer.name} on {signer.date}, key {signer.key_fingerprint}")
    return 0


#: ``bias-audit verify``'s exit code when the run does not verify: 1, as ``bias-audit data verify``
#: when a file failed (4 stays bad input: no run folder, no key file).
VERIFY_FAILED = 1


def _verify(ns: argparse.Namespace) -> int:
    from .compliance.signing import VerificationError, load_public_key, verify_run

    key = load_public_key(ns.public_key)
    try:
        verified = verify_run(ns.run_dir, key)
    except VerificationError as e:
        print(f"bias-audit verify: {ns.run_dir}: FAILED: {e}", file=sys.stderr)
        return VERIFY_FAILED
    s = verified.signer
    print(
        f"verified: {ns.run_dir}: {verified.files} files as signed by {s.name} on {s.date}, "
        f"key {s.key_fingerprint} (bias-audit {verified.suite_version})"
    )
    return 0


def _model_card(ns: argparse.Namespace) -> int:
    from .report.model_card import write_model_card
    from .report.results import ResultsDocument

    results = ResultsDocument.read(ns.run_dir)
    print(f"wrote {write_model_card(ns.output or results.folder / 'README.md', results)}")
    return 0


def _export(ns: argparse.Namespace) -> int:
    from .redact import redact_text
    from .report.mlflow_export import MlflowMissing, export_run
    from .report.results import ResultsDocument

    results = ResultsDocument.read(ns.run_dir)
    try:
        run_id = export_run(results, results.folder, ns.tracking_uri, ns.experiment)
    except MlflowMissing as e:
        raise _Error(str(e)) from None
    print(
        f"logged run {results.run_id} to MLflow at {redact_text(ns.tracking_uri)}: experiment "
        f"{ns.experiment!r}, run {run_id}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bias-audit``. ``argv`` defaults to ``sys.argv[1:]``.

    Returns:
        0 on success; 4 after printing one line on stderr for a usage error or bad input (missing
        or malformed data, a bad predictions or results file, ...). ``run`` does not return: it
        execs pytest.
    """
    from .errors import AuditError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args:
            print(build_parser().format_help(), file=sys.stderr)
            return EXIT_ERROR
        if args[0] == "run" and any(a in ("-h", "--help") for a in args[1:]):
            return _print_run_help()
        if args and args[0] == "run":
            _run_pytest(args[1:])
            return 0  # only reached when execv is replaced (tests)
        if args and args[0] == "data":
            from .sources.cli import main as data_main

            return data_main(args[1:])
        extra: list[str] = []
        if args[0] in ("score", "oracle") and "--" in args:  # the rest goes to the audit run as it is
            cut = args.index("--")
            args, extra = args[:cut], args[cut + 1 :]
        ns = build_parser(args[0]).parse_args(args)
        ns.pytest_args = extra
        commands = {
            "report": render_reports,
            "compare": _compare,
            "keygen": _keygen,
            "sign": _sign,
            "verify": _verify,
            "model-card": _model_card,
            "export": _export,
            "oracle": _oracle,
        }
        return commands.get(ns.command, _score)(ns)
    except SystemExit as e:  # --help
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except (_Error, AuditError) as e:
        msg = str(e)
    except OSError as e:
        msg = f"bias-audit: {e.strerror or e}" + (f": {e.filename}" if e.filename else "")
    except Exception as e:  # never a traceback for the user; name the type so bugs stay visible
        msg = f"bias-audit: internal error ({type(e).__name__}): {e}"
    line = " ".join(msg.split())
    print(line if line.startswith("bias-audit") else f"bias-audit: error: {line}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
