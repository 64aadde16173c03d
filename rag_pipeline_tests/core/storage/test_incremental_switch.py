"""The switch rewrites only the documents whose served rows change: a one-document edit touches
one document's rows, whatever the size of the source; metadata, chunking and model changes still
reach every row they change. On DuckDB and on PostgreSQL."""

from __future__ import annotations

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.embedder import make_embedder
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


def _ledger(store) -> dict[tuple[str, str], tuple]:
    return {(r["doc_id"], r["stage"]): (r["status"], r["content_hash"], r["reason"]) for r in store.ledger.rows("docs")}


def _without_times(served: dict[str, dict[str, set]]) -> dict[str, dict[str, set]]:
    # indexed_at (the last column of a documents row) is the time of the switch that wrote it.
    return {table: {doc: {row[:-1] if table == "documents" else row for row in rows} for doc, rows in docs.items()}
            for table, docs in served.items()}


def test_many_documents_deleted_at_once_end_as_if_deleted_one_run_at_a_time(request, source_and_store, tmp_path):
    """The deletion proof checks every tombstone with one statement per table, and searches for a
    deleted document only when a chunk of it is still served: deleting many documents in one run
    serves and records what deleting them one run at a time does, every proof passing."""
    source, store = source_and_store
    backend = request.node.callspec.params["source_and_store"]
    doomed = [f"p{i:02d}.md" for i in (0, 2, 5, 8, 11)]
    _run(source, store)
    for name in doomed:
        (source.path / name).unlink()
    switch = ingest_source(source, store, make_embedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
                           LifecycleConfig(), "run")["indexed"]
    assert switch.switched and switch.deletions.passed
    assert switch.counts["removed"] == len(doomed) and switch.counts["served_documents"] == 12 - len(doomed)
    assert switch.deletions.checked == sorted(f"docs:{name}" for name in doomed)
    assert store.served.remnants(switch.deletions.checked) == {}

    # The same deletions, one per run, in another store of the same backend.
    one_root = write_tree(tmp_path / "one" / "docs", {f"p{i:02d}.md": _page(i) for i in range(12)})
    one_source = SourceConfig(name="docs", path=one_root)
    one_store = make_store(request, backend, tmp_path / "one")
    try:
        _run(one_source, one_store)
        for name in doomed:
            (one_root / name).unlink()
            _run(one_source, one_store)
        assert _without_times(_served(one_store)) == _without_times(_served(store))
        assert _ledger(one_store) == _ledger(store)
        assert {d for (d, stage), row in _ledger(store).items() if stage == "deleted"} == set(switch.deletions.checked)
    finally:
        one_store.close()


def test_a_deleted_document_whose_chunk_is_left_served_is_found_and_searched_for(source_and_store):
    """A chunk, vector and posting of a deleted document left behind (a switch that forgot them):
    the proof names the tables and finds the document by searching for its former text."""
    from rag_pipeline.core.ingestion.lifecycle import deletion_report

    source, store = source_and_store
    _run(source, store)
    kept = ("chunks", "vectors", "postings")
    for table in kept:
        store.db.execute(f"CREATE TABLE kept_{table} AS SELECT * FROM {table} WHERE chunk_id LIKE 'docs:p04.md#%'")
    (source.path / "p04.md").unlink()
    _run(source, store)
    for table in kept:
        store.db.execute(f"INSERT INTO {table} SELECT * FROM kept_{table}")
        store.db.execute(f"DROP TABLE kept_{table}")
    report = deletion_report(store, "docs", make_embedder(EmbeddingConfig(kind="hashing")))
    assert not report.passed
    assert report.remnants == {"docs:p04.md": ["chunks", "vectors", "postings"]}
    assert set(report.retrievable) == {"docs:p04.md"}


def test_deleting_a_document_leaves_one_named_after_it_with_a_hash_served(source_and_store):
    """Chunk ids are `<doc id>#<ordinal>` and a file name may hold `#`: the chunks of `p01.md#v2.md`
    are not remnants of a deleted `p01.md` (they were taken for its remnants, and the deletion refused)."""
    source, store = source_and_store
    (source.path / "p01.md#v2.md").write_text(_page(101))
    _run(source, store)
    (source.path / "p01.md").unlink()
    counts = _run(source, store)
    assert (counts["removed"], counts["served_documents"]) == (1, 12)
    assert store.served.remnants(["docs:p01.md"]) == {}
    assert store.db.value("SELECT count(*) FROM chunks WHERE doc_id = 'docs:p01.md#v2.md'") > 0
