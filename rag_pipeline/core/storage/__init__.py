"""Persistent state: DuckDB in one file (the default) or PostgreSQL with pgvector."""

from pathlib import Path

from rag_pipeline.core.storage.database import NoIndexError
from rag_pipeline.core.storage.locks import SourceBusyError
from rag_pipeline.core.storage.staging import utcnow
from rag_pipeline.core.storage.store import Store, StoreConfigError, open_store


def duckdb_store(path: Path | str) -> Store:
    """A store in one DuckDB file (tests, benchmarks, and a throwaway experiment store)."""
    from rag_pipeline.core.storage.duckdb import DuckDBDatabase

    return Store(DuckDBDatabase(path), folder=Path(path).parent)


__all__ = ["NoIndexError", "SourceBusyError", "Store", "StoreConfigError", "duckdb_store", "open_store", "utcnow"]
