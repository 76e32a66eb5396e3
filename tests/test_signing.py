"""bias-audit keygen, sign and verify on a real run folder: a signed run verifies; one changed
byte, an added or a removed file, a wrong key or an edited manifest fails, naming what differs;
bad input (missing key, wrong key type, no run folder) is exit 4 with the path."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from test_report_html import audit

from audit_harness import cli
from audit_harness.compliance.signer import read_signer

REPO = Path(__file__).resolve().parents[1]
PRIVATE, PUBLIC = "bias-audit-signing-key.pem", "bias-audit-signing-key.pub.pem"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, data_dir) -> Path:
    """A real run of two benchmarks on the tiny model (as test_report_html's), never modified:
    each test signs a copy."""
    return audit(
        tmp_path_factory.mktemp("signing"),
        data_dir,
        "(test_bbq and (Religion or Age)) or (test_crows_pairs and (religion or overall))",
    )


@pytest.fixture
def run_dir(real_run, tmp_path) -> Path:
    return Path(shutil.copytree(real_run, tmp_path / "run"))


def bias_audit(capsys, *args) -> tuple[int, str, str]:
    """``bias-audit ARGS`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def keys(tmp_path, capsys) -> Path:
    folder = tmp_path / "keys"
    folder.mkdir()
    code, out, err = bias_audit(capsys, "keygen", "--out", folder)
    assert code == 0, err
    return folder


@pytest.fixture
def signed(run_dir, keys, capsys) -> Path:
    code, _, err = bias_audit(capsys, "sign", run_dir, "--key", keys / PRIVATE, "--signer", "Ada Lovelace")
    assert code == 0, err
    return run_dir


def raw_fingerprint(public_pem: Path) -> str:
    key = serialization.load_pem_public_key(public_pem.read_bytes())
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def every_file(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_keygen_writes_an_ed25519_pair_and_prints_its_fingerprint(tmp_path, capsys):
    folder = tmp_path / "k"  # made by keygen, for its owner only
    code, out, err = bias_audit(capsys, "keygen", "--out", folder)
    assert code == 0, err
    assert folder.stat().st_mode & 0o777 == 0o700
    private, public = folder / PRIVATE, folder / PUBLIC
    assert private.stat().st_mode & 0o777 == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS8, unencrypted
    assert isinstance(serialization.load_pem_public_key(public.read_bytes()), Ed25519PublicKey)
    assert f"fingerprint: {raw_fingerprint(public)}" in out
    # Explicit paths work too; an existing key is never overwritten.
    code, out, err = bias_audit(
        capsys, "keygen", "--private-key", tmp_path / "a.pem", "--public-key", tmp_path / "a.pub"
    )
    assert code == 0 and f"fingerprint: {raw_fingerprint(tmp_path / 'a.pub')}" in out
    before = private.read_bytes()
    code, _, err = bias_audit(capsys, "keygen", "--out", folder)
    assert code == 4 and f"{private}: already exists" in err and private.read_bytes() == before
    code, _, err = bias_audit(capsys, "keygen", "--private-key", tmp_path / "b.pem")
    assert code == 4 and "--public-key" in err
    code, _, err = bias_audit(capsys, "keygen", "--out", private)
    assert code == 4 and f"--out {private}: not a folder" in err


def test_a_signed_run_verifies_end_to_end(run_dir, tmp_path):
    """keygen, sign and verify through the bias-audit command, as a user runs them."""

    def bias_audit_cmd(*args):
        return subprocess.run(
            [sys.executable, "-m", "audit_harness.cli", *map(str, args)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )

    before = every_file(run_dir)
    keygen = bias_audit_cmd("keygen", "--out", tmp_path)
    assert keygen.returncode == 0, keygen.stderr
    sign = bias_audit_cmd("sign", run_dir, "--key", tmp_path / PRIVATE, "--signer", "Ada Lovelace")
    assert sign.returncode == 0, sign.stderr
    fp = raw_fingerprint(tmp_path / PUBLIC)
    signer = read_signer(run_dir)
    assert (signer.name, signer.key_fingerprint) == ("Ada Lovelace", fp)
    assert signer.date.endswith("Z") and signer.date[:4].isdigit() and "T" in signer.date
    for report in ("report.md", "report.html"):  # rendered again after signer.json was written
        text = (run_dir / report).read_text()
        assert f"Signed by Ada Lovelace on {signer.date}" in text and fp in text, report
    manifest_bytes = (run_dir / "manifest.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    # Every file of the folder (the run's own, and signer.json), with its sha256, and no other.
    assert set(manifest["files"]) == before | {"signer.json"}
    assert list(manifest["files"]) == sorted(manifest["files"])
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((run_dir / rel).read_bytes()).hexdigest() == digest, rel
    assert (manifest["signer"], manifest["date"], manifest["key_fingerprint"]) == (
        "Ada Lovelace",
        signer.date,
        fp,
    )
    assert (
        manifest["suite_version"]
        == json.loads((run_dir / "results.json").read_text())["run"]["suite"]["version"]
    )
    # manifest.sig is the base64 Ed25519 signature of manifest.json's bytes: checked here with
    # the library alone, not through the suite.
    public = serialization.load_pem_public_key((tmp_path / PUBLIC).read_bytes())
    public.verify(base64.b64decode((run_dir / "manifest.sig").read_bytes()), manifest_bytes)
    verify = bias_audit_cmd("verify", run_dir, "--public-key", tmp_path / PUBLIC)
    assert verify.returncode == 0, verify.stderr
    assert f"as signed by Ada Lovelace on {signer.date}, key {fp}" in verify.stdout
    # One changed byte: exit 1, naming the file.
    report = run_dir / "report.md"
    report.write_bytes(report.read_bytes().replace(b"#", b"%", 1))
    verify = bias_audit_cmd("verify", run_dir, "--public-key", tmp_path / PUBLIC)
    assert verify.returncode == 1
    assert "report.md: sha256 differs from the manifest" in verify.stderr


def test_sign_renders_the_reports_again_through_bias_audit_report(run_dir, keys, capsys, monkeypatch):
    calls = []
    report = cli.render_reports

    def spy(ns, being_signed=False):
        calls.append(ns)
        assert being_signed  # the reports may name the signer before manifest.sig exists
        assert (run_dir / "signer.json").is_file()  # rendered after the signer is known
        assert not (run_dir / "manifest.json").exists()  # and before the files are hashed
        return report(ns, being_signed)

    monkeypatch.setattr(cli, "render_reports", spy)
    (run_dir / "report.md").write_text("stale\n")
    code, out, err = bias_audit(capsys, "sign", run_dir, "--key", keys / PRIVATE, "--signer", "Ada")
    assert code == 0, err
    assert [Path(ns.run_dir) for ns in calls] == [run_dir]
    assert (run_dir / "report.md").read_text().startswith("# Bias audit report")
    assert "**Signature:** Signed by Ada on " in (run_dir / "report.md").read_text()


@pytest.mark.parametrize(
    "rel",
    ["results.json", "report.html", "report.md", "junit.xml", "records/bbq/Age.jsonl", "signer.json"],
)
def test_one_changed_byte_fails_naming_the_file(signed, keys, capsys, rel):
    path = signed / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte
    path.write_bytes(bytes(data))
    code, out, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1, out
    assert f"FAILED: {rel}: sha256 differs from the manifest" in err


@pytest.mark.parametrize("rel", ["extra.txt", "records/bbq/extra.jsonl"])
def test_an_added_file_fails(signed, keys, capsys, rel):
    (signed / rel).write_text("added after signing\n")
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and f"FAILED: {rel}: not in the manifest" in err


@pytest.mark.parametrize("rel", ["results.json", "records/crows_pairs/religion.jsonl"])
def test_a_removed_file_fails(signed, keys, capsys, rel):
    (signed / rel).unlink()
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and f"FAILED: {rel}: missing" in err


def test_the_first_file_in_path_order_is_named(signed, keys, capsys):
    (signed / "results.json").write_text("{}\n")
    (signed / "junit.xml").write_text("<x/>\n")
    (signed / "a-first.txt").write_text("new\n")
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and "FAILED: a-first.txt: not in the manifest" in err
    (signed / "a-first.txt").unlink()
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and "FAILED: junit.xml: sha256 differs" in err


def test_a_wrong_key_fails_naming_both_fingerprints(signed, keys, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    assert bias_audit(capsys, "keygen", "--out", other)[0] == 0
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", other / PUBLIC)
    assert code == 1
    assert (
        f"signature does not match the public key (fingerprint {raw_fingerprint(other / PUBLIC)}, "
        f"manifest says {raw_fingerprint(keys / PUBLIC)})"
    ) in err


def test_a_manifest_rewritten_to_match_a_changed_file_fails(signed, keys, capsys):
    """Whoever changes a file and puts its new hash in the manifest still cannot sign it."""
    report = signed / "report.html"
    report.write_bytes(report.read_bytes() + b"<!-- changed -->")
    manifest = json.loads((signed / "manifest.json").read_text())
    manifest["files"]["report.html"] = hashlib.sha256(report.read_bytes()).hexdigest()
    (signed / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and "manifest.json: changed after signing" in err
    assert raw_fingerprint(keys / PUBLIC) in err
    (signed / "manifest.sig").unlink()
    code, _, err = bias_audit(capsys, "verify", signed, "--public-key", keys / PUBLIC)
    assert code == 1 and "manifest.sig: missing" in err


def test_an_unsigned_run_fails(run_dir, keys, capsys):
    code, _, err = bias_audit(capsys, "verify", run_dir, "--public-key", keys / PUBLIC)
    assert code == 1 and "FAILED: unsigned (no manifest.json)" in err


def test_a_passphrase_protects_the_private_key(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AUDIT_KEY_PASSPHRASE", "correct horse")
    code, _, err = bias_audit(capsys, "keygen", "--out", tmp_path, "--passphrase-env", "AUDIT_KEY_PASSPHRASE")
    assert code == 0, err
    assert (tmp_path / PRIVATE).read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    sign = ["sign", run_dir, "--key", tmp_path / PRIVATE, "--signer", "Ada"]
    code, _, err = bias_audit(capsys, *sign)
    assert code == 4 and f"{tmp_path / PRIVATE}: the private key is encrypted" in err
    assert not (run_dir / "signer.json").exists()  # nothing written before the key loaded
    monkeypatch.setenv("WRONG", "battery staple")
    code, _, err = bias_audit(capsys, *sign, "--passphrase-env", "WRONG")
    assert code == 4 and "wrong passphrase" in err
    code, _, err = bias_audit(capsys, *sign, "--passphrase-env", "UNSET_VARIABLE_OF_THIS_TEST")
    assert code == 4 and "UNSET_VARIABLE_OF_THIS_TEST" in err
    code, _, err = bias_audit(capsys, *sign, "--passphrase-env", "AUDIT_KEY_PASSPHRASE")
    assert code == 0, err
    code, _, err = bias_audit(capsys, "verify", run_dir, "--public-key", tmp_path / PUBLIC)
    assert code == 0, err


def test_bad_input_is_exit_4_naming_the_file(run_dir, keys, tmp_path, capsys):
    missing = tmp_path / "nope.pem"
    code, _, err = bias_audit(capsys, "sign", run_dir, "--key", missing, "--signer", "Ada")
    assert code == 4 and f"{missing}: private key not found" in err
    code, _, err = bias_audit(capsys, "verify", run_dir, "--public-key", missing)
    assert code == 4 and f"{missing}: public key not found" in err
    # The private key where the public one belongs, and a key of another type.
    code, _, err = bias_audit(capsys, "verify", run_dir, "--public-key", keys / PRIVATE)
    assert code == 4 and f"{keys / PRIVATE}: not a PEM public key (this is a private key" in err
    ecdsa = tmp_path / "ec.pem"
    ecdsa.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    code, _, err = bias_audit(capsys, "sign", run_dir, "--key", ecdsa, "--signer", "Ada")
    assert code == 4 and f"{ecdsa}: not an Ed25519 key" in err
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    code, _, err = bias_audit(capsys, "sign", not_a_run, "--key", keys / PRIVATE, "--signer", "Ada")
    assert code == 4 and f"{not_a_run / 'results.json'}: not found" in err
    code, _, err = bias_audit(capsys, "verify", tmp_path / "absent", "--public-key", keys / PUBLIC)
    assert code == 4 and f"{tmp_path / 'absent'}: not a run folder" in err


def test_a_pdf_in_the_run_is_printed_again(run_dir, keys, capsys):
    """report.pdf names its signer too: signing prints it again (`bias-audit report --pdf`)."""
    if not shutil.which("chromium") and os.environ.get("CI") != "true":
        pytest.skip("report --pdf needs chromium (CI installs it)")
    stale = b"%PDF-1.4 stale\n"
    (run_dir / "report.pdf").write_bytes(stale)
    code, out, err = bias_audit(capsys, "sign", run_dir, "--key", keys / PRIVATE, "--signer", "Ada")
    assert code == 0, err
    pdf = (run_dir / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and pdf != stale
    assert f"wrote {run_dir / 'report.pdf'}" in out
    assert "report.pdf" in json.loads((run_dir / "manifest.json").read_text())["files"]
    code, _, err = bias_audit(capsys, "verify", run_dir, "--public-key", keys / PUBLIC)
    assert code == 0, err
