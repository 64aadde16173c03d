"""After a corpus change, an incremental backfill reaches the same served tables as a fresh build."""

import shutil

import dagster as dg
import pytest

from rag_pipeline.cli.runner import ingest
from rag_pipeline.core.storage import Store, open_store
from rag_pipeline_tests.conftest import HTTPX_V023, HTTPX_V028, require

pytestmark = pytest.mark.slow

SERVED = {
    "documents": "SELECT doc_id, source_id, rel_path, title, file_type, content_hash, tenant, visibility, status, chunk_count FROM documents",
    "chunks": "SELECT chunk_id, doc_id, text, embed_text, text_hash, line_start, line_end, lex_len FROM chunks",
    "vectors": "SELECT chunk_id, identity, vector FROM vectors",
    "postings": "SELECT chunk_id, term, tf FROM postings",
    "ledger": "SELECT doc_id, stage, status, content_hash FROM ledger WHERE stage IN ('indexed', 'queryable') AND status <> 'deleted'",
}


def _snapshot(store: Store) -> dict[str, list]:
    with store.db.connection() as con:
        return {name: sorted(con.execute(sql).fetchall(), key=repr) for name, sql in SERVED.items()}


def test_incremental_backfill_equals_fresh_build(tmp_path, write_config):
    docs = tmp_path / "docs"
    notes = tmp_path / "notes"
    shutil.copytree(require(HTTPX_V023), docs)
    notes.mkdir()
    for i in range(4):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nA short note number {i} about releases.\n")
    incremental = write_config({"httpx": docs, "notes": notes})
    instance = dg.DagsterInstance.ephemeral()
    assert all(run.success for run in ingest(incremental, instance))

    # The corpus changes: a new release of the docs, one note edited, one deleted, one added.
    shutil.rmtree(docs)
    shutil.copytree(require(HTTPX_V028), docs)
    (notes / "n0.md").write_text("# Note 0\n\nRewritten note about the new release.\n")
    (notes / "n1.md").unlink()
    (notes / "n9.md").write_text("# Note 9\n\nA brand new note.\n")
    assert all(run.success for run in ingest(incremental, instance))

    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    fresh = incremental.model_copy(
        update={"storage": incremental.storage.model_copy(update={"path": fresh_dir / "index.duckdb"})}
    )
    assert all(run.success for run in ingest(fresh, dg.DagsterInstance.ephemeral()))

    left, right = _snapshot(open_store(incremental.storage)), _snapshot(open_store(fresh.storage))
    for table in SERVED:
        assert left[table] == right[table], table
    # The cache may keep texts of earlier versions (a revert or a chunker switch then embeds
    # nothing), but it holds everything the fresh build needed.
    with open_store(incremental.storage).db.connection() as con:
        kept = set(con.execute("SELECT text_hash FROM embedding_cache").fetchall())
    with open_store(fresh.storage).db.connection() as con:
        needed = set(con.execute("SELECT text_hash FROM embedding_cache").fetchall())
    assert needed <= kept
    assert any(row[0] == "notes:n9.md" for row in left["documents"])
    assert not any(row[0] in ("notes:n1.md", "httpx:advanced.md") for row in left["documents"])


def test_purging_a_removed_source_leaves_nothing_but_its_ledger_history(tmp_path, write_config):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nSome text.\n")
    config = write_config({"notes": notes})
    assert ingest(config, dg.DagsterInstance.ephemeral())[0].success
    store = open_store(config.storage)
    store.served.purge_source("notes")
    assert set(store.served.table_counts("notes").values()) == {0}
    statuses = {row["status"] for row in store.ledger.rows("notes")}
    assert statuses == {"deleted"}
    with store.db.connection() as con:
        assert con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == 0
