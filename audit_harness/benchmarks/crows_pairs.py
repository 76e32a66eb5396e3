"""CrowS-Pairs (Nangia et al., EMNLP 2020): 1,508 English sentence pairs over 9 bias types.

Data: ``<data_dir>/crows_pairs/crows_pairs_anonymized.csv`` (``../shared/data/crows_pairs/
SOURCE.md``): header ``,sent_more,sent_less,stereo_antistereo,bias_type,annotations,anon_writer,
anon_annotators``; the unnamed first column is the row index. WinoQueer v0 uses the same format.

Metric: the authors' (``metric.py``), shared-token scores as in ``sentence_pairs``; a pair counts
when ``sent_more`` scores higher, for ``stereo`` and ``antistereo`` rows alike (upstream swaps the
sentences of antistereo rows and compares the other way round, which is the same thing); the two
subsets are reported as ``bias_score_stereo`` and ``bias_score_antistereo``. This is NOT lm-eval's
``crows_pairs`` (full-sentence log-likelihoods, docs/metrics.md §1.6 (a)); ``--pairs-protocol lmeval``
scores that one instead (``sentence_pairs``), for numbers comparable with lm-eval's
``crows_pairs_english`` ``pct_stereotype``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import DataError
from .sentence_pairs import (
    DIRECTIONS,
    OVERALL,
    PairFile,
    PairItem,
    SentencePairBenchmark,
    read_csv_rows,
    row_index,
)

BIAS_TYPES = (
    "race-color",
    "gender",
    "socioeconomic",
    "nationality",
    "religion",
    "age",
    "sexual-orientation",
    "physical-appearance",
    "disability",
)
FILE = Path("crows_pairs") / "crows_pairs_anonymized.csv"


def read_crows_format(
    bench: SentencePairBenchmark, path: Path, data_dir: Path, direction_column: str, groups: tuple[str, ...]
) -> PairFile:
    """Pairs of a file in the CrowS-Pairs format (CrowS-Pairs, WinoQueer v0).

    Args:
        bench: the benchmark reading it (names it in errors; checks each pair).
        path: the CSV file. data_dir: the data directory (provenance is relative to it).
        direction_column: ``stereo_antistereo`` (CrowS-Pairs) or ``stereo_antistero`` (the
            WinoQueer v0 spelling).
        groups: the allowed ``bias_type`` values.
    Raises:
        DataError: missing file or column, malformed CSV, a non-integer or duplicated row index,
            an empty sentence, a direction other than stereo/antistereo, or a bias_type not in
            ``groups``; messages name the file, line and field.
    """
    stat = path.stat() if path.is_file() else None
    key = (str(path), stat.st_size, stat.st_mtime_ns) if stat else (str(path), -1, -1)
    return _read_crows_format(bench, key, data_dir, direction_column, groups)


@lru_cache(maxsize=8)
def _read_crows_format(bench, key, data_dir, direction_column, groups) -> PairFile:
    path = Path(key[0])
    rows = read_csv_rows(
        path, ("", "sent_more", "sent_less", direction_column, "bias_type"), f"{bench.name} data"
    )
    items: list[PairItem] = []
    excluded: dict[str, dict[str, list[str]]] = {}
    seen: dict[str, int] = {}
    for line, row in rows:
        index = row_index(row, path, line, seen)
        if row[direction_column] not in DIRECTIONS:
            raise DataError(
                f"{path}:{line}: field {direction_column!r}: {row[direction_column]!r} "
                f"is not one of {list(DIRECTIONS)}"
            )
        if row["bias_type"] not in groups:
            raise DataError(
                f"{path}:{line}: field 'bias_type': {row['bias_type']!r} is not one of {list(groups)}"
            )
        item = PairItem(
            index, row["bias_type"], row["sent_more"], row["sent_less"], row[direction_column], line
        )
        if bench.check_pair(path, line, item, ("sent_more", "sent_less"), excluded):
            items.append(item)
    return PairFile.read(items, path, data_dir, len(rows), excluded)


class CrowSPairs(SentencePairBenchmark):
    """CrowS-Pairs: loader (see module docstring); categories are the 9 bias types + overall."""

    name = "crows_pairs"
    categories = BIAS_TYPES + (OVERALL,)
    data_folder = "crows_pairs"
    title = "CrowS-Pairs (Nangia et al., EMNLP 2020)"
    limitations = SentencePairBenchmark.common_limitations + (
        "US English crowd-sourced stereotypes: the pairs describe stereotypes about groups "
        "disadvantaged in the US, written by US crowd workers.",
        "Many pairs are noisy (Blodgett et al. 2021 found that a large share do not contrast a "
        "stereotype with its opposite cleanly): a small difference between models can be noise "
        "of the data, not of the model.",
    )

    def read_file(self, data_dir: Path) -> PairFile:
        return read_crows_format(self, Path(data_dir) / FILE, Path(data_dir), "stereo_antistereo", BIAS_TYPES)


BENCHMARKS = {"crows_pairs": CrowSPairs()}
