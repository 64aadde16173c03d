"""The switch rewrites only the documents whose served rows change: a one-document edit touches
one document's rows, whatever the size of the source; metadata, chunking and model changes still
reach every row they change. On DuckDB and on PostgreSQL."""

from __future__ import annotations

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.ingestion.embedding import make_embedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline_tests.conftest import BACKENDS, make_store, write_tree

SERVED = {
    "documents": "SELECT doc_id, content_hash, title, tenant, visibility, roles, status, chunk_count, indexed_at "
                 "FROM documents",
    "chunks": "SELECT chunk_id, doc_id, text, text_hash, tenant, lex_len, line_start, line_end FROM chunks",
    "vectors": "SELECT chunk_id, identity FROM vectors",
    "postings": "SELECT chunk_id, term, tf FROM postings",
}


def _page(number: int, extra: str = "") -> str:
    return (f"# Page {number}\n\nThe refund window for plan {number} is {number + 3} days.{extra}\n\n"
            f"## Limits\n\nPlan {number} allows {number * 2} seats and one project per seat.\n")


def _served(store) -> dict[str, dict[str, set]]:
    """Every served row, grouped by table and document."""
    by_doc: dict[str, dict[str, set]] = {}
    chunk_doc = dict(store.db.rows("SELECT chunk_id, doc_id FROM chunks"))
    for table, sql in SERVED.items():
        for row in store.db.rows(sql):
            row = tuple(tuple(v) if isinstance(v, list) else v for v in row)
            doc = row[0] if table == "documents" else (row[1] if table == "chunks" else chunk_doc[row[0]])
            by_doc.setdefault(table, {}).setdefault(doc, set()).add(row)
    return by_doc


@pytest.fixture(params=BACKENDS)
def source_and_store(request, tmp_path):
    root = write_tree(tmp_path / "docs", {f"p{i:02d}.md": _page(i) for i in range(12)})
    store = make_store(request, request.param, tmp_path)
    yield SourceConfig(name="docs", path=root), store
    store.close()


def _run(source, store, chunking=ChunkingConfig(), embedding=EmbeddingConfig(kind="hashing")):
    reports = ingest_source(source, store, make_embedder(embedding), chunking, LifecycleConfig(), "run")
    assert reports["indexed"].switched
    return reports["indexed"].counts


def test_an_edit_rewrites_one_document_and_leaves_the_others_rows_as_they_were(source_and_store):
    source, store = source_and_store
    assert _run(source, store)["rewritten"] == 12
    before = _served(store)
    page = source.path / "p03.md"
    page.write_text(_page(3, " Refunds of annual plans take a week."))
    (source.path / "p07.md").unlink()
    counts = _run(source, store)
    assert (counts["rewritten"], counts["removed"], counts["served_documents"]) == (1, 1, 11)
    after = _served(store)
    for table in SERVED:
        for doc_id, rows in before[table].items():
            if doc_id.endswith(("p03.md", "p07.md")):
                continue
            assert after[table][doc_id] == rows, (table, doc_id)  # untouched, indexed_at included
        assert "docs:p07.md" not in after[table]
    assert any("annual plans" in row[2] for row in after["chunks"]["docs:p03.md"])
    assert after["chunks"]["docs:p03.md"] != before["chunks"]["docs:p03.md"]
    assert _run(source, store)["rewritten"] == 0


def test_metadata_chunking_and_model_changes_reach_every_row_they_change(source_and_store):
    source, store = source_and_store
    _run(source, store)
    page = source.path / "p05.md"
    page.write_text("---\ntenant: acme\nvisibility: internal\n---\n" + _page(5))
    counts = _run(source, store)
    assert counts["rewritten"] == 1
    tenants = dict(store.db.rows("SELECT chunk_id, tenant FROM chunks WHERE doc_id = 'docs:p05.md'"))
    assert tenants and set(tenants.values()) == {"acme"}
    assert store.db.rows("SELECT visibility FROM documents WHERE doc_id = 'docs:p05.md'") == [("internal",)]
    # Sections no longer merged: every document's chunks change (one chunk each becomes two).
    assert store.db.value("SELECT count(*) FROM chunks") == 12
    assert _run(source, store, chunking=ChunkingConfig(max_tokens=20, overlap_tokens=5, min_tokens=0))["rewritten"] == 12
    assert store.db.value("SELECT count(*) FROM chunks") == 24
    # Another embedding model (another identity): every vector is rewritten.
    other = EmbeddingConfig(kind="hashing", dimension=64)
    assert _run(source, store, chunking=ChunkingConfig(max_tokens=20, overlap_tokens=5, min_tokens=0),
                embedding=other)["rewritten"] == 12
    identity = make_embedder(other).identity
    assert store.db.rows("SELECT DISTINCT identity FROM vectors") == [(identity,)]
