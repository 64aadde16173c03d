"""Ranking metrics of one query, following trec_eval's conventions (as pytrec_eval computes them).

Notation: `ranking` is the system's list of document ids, best first; `relevant` maps each judged
document id to its relevance grade (> 0 means relevant); k is a cutoff.

Conventions shared by all functions:
- only documents with grade > 0 count as relevant; a query without relevant documents is not
  scored (the caller keeps unanswerable cases apart);
- duplicates in the ranking count once, at their first position;
- every metric is in [0, 1] and averages over queries are arithmetic means (weighted where said).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

RECALL_CUTOFFS = (1, 3, 5, 10, 100)
PRECISION_CUTOFFS = (1, 3, 5, 10)
SUCCESS_CUTOFFS = (1, 3, 5, 10)


def _dedupe(ranking: Sequence[str], k: int | None = None) -> list[str]:
    """The ranking without repeats (each document at its first position), cut at k."""
    if k is None:
        return list(dict.fromkeys(ranking))
    seen: dict[str, None] = {}
    for doc_id in ranking:
        if len(seen) == k:
            break
        seen.setdefault(doc_id)
    return list(seen)


def _relevant(relevant: Mapping[str, float]) -> dict[str, float]:
    return {d: g for d, g in relevant.items() if g > 0}


def recall_at(ranking: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """Recall@k = |relevant ∩ top k| / |relevant|  (trec_eval `recall_k`)."""
    rel = _relevant(relevant)
    return sum(1 for d in _dedupe(ranking, k) if d in rel) / len(rel)


def precision_at(ranking: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """Precision@k = |relevant ∩ top k| / k; the divisor is k even when fewer are retrieved (`P_k`)."""
    rel = _relevant(relevant)
    return sum(1 for d in _dedupe(ranking, k) if d in rel) / k


def reciprocal_rank_at(ranking: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """RR@k = 1 / rank of the first relevant document in the top k, else 0 (`recip_rank` on the run cut at k)."""
    rel = _relevant(relevant)
    for rank, doc_id in enumerate(_dedupe(ranking, k), start=1):
        if doc_id in rel:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranking: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """nDCG@k = DCG@k / IDCG@k with linear gains (`ndcg_cut_k`).

    DCG@k = sum over ranks i <= k of grade(d_i) / log2(i + 1); IDCG@k is the DCG of the judged
    relevant documents sorted by grade.
    """
    rel = _relevant(relevant)
    dcg = sum(rel.get(d, 0.0) / math.log2(i + 1) for i, d in enumerate(_dedupe(ranking, k), start=1))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def success_at(ranking: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """Success@k = 1 if any relevant document is in the top k, else 0 (`success_k`)."""
    rel = _relevant(relevant)
    return 1.0 if any(d in rel for d in _dedupe(ranking, k)) else 0.0


def first_relevant_rank(ranking: Sequence[str], relevant: Mapping[str, float]) -> int | None:
    rel = _relevant(relevant)
    for rank, doc_id in enumerate(_dedupe(ranking), start=1):
        if doc_id in rel:
            return rank
    return None


def query_metrics(ranking: Sequence[str], relevant: Mapping[str, float], extra_cutoffs: Sequence[int] = ()) -> dict[str, float]:
    """All headline metrics of one query, keyed like `recall_at_5`, `ndcg_at_10`, `mrr_at_10`;
    `extra_cutoffs` adds recall and success at other k (a report's own cutoff)."""
    values = {f"recall_at_{k}": recall_at(ranking, relevant, k) for k in sorted({*RECALL_CUTOFFS, *extra_cutoffs})}
    values |= {f"precision_at_{k}": precision_at(ranking, relevant, k) for k in PRECISION_CUTOFFS}
    values |= {f"success_at_{k}": success_at(ranking, relevant, k) for k in sorted({*SUCCESS_CUTOFFS, *extra_cutoffs})}
    values["mrr_at_10"] = reciprocal_rank_at(ranking, relevant, 10)
    values["ndcg_at_10"] = ndcg_at(ranking, relevant, 10)
    return values


def mean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Arithmetic mean, or the weighted mean sum(w * v) / sum(w)."""
    if not values:
        return float("nan")
    if weights is None:
        return sum(values) / len(values)
    return sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)


def nearest_rank_quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-quantile (0 < q <= 1): the smallest value with at least q of the values
    at or below it; NaN for no values."""
    if not values:
        return float("nan")
    return float(sorted(values)[nearest_rank(len(values), q)])


def nearest_rank(count: int, q: float) -> int:
    """The 0-based position of the nearest-rank q-quantile among `count` sorted values (count > 0)."""
    return min(count - 1, max(0, math.ceil(q * count) - 1))
