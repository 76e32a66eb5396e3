"""The audit's metadata (``--audit-meta FILE``): which system was audited, for what use, who is
responsible for it, and when its model's training data ends. A YAML file a reviewer writes once
per system release; the run validates it at start-up, records it in results.json (``audit_meta``)
and both reports show it first, after the signature block.

Example::

    system_name: Acme Support Assistant
    system_version: "2.3.0"
    intended_use: Answering customer questions about Acme products, in English and Spanish.
    responsible_person: Jane Doe
    organisation: Acme GmbH
    training_data_cutoff: 2024-06-30
    notes: Fine-tuned from an open-weights model; see the model card.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TypedDict

import yaml

from ..errors import ConfigError

#: Every field of the file: ``{name: (required, what it holds)}``, in the order the reports show.
FIELDS: dict[str, tuple[bool, str]] = {
    "system_name": (True, "the AI system audited"),
    "system_version": (True, "its version (quote it in YAML: '2.10', not 2.10)"),
    "intended_use": (True, "what the system is for, and for whom"),
    "responsible_person": (True, "who answers for this audit"),
    "organisation": (True, "the organisation placing the system on the market or using it"),
    "training_data_cutoff": (False, "the last date of the model's training data, YYYY-MM-DD"),
    "notes": (False, "anything else a reviewer should know"),
}

#: The fields' labels in the reports.
LABELS = {
    "system_name": "System",
    "system_version": "Version",
    "intended_use": "Intended use",
    "responsible_person": "Responsible person",
    "organisation": "Organisation",
    "training_data_cutoff": "Training-data cutoff",
    "notes": "Notes",
}


class TextDateLoader(yaml.SafeLoader):
    """SafeLoader that reads dates as plain strings: PyYAML's own date parsing turns
    ``2024-13-01`` into an exception that names no field; read as text, the date is parsed where
    the message can name its field (here and in ``mapping``)."""


TextDateLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class AuditMetaRecord(TypedDict):
    """The metadata as recorded in results.json's ``audit_meta`` (``AuditMeta.to_dict``)."""

    system_name: str
    system_version: str
    intended_use: str
    responsible_person: str
    organisation: str
    training_data_cutoff: str | None
    notes: str | None
    file: str
    sha256: str


@dataclass(frozen=True)
class AuditMeta:
    """A validated ``--audit-meta`` file.

    Attributes:
        system_name, system_version, intended_use, responsible_person, organisation: as given.
        training_data_cutoff: the model's training-data cutoff, or None when not given (then
            every benchmark's contamination status is "unknown").
        notes: free text, or None.
        file: the path as given on the command line; sha256: of the file's bytes.
    """

    system_name: str
    system_version: str
    intended_use: str
    responsible_person: str
    organisation: str
    training_data_cutoff: date | None = None
    notes: str | None = None
    file: str = ""
    sha256: str = ""

    def to_dict(self) -> AuditMetaRecord:
        """JSON-ready (results.json ``audit_meta``): the cutoff as ``YYYY-MM-DD``."""
        return {
            "system_name": self.system_name,
            "system_version": self.system_version,
            "intended_use": self.intended_use,
            "responsible_person": self.responsible_person,
            "organisation": self.organisation,
            "training_data_cutoff": self.training_data_cutoff.isoformat()
            if self.training_data_cutoff
            else None,
            "notes": self.notes,
            "file": self.file,
            "sha256": self.sha256,
        }

    @classmethod
    def from_dict(cls, data: AuditMetaRecord) -> AuditMeta:
        """Back from ``to_dict`` (a results file's ``audit_meta``)."""
        cutoff = data.get("training_data_cutoff")
        return cls(
            system_name=data.get("system_name") or "",
            system_version=data.get("system_version") or "",
            intended_use=data.get("intended_use") or "",
            responsible_person=data.get("responsible_person") or "",
            organisation=data.get("organisation") or "",
            training_data_cutoff=date.fromisoformat(cutoff) if cutoff else None,
            notes=data.get("notes"),
            file=data.get("file") or "",
            sha256=data.get("sha256") or "",
        )


def read_yaml_file(path: str | Path, where: str) -> tuple[object, bytes]:
    """A compliance YAML file (dates kept as text, ``TextDateLoader``) and its raw bytes (for its
    sha256).

    Raises:
        ConfigError: it cannot be read or is not YAML, naming ``where`` (the option and the file).
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror or e})") from None
    try:
        return yaml.load(raw.decode("utf-8"), Loader=TextDateLoader), raw  # a SafeLoader
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{where}: not a YAML file ({' '.join(str(e).split())})") from None


def load_audit_meta(path: str | Path, option: str = "--audit-meta") -> AuditMeta:
    """Read and validate an audit metadata file.

    Parameters
    ----------
    path : str or Path
        The YAML file.
    option : str
        The option that named it, put before every message.

    Raises
    ------
    ConfigError
        The file is missing or not YAML, a key is unknown, a required field is missing or empty,
        a field has the wrong type, or the cutoff is not a real ``YYYY-MM-DD`` date: the message
        names the file and the field.
    """
    where = f"{option} {path}"
    doc, raw = read_yaml_file(path, where)
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a mapping of fields ({', '.join(FIELDS)})")
    unknown = [str(k) for k in doc if k not in FIELDS]
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (the fields: {', '.join(FIELDS)})")
    values: dict[str, str] = {}
    for name, (required, what) in FIELDS.items():
        value = doc.get(name)
        if value is None:
            if required:
                raise ConfigError(f"{where}: field {name!r} is missing ({what})")
            continue
        if not isinstance(value, str):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            kind = "a number" if number else f"a {type(value).__name__}"
            raise ConfigError(f"{where}: field {name!r} must be text, got {kind} ({value!r}): {what}")
        if not value.strip():
            if required:
                raise ConfigError(f"{where}: field {name!r} is empty ({what})")
            continue
        values[name] = value.strip()
    given = values.pop("training_data_cutoff", None)
    cutoff = None
    if given is not None:
        try:
            cutoff = date.fromisoformat(given)
        except ValueError:
            raise ConfigError(
                f"{where}: field 'training_data_cutoff' is not a date YYYY-MM-DD: {given!r}"
            ) from None
    return AuditMeta(
        **values,
        training_data_cutoff=cutoff,
        file=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
    )
