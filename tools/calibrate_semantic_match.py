"""Calibrate the KGQuiz semantic-match threshold theta for the local embedding model.

The paper's embedding model (InstructGPT Ada) is an API not available here, so its threshold
(unpublished anyway) cannot be reused. This script builds gold/paraphrase pairs from the KGQuiz
data itself and picks theta for all-MiniLM-L6-v2:

- positives (should match): the two sides of the data's synonym-type triples in the Task5 gold
  lists: ConceptNet ``synonym``, UMLS ``same as`` and ``possibly equivalent to`` (a gold entity and
  another name for it); identical strings after normalisation are dropped;
- negatives (should not match): two tails of the same relation for different head entities (same
  type, different entity: "Hyperkalemia" vs "Nausea" for "may cause"), the confusion a semantic
  match must reject; one negative per positive, per domain, all three domains (YAGO has no
  synonym relation, so it contributes negatives only);
- hard negatives (should not match): two different values of a relation drawn from its set of
  distinct tails, relation first, so closed classes weigh as much as open ones: siblings of one
  type, such as YAGO's ``Female`` vs ``male``, which the random negatives almost never pair;
- split by Task5 entity id: even ids calibrate, odd ids are held out.

theta is the smallest value of the grid 0.00, 0.01, ..., 0.99 whose false-positive rate on the
calibration half is at most ``--max-fpr`` (default 0.05) in EVERY domain, for the random and the
hard negatives alike: a semantic match may
credit a wrong entity of the right type at most 5% of the time, which matters more for a release
floor than crediting every paraphrase (the true-positive rate it buys is printed). The threshold
of maximal balanced accuracy is printed for comparison. The held-out half reports the rates at
the chosen theta. Copy it into ``audit_harness/benchmarks/kgquiz_protocol.yaml``.

Usage: python tools/calibrate_semantic_match.py --data-dir ../shared/data [--seed 0]
(about 10 s on 2 CPU cores; reads the data, writes nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit_harness.models.embedding import default_embedder  # noqa: E402
from bias_metrics.kgquiz import normalize_text  # noqa: E402

SYNONYM_RELATIONS = {"ConceptNet": {"synonym"}, "UMLS": {"same as", "possibly equivalent to"}, "YAGO": set()}
GRID = np.round(np.arange(0.0, 0.995, 0.01), 2)


def build_pairs(data_dir: Path, seed: int) -> list[dict]:
    """Pairs ``{domain, split, a, b, label}`` (label 1 = paraphrase) from the Task5 files."""
    rng = np.random.default_rng(seed)
    pairs: list[dict] = []
    for domain, synonyms in SYNONYM_RELATIONS.items():
        path = data_dir / "kgquiz" / domain / "Task5.json"
        rows = json.loads(path.read_text(encoding="utf-8"))
        for split in ("calibration", "held_out"):
            parity = 0 if split == "calibration" else 1
            positives, tails_by_relation = [], {}
            for row_id, row in rows.items():
                if int(row_id) % 2 != parity:
                    continue
                for head, relation, tail in row["ground_truth"]:
                    head, relation, tail = head.strip(), relation.strip(), tail.strip()
                    tails_by_relation.setdefault(relation, []).append((head, tail))
                    if relation in synonyms and normalize_text(head) != normalize_text(tail):
                        positives.append((head, tail))
            positives = sorted(set(positives))
            pairs += [{"domain": domain, "split": split, "a": a, "b": b, "label": 1} for a, b in positives]
            # As many negatives as the domain's positives (at least 200 where it has none).
            relations = sorted(r for r, v in tails_by_relation.items() if len({h for h, _ in v}) > 1)
            n_neg, negatives = max(len(positives), 200), set()
            for _ in range(50 * n_neg):
                if len(negatives) >= n_neg:
                    break
                rel = tails_by_relation[relations[rng.integers(len(relations))]]
                (h1, t1), (h2, t2) = (rel[i] for i in rng.choice(len(rel), 2, replace=False))
                if h1 != h2 and normalize_text(t1) != normalize_text(t2):
                    negatives.add((t1, t2))
            pairs += [
                {"domain": domain, "split": split, "a": a, "b": b, "label": 0, "kind": "random"}
                for a, b in sorted(negatives)
            ]
            values = {
                r: sorted({normalize_text(t): t for _, t in v}.values()) for r, v in tails_by_relation.items()
            }
            closed = sorted(r for r, v in values.items() if len(v) > 1)
            hard: set[tuple[str, str]] = set()
            for _ in range(50 * n_neg):
                if len(hard) >= n_neg or not closed:
                    break
                vals = values[closed[rng.integers(len(closed))]]
                a, b = (vals[i] for i in rng.choice(len(vals), 2, replace=False))
                hard.add((a, b))
            pairs += [
                {"domain": domain, "split": split, "a": a, "b": b, "label": 0, "kind": "hard"}
                for a, b in sorted(hard)
            ]
    return pairs


def rates(cos: np.ndarray, labels: np.ndarray, theta: float) -> dict[str, float]:
    """True-positive rate, false-positive rate and balanced accuracy at ``theta``."""
    hit = cos >= theta
    tpr = float(hit[labels == 1].mean()) if (labels == 1).any() else float("nan")
    fpr = float(hit[labels == 0].mean())
    return {"tpr": tpr, "fpr": fpr, "balanced_accuracy": (tpr + 1 - fpr) / 2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-fpr", type=float, default=0.05)
    args = ap.parse_args()
    pairs = build_pairs(args.data_dir.resolve(), args.seed)
    embedder = default_embedder()
    texts = sorted({p["a"] for p in pairs} | {p["b"] for p in pairs})
    index = {t: i for i, t in enumerate(texts)}
    emb = embedder.embed(texts)
    cos = np.array([float(emb[index[p["a"]]] @ emb[index[p["b"]]]) for p in pairs])
    labels = np.array([p["label"] for p in pairs])
    split = np.array([p["split"] for p in pairs])
    domain = np.array([p["domain"] for p in pairs])
    kind = np.array([p.get("kind", "positive") for p in pairs])
    cal = split == "calibration"
    scores = [rates(cos[cal], labels[cal], t)["balanced_accuracy"] for t in GRID]
    best_balanced = float(GRID[int(np.argmax(scores))])
    # Every domain, random and hard negatives alike: FPR over the negatives of that kind.
    ok = [
        t
        for t in GRID
        if all(
            float((cos[m] >= t).mean()) <= args.max_fpr
            for d in SYNONYM_RELATIONS
            for k in ("random", "hard")
            if (m := cal & (domain == d) & (kind == k)).any()
        )
    ]
    theta = float(ok[0]) if ok else float(GRID[-1])
    print(f"embedding model {embedder.name} ({embedder.fingerprint})")
    print(
        f"pairs: {int(cal.sum())} calibration, {int((~cal).sum())} held out "
        f"({int(labels.sum())} positives in all)"
    )
    print(
        f"theta = {theta:.2f}: smallest with FPR <= {args.max_fpr} in every domain on the calibration "
        f"half (max balanced accuracy would be at {best_balanced:.2f}: {max(scores):.3f})"
    )
    for name, mask in (
        ("held out, all", ~cal),
        *((f"held out, {d}", ~cal & (domain == d)) for d in SYNONYM_RELATIONS),
    ):
        r = rates(cos[mask], labels[mask], theta)
        hard = mask & (kind == "hard")
        fmr = float((cos[hard] >= theta).mean()) if hard.any() else float("nan")
        print(
            f"  {name:<22} n={int(mask.sum()):>5} positives={int(labels[mask].sum()):>4} "
            f"TPR={r['tpr']:.3f} FPR={r['fpr']:.3f} hard-negative FMR={fmr:.3f} "
            f"balanced={r['balanced_accuracy']:.3f}"
        )
    for a, b in (("Female", "male"), ("male", "female")):
        ea, eb = embedder.embed([a, b])
        print(f"  cos({a!r}, {b!r}) = {float(ea @ eb):.3f}")
    pos, neg = cos[labels == 1], cos[labels == 0]
    print(
        f"cosine: positives median {np.median(pos):.3f} (IQR {np.percentile(pos, 25):.3f}-"
        f"{np.percentile(pos, 75):.3f}); negatives median {np.median(neg):.3f} "
        f"(IQR {np.percentile(neg, 25):.3f}-{np.percentile(neg, 75):.3f})"
    )


if __name__ == "__main__":
    main()
