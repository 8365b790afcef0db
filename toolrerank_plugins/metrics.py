"""Ranking metrics for tool retrieval (binary relevance).

Each function takes a ranked list of ids (best first), the set of relevant ids, and a cut-off ``k``
(``None`` = the whole list). A query with no relevant id has no defined value: the functions raise
``ValueError`` and the evaluation harness skips such queries (and says how many).

- ``recall_at_k``: |relevant in top k| / |relevant|.
- ``precision_at_k``: |relevant in top k| / k.
- ``ndcg_at_k``: DCG with gain 1/log2(rank+1) over the ideal DCG of min(k, |relevant|) hits.
- ``sufficiency_at_k``: 1 if *all* relevant ids are in the top k (a.k.a. Pass Rate@k, COMP@k), else 0.
- ``mmrr``: Multiple Mean Reciprocal Rank (Kachuee et al., Eq. 2): the mean rank of a perfect ranking,
  (|R|+1)/2, over the mean rank of the relevant ids, a missing id counted at rank k+1.
- ``average_precision``: sum over hits of precision@rank, divided by min(|relevant|, k) (MAP over queries).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence


def _prep(ranked: Sequence[str], relevant: Collection[str], k: int | None) -> tuple[list[str], set[str], int]:
    rel = set(relevant)
    if not rel:
        raise ValueError("metric undefined: the query has no relevant ids")
    if k is not None and k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    # A ranking that repeats an id counts it once, at its first position.
    seen: set[str] = set()
    dedup = [x for x in ranked if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
    kk = len(dedup) if k is None else k
    return dedup[:kk], rel, kk


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, _ = _prep(ranked, relevant, k)
    return len(rel.intersection(top)) / len(rel)


def precision_at_k(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, kk = _prep(ranked, relevant, k)
    if kk == 0:
        return 0.0
    return len(rel.intersection(top)) / kk


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, kk = _prep(ranked, relevant, k)
    dcg = sum(1.0 / math.log2(i + 2) for i, x in enumerate(top) if x in rel)
    ideal_hits = min(len(rel), kk)
    idcg = sum(1.0 / math.log2(i + 2) for i in range(ideal_hits))
    return dcg / idcg if idcg > 0 else 0.0


def sufficiency_at_k(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, _ = _prep(ranked, relevant, k)
    return 1.0 if rel.issubset(top) else 0.0


def mmrr(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, kk = _prep(ranked, relevant, k)
    pos = {x: i + 1 for i, x in enumerate(top)}
    actual = sum(pos.get(r, kk + 1) for r in rel) / len(rel)
    perfect = (len(rel) + 1) / 2
    return perfect / actual


def average_precision(ranked: Sequence[str], relevant: Collection[str], k: int | None = None) -> float:
    top, rel, kk = _prep(ranked, relevant, k)
    hits, total = 0, 0.0
    for i, x in enumerate(top, start=1):
        if x in rel:
            hits += 1
            total += hits / i
    denom = min(len(rel), kk) if kk else len(rel)
    return total / denom if denom else 0.0


#: metric name -> function; the evaluation harness reports each at every requested k.
METRICS = {
    "recall": recall_at_k,
    "ndcg": ndcg_at_k,
    "sufficiency": sufficiency_at_k,
    "precision": precision_at_k,
    "mmrr": mmrr,
    "map": average_precision,
}
