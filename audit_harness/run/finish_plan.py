"""The end of a ``--plan`` run, in the controller: merge what every process planned, build the plan
document (``planning.build_plan``) and write it as ``plan.json`` in the run folder. A plan writes
nothing that reads as results: no results.json, no reports, no records, no verdict."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import exit_codes

if TYPE_CHECKING:
    from .audit_run import AuditRun


@dataclass
class PlanFiles:
    """The finished plan: its document and where it was written (or why not)."""

    document: dict[str, Any]
    path: Path | str


def finish_plan(run: AuditRun, exitstatus) -> int | None:
    """Build and write the plan; the exit code: 0 once everything selected was planned, 4 when
    the model could not be opened, 2 when interrupted, 3 when a category could not be planned,
    5 when nothing was (every selected category's data missing); None when nothing was
    selected (no run folder)."""
    from ..planning import build_plan

    session = run.session
    parts = [session.export()] + [json.loads(p) for p in run.worker_outputs]
    outcomes = [o for p in parts for o in p["outcomes"] if o.get("plan") is not None]
    errors = [e for p in parts for e in p.get("errors", [])]
    skipped = [
        {"benchmark": v["benchmark"], "category": v["category"], "reason": v.get("message")}
        for p in parts
        for v in p["verdicts"]
        if v.get("status") == "skipped"
    ]
    model_error = next((p["model_error"] for p in parts if p.get("model_error")), None)
    if not (outcomes or errors or skipped or model_error or run.collected_gates):
        return None
    model = next((p["model"] for p in parts if p["model"]), None)
    interrupted = (int(exitstatus) == exit_codes.INTERRUPTED or run.interrupted) and not model_error
    code = _exit_code(model_error, interrupted, errors, outcomes)
    params = session.options.backend.plan_params
    doc = build_plan(outcomes, model, int(params) if params else None)
    from ..models.zoo import first_use
    from ..planning import first_run, machine_load
    from ..redact import redact

    if doc["benchmarks"]:
        name = (model or {}).get("name") or session.options.model
        doc["first_run"] = first_run(
            doc, name, first_use(name, int((model or {}).get("n_parameters") or 0)), *machine_load()
        )
    args = redact(list(run.config.invocation_params.args))
    doc = {
        "plan": doc.pop("plan"),
        "run_id": run.run_id,
        "command_line": shlex.join(["pytest", *args]),
        "started": datetime.fromtimestamp(run.started, timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - run.started, 3),
        "exit_status": code,
        "interrupted": interrupted,
        "model": model,
        "model_error": model_error,
        "errors": errors,
        "skipped": _unique(skipped),
        "options": redact(session.options.to_dict()),
        **doc,
    }
    path: Path | str = session.run_dir / "plan.json"
    try:
        Path(path).write_text(json.dumps(doc, indent=1, ensure_ascii=False, default=str) + "\n")
    except OSError as e:
        path = f"not written ({e.strerror or e})"
        code = exit_codes.RUN_ERROR
        doc["exit_status"] = code
    run.plan = PlanFiles(doc, path)
    return code


def _exit_code(model_error, interrupted: bool, errors: list, outcomes: list) -> int:
    """4 when the model could not be opened, 2 when interrupted, 3 when a category could not be
    planned, 5 when nothing was, else 0."""
    if model_error:
        return exit_codes.USAGE_ERROR
    if interrupted:
        return exit_codes.INTERRUPTED
    if errors:
        return exit_codes.RUN_ERROR
    return exit_codes.OK if outcomes else exit_codes.NOTHING_SELECTED


def _unique(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per skipped category (each of its gates reports the same skip)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        seen.setdefault((r["benchmark"], r["category"]), r)
    return list(seen.values())
