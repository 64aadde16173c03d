"""The store: one database, seen through the parts the pipeline works with.

    store.staging   what the ingestion stages write (discovery, parsed, chunks, embedding cache)
    store.served    the served index, its switch and the proofs about what left it
    store.search    dense and BM25 search over the served index, filters in the SQL
    store.ledger    every document's stages with reasons; every source's switches
    store.records   evaluations, baselines, experiments, golden snapshots, production samples
    store.states    every served state of each source, its history, restores and pins
    store.versions  one document's versions: what each held; counterfactuals inside `scratch()`
    store.gaps      the coverage gaps each monitored day listed

All SQL lives in this package. `open_store` builds a store from the storage config, so the CLI,
the runner and the Dagster resources all get theirs the same way.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from rag_pipeline.core.storage.database import Database, StoreConfigError
from rag_pipeline.core.storage.gaps import GapRecords
from rag_pipeline.core.storage.ledger import Ledger
from rag_pipeline.core.storage.records import Records
from rag_pipeline.core.storage.search import Search
from rag_pipeline.core.storage.served import ServedIndex
from rag_pipeline.core.storage.staging import Staging
from rag_pipeline.core.storage.states import IndexStates
from rag_pipeline.core.storage.versions import DocumentVersions


class Store:
    def __init__(self, db: Database, memory_search: bool = True, memory_max_chunks: int = 2_000_000,
                 folder: Path | None = None) -> None:
        self.db = db
        # Where files of the store's own live beside the database (the caches of remote sources).
        self.folder = folder
        self.staging = Staging(db)
        self.served = ServedIndex(db)
        self.search = Search(db, memory_search, memory_max_chunks)
        self.ledger = Ledger(db)
        self.records = Records(db)
        self.states = IndexStates(db)
        self.versions = DocumentVersions(db)
        self.gaps = GapRecords(db)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Every store call inside the block commits together, or not at all."""
        with self.db.transaction():
            yield

    @contextmanager
    def scratch(self) -> Iterator[Store]:
        """This store inside a transaction that is always rolled back, searching the database itself
        (the in-memory copy serves what is committed): change it, ask it, and the change is gone."""
        with self.db.scratch():
            view = copy.copy(self)
            view.search = self.search.in_database()
            yield view

    def source_lock(self, source_id: str, timeout_s: float = 1800.0) -> AbstractContextManager:
        """Held for a whole ingestion of one source (a file lock, or a PostgreSQL advisory lock)."""
        return self.db.source_lock(source_id, timeout_s)

    @property
    def backend(self) -> str:
        return self.db.dialect

    def describe(self) -> str:
        return self.db.describe()

    def close(self) -> None:
        self.db.close()


def open_store(storage, namespace: str | None = None, read_only: bool = False, create: bool = True) -> Store:
    """The store a `StorageConfig` names. `namespace` keeps a second store apart from the main one
    (the experiment log's rebuilt indexes): its own DuckDB file, or its own PostgreSQL schema.
    `read_only`: for commands that only read (nothing is created, a missing index is an error that
    says to ingest first); `create=False`: a writer that must find an index there."""
    if storage.backend == "duckdb":
        from rag_pipeline.core.storage.duckdb import DuckDBDatabase

        path = storage.path if namespace is None else storage.path.parent / f"{namespace}.duckdb"
        return Store(DuckDBDatabase(path, read_only, create), storage.memory_search, storage.memory_max_chunks,
                     Path(storage.path).parent)
    from rag_pipeline.core.storage.postgres import PostgresDatabase

    dsn = os.environ.get(storage.dsn_env)
    if not dsn:
        raise StoreConfigError(
            f"storage.backend is postgres but the environment variable {storage.dsn_env} (storage.dsn_env) is not set: "
            f"export {storage.dsn_env}=postgresql://user:password@host:5432/database"
        )
    schema = storage.pg_schema if namespace is None else f"{storage.pg_schema}_{namespace}"
    return Store(PostgresDatabase(dsn, schema=schema, vector_index=storage.vector_index, hnsw_m=storage.hnsw_m,
                                  hnsw_ef_construction=storage.hnsw_ef_construction,
                                  hnsw_ef_search=storage.hnsw_ef_search, read_only=read_only, create=create),
                 storage.memory_search, storage.memory_max_chunks, Path(storage.path).parent)
