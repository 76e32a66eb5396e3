"""What an audit checks before anything is scored: the selected gates, their data files, the
model name, the backend's capabilities, saved predictions, the result cache, the run folder and a strict
baseline. Every failure is an ``AuditError`` naming what to fix (exit 4, no run folder)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import AuditError, ConfigError, DataError, MissingDataError
from ..option_values import AuditOptions

#: The audit modules ship inside the package (the repository's ``audits/`` links here), so
#: ``bias-audit run`` works from any directory.
AUDITS_DIR = Path(__file__).resolve().parents[1] / "audits"


def expand_gates(gates: Mapping[str, list], benchmarks) -> dict[str, list]:
    """Each thresholds.yaml gate once per metric it checks in this run's configuration
    (``Benchmark.gate_metrics``: KoBBQ ``both`` adds ``<metric>-letter`` gates), in file order."""
    return {
        name: [dataclasses.replace(g, metric=m) for g in gs for m in benchmarks[name].gate_metrics(g.metric)]
        for name, gs in gates.items()
    }


def gates_for_data(session, benchmark: str, gates: list) -> list:
    """The gates whose category the data directory holds (WinoQueer: the subgroups of the file
    found, ``Benchmark.categories_in``); all of them when no data dir can be resolved (the
    start-up check reports that)."""
    bench = session.benchmarks[benchmark]
    try:
        # A pooled gate stays while its pooled category has a category to pool.
        present = set(bench.categories_in(session.data_dir)) | set(bench.pooled_members(session.data_dir))
    except AuditError:
        return gates
    return [g for g in gates if g.category in present]


def read_pairs(session, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``pairs`` with each pooled category replaced by the categories it pools: the (benchmark,
    category) pairs whose data the run reads and scores."""
    out: list[tuple[str, str]] = []
    for bench, category in pairs:
        if category in session.benchmarks[bench].pooled_names:
            members = session.benchmarks[bench].pooled_members(session.data_dir).get(category, ())
            out.extend((bench, m) for m in members if (bench, m) not in out)
        elif (bench, category) not in out:
            out.append((bench, category))
    return out


def baseline_summary(results: Mapping[str, Any], path: str, file: Path) -> dict[str, Any]:
    """What the results file records about the ``--baseline`` run: where it was read, its sha256
    (so a reviewer can tell the baseline was not edited after the fact), run id, model."""
    from ..data import sha256_file

    return {
        "path": str(path),
        "sha256": sha256_file(file),
        "run_id": results.get("run_id"),
        "model": (results.get("model") or {}).get("name"),
        "fingerprint": (results.get("model") or {}).get("fingerprint"),
        "created": results.get("created"),
    }


def targets_audits(config) -> bool:
    """Whether the command line names the audits folder (or a file in it)."""
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = (Path(config.invocation_params.dir) / path).resolve()
        if path == AUDITS_DIR or AUDITS_DIR in path.parents:
            return True
    return False


def selected_gates(config, gates: Mapping[str, list]) -> dict[str, list[str]]:
    """``{benchmark: [gate ids]}`` the command line selects (``selection.selected_gate_ids``)."""
    from ..selection import selected_gate_ids

    return selected_gate_ids(
        AUDITS_DIR,
        config.args,
        Path(config.invocation_params.dir),
        config.option.keyword,
        {b: [g.test_id for g in gs] for b, gs in gates.items()},
    )


def selected_pairs(session, selected: Mapping[str, list[str]], gates) -> list[tuple[str, str]]:
    """(benchmark, category) of the selected gate ids, in order: the categories the run reads."""
    pairs: list[tuple[str, str]] = []
    for bench, ids in selected.items():
        by_id = {g.test_id: g.category for g in gates.get(bench, ())}
        for gate_id in ids:
            category = by_id.get(gate_id)
            if category is not None and (bench, category) not in pairs:
                pairs.append((bench, category))
    return pairs


def present_pairs(session, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Those of ``pairs`` whose category the data dir holds (the gates that will be created)."""
    out = []
    for bench, category in pairs:
        if category in set(session.benchmarks[bench].categories_in(session.data_dir)):
            out.append((bench, category))
    return out


def validate_data(session, pairs: Sequence[tuple[str, str]]) -> None:
    """Read and validate every (benchmark, category) a run selected, before any model loads
    (parsing only), so a malformed row stops the run at start-up. With
    ``require_published_data``, every file read must be the published release
    (``sources.status_of``).

    Raises:
        DataError: the first malformed row (file:line: field), or the files that are not the
            published release, each with its status. A ``MissingDataError`` (a file absent
            upstream, KGQuiz) is not raised here: those gates are skipped and reported.
    """
    from ..sources import status_of

    loaded = []
    for bench, cat in pairs:
        try:
            session.load_data(bench, cat)
        except MissingDataError:
            continue  # an absent file skips its gates (reported), it is not malformed data
        loaded.append((bench, cat))
    pairs = loaded
    if not session.options.require_published_data:
        return
    bad: dict[str, str] = {}
    for bench, cat in pairs:
        for f in session.load_data(bench, cat).files:
            status = status_of(f.path, f.sha256)
            if status != "published":
                bad[f.path] = status if status != "unknown" else "not in the pinned source table"
    if bad:
        listed = "; ".join(f"{p}: {s}" for p, s in sorted(bad.items()))
        raise DataError(
            f"--require-published-data: {len(bad)} data file(s) in {session.data_dir} "
            f"are not the published release: {listed} (restore them with "
            "`bias-audit data fetch`, or drop the flag)"
        )


def expect_progress(session, pairs: Sequence[tuple[str, str]]) -> None:
    """Tell the run's progress (``engine.progress.Progress.expect``) which categories it will
    score and how many items each (the backend's item source: the ``--limit`` selection, or
    the items saved predictions answer). Categories whose data is absent (skipped) are left
    out. Called by the controller after the start-up checks have read the data."""
    totals: dict[str, float] = {}
    for bench, cat in pairs:
        try:
            data = session.load_data(bench, cat)
        except MissingDataError:
            continue
        source = session.backend_spec.item_source(bench)
        totals[f"{bench}/{cat}"] = source.count(session.benchmarks[bench], bench, cat, data)
    session.progress.expect(totals)


def check_inputs(session, pairs: list[tuple[str, str]], fetch: bool = False) -> None:
    """Raise AuditError when the data directory lacks a file a selected category needs
    (``Benchmark.data_files``; fetching them first with ``--fetch-data``), ``--device`` names
    a GPU this machine lacks, or the model name is unusable."""
    from ..models.zoo import check_model_name
    from ..sources.check import require_files

    needed = {}
    for bench, category in pairs:
        for path in session.benchmarks[bench].data_files(category):
            needed.setdefault(path, bench)
    require_files(session.data_dir, needed, fetch=fetch)
    if session.backend_spec.in_process:  # a server's model name is whatever it serves
        import torch

        from ..devices import check_device

        check_device(session.options.backend.device, torch.cuda.device_count())
        check_model_name(session.options.model)


def check_backend(session, benchmarks: list[str]) -> None:
    """The backend can run the selected ``benchmarks``: what it checks itself
    (``BackendSpec.check_selection``: with ``--backend replay``, one benchmark whose predictions
    file joins to the data, every row checked at start-up so a bad row stops the run before
    scoring), then what every backend declares it computes (``backends.check_capabilities``).

    Raises:
        AuditError: naming what to select, the file's first bad row (file:line), or the
            backend, benchmark and capability it lacks.
    """
    from ..backends import check_capabilities

    spec = session.backend_spec
    spec.check_selection(benchmarks)
    check_capabilities(spec, {name: b.requires for name, b in session.benchmarks.items()}, benchmarks)


def check_outputs(session, baseline: Mapping[str, Any] | None) -> None:
    """Before anything is scored: the run's identity is built (``AuditSession.identity``, the
    one the regression gates and the results read); with ``--strict-baseline`` it already shows
    the baseline comparable; the result cache opens and is valid; the run folder can be written.

    Raises:
        AuditError: naming the file or option and what to do.
    """
    identity = session.identity  # built once, here, before anything is scored
    if baseline is not None and session.options.strict_baseline:
        from ..gates.comparability import comparability_notes
        from ..report.compare import incomplete_notes

        unlike = (
            comparability_notes(baseline, identity.document())
            + _explicit_model_notes(baseline, session.options)
            + incomplete_notes({"baseline": baseline})
        )
        if unlike:
            raise ConfigError(
                f"--strict-baseline: the baseline run is not like for like: {'; '.join(unlike)}"
            )
    session.open_cache()
    check_results_dir(session)  # last: it creates the run folder


def _explicit_model_notes(baseline: Mapping[str, Any], options: AuditOptions) -> list[str]:
    """The model settings an explicit ``--dtype`` / ``--device`` already fixes before the model
    loads (``auto`` is only known after), so ``--strict-baseline`` refuses them before scoring."""
    had, backend = baseline.get("model") or {}, options.backend
    notes = []
    if backend.dtype not in (None, "auto") and had.get("dtype") and had["dtype"] != backend.dtype:
        notes.append(f"model dtype differs: {had['dtype']!r} (old) vs {backend.dtype!r} (new)")
    want = None if backend.device in (None, "auto") else str(backend.device).split(":")[0]
    old = had.get("device") and str(had["device"]).split(":")[0]
    if want and old and old != want:
        notes.append(f"device type differs: {old!r} (old) vs {want!r} (new)")
    return notes


def gpu_plan(config, options: AuditOptions, audit_run: bool) -> list | None:
    """The GPU of each xdist worker (``devices.assign``), or None without ``-n``.

    Raises:
        AuditError: more workers than GPUs (an audit's workers each hold a whole model; the
            suite's own tests, ``audit_run`` False, may share GPUs)."""
    from ..backends import in_process
    from ..devices import assign, uses_gpus, visible_gpus

    workers, device = getattr(config.option, "numprocesses", None), options.backend.device
    if not isinstance(workers, int) or workers < 1 or not uses_gpus(in_process(options.backend.name), device):
        return None
    return assign(workers, visible_gpus(), device, share=not audit_run)


def compliance_inputs(options: AuditOptions, benchmarks: Mapping[str, Any]):
    """The ``--audit-meta`` file (None without one) and the regulatory mapping (the packaged one
    without ``--regulatory-mapping``), validated before anything else runs; the mapping's
    benchmark and metric names are checked against the suite's.

    Raises:
        ConfigError: naming the file and the field (exit 4, as any bad option).
    """
    from ..compliance.mapping import load_mapping
    from ..compliance.meta import load_audit_meta

    outputs = options.outputs
    meta = load_audit_meta(outputs.audit_meta) if outputs.audit_meta else None
    known = {name: tuple(b.metric_names) for name, b in benchmarks.items()}
    return meta, load_mapping(outputs.regulatory_mapping, known)


def check_results_dir(session) -> None:
    """Create the run folder and write a probe file in it, so a ``--results-dir`` that is a
    file or unwritable stops the run at start-up instead of after scoring.

    Raises:
        ConfigError: naming the folder and the operating system's reason.
    """
    import tempfile

    try:
        session.run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=session.run_dir):
            pass
    except OSError as e:
        raise ConfigError(
            f"--results-dir {session.options.outputs.results_dir}: cannot write the run "
            f"folder {session.run_dir} ({e.strerror or e})"
        ) from None
