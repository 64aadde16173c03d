"""Document versions, one at a time: what a version held (its bytes' hash, access fields, chunks),
served now or kept in history; and, inside `Store.scratch()`, the served index with some documents
set to another version (or left out) and some chunks embedded again: the counterfactuals that tell
why an evaluation moved (`core/evaluation/attribution/`).

`IndexStates.restore` swaps a whole source to a state; these swap single documents and record no
state: they are meant for a transaction that is rolled back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag_pipeline.core.storage import history
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.served import mark_changed
from rag_pipeline.core.storage.states import StateError

if TYPE_CHECKING:
    import numpy as np

# The fields of a document row that decide who sees it and whether it is current.
ACCESS_FIELDS = ("tenant", "visibility", "roles", "status", "effective_date", "supersedes", "superseded_by")


@dataclass(frozen=True)
class ChunkRow:
    chunk_id: str
    heading_path: tuple[str, ...]
    text_hash: str


@dataclass(frozen=True)
class VersionInfo:
    """One version of a document as its rows hold it."""

    version: str
    doc_id: str
    source_id: str
    content_hash: str
    parser_version: str | None
    access: dict[str, object]
    chunks: tuple[ChunkRow, ...]


class DocumentVersions:
    def __init__(self, db: Database) -> None:
        self.db = db

    def describe(self, versions: Sequence[str]) -> dict[str, VersionInfo]:
        """Version -> what it held, for the versions served now or kept in history (others are absent)."""
        wanted = sorted(set(versions))
        if not wanted:
            return {}
        fields = ", ".join(f"d.{f}" for f in ("version", "doc_id", "source_id", "content_hash", "parser_version",
                                               *ACCESS_FIELDS))
        docs: dict[str, dict] = {}
        chunks: dict[str, list[ChunkRow]] = {}
        for table, chunk_table in (("history_documents", "history_chunks"), ("documents", "chunks")):
            for row in self.db.dicts(f"SELECT {fields} FROM {table} d WHERE d.version IN (SELECT unnest(?::VARCHAR[]))",
                                     [wanted]):
                docs.setdefault(row["version"], row)
            join = "c.version = d.version" if chunk_table == "history_chunks" else "c.doc_id = d.doc_id"
            found: dict[str, list[ChunkRow]] = {}
            for version, chunk_id, path, text_hash in self.db.rows(
                    f"SELECT d.version, c.chunk_id, c.heading_path, c.text_hash FROM {chunk_table} c JOIN {table} d "
                    f"ON {join} WHERE d.version IN (SELECT unnest(?::VARCHAR[])) ORDER BY d.version, c.ordinal", [wanted]):
                found.setdefault(version, []).append(ChunkRow(chunk_id, tuple(path or ()), text_hash))
            for version, rows in found.items():  # a version both kept and served again holds the same rows
                chunks.setdefault(version, rows)
        return {v: VersionInfo(v, d["doc_id"], d["source_id"], d["content_hash"], d["parser_version"],
                               {f: (list(d[f]) if f == "roles" and d[f] is not None else d[f]) for f in ACCESS_FIELDS},
                               tuple(chunks.get(v, ())))
                for v, d in docs.items()}

    # ---- inside Store.scratch() ------------------------------------------------------------------

    def serve(self, source_id: str, wanted: Mapping[str, str | None]) -> None:
        """Serve each document of `wanted` in the given version (from history), or not at all (None);
        the source's other documents stay as they are. StateError when a version's rows are not kept."""
        history.stamp_versions(self.db, source_id)
        current = dict(self.db.rows("SELECT doc_id, version FROM documents WHERE source_id = ? AND doc_id IN "
                                    "(SELECT unnest(?::VARCHAR[]))", [source_id, sorted(wanted)]))
        changing = sorted(d for d, v in wanted.items() if current.get(d) != v)
        if not changing:
            return
        arriving = {d: wanted[d] for d in changing if wanted[d] is not None}
        kept = {r[0] for r in self.db.rows("SELECT DISTINCT version FROM history_documents WHERE version IN "
                                           "(SELECT unnest(?::VARCHAR[]))", [sorted(set(arriving.values()))])}
        lost = sorted(d for d, v in arriving.items() if v not in kept)
        if lost:
            raise StateError(f"the rows of {', '.join(lost)} in that version were not kept (retention: "
                             "lifecycle.keep_states, keep_state_days)")
        self.db.execute("DROP TABLE IF EXISTS leaving")
        self.db.execute("CREATE TEMP TABLE leaving AS SELECT unnest(?::VARCHAR[]) AS doc_id", [changing])
        for table in ("postings", "vectors"):
            self.db.execute(f"DELETE FROM {table} WHERE chunk_id IN "
                            "(SELECT c.chunk_id FROM chunks c JOIN leaving USING (doc_id))")
        self.db.execute("DELETE FROM chunks WHERE doc_id IN (SELECT doc_id FROM leaving)")
        self.db.execute("DELETE FROM documents WHERE doc_id IN (SELECT doc_id FROM leaving)")
        self.db.execute("DROP TABLE IF EXISTS arriving")
        self.db.execute("CREATE TEMP TABLE arriving AS SELECT unnest(?::VARCHAR[]) AS doc_id, "
                        "unnest(?::VARCHAR[]) AS version", [list(arriving), list(arriving.values())])
        history.bring_back(self.db, source_id, "arriving")
        mark_changed(self.db, source_id)

    def chunks_not_embedded_by(self, identity: str) -> list[tuple[str, str, str]]:
        """(chunk id, source id, the text that was embedded) of each served chunk whose vector another
        embedder made."""
        return [tuple(r) for r in self.db.rows(
            "SELECT c.chunk_id, c.source_id, c.embed_text FROM chunks c JOIN vectors v USING (chunk_id) "
            "WHERE v.identity <> ? ORDER BY c.chunk_id", [identity])]

    def replace_vectors(self, chunks: Sequence[tuple[str, str]], identity: str, matrix: np.ndarray) -> None:
        """Give each (chunk id, source id) the vector of its row in `matrix`, embedded by `identity`."""
        if not chunks:
            return
        self.db.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))", [[c for c, _ in chunks]])
        self.db.insert("vectors", ["chunk_id", "source_id", "identity", "vector"],
                       [(chunk_id, source_id, identity) for chunk_id, source_id in chunks], vectors=matrix)
        for source_id in sorted({s for _, s in chunks}):
            mark_changed(self.db, source_id)
