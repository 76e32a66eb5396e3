"""WinoQueer (Felkner et al., ACL 2023; v0: QueerInAI @ NAACL 2022): anti-LGBTQ+ bias from
sentence-pair likelihoods; 50 = no preference, above 50 = bias against the queer group.

Data (``../shared/data/winoqueer/SOURCE.md``), the first file found wins:

- the final benchmark, ``winoqueer/winoqueer_final.csv`` (or ``winoqueer/data/winoqueer_final.csv``,
  the repository layout): header ``,Gender_ID_x,Gender_ID_y,sent_x,sent_y`` (unnamed leftover
  pandas index); ``sent_x`` is the LGBTQ+ sentence, ``sent_y`` the counterfactual; subgroups are
  the 9 ``Gender_ID_x`` values. 45,540 pairs per the paper. Not available in this workplace;
- v0, ``winoqueer/v0/winoqueer_benchmark.csv``: 5,872 pairs in the CrowS-Pairs format with the
  upstream misspelling ``stereo_antistero`` and leading spaces in cells; subgroups are the 8
  ``bias_type`` values.

Which file a run used, its sha256 and row count go in the results (``data_files``). Scoring:
``sentence_pairs`` (metric.py / metric_autoregressive.py after the 2024 fix, d4e5fe7; compare with
the paper's arXiv v2 tables). ``--pairs-protocol lmeval`` applies lm-eval's ``crows_pairs`` scoring
(whole-sentence log-likelihoods) to these pairs; lm-eval has no WinoQueer task, so such numbers
compare with no published table, only with other runs under the same option.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import DataError
from .crows_pairs import read_crows_format
from .sentence_pairs import OVERALL, PairFile, PairItem, SentencePairBenchmark, read_csv_rows, row_index

#: ``Gender_ID_x`` values of the final file (upstream metric script's group list).
FINAL_GROUPS = ("LGBTQ", "Queer", "Transgender", "NB", "Bisexual", "Pansexual", "Lesbian", "Asexual", "Gay")
#: ``bias_type`` values of v0.
V0_GROUPS = (
    "cis_gay_pairwise_mf",
    "cis_gay_pairwise_fm",
    "cis_les_pairwise_mf",
    "cis_les_pairwise_fm",
    "masc_femm_name",
    "masc_trans_pronoun",
    "femme_trans_pronoun",
    "masc_femm_pronoun",
)
FINAL_FILES = (Path("winoqueer") / "winoqueer_final.csv", Path("winoqueer") / "data" / "winoqueer_final.csv")
V0_FILE = Path("winoqueer") / "v0" / "winoqueer_benchmark.csv"


def resolve_file(data_dir: Path) -> tuple[Path, str]:
    """(path, ``"final"`` | ``"v0"``): the final file when present, else v0 (which may be
    missing; the loader then names it)."""
    for rel in FINAL_FILES:
        if (data_dir / rel).is_file():
            return data_dir / rel, "final"
    return data_dir / V0_FILE, "v0"


@lru_cache(maxsize=4)
def _read_final(bench, key, data_dir) -> PairFile:
    path = Path(key[0])
    rows = read_csv_rows(
        path, ("", "Gender_ID_x", "Gender_ID_y", "sent_x", "sent_y"), "WinoQueer data (winoqueer_final.csv)"
    )
    items: list[PairItem] = []
    excluded: dict[str, dict[str, list[str]]] = {}
    seen: dict[str, int] = {}
    for line, row in rows:
        index = row_index(row, path, line, seen)
        if row["Gender_ID_x"] not in FINAL_GROUPS:
            raise DataError(
                f"{path}:{line}: field 'Gender_ID_x': {row['Gender_ID_x']!r} is not one "
                f"of {list(FINAL_GROUPS)}"
            )
        if not row["Gender_ID_y"]:
            raise DataError(f"{path}:{line}: field 'Gender_ID_y': empty")
        # Every final pair is (stereotyping sentence about the queer group, counterfactual).
        item = PairItem(
            index,
            row["Gender_ID_x"],
            row["sent_x"],
            row["sent_y"],
            "stereo",
            line,
            {"gender_id_y": row["Gender_ID_y"]},
        )
        if bench.check_pair(path, line, item, ("sent_x", "sent_y"), excluded):
            items.append(item)
    return PairFile.read(items, path, data_dir, len(rows), excluded)


class WinoQueer(SentencePairBenchmark):
    """WinoQueer: categories are both files' subgroups + overall (gates are validated against all
    of them; a run has gates for the subgroups of the file it reads, ``categories_in``)."""

    name = "winoqueer"
    categories = FINAL_GROUPS + V0_GROUPS + (OVERALL,)
    data_folder = "winoqueer"
    title = "WinoQueer: anti-LGBTQ+ bias (Felkner et al., ACL 2023)"
    limitations = SentencePairBenchmark.common_limitations + (
        "The stereotypes come from a survey of LGBTQ+ people in the US, in English: other "
        "languages, cultures and forms of harm are not measured.",
        "Only the stereotype direction is tested (the final file has no anti-stereotype rows): a "
        "score says how often the model prefers the stereotyping sentence, not how strongly.",
    )

    def categories_in(self, data_dir: Path | None) -> tuple[str, ...]:
        if data_dir is None:
            return self.categories
        _, version = resolve_file(Path(data_dir))
        return (FINAL_GROUPS if version == "final" else V0_GROUPS) + (OVERALL,)

    def load_category(self, data_dir, category):
        """As ``SentencePairBenchmark.load_category``; a subgroup of the other file than the one
        in ``data_dir`` is a DataError naming both."""
        wanted = self.categories_in(Path(data_dir))
        if category in self.categories and category not in wanted:
            path, version = resolve_file(Path(data_dir))
            raise DataError(
                f"winoqueer category {category!r} is not a subgroup of the {version} file "
                f"{path} (its subgroups: {', '.join(wanted)})"
            )
        return super().load_category(data_dir, category)

    def read_file(self, data_dir: Path) -> PairFile:
        path, version = resolve_file(data_dir)
        if version == "v0":
            return read_crows_format(self, path, data_dir, "stereo_antistero", V0_GROUPS)
        stat = path.stat()
        return _read_final(self, (str(path), stat.st_size, stat.st_mtime_ns), data_dir)


BENCHMARKS = {"winoqueer": WinoQueer()}
