"""Signed run folders: an Ed25519 key pair, the manifest of a run folder (the sha256 of every file)
and its signature, and the check of both (``bias-audit keygen``, ``sign``, ``verify``).

What a valid signature shows: the files of the folder are, byte for byte, the ones the holder of
the private key signed. It does not show that the run was honest or its numbers right.

The key pair: the private key as PKCS8 PEM (mode 0600, encrypted when a passphrase is given), the
public key as SubjectPublicKeyInfo PEM. A key's fingerprint is the sha256 of its raw 32-byte
public key, hex. ``manifest.json`` lists every file of the run folder but itself and
``manifest.sig``; ``manifest.sig`` holds the Ed25519 signature of manifest.json's exact bytes,
base64 on one line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .. import __version__
from ..data import sha256_file
from ..errors import ConfigError
from .signer import Signer

#: The manifest's and the signature's file names in a run folder.
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig"
#: The manifest's format, so a later change of layout is told apart from tampering.
MANIFEST_FORMAT = "bias-audit-manifest/1"
#: File names ``keygen --out DIR`` writes.
PRIVATE_KEY_NAME = "bias-audit-signing-key.pem"
PUBLIC_KEY_NAME = "bias-audit-signing-key.pub.pem"


class SigningKeyError(ConfigError):
    """A key file that is missing, unreadable, not PEM, not Ed25519, or locked by a passphrase
    that was not given or is wrong; the message names the file."""


class VerificationError(Exception):
    """A run folder that does not verify: unsigned, a signature that does not match the key, or a
    file that differs from the manifest (the first one, in path order)."""


@dataclass(frozen=True)
class Verified:
    """A run folder that verified: who signed it, and how many files the manifest covers."""

    signer: Signer
    files: int
    suite_version: str


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """sha256 of the raw 32-byte public key, hex: the key's name in signer.json and the manifest."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a file that must not exist yet, created with ``mode`` (never briefly
    world-readable, as a chmod after writing would leave it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise SigningKeyError(
            f"{path}: already exists; a key is never overwritten (remove it first)"
        ) from None
    except OSError as e:
        raise SigningKeyError(f"{path}: cannot create: {e.strerror or e}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate_key_pair(private_path: Path, public_path: Path, passphrase: bytes | None = None) -> str:
    """Make a new Ed25519 key pair, write both files and return the fingerprint.

    Raises:
        SigningKeyError: either file exists already (a key is never overwritten) or cannot be created.
    """
    private_path, public_path = Path(private_path), Path(public_path)
    if private_path.resolve() == public_path.resolve():
        raise SigningKeyError(f"{private_path}: the private and the public key need two files")
    for path in (private_path, public_path):
        if path.exists():
            raise SigningKeyError(f"{path}: already exists; a key is never overwritten (remove it first)")
    key = Ed25519PrivateKey.generate()
    encryption = (
        serialization.BestAvailableEncryption(passphrase) if passphrase else serialization.NoEncryption()
    )
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_new(private_path, private_pem, 0o600)
    _write_new(public_path, public_pem, 0o644)
    return fingerprint(key.public_key())


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise SigningKeyError(f"{path}: is a folder, not a {what} file") from None
    except OSError as e:
        raise SigningKeyError(f"{path}: cannot read the {what}: {e.strerror or e}") from None


def load_private_key(path: Path, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """The Ed25519 private key of a PEM file (``keygen``'s).

    Raises:
        SigningKeyError: missing or unreadable file, not a PEM private key, another key type, or an
            encrypted key without its passphrase (or with a wrong one).
    """
    data = _read_key_file(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=passphrase or None)
    except TypeError:  # the library's way of saying encrypted-and-no-passphrase, or the reverse
        if passphrase:
            raise SigningKeyError(f"{path}: the private key is not encrypted; give no passphrase") from None
        raise SigningKeyError(
            f"{path}: the private key is encrypted; give its passphrase (--passphrase-env)"
        ) from None
    except ValueError as e:
        if passphrase and b"ENCRYPTED" in data:
            raise SigningKeyError(f"{path}: wrong passphrase for the private key") from None
        raise SigningKeyError(f"{path}: not a PEM private key ({e})") from None
    except Exception as e:  # unsupported algorithms surface as several exception types
        raise SigningKeyError(f"{path}: cannot load the private key ({type(e).__name__}: {e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(
            f"{path}: not an Ed25519 key ({type(key).__name__}; make one with bias-audit keygen)"
        )
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key of a PEM file (``keygen``'s).

    Raises:
        SigningKeyError: missing or unreadable file, not a PEM public key, or another key type.
    """
    data = _read_key_file(path, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except Exception as e:  # ValueError for bad PEM, UnsupportedAlgorithm for exotic keys
        hint = " (this is a private key: give the .pub.pem file)" if b"PRIVATE KEY" in data else ""
        raise SigningKeyError(f"{path}: not a PEM public key{hint} ({type(e).__name__})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: not an Ed25519 key ({type(key).__name__})")
    return key


def run_files(run_dir: Path) -> list[str]:
    """Every file of the run folder, recursively, as sorted relative POSIX paths, except the
    manifest and its signature (the only files the manifest cannot cover)."""
    root = Path(run_dir)
    out = []
    for folder, dirs, names in os.walk(root):
        for name in dirs:
            if (Path(folder) / name).is_symlink():  # os.walk does not enter it: it would go unhashed
                raise ConfigError(f"{Path(folder) / name}: a link to a folder; sign a folder of plain files")
        for name in names:
            rel = (Path(folder) / name).relative_to(root).as_posix()
            if rel not in (MANIFEST_FILE, SIGNATURE_FILE):
                out.append(rel)
    return sorted(out)


class Manifest(TypedDict):
    """manifest.json: who signed, when, with which key, and every file's sha256."""

    format: str
    signer: str
    date: str
    key_fingerprint: str
    suite_version: str
    algorithm: str
    files: dict[str, str]


def build_manifest(run_dir: Path, signer: Signer) -> Manifest:
    """The manifest of ``run_dir`` as signed by ``signer``: the sha256 of every file
    (``run_files``), who signed, when, with which key, and the suite's version."""
    root = Path(run_dir)
    return {
        "format": MANIFEST_FORMAT,
        "signer": signer.name,
        "date": signer.date,
        "key_fingerprint": signer.key_fingerprint,
        "suite_version": __version__,
        "algorithm": "Ed25519 over manifest.json's bytes; file hashes sha256",
        "files": {rel: sha256_file(root / rel) for rel in run_files(root)},
    }


def sign_run(run_dir: Path, key: Ed25519PrivateKey, signer: Signer) -> tuple[Path, Path]:
    """Write ``manifest.json`` over the folder as it is now and ``manifest.sig``, its signature
    (base64). Call it last: a file changed afterwards no longer verifies.

    Raises:
        ConfigError: the signer's fingerprint is not the key's (signer.json would name another
            key than the one that signed).
    """
    root = Path(run_dir)
    if signer.key_fingerprint != fingerprint(key.public_key()):
        raise ConfigError(
            f"signer fingerprint {signer.key_fingerprint} is not the signing key's "
            f"({fingerprint(key.public_key())})"
        )
    body = (json.dumps(build_manifest(root, signer), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    manifest = root / MANIFEST_FILE
    manifest.write_bytes(body)
    signature = root / SIGNATURE_FILE
    signature.write_bytes(base64.b64encode(key.sign(body)) + b"\n")
    return manifest, signature


def _manifest_fingerprint(body: bytes) -> str:
    """The key fingerprint a manifest claims, for the message of a signature that does not match
    (read before the signature is trusted, so it is only shown, never relied on)."""
    try:
        return str(json.loads(body.decode("utf-8")).get("key_fingerprint") or "none")
    except (ValueError, AttributeError):
        return "unreadable"


def verify_run(run_dir: Path, public_key: Ed25519PublicKey) -> Verified:
    """Check the signature over manifest.json, then every file's sha256, then that no file was
    added or removed.

    Raises:
        VerificationError: naming the first problem: ``unsigned (no manifest.json)``, a signature
            that does not match the key (both fingerprints), or the first file in path order that
            differs (``X: sha256 differs from the manifest``, ``X: not in the manifest``,
            ``X: missing``).
        ConfigError: ``run_dir`` is not a folder.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a run folder (no such folder)")
    manifest_path, signature_path = root / MANIFEST_FILE, root / SIGNATURE_FILE
    if not manifest_path.is_file():
        raise VerificationError(f"unsigned (no {MANIFEST_FILE})")
    body = manifest_path.read_bytes()
    if not signature_path.is_file():
        raise VerificationError(f"{SIGNATURE_FILE}: missing (the manifest is not signed)")
    try:
        signature = base64.b64decode(b"".join(signature_path.read_bytes().split()), validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(f"{SIGNATURE_FILE}: not a base64 signature") from None
    try:
        public_key.verify(signature, body)
    except InvalidSignature:
        claimed, actual = _manifest_fingerprint(body), fingerprint(public_key)
        if claimed == actual:
            raise VerificationError(
                f"{MANIFEST_FILE}: changed after signing (its signature does not verify with this "
                f"public key, which is the key it names: {actual})"
            ) from None
        raise VerificationError(
            f"signature does not match the public key (fingerprint {actual}, manifest says {claimed})"
        ) from None
    # From here on the manifest is what the key holder signed: its contents can be trusted.
    manifest = json.loads(body.decode("utf-8"))
    if manifest.get("format") != MANIFEST_FORMAT:
        raise VerificationError(
            f"{MANIFEST_FILE}: format {manifest.get('format')!r}, expected {MANIFEST_FORMAT}"
        )
    listed: dict[str, str] = manifest["files"]
    present = set(run_files(root))
    for rel in sorted(present | set(listed)):
        if rel not in listed:
            raise VerificationError(f"{rel}: not in the manifest")
        if rel not in present:
            raise VerificationError(f"{rel}: missing")
        if sha256_file(root / rel) != listed[rel]:
            raise VerificationError(f"{rel}: sha256 differs from the manifest")
    signer = Signer(manifest["signer"], manifest["date"], manifest["key_fingerprint"])
    return Verified(signer=signer, files=len(listed), suite_version=str(manifest.get("suite_version")))
