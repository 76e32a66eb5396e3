"""The run's identity (``RunIdentity``): what makes its numbers like for like with another run's
besides the model and the data, built once per run (``AuditSession.identity``) and read by
every check that compares it: the start-up ``--strict-baseline`` check (``run.startup``), a
regression gate's own like-for-like notes while the run goes on (``AuditSession.
category_document``, ``gates.judge.regression_notes``) and the results document
(``run.finish``), so the three can never describe the run differently."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from ..errors import AuditError
from ..option_values import AuditOptions
from ..redact import redact
from .schema import thresholds_provenance


@dataclass(frozen=True)
class RunIdentity:
    """The run-wide part of a run's results document that ``gates.comparability`` compares.

    Attributes:
        options: every option as results.json records it (``AuditOptions.to_dict``, the data
            directory resolved, credentials masked).
        engine_version: the engine's version (``engine.cache.ENGINE_VERSION``): another engine
            may score the same prompts differently.
        thresholds_sha256: the gates file's sha256, read once when the run starts.
        thresholds_origin: ``"packaged"`` when it is the shipped file byte for byte, else
            ``"custom"``.
        packaged_thresholds_sha256: the shipped gates file's sha256.
    """

    options: Mapping[str, object]
    engine_version: str
    thresholds_sha256: str
    thresholds_origin: str
    packaged_thresholds_sha256: str

    @classmethod
    def of(cls, options: AuditOptions, data_dir: Callable[[], Path], engine_version: str) -> RunIdentity:
        """The identity of a run with ``options`` (their data directory recorded as
        ``data_dir()`` resolves it, or as the option gave it where it cannot), its gates file
        (``options.thresholds``, hashed now: a file edited while the run goes on does not change
        what it is judged by) and the engine's ``engine_version``."""
        recorded = options.to_dict()
        try:
            recorded["data_dir"] = str(data_dir())  # the resolved path, not the flag as typed
        except AuditError:
            pass
        provenance = thresholds_provenance(Path(options.thresholds))
        return cls(
            # Where the options are recorded, credentials in URLs are masked (``redact``): every
            # report, JUnit property, model card and MLflow param is made from here.
            options=redact(recorded),
            engine_version=engine_version,
            thresholds_sha256=str(provenance["thresholds_sha256"]),
            thresholds_origin=str(provenance["thresholds_origin"]),
            packaged_thresholds_sha256=str(provenance["packaged_thresholds_sha256"]),
        )

    def run_entry(self) -> dict[str, str]:
        """Its part of results.json's ``run``: the engine version and the gates file's
        provenance (``gates.thresholds_provenance``), in that order."""
        return {
            "engine_version": self.engine_version,
            "thresholds_sha256": self.thresholds_sha256,
            "thresholds_origin": self.thresholds_origin,
            "packaged_thresholds_sha256": self.packaged_thresholds_sha256,
        }

    def document(
        self,
        model: Mapping[str, object] | None = None,
        protocols: Mapping[str, Mapping[str, object]] | None = None,
        benchmarks: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
        data_files: Mapping[str, Mapping[str, str]] | None = None,
    ) -> dict[str, object]:
        """This run as ``gates.comparability.comparability_notes`` reads a results document:
        the identity, and what the run knows so far of its model (``model``: the exported model
        info, None before it loads), its ``protocols``, the categories judged (``benchmarks``:
        ``{benchmark: {category: {"n_scored": n}}}``) and the ``data_files`` read."""
        doc: dict[str, object] = {"options": dict(self.options), "run": self.run_entry()}
        if model is not None:
            doc["model"] = dict(model)
        for key, part in (("protocols", protocols), ("benchmarks", benchmarks), ("data_files", data_files)):
            if part is not None:
                doc[key] = {k: dict(v) for k, v in part.items()}
        return doc
