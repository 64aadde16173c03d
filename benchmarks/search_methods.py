"""search_scale.py's methods: the physical references (numpy, the sparse product, their fusion), the
store's timed search calls (with where a query's time goes) and the per-method summary row."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
from scipy import sparse
from search_data import TERMS, VOCABULARY, chunk_id
from search_memory_use import peak_rss_mb

from rag_pipeline.api import Hit, RetrievalConfig, SearchFilters, Store
from rag_pipeline.core.retrieval.fusion import reciprocal_rank_fusion
from rag_pipeline.core.vectors import near_top, normalise_rows, rank

METHODS = {
    "numpy": "numpy matrix product (dense reference)",
    "memory": "DuckDB store, memory_search=True: the in-memory served copy (product default)",
    "duckdb": "DuckDB store, memory_search=False: SQL path",
    "pg-exact": "PostgreSQL exact, memory_search=False: SQL path",
    "pg-hnsw": "PostgreSQL HNSW: approximate engine path (dense only)",
}
SQL_METHODS = ("duckdb", "pg-exact")  # slow at large N: at most --slow-queries queries
UNRESTRICTED = SearchFilters(unrestricted=True)
RETRIEVAL = RetrievalConfig()  # k1, b, candidate depth, RRF constant and weights: the product's defaults


def reference(matrix: np.ndarray, query_matrix: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
    """The exact top-k (chunk id, cosine) as the store ranks them (float32 candidates, float64 cosine, id)."""
    out = []
    for query in normalise_rows(query_matrix):
        chosen = near_top(matrix @ query, k)
        out.append(rank(query, [chunk_id(int(j)) for j in chosen], matrix[chosen], k))
    return out


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ query
    top = np.argpartition(scores, len(scores) - k)[len(scores) - k :]
    return top[np.argsort(-scores[top], kind="stable")]


def bm25_weights(n: int, chunk: np.ndarray, term: np.ndarray, tf: np.ndarray, lengths: np.ndarray,
                 k1: float, b: float) -> sparse.csr_matrix:
    """Terms x chunks CSR matrix of each posting's BM25 weight (search.bm25_search's formula, float64):
    idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl)), N, df and avgdl over all chunks."""
    df = np.bincount(term, minlength=VOCABULARY).astype(np.float64)
    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
    avgdl = float(lengths.mean())
    counts = tf.astype(np.float64)
    weights = idf[term] * counts * (k1 + 1) / (counts + k1 * (1 - b + b * lengths[chunk] / avgdl))
    return sparse.csr_matrix((weights, (term, chunk)), shape=(VOCABULARY, n))


def sparse_top_k(weights: sparse.csr_matrix, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The query's term-count vector (1 x VOCABULARY, sparse) times the weights; the k best by score
    rounded to 1e-9 (argpartition), ties to the smaller chunk id (index order is chunk id order)."""
    terms, counts = np.unique(query, return_counts=True)
    vector = sparse.csr_matrix((counts.astype(np.float64), (np.zeros(len(terms), dtype=np.int32), terms)),
                               shape=(1, VOCABULARY))
    product = vector @ weights
    indexes, scores = product.indices, product.data
    positive = scores > 0
    indexes, scores = indexes[positive], scores[positive]
    if len(scores) == 0:
        return []
    keys = np.floor(scores * 1e9 + 0.5)
    depth = min(k, len(keys))
    edge = keys[np.argpartition(-keys, depth - 1)[:depth]].min()
    chosen = np.flatnonzero(keys >= edge)
    order = chosen[np.lexsort((indexes[chosen], -keys[chosen]))][:k]
    return [(chunk_id(int(indexes[j])), float(scores[j])) for j in order]


def query_reach(weights: sparse.csr_matrix, term_queries: list[np.ndarray]) -> dict[str, int]:
    """Median, over the queries, of the chunks matching a query term and of the postings of its terms."""
    rows = [weights[np.unique(terms)] for terms in term_queries]
    return {"matched_chunks_p50": int(np.median([np.count_nonzero(r.getnnz(axis=0)) for r in rows])),
            "postings_read_p50": int(np.median([r.nnz for r in rows]))}


def fused_reference(dense: list[tuple[str, float]], bm25: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """The product's fusion of the two reference lists (each `candidates` deep)."""
    def hits(ranked):
        return [Hit(cid, cid.rsplit("#", 1)[0], score, position) for position, (cid, score) in enumerate(ranked, start=1)]

    fused = reciprocal_rank_fusion({"dense": hits(dense), "bm25": hits(bm25)}, fusion_weights(), RETRIEVAL.rrf_k,
                                   max(RETRIEVAL.candidates, k))
    return [(h.chunk_id, h.score) for h in fused[:k]]


def fusion_weights() -> dict[str, float]:
    return {"dense": RETRIEVAL.dense_weight, "bm25": RETRIEVAL.bm25_weight}


# ---- timing ----------------------------------------------------------------------------------

# Where a store's search time goes: (part, object attribute), shadowed by timing wrappers.
PARTS = {"version_check": ("search", "served_copy"), "candidates": ("db", "dense_candidates"),
         "read_vectors": ("db", "read_vectors"), "hits": ("search", "_hits")}


@contextmanager
def instrumented(store: Store) -> Iterator[dict[str, float]]:
    """Seconds spent per call of the store in each of PARTS (instance attributes shadow the methods
    for the block; the wrappers add one clock read). version_check: `served_copy()` (the served
    version's query, once the copy is loaded); hits: reading the hits' chunk rows."""
    spent = dict.fromkeys(PARTS, 0.0)

    def timed(name: str, method: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return wrapper

    owners = {"search": store.search, "db": store.db}
    for name, (owner, attribute) in PARTS.items():
        setattr(owners[owner], attribute, timed(name, getattr(owners[owner], attribute)))
    try:
        yield spent
    finally:
        for owner, attribute in PARTS.values():
            delattr(owners[owner], attribute)


def time_store(store: Store, search: Callable[[Store, object], list[Hit]], items: Sequence, warm_up) -> tuple:
    """Latency of `search(store, item)` per item after one warm-up call, its results, and where the
    time went (p50 ms per part)."""
    search(store, warm_up)
    latencies, results = [], []
    parts: dict[str, list[float]] = {name: [] for name in [*PARTS, "rest"]}
    with instrumented(store) as spent:
        cpu_started = time.process_time()  # every thread of this process: the CPU the queries cost
        for item in items:
            spent.update(dict.fromkeys(PARTS, 0.0))
            started = time.perf_counter()
            hits = search(store, item)
            elapsed = time.perf_counter() - started
            latencies.append(elapsed)
            results.append([(h.chunk_id, h.score) for h in hits])
            for name in PARTS:
                parts[name].append(spent[name])
            parts["rest"].append(elapsed - sum(spent.values()))
        cpu = time.process_time() - cpu_started
    breakdown = {f"{name}_p50_ms": round(float(np.median(values)) * 1000, 3) for name, values in parts.items()
                 if any(values)}
    breakdown["cpu_per_query_ms"] = round(cpu * 1000 / max(len(items), 1), 3)
    return latencies, results, breakdown


def dense_call(k: int) -> Callable:
    return lambda store, query: store.search.dense_search(query[None, :], k, UNRESTRICTED)[0]


def bm25_call(k: int) -> Callable:
    return lambda store, terms: store.search.bm25_search([[TERMS[t] for t in terms]], k, UNRESTRICTED,
                                                         RETRIEVAL.bm25_k1, RETRIEVAL.bm25_b)[0]


def time_hybrid(store: Store, pairs: Sequence[tuple[np.ndarray, np.ndarray]], warm_up, k: int) -> tuple:
    """The product's hybrid path at the storage level: dense and BM25 `candidates` deep, then
    `reciprocal_rank_fusion` (weights and rrf_k of the default RetrievalConfig), top k."""
    depth = max(RETRIEVAL.candidates, k)
    dense, bm25 = dense_call(depth), bm25_call(depth)

    def hybrid(query, terms, spent):
        started = time.perf_counter()
        dense_hits = dense(store, query)
        middle = time.perf_counter()
        bm25_hits = bm25(store, terms)
        fusing = time.perf_counter()
        fused = reciprocal_rank_fusion({"dense": dense_hits, "bm25": bm25_hits}, fusion_weights(), RETRIEVAL.rrf_k, depth)[:k]
        spent["dense"].append(middle - started)
        spent["bm25"].append(fusing - middle)
        spent["fusion"].append(time.perf_counter() - fusing)
        return fused

    hybrid(*warm_up, {"dense": [], "bm25": [], "fusion": []})
    spent: dict[str, list[float]] = {"dense": [], "bm25": [], "fusion": []}
    latencies, results = [], []
    for query, terms in pairs:
        started = time.perf_counter()
        fused = hybrid(query, terms, spent)
        latencies.append(time.perf_counter() - started)
        results.append([(h.chunk_id, h.score) for h in fused])
    return latencies, results, {f"{name}_p50_ms": round(float(np.median(v)) * 1000, 3) for name, v in spent.items()}


def summary(method: str, search: str, latencies: list[float], results: list[list[tuple[str, float]]],
            exact: list[list[tuple[str, float]]], k: int, total_queries: int, **extra) -> dict:
    """p50/p95/mean ms; recall@k and the fraction of queries whose ranked ids equal the reference's;
    the largest score difference from the reference over the chunks both return."""
    ms = np.asarray(latencies) * 1000
    got_ids = [[cid for cid, _ in got] for got in results]
    want_ids = [[cid for cid, _ in want[:k]] for want in exact]
    recall = [len(set(got) & set(want)) / len(want) if want else float(not got) for got, want in zip(got_ids, want_ids)]
    differences = [abs(score - dict(want).get(cid, score)) for got, want in zip(results, exact) for cid, score in got]
    row = {
        "method": method, "search": search, "queries": len(latencies), "of_queries": total_queries,
        "p50_ms": round(float(np.percentile(ms, 50)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_ms": round(float(ms.mean()), 3), f"recall_at_{k}": round(float(np.mean(recall)), 4),
        "identical_to_exact": round(float(np.mean([g == w for g, w in zip(got_ids, want_ids)])), 4),
        "max_score_difference": float(max(differences, default=0.0)),
    }
    row.update(extra)
    row.setdefault("peak_rss_mb", peak_rss_mb())
    return row


def agreement(results: list[list[tuple[str, float]]], other: list[list[tuple[str, float]]]) -> float:
    """Fraction of queries (the first len(results)) whose ranked ids are the same in both."""
    return round(float(np.mean([[c for c, _ in a] == [c for c, _ in b] for a, b in zip(results, other)])), 4)


HYBRID_NOTE = ("dense + bm25 at the candidate depth, reciprocal_rank_fusion, top k; "
               "reference: the same fusion of the dense and sparse references")
