"""Who signed a run: ``signer.json`` in the run folder, written by ``bias-audit sign`` before the
reports are rendered again and the manifest is hashed, so the signed reports name their signer.

The file says who signed, when and with which key; it proves nothing by itself: ``bias-audit
verify`` checks the manifest's signature and every file's hash (``signing.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: The signer record's file name in a run folder.
SIGNER_FILE = "signer.json"


@dataclass(frozen=True)
class Signer:
    """A run's signer.

    Attributes:
        name: the responsible person, as given to ``bias-audit sign --signer``.
        date: when the run was signed, ISO 8601 in UTC (``2026-12-02T07:40:00Z``).
        key_fingerprint: sha256 of the raw Ed25519 public key, hex.
    """

    name: str
    date: str
    key_fingerprint: str

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / SIGNER_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path


def read_signer(run_dir: Path) -> Signer | None:
    """The run's signer, or None for an unsigned run (no ``signer.json``).

    Raises:
        ValueError: ``signer.json`` exists but is not a signer record (names the file and field).
    """
    path = Path(run_dir) / SIGNER_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    fields = ("name", "date", "key_fingerprint")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object with {', '.join(fields)}")
    for f in fields:
        if not isinstance(data.get(f), str) or not data[f]:
            raise ValueError(f"{path}: field {f!r} must be a non-empty string")
    return Signer(**{f: data[f] for f in fields})
