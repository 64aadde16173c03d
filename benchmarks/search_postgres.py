"""search_scale.py's PostgreSQL side: fresh schemas, the HNSW build, the candidate statement's plan
and the server's settings."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np
from search_data import DIMENSION
from search_methods import UNRESTRICTED

from rag_pipeline.api import Store
from rag_pipeline.core.storage.postgres import PostgresDatabase
from rag_pipeline.core.storage.search import filter_sql
from rag_pipeline.core.vectors import normalise_rows


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
