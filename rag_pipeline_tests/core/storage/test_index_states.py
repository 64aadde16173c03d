"""Index states: every served state of a source is kept, shares its unchanged rows with the others,
can be served again exactly (rows, vectors, postings, search results), and is pruned by retention
without losing what a kept state needs. On DuckDB and on PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.ingestion import undo
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage.staging import utcnow
from rag_pipeline.core.storage.states import StateError
from rag_pipeline_tests.conftest import BACKENDS, make_store, write_tree

EMBEDDER = make_embedder(EmbeddingConfig(kind="hashing"))
# What a served index holds, row by row (vectors as their bytes): equal means the same index.
SERVED = {
    "documents": "SELECT doc_id, content_hash, title, tenant, visibility, roles, status, chunk_count, version FROM documents",
    "chunks": "SELECT chunk_id, doc_id, text, text_hash, heading_path, lex_len, line_start, line_end FROM chunks",
    "postings": "SELECT chunk_id, term, tf FROM postings",
}


def _page(name: str, fact: str) -> str:
    return f"# {name}\n\n{fact}\n\n## Details\n\nThe {name} page explains {fact.lower()}\n"


def _served(store, source_id: str = "docs") -> dict:
    rows = {table: sorted(tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in store.db.rows(
        f"{sql} WHERE {'doc_id' if table != 'postings' else 'chunk_id'} LIKE ?", [f"{source_id}:%"]))
        for table, sql in SERVED.items()}
    keys, matrix = store.db.read_vectors("SELECT chunk_id, vector FROM vectors WHERE source_id = ? ORDER BY chunk_id",
                                         [source_id])
    rows["vectors"] = list(zip(keys, [v.tobytes() for v in matrix]))
    return rows


def _run(source, store, lifecycle=LifecycleConfig()):
    return ingest_source(source, store, EMBEDDER, ChunkingConfig(), lifecycle, "run")["indexed"]


def _search(store, text: str) -> list[str]:
    [hits] = store.search.in_database().dense_search(EMBEDDER.encode([text]), 5, SearchFilters(unrestricted=True))
    return [h.doc_id for h in hits]


@pytest.fixture(params=BACKENDS)
def source_and_store(request, tmp_path):
    root = write_tree(tmp_path / "docs", {"refunds.md": _page("Refunds", "Refunds take 14 days."),
                                          "seats.md": _page("Seats", "Each plan has 5 seats."),
                                          "sso.md": _page("SSO", "Single sign-on uses SAML.")})
    store = make_store(request, request.param, tmp_path)
    yield SourceConfig(name="docs", path=root), store
    store.close()


def _night(source) -> None:
    """A night's change: one page edited, one deleted, one added."""
    (source.path / "refunds.md").write_text(_page("Refunds", "Refunds take 30 days."))
    (source.path / "sso.md").unlink()
    (source.path / "pricing.md").write_text(_page("Pricing", "Pricing starts at 10 euros."))


def test_a_restored_state_serves_exactly_its_rows_and_is_pinned_until_unpinned(source_and_store):
    source, store = source_and_store
    first = _run(source, store)
    yesterday = _served(store)
    _night(source)
    second = _run(source, store)
    assert first.state != second.state and [s.state_id for s in store.states.list("docs")] == [first.state, second.state]
    assert _search(store, "Single sign-on uses SAML")[0] != "docs:sso.md"

    done = undo.restore(store, "docs", store.states.get(first.state), by="on-call", reason="refund page wrong")
    assert (done.restored, done.removed, done.kept) == (2, 1, 1)  # refunds and sso back, pricing gone, seats kept
    assert _served(store) == yesterday
    assert _search(store, "Single sign-on uses SAML")[0] == "docs:sso.md"
    ledger = {(r["doc_id"], r["stage"]): r for r in store.ledger.rows("docs")}
    assert ledger[("docs:pricing.md", "indexed")]["status"] == "deleted"
    assert "restored to state" in ledger[("docs:sso.md", "queryable")]["reason"]

    # Pinned: a run with changed files leaves the served rows alone and says who pinned it and why.
    (source.path / "seats.md").write_text(_page("Seats", "Each plan has 50 seats."))
    pinned = _run(source, store)
    assert not pinned.switched and "pinned to state" in pinned.pinned and "on-call" in pinned.pinned
    assert _served(store) == yesterday
    undo.unpin(store, "docs")
    assert _run(source, store).switched
    assert {d["doc_id"] for d in store.served.indexed_documents("docs")} == {
        "docs:refunds.md", "docs:seats.md", "docs:pricing.md"}
    with pytest.raises(InputError, match="not pinned"):
        undo.unpin(store, "docs")


def test_disabled_serves_nothing_and_enabled_follows_the_files_again(source_and_store):
    source, store = source_and_store
    _run(source, store)
    done = undo.disable(store, "docs", by="security", reason="a page leaked a key")
    assert done.state.documents == 0 and store.served.indexed_documents("docs") == []
    assert _search(store, "Refunds take 14 days") == []
    assert "disabled (serves nothing) by security" in _run(source, store).pinned
    undo.unpin(store, "docs")
    assert _run(source, store).switched and len(store.served.indexed_documents("docs")) == 3


def test_states_share_unchanged_rows(source_and_store):
    """Ten one-page edits: the states cost the edits, not ten copies of the source."""
    source, store = source_and_store
    _run(source, store)
    for night in range(10):
        (source.path / "refunds.md").write_text(_page("Refunds", f"Refunds take {night + 15} days."))
        assert _run(source, store).switched
    held = store.states.storage_rows()
    assert held["index_states"] == 11
    assert held["served_spans"] == 3 + 10  # each page's first span, then one per edit of refunds.md
    assert held["history_documents"] == 10  # every replaced version of refunds.md, once


def test_every_kept_state_can_be_served_again(source_and_store):
    source, store = source_and_store
    seen = {}
    for night in range(4):
        (source.path / "refunds.md").write_text(_page("Refunds", f"Refunds take {night + 15} days."))
        state = _run(source, store).state
        seen[state] = _served(store)
    for state_id, rows in reversed(list(seen.items())):
        undo.restore(store, "docs", store.states.get(state_id), by="test", reason="walk back")
        assert _served(store) == rows


def test_retention_keeps_the_latest_the_measured_and_the_pinned(source_and_store):
    source, store = source_and_store
    keep_two = LifecycleConfig(keep_states=2, keep_state_days=0)
    states = []
    for night in range(5):
        (source.path / "refunds.md").write_text(_page("Refunds", f"Refunds take {night + 15} days."))
        states.append(_run(source, store, keep_two).state)
    assert [s.state_id for s in store.states.list("docs")] == states[-2:]
    # What only dropped states needed is gone with them: the kept states' versions remain.
    assert store.states.storage_rows()["history_documents"] == 1
    with pytest.raises(StateError, match="no index state"):
        store.states.get(states[0])
    # A state an evaluation measured is kept whatever its age or rank.
    measured = store.states.get(states[-2])
    with store.transaction():
        kept = store.states.prune("docs", 1, utcnow() + timedelta(days=1), [measured.state_id])
    assert kept == 0 and [s.state_id for s in store.states.list("docs")] == states[-2:]
    undo.restore(store, "docs", measured, by="test", reason="measured state")
    assert store.states.latest("docs").origin == "restore"


def test_a_restore_that_cannot_be_whole_is_refused_and_changes_nothing(source_and_store):
    source, store = source_and_store
    first = _run(source, store)
    _night(source)
    _run(source, store)
    now = _served(store)
    with store.transaction():
        store.states.forget_document("docs:sso.md")
    with pytest.raises(StateError, match="cannot be served again"):
        undo.restore(store, "docs", store.states.get(first.state), by="test", reason="try")
    assert _served(store) == now and store.states.pinned("docs") is None


def test_no_history_is_kept_when_retention_is_zero(source_and_store):
    source, store = source_and_store
    none = LifecycleConfig(keep_states=0, keep_state_days=0)
    _run(source, store, none)
    _night(source)
    latest = _run(source, store, none).state
    assert store.states.storage_rows()["history_documents"] == 0
    assert [s.state_id for s in store.states.list("docs")] == [latest]
