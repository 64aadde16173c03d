"""Combining ranked lists: reciprocal rank fusion of chunk lists, and chunks rolled up to documents."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from rag_pipeline.core.models import Hit


def rollup_documents(hits: Sequence[Hit]) -> list[tuple[str, float]]:
    """Documents in the order of their best chunk, each scored by that chunk."""
    best: dict[str, float] = {}
    for hit in hits:
        if hit.doc_id not in best:
            best[hit.doc_id] = hit.score
    return list(best.items())


def reciprocal_rank_fusion(
    lists: dict[str, Sequence[Hit]], weights: dict[str, float], rrf_k: int, k: int
) -> list[Hit]:
    """score(c) = sum over lists r of weight_r / (rrf_k + rank_r(c)); ties broken by chunk id."""
    scores: dict[str, float] = defaultdict(float)
    first_seen: dict[str, Hit] = {}
    for name, hits in lists.items():
        for hit in hits:
            scores[hit.chunk_id] += weights.get(name, 1.0) / (rrf_k + hit.rank)
            first_seen.setdefault(hit.chunk_id, hit)
    ordered = sorted(scores, key=lambda c: (-scores[c], c))[:k]
    return [_reranked(first_seen[c], scores[c], rank) for rank, c in enumerate(ordered, start=1)]


def _reranked(hit: Hit, score: float, rank: int) -> Hit:
    return replace(hit, score=score, rank=rank)
