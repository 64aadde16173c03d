"""A store opened for reading writes nothing and creates nothing, on both backends."""

from __future__ import annotations

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage import NoIndexError, Store
from rag_pipeline.core.storage.duckdb import DuckDBDatabase
from rag_pipeline.core.storage.postgres import PostgresDatabase
from rag_pipeline_tests.conftest import BACKENDS, make_store, new_pg_schema, write_tree


def _open(request, backend: str, where, **mode) -> Store:
    if backend == "duckdb":
        return Store(DuckDBDatabase(where, **mode))
    return Store(PostgresDatabase(request.getfixturevalue("pg_dsn"), schema=where, **mode))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reader_or_a_writer_that_must_not_create_finds_no_index_and_creates_none(request, backend, tmp_path):
    where = tmp_path / "nowhere" / "index.duckdb" if backend == "duckdb" else new_pg_schema()
    for mode in ({"read_only": True}, {"create": False}):
        with pytest.raises(NoIndexError, match=r"no index at .*: run `rag-pipeline ingest` first"):
            _open(request, backend, where, **mode).served.document_hashes()
    if backend == "duckdb":
        assert not (tmp_path / "nowhere").exists()
    else:
        probe = make_store(request, "postgres", tmp_path)
        assert probe.db.value("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", [where]) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reader_searches_and_cannot_write(request, backend, tmp_path):
    writer = make_store(request, backend, tmp_path)
    write_tree(tmp_path / "kb", {"a.md": "# Alpha\n\nAlpha explains the refund window.\n"})
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    ingest_source(SourceConfig(name="kb", path=tmp_path / "kb"), writer, embedder, ChunkingConfig(), LifecycleConfig(), "r1")
    writer.close()  # DuckDB: one process opens a file one way at a time
    reader = _open(request, backend, writer.db.path if backend == "duckdb" else writer.db.schema, read_only=True)
    hits = reader.search.bm25_search([["alpha"]], 5, SearchFilters(), 0.9, 0.4)
    assert [h.doc_id for h in hits[0]] == ["kb:a.md"]
    with pytest.raises(Exception, match="(?i)read.only"):
        reader.ledger.record_source_run("kb", "x", "r2")
    assert reader.ledger.last_failure("kb") is None
    reader.close()
