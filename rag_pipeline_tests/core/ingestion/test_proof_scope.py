"""A switch proves what its run changed; the whole source is proven at the first switch, every Nth
switch, once the last full proof is old, and when asked for (a forced run, the nightly schedule)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion import stages
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.proof_scope import proof_scope
from rag_pipeline.core.ingestion.switch import index_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

EMBEDDER = HashingEmbedder(EmbeddingConfig(kind="hashing"))
PAGES = {f"p{i}.md": f"# Page {i}\n\nPlan {i} refunds take {i + 3} days; plan {i} has {2 * i} seats.\n" for i in range(6)}


@pytest.fixture
def source(tmp_path):
    return SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))


@pytest.fixture
def store(tmp_path):
    store = duckdb_store(tmp_path / "index.duckdb")
    yield store
    store.close()


def _run(source, store, run_id, lifecycle=LifecycleConfig(), upto="indexed", full_proof=None):
    """The stages up to `upto` (the switch included when it is `indexed`); the switch's report, if it ran."""
    steps = [lambda: stages.discover_source(source, store, lifecycle, run_id),
             lambda: stages.parse_source(source, store, run_id),
             lambda: stages.chunk_source(source, store, ChunkingConfig(), run_id),
             lambda: stages.embed_source(source.source_id, store, EMBEDDER, run_id)]
    names = ["discovered", "parsed", "chunked", "embedded", "indexed"]
    for step in steps[: names.index(upto) + 1]:
        step()
    if upto == "indexed":
        return index_source(source, store, EMBEDDER, run_id, lifecycle, full_proof=full_proof)
    return None


def _unchanged_doc_vector_gone(store, doc_id):
    """Behind the pipeline's back: the served vectors of an unchanged document and their cached
    copies are deleted (a bad manual clean-up), so no stage has a reason to look at it again."""
    with store.db.connection() as con:
        hashes = [h for (h,) in con.execute("SELECT text_hash FROM chunks WHERE doc_id = ?", [doc_id]).fetchall()]
        con.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE doc_id = ?)", [doc_id])
        con.execute("DELETE FROM embedding_cache WHERE text_hash IN (SELECT unnest(?::VARCHAR[]))", [hashes])


def test_the_first_switch_is_a_full_proof_and_an_edit_after_it_an_incremental_one(source, store):
    first = _run(source, store, "r1")
    assert first.switched and first.proof.full and first.counts["probed"] == 6
    (source.path / "p2.md").write_text("# Page 2\n\nPlan 2 refunds now take a month.\n")
    second = _run(source, store, "r2")
    assert second.switched and not second.proof.full
    assert second.counts["probed"] == 1 and second.counts["rewritten"] == 1 and second.counts["indexed"] == 1
    assert coverage_report(store, "kb").counts_by_stage["queryable"] == 6
    verdict = second.proof.stated(second.coverage.verdict())
    assert verdict.texts["proof"] == "incremental" and "incremental proof" in verdict.summary
    assert [r["scope"] for r in store.db.dicts("SELECT scope FROM source_proofs ORDER BY proved_at")] == \
        ["full", "incremental"]


def test_an_incremental_switch_refuses_a_coverage_hole_in_a_changed_document(source, store):
    _run(source, store, "r1")
    (source.path / "p4.md").write_text("# Page 4\n\nPlan 4 now has unlimited seats.\n")
    # The embedding stage is skipped: the new version of p4 has no vector, so it would silently miss.
    _run(source, store, "r2", upto="chunked")
    refused = index_source(source, store, EMBEDDER, "r2")
    assert not refused.proof.full and not refused.switched
    assert refused.coverage.uncovered == ["kb:p4.md"]
    assert "never" in refused.coverage.stopped_after["kb:p4.md"]
    assert "coverage: 1 document(s)" in store.ledger.last_failure("kb")
    # Refused: nothing recorded as proven, the old version of p4 still served.
    assert store.db.value("SELECT count(*) FROM source_proofs WHERE run_id = 'r2'") == 0
    assert "unlimited" not in store.db.value("SELECT string_agg(text, ' ') FROM chunks WHERE doc_id = 'kb:p4.md'")


def test_a_hole_in_an_unchanged_document_is_caught_by_the_next_full_proof(source, store):
    _run(source, store, "r1")
    _unchanged_doc_vector_gone(store, "kb:p1.md")
    # Only the switch runs (as when search_index is materialized alone): no stage re-embeds p1.
    incremental = index_source(source, store, EMBEDDER, "r2")
    assert incremental.switched and not incremental.proof.full and incremental.counts["probed"] == 0
    assert incremental.coverage.failed == []  # the incremental proof does not look at p1
    forced = index_source(source, store, EMBEDDER, "r3", full_proof="forced by the test")
    assert forced.proof.full and forced.proof.reason == "forced by the test" and forced.counts["probed"] == 6
    [failure] = forced.coverage.failed
    assert (failure["doc_id"], failure["stage"]) == ("kb:p1.md", "queryable")
    assert failure["reason"] == "indexed without any chunk vector"
    assert not forced.coverage.failed_documents_verdict("r3").passed
    # The next run (incremental) embeds p1's chunks again, since their cached vectors are gone, and
    # serves and probes it: the failure recorded by the full proof is cleared.
    healed = _run(source, store, "r4")
    assert healed.switched and not healed.proof.full
    assert healed.coverage.failed == [] and healed.counts["rewritten"] == 1 and healed.counts["probed"] == 1


def test_a_full_proof_is_due_every_nth_switch_and_once_the_last_one_is_old(source, store):
    lifecycle = LifecycleConfig(full_proof_every_runs=3, full_proof_hours=24)
    scopes = [_run(source, store, f"r{i}", lifecycle).proof.full for i in range(5)]
    assert scopes == [True, False, False, True, False]
    at, since = store.ledger.last_full_proof("kb")
    assert since == 1
    assert not proof_scope(store, "kb", lifecycle, now=at + timedelta(hours=23)).full
    late = proof_scope(store, "kb", lifecycle, now=at + timedelta(hours=25))
    assert late.full and "25.0 h old" in late.reason
    assert proof_scope(store, "kb", LifecycleConfig(full_proof_every_runs=1)).full


def test_an_incremental_switch_checks_the_deletions_of_its_run(source, store):
    _run(source, store, "r1")
    (source.path / "p5.md").unlink()
    switch = _run(source, store, "r2")
    assert switch.switched and not switch.proof.full
    assert switch.deletions.checked == ["kb:p5.md"] and switch.deletions.passed
    (source.path / "p3.md").unlink()
    later = _run(source, store, "r3")
    # The earlier deletion is proven already; the full proof checks every tombstone again.
    assert later.deletions.checked == ["kb:p3.md"]
    full = index_source(source, store, EMBEDDER, "r4", full_proof="forced")
    assert full.deletions.checked == ["kb:p3.md", "kb:p5.md"] and full.deletions.passed


def test_a_served_chunk_deleted_by_hand_is_left_by_an_incremental_switch_and_written_again_by_a_full_one(source, store):
    _run(source, store, "r1")
    with store.db.connection() as con:  # by hand, and thoroughly: its chunks with their vectors and postings
        for table in ("postings", "vectors"):
            con.execute(f"DELETE FROM {table} WHERE chunk_id LIKE 'kb:p0.md#%'")
        con.execute("DELETE FROM chunks WHERE doc_id = 'kb:p0.md'")
    (source.path / "p3.md").write_text("# Page 3\n\nPlan 3 refunds take two weeks.\n")
    incremental = _run(source, store, "r2")
    assert incremental.switched and incremental.counts["rewritten"] == 1  # p3 only: p0 is not a candidate
    assert store.db.value("SELECT count(*) FROM chunks WHERE doc_id = 'kb:p0.md'") == 0
    full = _run(source, store, "r3", full_proof="forced")
    assert full.switched and full.counts["rewritten"] == 1 and full.counts["probed"] == 6
    assert store.db.value("SELECT count(*) FROM chunks WHERE doc_id = 'kb:p0.md'") > 0
    assert full.coverage.failed == [] and full.deletions.orphans == {}


_KILLED_RUN = """
import sys
from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.storage import duckdb_store
every = int(sys.argv[3])
ingest_source(SourceConfig(name="kb", path=sys.argv[1]), duckdb_store(sys.argv[2]),
              HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
              LifecycleConfig(full_proof_every_runs=every), "killed")
"""


@pytest.mark.parametrize(("point", "every"), [("switch:replaced", 20), ("switch:verified", 1)])
def test_a_kill_inside_a_switch_leaves_one_state_served_and_the_next_run_converges(source, tmp_path, point, every):
    import os
    import subprocess
    import sys

    from rag_pipeline.core.faults import KILL_AT_ENV

    path = tmp_path / "index.duckdb"
    store = duckdb_store(path)
    _run(source, store, "r1")
    old = dict(store.db.rows("SELECT doc_id, content_hash FROM documents"))
    store.close()
    (source.path / "p2.md").write_text("# Page 2\n\nPlan 2 refunds now take a month.\n")
    (source.path / "p5.md").unlink()
    done = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(source.path), str(path), str(every)],
                          env={**os.environ, KILL_AT_ENV: point}, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr[-2000:]
    store = duckdb_store(path)
    assert dict(store.db.rows("SELECT doc_id, content_hash FROM documents")) == old  # the old state, whole
    assert store.db.value("SELECT count(*) FROM source_proofs WHERE run_id = 'killed'") == 0
    again = _run(source, store, "r2", LifecycleConfig(full_proof_every_runs=every))
    assert again.switched and again.proof.full == (every == 1)
    assert set(dict(store.db.rows("SELECT doc_id, content_hash FROM documents"))) == set(old) - {"kb:p5.md"}
    assert coverage_report(store, "kb").passed and again.counts["queryable"] == 5
    assert again.deletions.checked == ["kb:p5.md"] and again.deletions.passed
    store.close()


def test_a_run_that_changed_nothing_rewrites_no_discovery_ledger_or_manifest_row(source, store, monkeypatch):
    from rag_pipeline.core.ingestion import discovery

    # The files were written just now: without this, the next discovery reads them again (racy).
    monkeypatch.setattr(discovery, "RACY_MARGIN_NS", -10**12)
    _run(source, store, "r1")

    def rows():
        return (store.db.rows("SELECT doc_id, discovered_at FROM discovery ORDER BY doc_id"),
                store.db.rows("SELECT doc_id, discovered_at FROM manifest ORDER BY doc_id"),
                store.db.rows("SELECT doc_id, stage, run_id, updated_at FROM ledger ORDER BY doc_id, stage"))

    before = rows()
    again = _run(source, store, "r2")
    assert again.switched and again.counts["rewritten"] == 0 and again.counts["probed"] == 0
    assert rows() == before
    (source.path / "p0.md").write_text("# Page 0\n\nPlan 0 refunds take a day.\n")
    _run(source, store, "r3")
    ledger = store.db.rows("SELECT DISTINCT doc_id FROM ledger WHERE run_id = 'r3'")
    assert ledger == [("kb:p0.md",)]


def test_orphan_rows_refuse_an_incremental_switch_that_touched_their_document_and_a_full_one_always(source, store):
    _run(source, store, "r1")
    with store.db.connection() as con:  # rows whose chunk is gone, as a broken switch would leave them
        for doc in ("kb:p1.md", "kb:p2.md"):
            con.execute("INSERT INTO postings (chunk_id, source_id, term, tf) VALUES (?, 'kb', 'stale', 1)", [f"{doc}#99"])
    assert store.served.orphans(["kb:p2.md", "kb:p2"]) == {"kb:p2.md": ["postings"]}
    (source.path / "p2.md").write_text("# Page 2\n\nPlan 2 refunds now take a month.\n")
    refused = _run(source, store, "r2")
    assert not refused.switched and refused.deletions.orphans == {"kb:p2.md": ["postings"]}
    with store.db.connection() as con:
        con.execute("DELETE FROM postings WHERE chunk_id = 'kb:p2.md#99'")
    # p1's orphan is not in what the run touched; the full proof finds it.
    assert _run(source, store, "r3").switched
    full = index_source(source, store, EMBEDDER, "r4", full_proof="forced")
    assert not full.switched and full.deletions.orphans == {"kb:p1.md": ["postings"]}
