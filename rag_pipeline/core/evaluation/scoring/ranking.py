"""Each golden case's documents as retrieval ranks them, deep enough for the metrics: chunk hits
rolled up to documents (a document's best chunk), deeper searches where a few documents filled
the top chunks, latencies of single searches, and superseded versions allowed to compete."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np

from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.fusion import rollup_documents
from rag_pipeline.core.retrieval.retriever import RetrievalResult, Retriever

# Metrics rank documents: at least this many per case when the visible index holds them
# (Recall@100 at document level). Where chunks of a few documents fill the top EVAL_DEPTH chunks,
# deeper searches (4x each, up to MAX_EVAL_CHUNKS chunks) add the next documents behind them.
EVAL_DEPTH = 100
MAX_EVAL_CHUNKS = 6400
# Cases searched one at a time for the latency figures (p50, p95), chosen by sha256 of their id.
LATENCY_SAMPLE = 30


def case_filters(case: GoldenCase) -> SearchFilters:
    """The trusted caller context of a case: its tenant and roles, never anything read from the question."""
    return SearchFilters(tenant=case.tenant, roles=case.roles)


def confidence(result: RetrievalResult) -> float | None:
    """The no-result signal: best dense cosine (dense, hybrid) or best BM25 score (bm25)."""
    source = result.candidates.get("dense") or result.candidates.get("bm25") or []
    return max((h.score for h in source), default=None)


def ranked_documents(retriever: Retriever, questions: Sequence[str], filters: Sequence[SearchFilters],
                     results: Sequence[RetrievalResult], mode: str) -> list[list[tuple[str, float]]]:
    """Each case's documents in rank order (`rollup_documents` of its hits), filled to EVAL_DEPTH
    documents when its top chunks came from fewer: the documents of ever deeper searches of the
    same query are appended behind, in their order. The head is the retrieval's own, unchanged."""
    rankings = [rollup_documents(r.hits) for r in results]
    depth = EVAL_DEPTH

    def short(indexes, found) -> list[int]:  # cut at `depth` chunks with documents still missing
        return [i for i, r in zip(indexes, found) if len(rankings[i]) < EVAL_DEPTH and len(r.hits) >= depth]

    pending = short(range(len(results)), results)
    while pending and depth < MAX_EVAL_CHUNKS:
        depth *= 4
        vectors = np.stack([results[i].query_vector for i in pending]) if results[pending[0]].query_vector is not None else None
        deeper = retriever.search_many([questions[i] for i in pending], [filters[i] for i in pending], mode, depth, vectors)
        for i, result in zip(pending, deeper):
            ranked = {d for d, _ in rankings[i]}
            rankings[i] += [(d, score) for d, score in rollup_documents(result.hits) if d not in ranked][: EVAL_DEPTH - len(ranked)]
        pending = short(pending, deeper)
    return rankings


def sampled_latencies(retriever: Retriever, cases: Sequence[GoldenCase], filters: Sequence[SearchFilters], mode: str,
                      size: int) -> dict[int, float]:
    """Case index -> its latency searched on its own, for `size` cases (smallest sha256 of the id)."""
    chosen = sorted(range(len(cases)), key=lambda i: hashlib.sha256(cases[i].id.encode("utf-8")).hexdigest())[:size]
    timed = retriever.single_query_latencies([cases[i].question for i in chosen], [filters[i] for i in chosen], mode)
    return dict(zip(chosen, timed))


def superseded_outranks(
    cases: Sequence[GoldenCase], retriever: Retriever, mode: str, supersedes: Mapping[str, str]
) -> dict[str, bool]:
    """For cases whose gold document replaced an older one: with superseded documents allowed to
    compete, does the old version rank above the current one? (The goal: never.)"""
    relevant = [c for c in cases if c.answerable and any(d in supersedes for d in c.gold_docs)]
    if not relevant:
        return {}
    filters = [SearchFilters(tenant=c.tenant, roles=c.roles, statuses=("published", "superseded")) for c in relevant]
    results = retriever.search_many([c.question for c in relevant], filters, mode, EVAL_DEPTH)
    verdicts = {}
    for case, result in zip(relevant, results):
        ranking = [d for d, _ in rollup_documents(result.hits)]
        position = {d: i for i, d in enumerate(ranking)}
        verdict = False
        for gold in case.gold_docs:
            old = supersedes.get(gold)
            if old is not None and position.get(old, math.inf) < position.get(gold, math.inf):
                verdict = True
        verdicts[case.id] = verdict
    return verdicts
