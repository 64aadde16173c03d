"""The store's contract, run against both backends: what one part writes, the others read back
the same way on DuckDB and on PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import date, datetime

import numpy as np
import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage import SourceBusyError, Store
from rag_pipeline.core.storage.duckdb import SMALL_VECTOR_ROWS, DuckDBDatabase
from rag_pipeline.core.storage.postgres import PostgresDatabase
from rag_pipeline.core.storage.schema import SCHEMA_VERSION, SchemaError
from rag_pipeline_tests.conftest import BACKENDS, make_store, new_pg_schema, write_tree

PAGES = {
    "a.md": "# Alpha\n\nAlpha pages explain the refund window of fourteen days.\n",
    "b.md": "---\ntenant: acme\nroles: [support]\nvisibility: internal\n---\n# Beta\n\nBeta is for support staff.\n",
    "c.md": "# Gamma\n\nGamma covers single sign-on.\n\n## Setup\n\nSetup needs an entity id.\n",
}


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    store = make_store(request, request.param, tmp_path)
    yield store
    store.close()


def _ingest(store, root, run_id="r1"):
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    return ingest_source(SourceConfig(name="kb", path=root), store, embedder, ChunkingConfig(), LifecycleConfig(), run_id), embedder


def test_an_empty_store_has_the_current_schema_and_refuses_a_newer_one(store, request, tmp_path):
    assert store.db.value("SELECT version FROM schema_version") == SCHEMA_VERSION
    store.db.execute("UPDATE schema_version SET version = ?", [SCHEMA_VERSION + 1])
    # A second process (a newer rag_pipeline wrote the version) opens the same database.
    if store.backend == "duckdb":
        reopened = DuckDBDatabase(store.db.path)
    else:
        reopened = PostgresDatabase(store.db.dsn, schema=store.db.schema)
    with pytest.raises(SchemaError, match="newer than this rag_pipeline"):
        Store(reopened).ledger.rows()


def _reopen(store):
    if store.backend == "duckdb":
        return Store(DuckDBDatabase(store.db.path))
    return Store(PostgresDatabase(store.db.dsn, schema=store.db.schema))


def test_a_store_at_this_version_missing_a_table_gets_it_back(store, tmp_path):
    # A database made by a build from between two layout changes: the current version number,
    # one table short. Opening it must not fail on the first query that reads the table.
    store.db.execute("DROP TABLE source_inputs")
    reopened = _reopen(store)
    try:
        assert reopened.db.value("SELECT count(*) FROM source_inputs") == 0
        assert reopened.db.value("SELECT version FROM schema_version") == SCHEMA_VERSION
    finally:
        reopened.close()


def test_a_store_of_schema_5_gains_the_waivers_and_keeps_its_rows(store, tmp_path):
    # A store written before gate waivers existed: brought forward when a writer opens it, refused
    # by a reader until then (readers write nothing), on both engines.
    from rag_pipeline.core.storage.database import NoIndexError

    store.records.record_golden_change("release", ["c1"], "rev1", "rev2", "ana", "kept")
    store.db.execute("DROP TABLE gate_waivers")
    store.db.execute("UPDATE schema_version SET version = 5")
    reader = Store(DuckDBDatabase(store.db.path, read_only=True)) if store.backend == "duckdb" else \
        Store(PostgresDatabase(store.db.dsn, schema=store.db.schema, read_only=True))
    with pytest.raises(NoIndexError, match="schema version 5"):
        reader.records.waivers()
    reader.close()
    reopened = _reopen(store)
    try:
        assert reopened.db.value("SELECT version FROM schema_version") == SCHEMA_VERSION
        assert reopened.records.waivers() == [] and len(reopened.records.golden_changes()) == 1
        reopened.records.add_waiver("recall_at_5", "ana", "labels rewritten", date(2026, 12, 31))
        [row] = reopened.records.waivers()
        assert (row["rule"], row["waived_by"], row["until_day"]) == ("recall_at_5", "ana", date(2026, 12, 31))
    finally:
        reopened.close()


def _gap_row(day, gap_id, status="open", **changes):
    row = {"day": day, "gap_id": gap_id, "first_seen": date(2026, 11, 20), "last_seen": day, "status": status,
           "label": "dashboard, widget", "question_count": 2, "share": 0.25, "best_score": 0.31, "threshold": 0.4,
           "nearest_doc": "kb:a.md", "nearest_section": "Alpha", "tenants": ["(no tenant)", "acme"],
           "members": '[{"query": "dashboard widgets", "tenant": "acme", "roles": [], "best_score": 0.31}]',
           "centroid": [0.6, 0.8], "closed_by": None}
    return {**row, **changes}


def test_a_store_of_schema_6_gains_the_gaps_table_and_gaps_read_back(store, tmp_path):
    # A store written before coverage gaps: brought forward by a writer, its rows kept, on both engines.
    store.records.add_waiver("recall_at_5", "ana", "kept", date(2026, 12, 31))
    store.db.execute("DROP TABLE coverage_gaps")
    # ...and before the switches' proofs were recorded (schema 9).
    store.db.execute("DROP TABLE source_proofs")
    store.db.execute("DROP TABLE staged_changes")
    store.db.execute("UPDATE schema_version SET version = 6")
    reopened = _reopen(store)
    try:
        assert reopened.db.value("SELECT version FROM schema_version") == SCHEMA_VERSION == 9
        assert len(reopened.records.waivers()) == 1 and reopened.gaps.of_day(date(2026, 11, 20)) == []
        assert reopened.ledger.last_full_proof("kb") is None  # its next switch is a full proof
        reopened.staging.note_changes("kb", ["kb:a.md"])
        day1, day2 = date(2026, 11, 20), date(2026, 11, 21)
        reopened.gaps.save_day(day1, [_gap_row(day1, "gap-a"), _gap_row(day1, "gap-b", question_count=5)])
        reopened.gaps.save_day(day2, [_gap_row(day2, "gap-a", "closed", closed_by="kb:dash.md")])
        # Saving a day again replaces it whole.
        reopened.gaps.save_day(day1, [_gap_row(day1, "gap-a"), _gap_row(day1, "gap-b", question_count=5)])
        rows = reopened.gaps.of_day(day1)
        assert [r["gap_id"] for r in rows] == ["gap-b", "gap-a"]  # largest first
        assert rows[1]["centroid"] == [0.6, 0.8] and rows[1]["tenants"] == ["(no tenant)", "acme"]
        assert rows[1]["first_seen"] == day1 and rows[1]["share"] == 0.25
        # gap-a was closed on day 2: open before day 2 both, before day 3 only gap-b.
        assert sorted(r["gap_id"] for r in reopened.gaps.open_before(day2)) == ["gap-a", "gap-b"]
        assert [r["gap_id"] for r in reopened.gaps.open_before(date(2026, 11, 22))] == ["gap-b"]
        assert [(r["day"], r["status"]) for r in reopened.gaps.traffic(day2) if r["gap_id"] == "gap-a"] == [
            (day1, "open"), (day2, "closed")]
    finally:
        reopened.close()


@pytest.mark.parametrize("rows", [5, SMALL_VECTOR_ROWS + 1])
def test_vectors_come_back_bit_for_bit(store, tmp_path, rows):
    # A few rows go in and out as lists, more through Arrow: both paths, on both backends.
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((rows, 384)).astype(np.float32)
    store.staging.cache_vectors("model@1", [(f"h{i:04d}", v) for i, v in enumerate(vectors)])
    sql = f"SELECT text_hash, {store.db.vector_expression('vector')} FROM embedding_cache ORDER BY text_hash"
    for most_rows in (None, rows):
        keys, matrix = store.db.read_vectors(sql, most_rows=most_rows)
        assert keys == [f"h{i:04d}" for i in range(rows)]
        assert matrix.dtype == np.float32 and np.array_equal(matrix, vectors)
    assert store.staging.cached_hashes("model@1", ["h0001", "h0004", "nope"]) == {"h0001", "h0004"}
    # With parameters (the rescoring's candidate list), and keys that quoting must not break.
    store.staging.cache_vectors("model@1", [("it's 100%", vectors[0])])
    keys, matrix = store.db.read_vectors(
        f"SELECT text_hash, {store.db.vector_expression('vector')} FROM embedding_cache "
        "WHERE text_hash IN (SELECT unnest(?::VARCHAR[])) ORDER BY text_hash", [["h0002", "it's 100%"]])
    assert keys == ["h0002", "it's 100%"] and np.array_equal(matrix, vectors[[2, 0]])


def test_an_ingested_source_is_served_ledgered_and_searchable(store, tmp_path):
    root = write_tree(tmp_path / "src", PAGES)
    reports, embedder = _ingest(store, root)
    served = store.served.indexed_documents("kb")
    assert [d["doc_id"] for d in served] == ["kb:a.md", "kb:b.md", "kb:c.md"]
    beta = next(d for d in served if d["doc_id"] == "kb:b.md")
    assert (beta["tenant"], list(beta["roles"]), beta["visibility"]) == ("acme", ["support"], "internal")
    statuses = {(r["doc_id"], r["stage"]): r["status"] for r in store.ledger.rows("kb")}
    assert statuses[("kb:c.md", "queryable")] == "ok" and statuses[("kb:a.md", "indexed")] == "ok"
    assert store.ledger.last_success("kb") is not None
    assert store.ledger.failures("kb") == {}
    # A public caller never sees the internal page, by either retriever.
    public = SearchFilters(tenant=None, roles=())
    [dense] = store.search.dense_search(embedder.encode(["support staff beta"]), 10, public)
    [lexical] = store.search.bm25_search([["beta", "support"]], 10, public, k1=0.9, b=0.4)
    assert "kb:b.md" not in {h.doc_id for h in dense + lexical}
    staff = SearchFilters(tenant="acme", roles=("support",), as_of=date.today())
    [lexical] = store.search.bm25_search([["beta", "support"]], 10, staff, k1=0.9, b=0.4)
    assert lexical[0].doc_id == "kb:b.md" and lexical[0].rank == 1


def test_a_deleted_page_leaves_every_table_and_its_tombstone_proves_it(store, tmp_path):
    root = write_tree(tmp_path / "src", PAGES)
    _ingest(store, root)
    (root / "c.md").unlink()
    _ingest(store, root, "r2")
    assert [d["doc_id"] for d in store.served.indexed_documents("kb")] == ["kb:a.md", "kb:b.md"]
    [tombstone] = store.served.tombstones("kb")
    assert tombstone["doc_id"] == "kb:c.md" and tombstone["title"] and len(tombstone["text_hashes"]) >= 1
    assert store.served.remnants(["kb:c.md"]) == {}
    assert store.served.orphans() == {}
    assert {r["stage"]: r["status"] for r in store.ledger.rows("kb") if r["doc_id"] == "kb:c.md"}["deleted"] == "deleted"


def test_the_ledger_keeps_one_row_per_document_and_stage(store):
    entry = {"doc_id": "kb:x.md", "source_id": "kb", "stage": "parsed", "status": "failed", "reason": "bad pdf"}
    store.ledger.record([entry], "r1")
    store.ledger.record([{**entry, "status": "ok", "reason": None}, {**entry, "stage": "chunked", "status": "ok"}], "r2")
    rows = store.ledger.rows("kb")
    assert [(r["stage"], r["status"], r["run_id"]) for r in rows] == [("chunked", "ok", "r2"), ("parsed", "ok", "r2")]
    assert store.ledger.failures("kb") == {}


def test_a_refused_switch_keeps_the_last_success_and_says_why(store):
    store.ledger.record_source_run("kb", "/docs", "r1")
    first = store.ledger.last_success("kb")
    store.ledger.record_source_run("kb", "/docs", "r2", failure="coverage: 2 document(s) uncovered")
    assert store.ledger.last_success("kb") == first
    [(failure,)] = store.db.rows("SELECT last_failure FROM source_runs WHERE source_id = 'kb'")
    assert failure.startswith("coverage")


def test_records_round_trip(store, tmp_path):
    store.records.promote("rev1", "eval-a", "first")
    time.sleep(0.01)
    store.records.promote("rev1", "eval-b", "better")
    assert store.records.baseline("rev1") == "eval-b" and store.records.latest_baseline() == ("rev1", "eval-b")
    assert store.records.baseline("rev2") is None
    store.records.snapshot_golden("rev1", "golden.jsonl", '{"id": "q1"}\n')
    store.records.snapshot_golden("rev1", "golden.jsonl", "changed text is not a new snapshot")
    assert store.records.golden_snapshot("rev1") == '{"id": "q1"}\n'
    day = date(2026, 11, 30)
    store.records.save_monitoring(day, "drift", {"p_value": 0.5})
    store.records.save_monitoring(day, "drift", {"p_value": 0.01})
    assert store.records.monitoring_history("drift", day) == [{"day": day, "p_value": 0.01}]
    store.records.log_experiment({
        "experiment_id": "e1", "created_at": datetime(2026, 11, 30, 9), "component": "chunking",
        "hypothesis": "h", "config_diff": {"chunking.size": [400, 200]}, "baseline_eval": "a", "candidate_eval": "b",
        "deltas": {"ndcg_at_10": 0.01}, "worst_slice": "sso", "worst_slice_delta": -0.02, "decision": "keep", "bundle": False,
    })
    [row] = store.records.experiment_log()
    assert row["config_diff"] == {"chunking.size": [400, 200]} and row["worst_slice_delta"] == -0.02
    with pytest.raises(InputError, match="no evaluation 'missing'"):
        store.records.evaluation_summary("missing")


def test_a_transaction_rolls_back_every_part_together(store):
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.ledger.record([{"doc_id": "kb:x.md", "source_id": "kb", "stage": "parsed", "status": "ok"}], "r1")
        store.records.promote("rev1", "eval-a", "")
        raise RuntimeError("boom")
    assert store.ledger.rows() == [] and store.records.latest_baseline() is None


def test_two_runs_of_one_source_are_kept_apart(store):
    """The source lock (a file lock, or an advisory lock) admits one holder; other sources pass."""
    entered = threading.Event()
    release = threading.Event()

    def hold():
        with store.source_lock("kb"):
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert entered.wait(10)
        with pytest.raises(SourceBusyError, match="'kb'"):
            with store.source_lock("kb", timeout_s=0.6):
                pass
        with store.source_lock("other", timeout_s=0.6):
            pass
    finally:
        release.set()
        holder.join()
    with store.source_lock("kb", timeout_s=0.6):
        pass


HOLD_AND_DIE = """
import sys, time
from rag_pipeline.core.storage.postgres import PostgresDatabase
db = PostgresDatabase(sys.argv[1], schema=sys.argv[2])
with db.source_lock("kb"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_postgres_frees_the_lock_of_a_killed_holder(request):
    dsn, schema = request.getfixturevalue("pg_dsn"), new_pg_schema()
    proc = subprocess.Popen([sys.executable, "-c", HOLD_AND_DIE, dsn, schema], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        db = PostgresDatabase(dsn, schema=schema)
        with pytest.raises(SourceBusyError):
            with db.source_lock("kb", timeout_s=0.6):
                pass
        proc.kill()
        proc.wait()
        with db.source_lock("kb", timeout_s=10):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_postgres_hnsw_is_built_by_the_first_switch_and_used(request, tmp_path):
    """`vector_index: hnsw`: the index appears once vectors exist, the candidate query uses it, and on
    a small corpus it returns what the exact scan returns."""
    dsn = request.getfixturevalue("pg_dsn")
    hnsw = Store(PostgresDatabase(dsn, schema=new_pg_schema(), vector_index="hnsw"))
    exact = Store(PostgresDatabase(dsn, schema=new_pg_schema()))
    root = write_tree(tmp_path / "src", PAGES)
    for store in (hnsw, exact):
        _, embedder = _ingest(store, root)
    assert hnsw.db.value("SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname = 'vectors_hnsw_idx'",
                         [hnsw.db.schema]) == 1
    assert exact.db.value("SELECT count(*) FROM pg_indexes WHERE schemaname = ? AND indexname = 'vectors_hnsw_idx'",
                          [exact.db.schema]) == 0
    query = embedder.encode(["single sign-on entity id"])
    literal = "[" + ",".join(repr(float(x)) for x in query[0]) + "]"
    with hnsw.db.connection() as connection:
        hnsw.db._run(connection, "SET enable_seqscan = off", ())
        plan = "\n".join(r[0] for r in hnsw.db._fetch(hnsw.db._run(
            connection, f"EXPLAIN SELECT chunk_id FROM vectors ORDER BY vector::vector({len(query[0])}) <=> ?::vector({len(query[0])}) LIMIT 3",
            [literal])))
        hnsw.db._run(connection, "RESET enable_seqscan", ())
    assert "vectors_hnsw_idx" in plan
    filters = SearchFilters(unrestricted=True)
    assert [h.chunk_id for h in hnsw.search.dense_search(query, 3, filters)[0]] == \
        [h.chunk_id for h in exact.search.dense_search(query, 3, filters)[0]]
    hnsw.close()
    exact.close()


def test_the_in_memory_copy_follows_every_switch(store, tmp_path):
    root = write_tree(tmp_path / "src", PAGES)
    _, embedder = _ingest(store, root)
    first = store.search.served_copy()
    [hits] = store.search.bm25_search([["zanzibar"]], 5, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    assert hits == [] and store.search.served_copy() is first, "unchanged index: the same copy"
    (root / "a.md").write_text("# Alpha\n\nAlpha pages now mention zanzibar.\n")
    (root / "c.md").unlink()
    _ingest(store, root, "r2")
    [hits] = store.search.bm25_search([["zanzibar"]], 5, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    assert [h.doc_id for h in hits] == ["kb:a.md"]
    copy = store.search.served_copy()
    assert copy is not first and not [c for c in copy.chunk_ids if c.startswith("kb:c.md")]


def test_a_switch_probes_in_the_database_and_builds_no_copy(store, tmp_path, monkeypatch):
    """A switch searches, once, a state not yet committed (its queryable and deletion probes):
    it does so in the database; the copy is built by the first search after it."""
    from rag_pipeline.core.storage import search

    loaded = []
    load = search.load_served_copy
    monkeypatch.setattr(search, "load_served_copy",
                        lambda db, version, **given: loaded.append(version) or load(db, version, **given))
    root = write_tree(tmp_path / "src", PAGES)
    (reports, _) = _ingest(store, root)
    (root / "c.md").unlink()
    (deletion, _) = _ingest(store, root, "r2")
    assert reports["indexed"].counts["probed"] == 3 and deletion["indexed"].deletions.passed
    assert deletion["indexed"].deletions.checked == ["kb:c.md"]
    assert loaded == []
    [hits] = store.search.bm25_search([["alpha"]], 5, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    assert [h.doc_id for h in hits] == ["kb:a.md"] and len(loaded) == 1


def test_a_page_copied_into_more_sources_than_the_probe_sees_stays_queryable(store, tmp_path):
    """Twelve sources hold the same page: a search returns ten of the twelve identical chunks, and
    the tie at the cut-off, not the page, keeps the other two out; they are queryable."""
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    for i in range(12):
        root = write_tree(tmp_path / f"copy{i:02d}", {"page.md": "# Shared\n\nThe very same page in every source.\n"})
        reports = ingest_source(SourceConfig(name=f"copy{i:02d}", path=root), store, embedder, ChunkingConfig(),
                                LifecycleConfig(), f"r{i}")
        assert reports["indexed"].switched and not reports["indexed"].failures
    queryable = [r for r in store.ledger.rows() if r["stage"] == "queryable"]
    assert len(queryable) == 12 and {r["status"] for r in queryable} == {"ok"}


def test_a_session_shares_one_connection_and_leaves_transactions_whole(store, monkeypatch):
    opened = []
    connect = store.db._connect

    def counted():
        opened.append(1)
        return connect()

    monkeypatch.setattr(store.db, "_connect", counted)
    store.db.execute("CREATE TABLE IF NOT EXISTS session_probe (n INTEGER)")
    opened.clear()
    with store.db.session():
        pass
    assert not opened  # a block with nothing to do connects to nothing
    with store.db.session():
        store.db.execute("INSERT INTO session_probe VALUES (1)")
        with pytest.raises(RuntimeError):
            with store.db.transaction():
                store.db.execute("INSERT INTO session_probe VALUES (2)")
                raise RuntimeError("rolled back")
        with store.db.transaction():
            store.db.execute("INSERT INTO session_probe VALUES (3)")
        assert store.db.value("SELECT count(*) FROM session_probe") == 2
    assert len(opened) <= 1  # PostgreSQL keeps its one connection; DuckDB opens one for the block
    # After the block, each call has its own connection again (DuckDB's file lock is released).
    assert sorted(r[0] for r in store.db.rows("SELECT n FROM session_probe")) == [1, 3]
