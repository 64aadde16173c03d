"""The retriever: dense, BM25 and hybrid (reciprocal rank fusion), with a trace of every stage.

Filters (tenant, roles, status, effective date) are applied inside each retriever's query,
before fusion: a chunk the caller may not see never enters the candidate lists.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.config import RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.models import Hit, SearchFilters
from rag_pipeline.core.retrieval.fusion import reciprocal_rank_fusion, rollup_documents
from rag_pipeline.core.retrieval.lexical import analyze, count_tokens
from rag_pipeline.core.storage import Store

MODES = ("dense", "bm25", "hybrid")


@dataclass
class RetrievalResult:
    """The final top k for one query, and the trace of how it was made."""

    query: str
    mode: str
    filters: SearchFilters
    hits: list[Hit]
    candidates: dict[str, list[Hit]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)
    # The query's embedding (dense and hybrid), so that a deeper search of it needs no new encode.
    query_vector: np.ndarray | None = None

    @property
    def context_tokens(self) -> int:
        """Words of the assembled context (the final hits' texts), the cost proxy per query."""
        return self.context_words(len(self.hits))

    def context_words(self, k: int) -> int:
        """Words of the first k final hits: the context a generator given k chunks reads."""
        return sum(count_tokens(h.text) for h in self.hits[:k])

    def ranked_documents(self) -> list[tuple[str, float]]:
        return rollup_documents(self.hits)

    def trace(self, depth: int = 10, final_depth: int | None = None) -> dict:
        """How the result was made: each retriever's top `depth`, the final list (its top
        `final_depth`, all of it by default), latencies and the words of the top `depth`."""
        return {
            "query": self.query,
            "mode": self.mode,
            "filters": {"tenant": self.filters.tenant, "roles": list(self.filters.roles),
                        "statuses": list(self.filters.statuses), "unrestricted": self.filters.unrestricted},
            "candidates": {
                stage: [_hit_json(h) for h in hits[:depth]] for stage, hits in self.candidates.items()
            },
            "final": [_hit_json(h) for h in self.hits[:final_depth]],
            "latency_ms": {k: round(v, 2) for k, v in self.latency_ms.items()},
            # The context at the trace's depth (k): an evaluation ranks 100 hits, a generator reads k.
            "context_tokens": self.context_words(depth),
        }


def _hit_json(hit: Hit) -> dict:
    return {"rank": hit.rank, "score": round(hit.score, 6), "chunk_id": hit.chunk_id, "doc_id": hit.doc_id,
            "heading_path": list(hit.heading_path)}


class Retriever:
    """Searches the served index of a store with one embedder and one retrieval config."""

    def __init__(self, store: Store, embedder: Embedder, config: RetrievalConfig) -> None:
        self.store = store
        self.embedder = embedder
        self.config = config

    def search(self, query: str, filters: SearchFilters, mode: str | None = None, k: int | None = None) -> RetrievalResult:
        return self.search_many([query], [filters], mode, k)[0]

    def search_many(
        self,
        queries: Sequence[str],
        filters: Sequence[SearchFilters],
        mode: str | None = None,
        k: int | None = None,
        vectors: np.ndarray | None = None,
    ) -> list[RetrievalResult]:
        """Search a batch: queries are embedded together and grouped by filters for the SQL.
        `vectors`: the queries' embeddings when the caller has them (then none is encoded).
        A batch's latencies are its stages' times shared evenly among its queries; a query's own
        latency is `single_query_latencies`'."""
        mode = mode or self.config.mode
        if mode not in MODES:
            raise ValueError(f"unknown retrieval mode {mode!r}; use one of {', '.join(MODES)}")
        k = k or self.config.k
        depth = max(self.config.candidates, k)
        results = [RetrievalResult(q, mode, f, []) for q, f in zip(queries, filters, strict=True)]
        groups: dict[SearchFilters, list[int]] = defaultdict(list)
        for index, f in enumerate(filters):
            groups[f].append(index)
        if mode in ("dense", "hybrid"):
            started = time.perf_counter()
            if vectors is None:
                vectors = self.embedder.encode(list(queries))
            encode_ms = (time.perf_counter() - started) * 1000 / max(len(queries), 1)
            for f, indexes in groups.items():
                started = time.perf_counter()
                hit_lists = self.store.search.dense_search(vectors[indexes], depth, f)
                per_query = (time.perf_counter() - started) * 1000 / len(indexes)
                for index, hits in zip(indexes, hit_lists):
                    results[index].candidates["dense"] = hits
                    results[index].query_vector = vectors[index]
                    results[index].latency_ms["embed_query"] = encode_ms
                    results[index].latency_ms["dense"] = per_query
        if mode in ("bm25", "hybrid"):
            for f, indexes in groups.items():
                started = time.perf_counter()
                hit_lists = self.store.search.bm25_search(
                    [analyze(queries[i]) for i in indexes], depth, f, self.config.bm25_k1, self.config.bm25_b
                )
                per_query = (time.perf_counter() - started) * 1000 / len(indexes)
                for index, hits in zip(indexes, hit_lists):
                    results[index].candidates["bm25"] = hits
                    results[index].latency_ms["bm25"] = per_query
        weights = {"dense": self.config.dense_weight, "bm25": self.config.bm25_weight}
        for result in results:
            if mode == "hybrid":
                started = time.perf_counter()
                fused = reciprocal_rank_fusion(result.candidates, weights, self.config.rrf_k, depth)
                result.latency_ms["fusion"] = (time.perf_counter() - started) * 1000
                result.candidates["fused"] = fused
                result.hits = fused[:k]
            else:
                result.hits = result.candidates[mode][:k]
            result.latency_ms["total"] = sum(result.latency_ms.values())
        return results

    def single_query_latencies(self, queries: Sequence[str], filters: Sequence[SearchFilters], mode: str | None = None,
                               k: int | None = None) -> list[float]:
        """Each query's latency in ms, searched on its own as a served query is (encode, search,
        fusion, hits), wall clock: a batch shares its time evenly, which hides a slow tail. One
        untimed search goes first, so that a first call's setup is not charged to a query."""
        if not queries:
            return []
        self.search_many(queries[:1], filters[:1], mode, k)
        latencies = []
        for query, query_filters in zip(queries, filters, strict=True):
            started = time.perf_counter()
            self.search_many([query], [query_filters], mode, k)
            latencies.append((time.perf_counter() - started) * 1000)
        return latencies
