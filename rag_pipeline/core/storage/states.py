"""Index states: every served state of a source, kept so that it can be served again.

A served document has a `version` (`history.py`: equal versions mean equal rows). Every switch (and every restore) that changes what a
source serves records a state, numbered per source (`seq`): `index_states` holds its identity and
counts, `served_spans` which document versions it served, as spans of states (a document served
unchanged across a hundred states is one row, so a state costs what changed, not a copy of the
index). The rows of a version no longer served go to the `history_*` tables when it leaves (never
searched; the deletion proofs cover the served tables), and come back when a state that served it
is restored. Retention (`prune`) drops states no longer wanted, and then the spans and history rows
that only they needed; it never drops the served state, a pinned state, or a state an evaluation
it is told to keep measured.

Restoring swaps only the documents whose version differs, inside the caller's transaction, so a
kill leaves the old state or the new one. A pin (`source_pins`) keeps a source on a state until it
is unpinned: ingestion then leaves its served rows alone. A disabled source serves nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.storage import history
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns
from rag_pipeline.core.storage.served import mark_changed
from rag_pipeline.core.storage.staging import utcnow

# States a source keeps at least, and the days a state is kept whatever their number (the
# lifecycle config overrides both).
KEEP_STATES = 30


class StateError(InputError):
    """A state that does not exist, or cannot be served here; the message says what exists."""


@dataclass(frozen=True)
class IndexState:
    """One served state of a source."""

    source_id: str
    seq: int
    state_id: str
    created_at: datetime
    run_id: str
    origin: str  # switch | restore | disable | enable
    manifest_hash: str
    documents: int
    chunks: int
    settings: str
    model: str
    revision: str | None
    note: str | None

    def as_json(self) -> dict:
        return {"state_id": self.state_id, "source": self.source_id, "seq": self.seq,
                "created_at": self.created_at.isoformat(timespec="seconds"), "origin": self.origin,
                "run_id": self.run_id, "manifest_hash": self.manifest_hash, "documents": self.documents,
                "chunks": self.chunks, "settings": self.settings, "model": self.model, "revision": self.revision,
                "note": self.note}


@dataclass(frozen=True)
class Swap:
    """What a restore changed: documents served in another version or again (`doc_id`,
    `content_hash`, `parser_version`), documents no longer served, and how many stayed as they were."""

    arrived: list[dict]
    removed: list[str]
    kept: int


@dataclass(frozen=True)
class Pin:
    source_id: str
    kind: str  # pinned | disabled
    state_id: str
    pinned_by: str
    reason: str
    pinned_at: datetime

    def sentence(self) -> str:
        what = "disabled (serves nothing)" if self.kind == "disabled" else f"pinned to state {self.state_id}"
        return (f"source {self.source_id!r} is {what} by {self.pinned_by} since "
                f"{self.pinned_at:%Y-%m-%d %H:%M} UTC: {self.reason}; ingestion leaves its served rows alone until "
                f"`rag-pipeline index {'enable' if self.kind == 'disabled' else 'unpin'} --source {self.source_id}`")


class IndexStates:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- inside a switch or a restore (the caller's transaction) ---------------------------

    def record(self, source_id: str, run_id: str, origin: str, settings: str, model: str,
               manifest_hash: str | Callable[[], str], revision: str | None = None, note: str | None = None) -> IndexState:
        """Record what the source serves now as its next state, unless it serves what its latest
        state served (then that state is returned). Call after the served rows changed.
        `manifest_hash`: its value, or how to compute it (asked only when a new state is recorded:
        it reads every served document of the source)."""
        history.stamp_versions(self.db, source_id)
        digest = self.db.value("SELECT md5(coalesce(string_agg(doc_id || ':' || version, ',' ORDER BY doc_id), '')) "
                               "FROM documents WHERE source_id = ?", [source_id])
        latest = self.latest(source_id)
        if latest is not None and origin == "switch" and self.db.value(
                "SELECT digest FROM index_states WHERE source_id = ? AND seq = ?", [source_id, latest.seq]) == digest:
            return latest
        seq = (latest.seq if latest else 0) + 1
        if callable(manifest_hash):
            manifest_hash = manifest_hash()
        self.db.execute("UPDATE served_spans SET last_seq = ? WHERE source_id = ? AND last_seq IS NULL AND NOT EXISTS "
                        "(SELECT 1 FROM documents d WHERE d.doc_id = served_spans.doc_id AND d.version = served_spans.version)",
                        [seq - 1, source_id])
        self.db.execute("INSERT INTO served_spans (source_id, doc_id, version, first_seq, last_seq) "
                        "SELECT d.source_id, d.doc_id, d.version, ?, NULL FROM documents d WHERE d.source_id = ? AND NOT EXISTS "
                        "(SELECT 1 FROM served_spans s WHERE s.source_id = d.source_id AND s.doc_id = d.doc_id "
                        "AND s.version = d.version AND s.last_seq IS NULL)", [seq, source_id])
        documents, chunks = self.db.rows("SELECT count(*), coalesce(sum(chunk_count), 0) FROM documents WHERE source_id = ?",
                                         [source_id])[0]
        now = utcnow()
        state = IndexState(source_id, seq, f"{source_id}@{seq}-{uuid.uuid4().hex[:6]}", now, run_id, origin, manifest_hash,
                           int(documents), int(chunks), settings, model, revision, note)
        self.db.insert("index_states", columns("index_states"), [
            (source_id, seq, state.state_id, now, run_id, origin, manifest_hash, digest, state.documents, state.chunks,
             settings, model, revision, note)])
        return state

    def restore(self, source_id: str, state: IndexState | None) -> Swap:
        """Serve exactly what `state` served (None: nothing), swapping only the documents whose
        version differs (call inside a transaction; record the new state after)."""
        history.stamp_versions(self.db, source_id)
        self.db.execute("DROP TABLE IF EXISTS target")
        if state is None:
            self.db.execute("CREATE TEMP TABLE target AS SELECT doc_id, version FROM served_spans WHERE false")
        else:
            self.db.execute("CREATE TEMP TABLE target AS SELECT doc_id, version FROM served_spans WHERE source_id = ? "
                            "AND first_seq <= ? AND (last_seq IS NULL OR last_seq >= ?)", [source_id, state.seq, state.seq])
            missing = self.db.value("SELECT count(*) FROM target t WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE "
                                    "d.doc_id = t.doc_id AND d.version = t.version) AND NOT EXISTS "
                                    "(SELECT 1 FROM history_documents h WHERE h.version = t.version)")
            if missing:
                raise StateError(f"state {state.state_id} cannot be served again: the rows of {missing} of its documents "
                                 "were not kept (it was recorded before index states kept history, or history was forgotten)")
        leaving = ("SELECT d.doc_id FROM documents d WHERE d.source_id = ? AND NOT EXISTS "
                   "(SELECT 1 FROM target t WHERE t.doc_id = d.doc_id AND t.version = d.version)")
        history.archive_leaving(self.db, source_id, leaving, [source_id])
        self.db.execute("DROP TABLE IF EXISTS swapped")
        self.db.execute(f"CREATE TEMP TABLE swapped AS {leaving}", [source_id])
        for table in ("postings", "vectors"):
            self.db.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT c.chunk_id FROM chunks c JOIN swapped USING (doc_id))")
        self.db.execute("DELETE FROM chunks WHERE doc_id IN (SELECT doc_id FROM swapped)")
        self.db.execute("DELETE FROM documents WHERE doc_id IN (SELECT doc_id FROM swapped)")
        self.db.execute("DROP TABLE IF EXISTS arriving")
        self.db.execute("CREATE TEMP TABLE arriving AS SELECT t.doc_id, t.version FROM target t WHERE NOT EXISTS "
                        "(SELECT 1 FROM documents d WHERE d.doc_id = t.doc_id)")
        history.bring_back(self.db, source_id, "arriving")
        mark_changed(self.db, source_id)
        arrived = self.db.dicts("SELECT d.doc_id, d.content_hash, d.parser_version FROM documents d "
                                "JOIN arriving USING (doc_id) ORDER BY d.doc_id")
        returning = {d["doc_id"] for d in arrived}
        left = [r[0] for r in self.db.rows("SELECT doc_id FROM swapped ORDER BY doc_id") if r[0] not in returning]
        kept = int(self.db.value("SELECT count(*) FROM documents WHERE source_id = ?", [source_id])) - len(arrived)
        return Swap(arrived, left, kept)

    # ---- reading -----------------------------------------------------------------------------

    def _states(self, where: str, params: Sequence) -> list[IndexState]:
        return [IndexState(**{k: row[k] for k in IndexState.__dataclass_fields__})
                for row in self.db.dicts(f"SELECT * FROM index_states WHERE {where} ORDER BY source_id, seq", params)]

    def list(self, source_id: str) -> list[IndexState]:
        return self._states("source_id = ?", [source_id])

    def latest(self, source_id: str) -> IndexState | None:
        found = self._states("source_id = ? AND seq = (SELECT max(seq) FROM index_states WHERE source_id = ?)",
                             [source_id, source_id])
        return found[0] if found else None

    def get(self, state_id: str) -> IndexState:
        found = self._states("state_id = ?", [state_id])
        if not found:
            raise StateError(f"no index state {state_id!r}: `rag-pipeline index list --source SOURCE` lists them")
        return found[0]

    def at(self, source_id: str, when: datetime) -> IndexState | None:
        """The state the source served at `when` (its latest state recorded at or before it)."""
        found = self._states("source_id = ? AND created_at <= ?", [source_id, when])
        return found[-1] if found else None

    def by_manifest(self, source_id: str, manifest_hash: str) -> IndexState | None:
        """The latest state of the source that served this manifest hash (what an evaluation recorded)."""
        found = self._states("source_id = ? AND manifest_hash = ?", [source_id, manifest_hash])
        return found[-1] if found else None

    def documents(self, state: IndexState) -> dict[str, str]:
        """Document id -> version of every document the state served."""
        return dict(self.db.rows("SELECT doc_id, version FROM served_spans WHERE source_id = ? AND first_seq <= ? "
                                 "AND (last_seq IS NULL OR last_seq >= ?)", [state.source_id, state.seq, state.seq]))

    def storage_rows(self) -> dict[str, int]:
        """Rows held by states and history, per table (what retention costs)."""
        return {t: int(self.db.value(f"SELECT count(*) FROM {t}")) for t in
                ("index_states", "served_spans", "history_documents", "history_chunks", "history_vectors", "history_postings")}

    # ---- pins --------------------------------------------------------------------------------

    def pin(self, source_id: str, kind: str, state_id: str, by: str, reason: str) -> Pin:
        pin = Pin(source_id, kind, state_id, by, reason, utcnow())
        self.db.execute("DELETE FROM source_pins WHERE source_id = ?", [source_id])
        self.db.insert("source_pins", columns("source_pins"),
                       [(source_id, kind, state_id, by, reason, pin.pinned_at)])
        return pin

    def unpin(self, source_id: str) -> Pin | None:
        pin = self.pinned(source_id)
        self.db.execute("DELETE FROM source_pins WHERE source_id = ?", [source_id])
        return pin

    def pinned(self, source_id: str) -> Pin | None:
        rows = self.db.dicts("SELECT * FROM source_pins WHERE source_id = ?", [source_id])
        return Pin(**rows[0]) if rows else None

    # ---- retention ---------------------------------------------------------------------------

    def prune(self, source_id: str, keep_states: int, keep_since: datetime, keep_ids: Sequence[str] = ()) -> int:
        """Drop the source's states that are neither among its latest `keep_states`, nor recorded
        since `keep_since`, nor in `keep_ids`, nor pinned; then the spans and history rows only
        they needed. Returns how many states were dropped."""
        latest = self.latest(source_id)
        if latest is None:
            return 0
        pin = self.pinned(source_id)
        kept = {s.state_id for s in self.list(source_id)[-max(keep_states, 1):]} | set(keep_ids)
        if pin is not None:
            kept.add(pin.state_id)
        dropped = [s for s in self.list(source_id)
                   if s.state_id not in kept and s.created_at < keep_since and s.seq != latest.seq]
        if not dropped:
            return 0
        self.db.execute("DELETE FROM index_states WHERE state_id IN (SELECT unnest(?::VARCHAR[]))",
                        [[s.state_id for s in dropped]])
        # A span no remaining state falls in is no longer needed; the open spans are the served state's.
        self.db.execute("DELETE FROM served_spans WHERE source_id = ? AND last_seq IS NOT NULL AND NOT EXISTS "
                        "(SELECT 1 FROM index_states s WHERE s.source_id = served_spans.source_id "
                        "AND s.seq BETWEEN served_spans.first_seq AND served_spans.last_seq)", [source_id])
        for table in ("history_documents", "history_chunks", "history_vectors", "history_postings"):
            self.db.execute(f"DELETE FROM {table} WHERE NOT EXISTS (SELECT 1 FROM served_spans s WHERE s.version = {table}.version)")
        return len(dropped)

    def forget_document(self, doc_id: str) -> int:
        """Remove a document from every kept state and from history (a leak, a legal removal);
        states that served it can then no longer be restored whole. Returns the versions forgotten."""
        versions = [r[0] for r in self.db.rows("SELECT DISTINCT version FROM served_spans WHERE doc_id = ? "
                                               "AND last_seq IS NOT NULL", [doc_id])]
        for table in ("history_documents", "history_chunks", "history_vectors", "history_postings"):
            self.db.execute(f"DELETE FROM {table} WHERE version IN (SELECT unnest(?::VARCHAR[]))", [versions])
        return len(versions)
