#!/usr/bin/env python3
"""Regenerate ``audit_harness/sources/sources.yaml``, the pinned source table, from a data folder.

    python tools/make_sources_table.py DATA_DIR [--output audit_harness/sources/sources.yaml]

For every file under DATA_DIR (except the curators' ``SOURCE.md`` and ``README.md``) it computes the
size, sha256 and git blob hash, and takes the repository and commit from the folder's ``SOURCE.md``
(the first ``GitHub `owner/name` ... `<40 hex>``` in it). Where a ``SOURCE.md`` lists a file's git
blob, the computed blob must equal it, otherwise the script stops: the table only pins bytes the
curators verified against upstream. Files the SOURCE.md files list as absent are added from
``ABSENT`` below with ``available: false``; each one's blob (when known) must appear in its
SOURCE.md too.

What is not in the SOURCE.md files in a machine-readable form is written down here: the licence of
each folder, where a local path lives upstream, and which benchmark(s) a file serves.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO_ROOT / "audit_harness" / "sources" / "sources.yaml"
SKIP_NAMES = {"SOURCE.md", "README.md"}  # the curators' notes, not upstream files (but see kobbq)

# folder (relative to the data dir) -> how its files map upstream. Longest prefix wins, so
# winoqueer/v0 (its own repository) is matched before winoqueer.
FOLDERS = {
    "bbq": {"license": "CC-BY-4.0", "upstream_prefix": ""},
    "esbbq_cabbq": {"license": "Apache-2.0", "upstream_prefix": ""},
    "kobbq": {"license": "MIT", "upstream_prefix": "", "keep": {"data/README.md"}},
    # crows_pairs/SOURCE.md: the file is data/crows_pairs_anonymized.csv upstream; no LICENSE file
    # upstream, the README states CC BY-SA 4.0.
    "crows_pairs": {"license": "CC-BY-SA-4.0", "upstream_prefix": "data/"},
    "winoqueer/v0": {"license": "MIT", "upstream_prefix": ""},
    "winoqueer": {"license": "MIT", "upstream_prefix": ""},
    # kgquiz/SOURCE.md: no licence at all (and UMLS-derived items must not be redistributed).
    "kgquiz": {"license": None, "upstream_prefix": ""},
    # mbbq/SOURCE.md: no licence stated (derived from BBQ, CC BY 4.0); fetch-only, never shipped.
    # Its SOURCE.md names the repository as a URL, so the pins are written here.
    "mbbq": {
        "license": None,
        "upstream_prefix": "",
        "pins": ("Veranep/MBBQ", "adaa40172cdcf52eb403c01954a1aef8b0b1e97d"),
    },
    # cbbq/SOURCE.md: CC BY-SA 4.0 (the README's "Data License"); it names the repository as a
    # URL, so the pins are written here.
    "cbbq": {
        "license": "CC-BY-SA-4.0",
        "upstream_prefix": "",
        "pins": ("YFHuangxxxx/CBBQ", "95eaf2eeaa0b936f3e97e3424f134e9d7655da98"),
    },
}

# Files SOURCE.md lists as held upstream but absent from the curated copy: (local path, upstream
# path, size or None, git blob or None, benchmarks, note).
ABSENT = [
    (
        "winoqueer/data/winoqueer_final.csv",
        "data/winoqueer_final.csv",
        4816487,
        "0c874a4b98b41435a2359e9a69d95ab7bd95302d",
        ["winoqueer"],
        "final 45,540-pair benchmark; not obtained, so no sha256 is pinned (the earlier LFS pointer "
        "gave sha256 1ed93f91834837b388c9129cd43c49dee70638fa6988634747565dd78c3c0237, unverified); "
        "a copy obtained elsewhere is checked by its git blob",
    ),
    (
        "kgquiz/ConceptNet/Task2.json",
        "ConceptNet/Task2.json",
        None,
        "a519e862b68dd5f05a822251559423c011e98bfc",
        ["kgquiz"],
        "multiple choice; not obtained",
    ),
    (
        "kgquiz/UMLS/Task2.json",
        "UMLS/Task2.json",
        None,
        "9adc4ee4f612466ba8064f909f2b0e7dc5ab4676",
        ["kgquiz"],
        "multiple choice; not obtained",
    ),
    (
        "kgquiz/YAGO/Task1.json",
        "YAGO/Task1.json",
        None,
        "37bf5c37d246ebe5b7f26c89b91e4dd4806fbe27",
        ["kgquiz"],
        "true/false; not obtained",
    ),
    (
        "kgquiz/YAGO/Task2.json",
        "YAGO/Task2.json",
        None,
        "29e72c94a1112edac60ce2262f1f1ca289f0c642",
        ["kgquiz"],
        "multiple choice; not obtained",
    ),
    (
        "kgquiz/YAGO/Task4.json",
        "YAGO/Task4.json",
        None,
        "5dba2051b3b8ef091c4c9a977e0d170c717c18dc",
        ["kgquiz"],
        "factual editing; not obtained",
    ),
    (
        "kobbq/data/KoBBQ_all_samples.tsv",
        "data/KoBBQ_all_samples.tsv",
        None,
        None,
        ["kobbq"],
        "full 76,048-sample set (the evaluation uses the test set); not obtained, no hash known",
    ),
]

# cbbq/SOURCE.md: the largest files of the authors' commit are not in the curated copy (size and
# blob unknown here): race (all four), and the disambiguated files of age, nationality and
# household_registration, and the JSON of the ambiguous files of the last two (their CSV is here).
ABSENT += [
    (
        f"cbbq/data/{cat}/{cond}/{cond}.{ext}",
        f"data/{cat}/{cond}/{cond}.{ext}",
        None,
        None,
        ["cbbq"],
        "in the authors' commit, not in the curated copy (too large to bring here); not obtained",
    )
    for cat, cond, exts in (
        ("race", "ambiguous", ("json", "csv")),
        ("race", "disambiguous", ("json", "csv")),
        ("age", "disambiguous", ("json", "csv")),
        ("nationality", "ambiguous", ("json",)),
        ("nationality", "disambiguous", ("json", "csv")),
        ("household_registration", "ambiguous", ("json",)),
        ("household_registration", "disambiguous", ("json", "csv")),
    )
    for ext in exts
]

_REPO_COMMIT = re.compile(r"GitHub\s+`([\w.-]+/[\w.-]+)`.*?`([0-9a-f]{40})`", re.S)
_LISTED_SHA256 = re.compile(r"sha256:\s*`([0-9a-f]{64})`")
_TABLE_BLOB = re.compile(r"^\|\s*`([^`]+)`\s*\|.*?`([0-9a-f]{40})`", re.M)


def git_blob(data: bytes) -> str:
    """Git's object id of a blob: sha1 of ``b"blob <size>\\0" + data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def benchmarks_of(rel: str) -> list[str]:
    """Benchmark names (as ``bias-audit data fetch`` takes them) that a data-dir file serves."""
    top = rel.split("/", 1)[0]
    if top == "esbbq_cabbq":
        if rel.startswith("esbbq_cabbq/data_es/"):
            return ["esbbq"]
        if rel.startswith("esbbq_cabbq/data_ca/"):
            return ["cabbq"]
        return ["esbbq", "cabbq"]  # templates and the licence serve both languages
    return [top]


def role_of(rel: str) -> str:
    """data (what an audit reads), license, template or doc."""
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("LICENSE"):
        return "license"
    if "/templates/" in rel:
        return "template"
    if name.endswith(".md"):
        return "doc"
    return "data"


def folder_of(rel: str) -> str | None:
    """The known source folder holding ``rel``, or None (a folder of no benchmark this table
    pins, e.g. data for a benchmark the suite does not have yet)."""
    return max((f for f in FOLDERS if rel.startswith(f + "/")), key=len, default=None)


def source_info(data_dir: Path, folder: str) -> tuple[str, str, str, dict[str, str]]:
    """(repo, commit, SOURCE.md text, {file in its table: blob}) of a folder's SOURCE.md."""
    path = data_dir / folder / "SOURCE.md"
    text = path.read_text(encoding="utf-8")
    m = _REPO_COMMIT.search(text)
    pins = FOLDERS[folder].get("pins")
    if pins and not m:
        if pins[1] not in text:
            sys.exit(f"{path}: the pinned commit {pins[1]} is not the one SOURCE.md names")
        return pins[0], pins[1], text, {p: b for p, b in _TABLE_BLOB.findall(text)}
    if not m:
        sys.exit(f"{path}: no 'GitHub `owner/name` ... `<commit>`' found")
    return m[1], m[2], text, {p: b for p, b in _TABLE_BLOB.findall(text)}


def build(data_dir: Path) -> dict:
    infos = {f: source_info(data_dir, f) for f in FOLDERS}
    files = []
    problems = []
    checked = 0
    unknown: set[str] = set()
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(data_dir).as_posix()
        if "/" not in rel:
            continue  # the data dir's own README
        folder = folder_of(rel)
        if folder is None:  # skipped and named, never a crash
            unknown.add(rel.split("/", 1)[0])
            continue
        inner = rel[len(folder) + 1 :]
        if path.name in SKIP_NAMES and inner not in FOLDERS[folder].get("keep", ()):
            continue
        repo, commit, _, listed = infos[folder]
        data = path.read_bytes()
        blob = git_blob(data)
        if inner in listed:
            checked += 1
            if listed[inner] != blob:
                problems.append(f"{rel}: git blob {blob} != {listed[inner]} listed in SOURCE.md")
        sha = hashlib.sha256(data).hexdigest()
        # Single-file folders (crows_pairs, winoqueer/v0) state the data file's full sha256.
        stated = _LISTED_SHA256.findall(infos[folder][2])
        if stated and role_of(rel) == "data":
            checked += 1
            if sha not in stated:
                problems.append(f"{rel}: sha256 {sha} not the one stated in SOURCE.md")
        files.append(
            {
                "path": rel,
                "benchmarks": benchmarks_of(rel),
                "role": role_of(rel),
                "repo": repo,
                "commit": commit,
                "upstream": FOLDERS[folder]["upstream_prefix"] + inner,
                "size": len(data),
                "sha256": sha,
                "git_blob": blob,
                "license": FOLDERS[folder]["license"],
                "available": True,
                "note": None,
            }
        )
    for rel, upstream, size, blob, benches, note in ABSENT:
        folder = folder_of(rel)
        repo, commit, text, _ = infos[folder]
        if blob and blob not in text:
            problems.append(f"{rel}: blob {blob} not found in {folder}/SOURCE.md")
        files.append(
            {
                "path": rel,
                "benchmarks": benches,
                "role": "data",
                "repo": repo,
                "commit": commit,
                "upstream": upstream,
                "size": size,
                "sha256": None,
                "git_blob": blob,
                "license": FOLDERS[folder]["license"],
                "available": False,
                "note": note,
            }
        )
    if problems:
        sys.exit("\n".join(problems))
    if unknown:
        print(f"skipped folders of no pinned benchmark: {', '.join(sorted(unknown))}")
    print(f"{checked} files checked against a hash stated in their SOURCE.md")
    return {"version": 1, "files": files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    ns = ap.parse_args(argv)
    table = build(ns.data_dir.resolve())
    header = (
        "# The pinned source table: one entry per benchmark file (path relative to the data\n"
        "# dir, the authors' repository, commit and path, size, sha256, git blob, licence).\n"
        "# Generated by tools/make_sources_table.py from the curated data folder and its\n"
        "# SOURCE.md files; regenerate rather than edit.\n"
    )
    ns.output.write_text(
        header + yaml.safe_dump(table, sort_keys=False, allow_unicode=True, width=100), encoding="utf-8"
    )
    n_avail = sum(f["available"] for f in table["files"])
    print(f"wrote {ns.output}: {n_avail} files pinned, {len(table['files']) - n_avail} listed as unavailable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
