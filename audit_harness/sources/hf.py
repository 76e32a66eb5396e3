"""EsBBQ / CaBBQ rows from the pinned CSV files or from the authors' Hugging Face copies
(``BSC-LT/EsBBQ``, ``BSC-LT/CaBBQ``: one config per category, split ``test``, the JSONL fields).

:func:`read_rows` returns the same thing for both sources: each row as the CSV's ``{column: str}``
in file order, so a loader that parses CSV rows (``benchmarks/esbbq.py``) can take either. Hub rows
are typed (lists, a nested ``answer_info``, booleans, integers); they are written back in the
CSV's spelling (Python list literals, ``answer_info.ans0`` columns, ``True``/``False``), which is
how the authors' CSVs were produced from the same records.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Mapping

from ..errors import DataError

HF_DATASETS = {"esbbq": "BSC-LT/EsBBQ", "cabbq": "BSC-LT/CaBBQ"}
CSV_SUBDIRS = {"esbbq": "esbbq_cabbq/data_es", "cabbq": "esbbq_cabbq/data_ca"}
SOURCES = ("files", "hf")


def _csv_spelling(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return str(list(value))  # the CSVs hold Python list literals: "['el Reino Unido']"
    return str(value)  # bool -> "True"/"False", int -> digits


def hub_row_to_csv(row: Mapping[str, object]) -> dict[str, str]:
    """One Hub/JSONL record as the CSV's ``{column: str}`` (nested dicts become ``a.b`` columns)."""
    flat: dict[str, str] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                flat[f"{key}.{sub}"] = _csv_spelling(v)
        else:
            flat[key] = _csv_spelling(value)
    return flat


def read_rows(
    benchmark: str,
    category: str,
    *,
    source: str = "files",
    data_dir: str | Path | None = None,
    hf_path: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """Rows of one EsBBQ/CaBBQ category, and where they came from.

    Args:
        benchmark: ``esbbq`` or ``cabbq``.
        category: file stem / Hub config name, e.g. ``Age``.
        source: ``files`` (``<data_dir>/esbbq_cabbq/data_{es,ca}/<category>.full.csv``) or ``hf``
            (``datasets.load_dataset(hf_path or BSC-LT/..., name=category, split="test")``; the
            datasets cache and ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` apply as usual).
        data_dir: the data dir (``files`` only).
        hf_path: a Hub id or a local folder in the Hub layout (``hf`` only).
        revision: Hub revision to pin (``hf`` only); recorded as given.
        cache_dir: datasets cache folder (default: datasets' own).

    Returns:
        (rows, provenance): rows as ``{column: str}`` dicts in order; provenance has ``source``
        and either ``path`` or ``dataset``/``config``/``split``/``revision`` (the requested
        revision, else the dataset's hash, which datasets derives from the Hub commit).

    Raises:
        DataError: unknown benchmark or source, a missing file, or a dataset that cannot be
            loaded (offline without a cached copy, unknown config, ...), naming it.
    """
    if benchmark not in HF_DATASETS:
        raise DataError(f"read_rows: unknown benchmark {benchmark!r}; known: {', '.join(HF_DATASETS)}")
    if source == "files":
        return _file_rows(benchmark, category, data_dir)
    if source != "hf":
        raise DataError(f"read_rows: unknown source {source!r}; known: {', '.join(SOURCES)}")
    return _hub_rows(hf_path or HF_DATASETS[benchmark], category, revision, cache_dir)


def _file_rows(
    benchmark: str, category: str, data_dir: str | Path | None
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """``read_rows`` from the pinned CSV file."""
    if data_dir is None:
        raise DataError("read_rows: source 'files' needs data_dir")
    path = Path(data_dir) / CSV_SUBDIRS[benchmark] / f"{category}.full.csv"
    if not path.is_file():
        raise DataError(f"missing {benchmark} {category} data: {path}")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, strict=True))
    return rows, {"source": "files", "path": str(path)}


def _hub_rows(
    dataset: str, category: str, revision: str | None, cache_dir: str | Path | None
) -> tuple[list[dict[str, str]], dict[str, str]]:
    """``read_rows`` from the Hub dataset (or local copy) ``dataset``, through ``datasets``."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(
            dataset, name=category, revision=revision, cache_dir=None if cache_dir is None else str(cache_dir)
        )
        builder.download_and_prepare()
        ds = builder.as_dataset(split="test")
    except Exception as e:  # datasets raises many types (ConnectionError, ValueError, ...)
        raise DataError(
            f"cannot load {dataset} config {category!r} split 'test' ({type(e).__name__}: {e})"
        ) from None
    rows = [hub_row_to_csv(r) for r in ds]
    return rows, {
        "source": "hf",
        "dataset": dataset,
        "config": category,
        "split": "test",
        "revision": revision or builder.hash,
    }
