"""The run protocol: a switch is served only when its proofs pass, and the record follows what is served."""

import duckdb
import pytest

from rag_pipeline.config import (
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    SourceConfig,
)
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion import stages
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.switch import index_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline.core.storage.schema import SCHEMA_VERSION
from rag_pipeline.core.storage.staging import Staging
from rag_pipeline_tests.conftest import write_tree

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds are issued within 14 days of the request.\n",
    "invoices.md": "# Invoices\n\nInvoices are sent on the first day of each month.\n",
    "sso.md": "# Single sign-on\n\nSSO uses SAML with the entity id urn:tallyo:sso.\n",
}


@pytest.fixture
def source(tmp_path):
    return SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))


@pytest.fixture
def store(tmp_path):
    return duckdb_store(tmp_path / "index.duckdb")


EMBEDDER = HashingEmbedder(EmbeddingConfig(kind="hashing"))


def _stages(source, store, run_id, upto="indexed"):
    order = ["discovered", "parsed", "chunked", "embedded", "indexed"]
    steps = {
        "discovered": lambda: stages.discover_source(source, store, LifecycleConfig(), run_id),
        "parsed": lambda: stages.parse_source(source, store, run_id),
        "chunked": lambda: stages.chunk_source(source, store, ChunkingConfig(), run_id),
        "embedded": lambda: stages.embed_source(source.source_id, store, EMBEDDER, run_id),
        "indexed": lambda: index_source(source, store, EMBEDDER, run_id),
    }
    return {name: steps[name]() for name in order[: order.index(upto) + 1]}


def _served(store):
    return {d["doc_id"]: d["content_hash"] for d in store.served.indexed_documents("kb")}


def _ledger(store):
    return {(r["doc_id"], r["stage"]): (r["status"], r["content_hash"]) for r in store.ledger.rows("kb")}


def test_a_refused_coverage_proof_keeps_the_previous_version_served(source, store):
    assert _stages(source, store, "r1")["indexed"].switched
    served, ledger = _served(store), _ledger(store)
    (source.path / "refunds.md").write_text("# Refunds\n\nRefunds now take 30 days.\n")
    (source.path / "payroll.md").write_text("# Payroll\n\nPayroll runs twice a month.\n")
    # The embedding stage is skipped (as when someone materializes search_index alone): the new
    # page and the new version of the changed one have no vectors, so they would silently miss.
    reports = _stages(source, store, "r2", upto="chunked")
    switch = index_source(source, store, EMBEDDER, "r2")
    assert not switch.switched and not switch.coverage.passed
    assert switch.coverage.uncovered == ["kb:payroll.md", "kb:refunds.md"]
    assert switch.coverage.stopped_after["kb:payroll.md"] == "chunked, never embedded"
    assert _served(store) == served  # nothing of the refused version is served
    assert {k: v for k, v in _ledger(store).items() if k[1] in ("indexed", "queryable")} == \
        {k: v for k, v in ledger.items() if k[1] in ("indexed", "queryable")}
    with store.db.connection() as con:
        [(failure,)] = con.execute("SELECT last_failure FROM source_runs WHERE source_id = 'kb'").fetchall()
    assert "coverage: 2 document(s)" in failure
    # The committed manifest did not move: the next run still sees (and reports) the change.
    assert reports["discovered"].counts["added"] == 1
    again = _stages(source, store, "r3")
    assert (again["discovered"].counts["added"], again["discovered"].counts["changed"]) == (1, 1)
    assert again["indexed"].switched
    assert set(_served(store)) == {"kb:refunds.md", "kb:invoices.md", "kb:sso.md", "kb:payroll.md"}
    with store.db.connection() as con:
        assert con.execute("SELECT last_failure FROM source_runs WHERE source_id = 'kb'").fetchall() == [(None,)]


def test_a_refused_deletion_proof_keeps_the_deleted_page_served(source, store, monkeypatch):
    _stages(source, store, "r1")
    (source.path / "sso.md").unlink()
    # A bug that forgets to prune the cache: the deleted page's vectors would survive it.
    monkeypatch.setattr(Staging, "prune_cache", lambda self, identity, hashes: 0)
    switch = _stages(source, store, "r2")["indexed"]
    assert not switch.switched and not switch.deletions.passed
    assert switch.deletions.remnants == {"kb:sso.md": ["embedding_cache"]}
    assert "kb:sso.md" in _served(store)
    assert ("kb:sso.md", "deleted") not in _ledger(store)  # still served, so not recorded as deleted
    monkeypatch.undo()
    switch = _stages(source, store, "r3")["indexed"]
    assert switch.switched and switch.deletions.passed and switch.deletions.checked == ["kb:sso.md"]
    assert "kb:sso.md" not in _served(store)
    assert _ledger(store)[("kb:sso.md", "deleted")][0] == "deleted"


def test_the_ledger_is_reconciled_with_what_is_served(source, store):
    """A record that disagrees with the index (as an older version left it after a kill) is repaired."""
    _stages(source, store, "r1")
    with store.db.connection() as con:
        con.execute("DELETE FROM ledger WHERE stage IN ('indexed', 'queryable')")
    assert coverage_report(store, "kb").uncovered == sorted(f"kb:{n}" for n in PAGES)
    switch = _stages(source, store, "r2")["indexed"]
    assert switch.switched and switch.counts["probed"] == 3 and switch.counts["indexed"] == 0
    assert coverage_report(store, "kb").passed and switch.counts["queryable"] == 3


def test_a_new_version_that_fails_keeps_the_served_one(source, store):
    _stages(source, store, "r1")
    before = _served(store)["kb:invoices.md"]
    # (Not b"\xff\xfe...": that is UTF-16's byte-order mark, and the text then decodes.)
    (source.path / "invoices.md").write_bytes("caf\xe9 not utf-8".encode("latin-1"))
    switch = _stages(source, store, "r2")["indexed"]
    assert switch.switched and switch.counts["kept_previous"] == 1
    assert _served(store)["kb:invoices.md"] == before  # the last good version stays
    [failure] = coverage_report(store, "kb").failed
    assert (failure["doc_id"], failure["stage"]) == ("kb:invoices.md", "parsed")
    assert "not valid UTF-8" in failure["reason"]


def test_an_index_file_of_the_first_layout_is_migrated(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute("""CREATE TABLE manifest (source_id VARCHAR, doc_id VARCHAR, rel_path VARCHAR, content_hash VARCHAR,
        meta_json VARCHAR, size BIGINT, file_type VARCHAR, supported BOOLEAN, skip_reason VARCHAR, meta_error VARCHAR,
        discovered_at TIMESTAMP)""")
    con.execute("INSERT INTO manifest VALUES ('kb', 'kb:a.md', 'a.md', 'h', '{}', 1, 'md', true, NULL, NULL, now())")
    con.execute("""CREATE TABLE source_runs (source_id VARCHAR, root VARCHAR, last_run_at TIMESTAMP,
        last_success_at TIMESTAMP, manifest_hash VARCHAR, run_id VARCHAR)""")
    con.close()
    store = duckdb_store(path)
    assert store.staging.previous_manifest("kb") == {"kb:a.md": ("h", "{}")}
    assert [r["doc_id"] for r in store.staging.discovery_rows("kb")] == ["kb:a.md"]
    with store.db.connection() as con:
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        con.execute("INSERT INTO schema_version VALUES (99)")
        con.execute("DELETE FROM schema_version WHERE version <> 99")
    with pytest.raises(RuntimeError, match="newer than this rag_pipeline"):
        duckdb_store(path).staging.previous_manifest("kb")


def test_a_metadata_only_change_is_a_new_served_version_in_the_counts_and_the_ledger(source, store):
    (source.path / "page.html").write_text("<html><body><h1>Bands</h1><p>Salary bands for every level.</p></body></html>")
    (source.path / "page.html.meta.yaml").write_text("visibility: internal\nroles: [hr]\n")
    _stages(source, store, "r1")
    state = store.served.manifest_hash("kb")
    # Not one byte of the page changes; its sidecar makes it public.
    (source.path / "page.html.meta.yaml").write_text("visibility: public\n")
    switch = _stages(source, store, "r2")["indexed"]
    assert switch.switched and switch.counts["indexed"] == 1
    served = {d["doc_id"]: d for d in store.served.indexed_documents("kb")}["kb:page.html"]
    assert served["visibility"] == "public"
    [row] = [r for r in store.ledger.rows("kb") if r["doc_id"] == "kb:page.html" and r["stage"] == "indexed"]
    assert row["run_id"] == "r2" and row["reason"] == "served with new metadata: visibility, roles"
    # The index state an evaluation records moves with it: it is another index for the callers.
    assert store.served.manifest_hash("kb") != state
