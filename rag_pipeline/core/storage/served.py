"""The served index (`documents`, `chunks`, `vectors`, `postings`): the switch that replaces a
source's rows from staging, and the proofs about what left it (tombstones, remnants, orphans)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag_pipeline.core.storage import history
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import CHUNK_TABLES, DOCUMENT_TABLES, SOURCE_TABLES, columns
from rag_pipeline.core.storage.staging import unused_by_staged, utcnow

if TYPE_CHECKING:
    import numpy as np

_IN = "IN (SELECT unnest(?::VARCHAR[]))"
# Documents whose orphan rows are looked for by the prefix of their chunk ids, at most.
_FEW_PREFIXES = 32
# The document id of a chunk id `<doc id>#<ordinal>`: what precedes its last `#` (a document id may
# hold `#` itself), in SQL that DuckDB and PostgreSQL both run. Python: `chunk_id.rsplit("#", 1)[0]`.
_CHUNK_DOC_ID = "left({chunk_id}, length({chunk_id}) - strpos(reverse({chunk_id}), '#'))"


def mark_changed(db: Database, source_id: str) -> None:
    """A new served-version token for the source (inside the caller's transaction)."""
    db.execute("DELETE FROM served_versions WHERE source_id = ?", [source_id])
    db.insert("served_versions", columns("served_versions"), [(source_id, uuid.uuid4().hex)])


def served_version(db: Database) -> tuple:
    """What is served, as one comparable value: every source's token."""
    return tuple(db.rows("SELECT source_id, version FROM served_versions ORDER BY source_id"))


# What makes a served document's version: its bytes and the metadata that decides who may see it
# and whether it is current. A change of any of them is a new served version.
SERVED_FIELDS = ("content_hash", "tenant", "visibility", "roles", "status", "effective_date", "supersedes",
                 "superseded_by")


def document_version(document: dict) -> tuple:
    """The version of a served document row (`SERVED_FIELDS`) as one comparable value."""
    return tuple(tuple(value) if isinstance(value := document.get(f), list) else value for f in SERVED_FIELDS)


# Ready documents (temp table `ready`) whose served rows already are what the switch would write:
# the document row equals its parsed and discovered state, it has as many chunks as are staged,
# and every staged chunk has a served chunk equal in every staged column with a vector of this
# embedding identity (the vector is the cache's for that identity and text hash). Postings and
# `lex_len` follow from a chunk's text and the analyzer, so equal texts posted by the same analyzer
# mean equal postings. Parameters: source, identity, analyzer.
_SAME = "IS NOT DISTINCT FROM"
_UNCHANGED = f"""
SELECT r.doc_id FROM ready r
JOIN parsed_docs p ON p.doc_id = r.doc_id
JOIN discovery m ON m.doc_id = r.doc_id
JOIN documents d ON d.doc_id = r.doc_id
WHERE d.source_id = ? AND d.content_hash = p.content_hash
  AND d.rel_path {_SAME} m.rel_path AND d.file_type {_SAME} m.file_type AND d.title {_SAME} p.title
  AND d.tenant {_SAME} p.tenant AND d.visibility {_SAME} p.visibility AND d.roles {_SAME} p.roles
  AND d.status {_SAME} p.status AND d.effective_date {_SAME} p.effective_date
  AND d.supersedes {_SAME} p.supersedes AND d.superseded_by {_SAME} p.superseded_by
  AND d.parser_version {_SAME} p.parser_version
  AND d.chunk_count = (SELECT count(*) FROM staged_chunks s WHERE s.doc_id = r.doc_id)
  AND NOT EXISTS (
    SELECT 1 FROM staged_chunks s
    WHERE s.doc_id = r.doc_id AND NOT EXISTS (
      SELECT 1 FROM chunks c JOIN vectors v ON v.chunk_id = c.chunk_id AND v.identity = ?
      WHERE c.chunk_id = s.chunk_id AND c.doc_id = s.doc_id AND c.source_id = s.source_id
        AND c.ordinal = s.ordinal AND c.title {_SAME} s.title AND c.heading_path {_SAME} s.heading_path
        AND c.text = s.text AND c.embed_text = s.embed_text AND c.text_hash = s.text_hash
        AND c.token_count {_SAME} s.token_count AND c.line_start {_SAME} s.line_start
        AND c.line_end {_SAME} s.line_end AND c.page_number {_SAME} s.page_number AND c.analyzer {_SAME} ?))
"""


# The same over the ready documents' staged chunks and served chunks with a vector of the identity,
# copied first (temp tables `ready_staged`, `ready_served`): for the few candidates of an incremental
# switch (one document: 0.03 s at 100k documents, against 0.5 to 1.3 s for the joins over every
# chunk); for a whole source the plain joins are faster. Parameters: source, analyzer.
_UNCHANGED_FEW = _UNCHANGED.replace("FROM staged_chunks s", "FROM ready_staged s").replace(
    "FROM chunks c JOIN vectors v ON v.chunk_id = c.chunk_id AND v.identity = ?", "FROM ready_served c")


@dataclass(frozen=True)
class Replaced:
    """What `replace_served` did: its counts (`indexed`, `kept_previous`, `rewritten`), the documents
    whose served rows it wrote, and the rows of the served documents it replaced or removed."""

    counts: dict[str, int]
    written: list[str]
    previous: dict[str, dict]


# An incremental switch's candidates (temp table `candidates`): documents of the source staged again
# since its last switch, served documents whose bytes are not those discovered (changed or gone), and
# discovered documents not served. Parameters: the source, three times.
_CANDIDATES = """
CREATE TEMP TABLE candidates AS
SELECT doc_id FROM staged_changes WHERE source_id = ?
UNION
SELECT d.doc_id FROM documents d WHERE d.source_id = ? AND NOT EXISTS (
    SELECT 1 FROM discovery m WHERE m.doc_id = d.doc_id AND m.supported AND m.content_hash = d.content_hash)
UNION
SELECT m.doc_id FROM discovery m WHERE m.source_id = ? AND m.supported
  AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = m.doc_id)
"""


class ServedIndex:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- the switch ------------------------------------------------------------------------

    def replace_served(self, source_id: str, identity: str, keep_history: bool = True,
                       analyzer: str | None = None, whole: bool = True) -> Replaced:
        """Replace the served rows of one source with its staged state (call inside a transaction).

        A document is published when its staged version is the one discovery found (same content
        hash and metadata) and every staged chunk has a cached vector; a document still in the
        source but not ready keeps its previously served version, so a failed stage never removes
        what was searchable; a document no longer in the source leaves the index.

        Only documents whose served rows differ from what they would become are rewritten (a
        one-document edit rewrites one document, not the source): a ready document whose
        served row, chunks and vectors equal its staged state (`_UNCHANGED`) keeps them. The rows
        of a replaced or removed document go to history first (`keep_history`: index states can then
        serve them again). `analyzer`: what the staged postings were made with, recorded with each
        chunk; a chunk served with another analyzer is rewritten even when its text is the same.
        Returns the counts, the ids of the documents written and the rows they replaced or that left.

        `whole` False (an incremental switch): only the candidates are compared, the documents a
        stage staged again since the last switch (`staged_changes`) and those whose served bytes
        are not the discovered ones (changed, new, gone); the others' served rows are left as they
        are, unread. A row changed behind the pipeline's back is then found by the next whole one.
        """
        db = self.db
        with db.transaction():
            db.execute("DROP TABLE IF EXISTS candidates")
            if whole:
                scope = ""
            else:
                db.execute(_CANDIDATES, [source_id, source_id, source_id])
                scope = " AND {alias}.doc_id IN (SELECT doc_id FROM candidates)"
            db.execute("DROP TABLE IF EXISTS ready")
            db.execute(
                """
                CREATE TEMP TABLE ready AS
                SELECT s.doc_id FROM staged_chunks s
                JOIN discovery m ON m.doc_id = s.doc_id AND m.content_hash = s.content_hash AND m.error IS NULL
                JOIN parsed_docs p ON p.doc_id = s.doc_id AND p.content_hash = m.content_hash AND p.meta_json = m.meta_json
                LEFT JOIN embedding_cache c ON c.identity = ? AND c.text_hash = s.text_hash
                WHERE s.source_id = ?""" + scope.format(alias="s") + """
                GROUP BY s.doc_id HAVING count(*) = count(c.text_hash)
                """,
                [identity, source_id],
            )
            db.execute("DROP TABLE IF EXISTS keep_old")
            db.execute(
                """
                CREATE TEMP TABLE keep_old AS
                SELECT d.doc_id FROM documents d
                WHERE d.source_id = ? AND NOT EXISTS (SELECT 1 FROM ready r WHERE r.doc_id = d.doc_id)
                  AND d.doc_id IN (SELECT doc_id FROM discovery WHERE source_id = ? AND supported)""" + scope.format(alias="d") + """
                """,
                [source_id, source_id],
            )
            db.execute("DROP TABLE IF EXISTS unchanged")
            if whole:
                db.execute(f"CREATE TEMP TABLE unchanged AS {_UNCHANGED}", [source_id, identity, analyzer])
            else:
                for table in ("ready_staged", "ready_served"):
                    db.execute(f"DROP TABLE IF EXISTS {table}")
                db.execute("CREATE TEMP TABLE ready_staged AS SELECT s.* FROM staged_chunks s JOIN ready r USING (doc_id)")
                db.execute("CREATE TEMP TABLE ready_served AS SELECT c.* FROM chunks c JOIN ready r USING (doc_id) "
                           "JOIN vectors v ON v.chunk_id = c.chunk_id AND v.identity = ?", [identity])
                db.execute(f"CREATE TEMP TABLE unchanged AS {_UNCHANGED_FEW}", [source_id, analyzer])
            db.execute("DROP TABLE IF EXISTS fresh")
            db.execute("CREATE TEMP TABLE fresh AS SELECT r.doc_id FROM ready r "
                       "WHERE NOT EXISTS (SELECT 1 FROM unchanged u WHERE u.doc_id = r.doc_id)")

            def replaced(table: str) -> str:
                return (f"{table}.source_id = ? AND NOT EXISTS (SELECT 1 FROM keep_old k WHERE k.doc_id = {table}.doc_id) "
                        f"AND NOT EXISTS (SELECT 1 FROM unchanged u WHERE u.doc_id = {table}.doc_id)"
                        + scope.format(alias=table))

            # What the replaced and removed documents were: the switch's ledger and counts need them only.
            previous = db.dicts(f"SELECT * FROM documents WHERE {replaced('documents')} ORDER BY doc_id", [source_id])
            written = [doc_id for (doc_id,) in db.rows("SELECT doc_id FROM fresh ORDER BY doc_id")]
            # An incremental switch that replaces nothing does not scan the chunk tables for nothing.
            if previous or whole:
                if keep_history:
                    history.archive_leaving(db, source_id, f"SELECT doc_id FROM documents WHERE {replaced('documents')}",
                                            [source_id])
                for table in ("postings", "vectors"):
                    db.execute(f"DELETE FROM {table} WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE "
                               f"{replaced('chunks')})", [source_id])
                db.execute(f"DELETE FROM chunks WHERE {replaced('chunks')}", [source_id])
                db.execute(f"DELETE FROM documents WHERE {replaced('documents')}", [source_id])
            db.execute(
                f"""
                INSERT INTO documents ({", ".join(columns("documents"))})
                SELECT p.doc_id, p.source_id, m.rel_path, p.title, m.file_type, p.content_hash,
                       p.tenant, p.visibility, p.roles, p.status, p.effective_date, p.supersedes, p.superseded_by,
                       p.parser_version, (SELECT count(*) FROM staged_chunks s WHERE s.doc_id = p.doc_id), ?,
                       NULL  -- its version, stamped once its chunks and vectors are in (history.stamp_versions)
                FROM parsed_docs p JOIN fresh USING (doc_id) JOIN discovery m USING (doc_id)
                """,
                [utcnow()],
            )
            db.execute(
                f"""
                INSERT INTO chunks ({", ".join(columns("chunks"))})
                SELECT s.chunk_id, s.doc_id, s.source_id, s.ordinal, s.title, s.heading_path, s.text, s.embed_text,
                       s.text_hash, s.token_count, s.line_start, s.line_end, s.page_number,
                       d.tenant, d.visibility, d.roles, d.status, d.effective_date,
                       (SELECT coalesce(sum(tf), 0) FROM staged_postings p WHERE p.chunk_id = s.chunk_id), ?
                FROM staged_chunks s JOIN fresh USING (doc_id) JOIN documents d USING (doc_id)
                """,
                [analyzer],
            )
            db.execute(
                """
                INSERT INTO vectors (chunk_id, source_id, identity, vector)
                SELECT s.chunk_id, s.source_id, c.identity, c.vector
                FROM staged_chunks s JOIN fresh USING (doc_id)
                JOIN embedding_cache c ON c.identity = ? AND c.text_hash = s.text_hash
                """,
                [identity],
            )
            db.execute(
                "INSERT INTO postings (chunk_id, source_id, term, tf) SELECT p.chunk_id, p.source_id, p.term, p.tf "
                "FROM staged_postings p JOIN staged_chunks s USING (chunk_id) JOIN fresh USING (doc_id)"
            )
            history.stamp_versions(db, source_id)
            mark_changed(db, source_id)
            indexed, kept = db.value("SELECT count(*) FROM ready"), db.value("SELECT count(*) FROM keep_old")
            rewritten = db.value("SELECT count(*) FROM fresh")
        # Built by the first switch that has vectors (their dimension is the index's), then kept current.
        db.ensure_vector_index()
        return Replaced({"indexed": int(indexed), "kept_previous": int(kept), "rewritten": int(rewritten)},
                        written, {row["doc_id"]: row for row in previous})

    def leaving_documents(self, source_id: str) -> list[dict]:
        """Served documents the latest discovery no longer holds: `doc_id`, `title`,
        `opening_text` (first chunk) and `text_hashes`; what their tombstones and probes need."""
        return self.db.dicts(
            """
            SELECT c.doc_id, min(c.title) AS title, (array_agg(c.text ORDER BY c.ordinal))[1] AS opening_text,
                   array_agg(DISTINCT c.text_hash ORDER BY c.text_hash) AS text_hashes
            FROM chunks c
            WHERE c.source_id = ?
              AND NOT EXISTS (SELECT 1 FROM discovery f WHERE f.doc_id = c.doc_id AND f.source_id = ? AND f.supported)
            GROUP BY c.doc_id ORDER BY c.doc_id
            """,
            [source_id, source_id],
        )

    # ---- deletion proofs -------------------------------------------------------------------

    def record_tombstones(self, source_id: str, leaving: Sequence[dict], run_id: str) -> None:
        """Remember documents about to leave the index (title, opening text, text hashes), so that
        their deletion can be proven afterwards."""
        if not leaving:
            return
        now = utcnow()
        with self.db.transaction():
            self.db.execute(f"DELETE FROM tombstones WHERE doc_id {_IN}", [[d["doc_id"] for d in leaving]])
            self.db.insert("tombstones", columns("tombstones"), [
                (d["doc_id"], source_id, d["title"], d["opening_text"], list(d["text_hashes"]), now, run_id) for d in leaving
            ])

    def tombstones(self, source_id: str) -> list[dict]:
        """Deleted documents of a source that have not come back."""
        return self.db.dicts(
            "SELECT * FROM tombstones t WHERE t.source_id = ? "
            "AND NOT EXISTS (SELECT 1 FROM manifest m WHERE m.doc_id = t.doc_id AND m.supported) ORDER BY t.doc_id", [source_id])

    def remnants(self, doc_ids: Sequence[str]) -> dict[str, list[str]]:
        """For each document id, the tables that still hold something of it.

        One statement per table for all the documents at once, each a hash join: the switch
        checks every tombstone of the source, so the work must not be (documents x rows)."""
        if not doc_ids:
            return {}
        found: dict[str, list[str]] = {}
        probe = [list(doc_ids)]
        for table in DOCUMENT_TABLES:
            for (doc_id,) in self.db.rows(f"SELECT DISTINCT doc_id FROM {table} WHERE doc_id {_IN}", probe):
                found.setdefault(doc_id, []).append(table)
        for table in CHUNK_TABLES:
            # Chunk ids are `<doc id>#<ordinal>`: a row of a deleted document keeps its document id
            # before the last `#` (joined on by equality, not by a prefix test against every id).
            for (doc_id,) in self.db.rows(
                f"SELECT DISTINCT p.doc_id FROM {table} t JOIN (SELECT unnest(?::VARCHAR[]) AS doc_id) p "
                f"ON {_CHUNK_DOC_ID.format(chunk_id='t.chunk_id')} = p.doc_id", probe):
                found.setdefault(doc_id, []).append(table)
        # Cached vectors of a tombstone's texts that no staged chunk uses any more.
        for (doc_id,) in self.db.rows(
            "SELECT DISTINCT h.doc_id FROM (SELECT doc_id, unnest(text_hashes) AS text_hash FROM tombstones "
            f"WHERE doc_id {_IN}) h JOIN embedding_cache e ON e.text_hash = h.text_hash "
            f"WHERE {unused_by_staged('h')}", probe):
            found.setdefault(doc_id, []).append("embedding_cache")
        return found

    def orphans(self, doc_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        """Served rows whose parent is gone: chunks without a document, vectors or postings without a
        chunk (only rows of the documents `doc_ids`, when given: those a switch wrote or removed)."""
        if doc_ids is not None:
            return self._orphans_of(doc_ids)
        found: dict[str, list[str]] = {}
        for (doc_id,) in self.db.rows("SELECT DISTINCT c.doc_id FROM chunks c "
                                      "WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = c.doc_id)"):
            found.setdefault(doc_id, []).append("chunks")
        for table in ("vectors", "postings"):
            for (chunk_id,) in self.db.rows(
                f"SELECT DISTINCT t.chunk_id FROM {table} t "
                "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = t.chunk_id)"):
                found.setdefault(chunk_id.rsplit("#", 1)[0], []).append(table)
        return found

    def _orphans_of(self, doc_ids: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        if not doc_ids:
            return found
        probe = [list(doc_ids)]
        for (doc_id,) in self.db.rows(f"SELECT DISTINCT c.doc_id FROM chunks c WHERE c.doc_id {_IN} "
                                      "AND NOT EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = c.doc_id)", probe):
            found.setdefault(doc_id, []).append("chunks")
        wanted = set(doc_ids)
        for table in ("vectors", "postings"):
            if len(wanted) <= _FEW_PREFIXES:
                # A few documents: a prefix test per row (8x cheaper than computing every row's document
                # id); a longer id sharing the prefix (`a#b` for `a`) is told apart by its document id.
                prefixes = " OR ".join("starts_with(t.chunk_id, ?)" for _ in wanted)
                rows = self.db.rows(f"SELECT DISTINCT t.chunk_id FROM {table} t WHERE ({prefixes}) "
                                    "AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = t.chunk_id)",
                                    [f"{d}#" for d in sorted(wanted)])
                docs = sorted({chunk_id.rsplit("#", 1)[0] for (chunk_id,) in rows} & wanted)
            else:
                docs = [doc_id for (doc_id,) in self.db.rows(
                    f"SELECT DISTINCT p.doc_id FROM {table} t JOIN (SELECT unnest(?::VARCHAR[]) AS doc_id) p "
                    f"ON {_CHUNK_DOC_ID.format(chunk_id='t.chunk_id')} = p.doc_id "
                    "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.chunk_id = t.chunk_id)", probe)]
            for doc_id in docs:
                found.setdefault(doc_id, []).append(table)
        return found

    # ---- what is served --------------------------------------------------------------------

    def indexed_documents(self, source_id: str, doc_ids: Sequence[str] | None = None) -> list[dict]:
        """The source's served document rows (only those of `doc_ids`, when given)."""
        if doc_ids is None:
            return self.db.dicts("SELECT * FROM documents WHERE source_id = ? ORDER BY doc_id", [source_id])
        if not doc_ids:
            return []
        return self.db.dicts(f"SELECT * FROM documents WHERE source_id = ? AND doc_id {_IN} ORDER BY doc_id",
                             [source_id, list(doc_ids)])

    def served_ids(self, source_id: str) -> set[str]:
        return {doc_id for (doc_id,) in self.db.rows("SELECT doc_id FROM documents WHERE source_id = ?", [source_id])}

    def served_count(self, source_id: str) -> int:
        return int(self.db.value("SELECT count(*) FROM documents WHERE source_id = ?", [source_id]))

    def document_hashes(self) -> dict[str, str]:
        """Served document id -> content hash of the indexed version."""
        return dict(self.db.rows("SELECT doc_id, content_hash FROM documents"))

    def manifest_hash(self, source_id: str) -> str:
        """A hash of the served state of one source: each document's id, content hash and the
        fields that decide who sees it and when (`SERVED_FIELDS`): a sidecar that makes a page
        public changes what is served, though not one byte of the page."""
        rows = self.db.rows(f"SELECT doc_id, {', '.join(SERVED_FIELDS)} FROM documents WHERE source_id = ? ORDER BY doc_id",
                            [source_id])
        # The rows as they come: JSON writes a tuple as the list it was hashed as before (100k rows: no copy of each).
        return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()[:16]

    def first_chunk_vectors(self, doc_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The served vector of each document's first chunk (the queryable probe's query)."""
        if not doc_ids:
            return {}
        keys, matrix = self.db.read_vectors(
            f"""
            SELECT doc_id, vector FROM (
                SELECT c.doc_id, {self.db.vector_expression("v.vector")} AS vector,
                       row_number() OVER (PARTITION BY c.doc_id ORDER BY c.ordinal) AS position
                FROM chunks c JOIN vectors v USING (chunk_id) WHERE c.doc_id {_IN}
            ) firsts WHERE position = 1
            """,
            [list(doc_ids)],
            most_rows=len(doc_ids),
        )
        return dict(zip(keys, matrix))

    def chunk_texts(self) -> dict[str, list[str]]:
        """Served document id -> the texts of its chunks, in order (what imported contexts are matched against)."""
        texts: dict[str, list[str]] = {}
        for doc_id, text in self.db.rows("SELECT doc_id, text FROM chunks ORDER BY doc_id, ordinal"):
            texts.setdefault(doc_id, []).append(text)
        return texts

    def chunk_text_by_id(self, chunk_ids: Sequence[str]) -> dict[str, str]:
        """Chunk id -> its served text, for the ids still served (a trace keeps ids, not texts)."""
        if not chunk_ids:
            return {}
        return dict(self.db.rows(f"SELECT chunk_id, text FROM chunks WHERE chunk_id {_IN}", [list(chunk_ids)]))

    def supersession(self) -> dict[str, str]:
        """Served document id -> id of the document it supersedes (same source)."""
        rows = self.db.rows("SELECT doc_id, source_id, supersedes FROM documents WHERE supersedes IS NOT NULL")
        return {doc_id: f"{source_id}:{old}" for doc_id, source_id, old in rows}

    def known_sources(self) -> list[str]:
        rows = self.db.rows("SELECT DISTINCT source_id FROM manifest UNION SELECT DISTINCT source_id FROM documents ORDER BY 1")
        return [r[0] for r in rows]

    def table_counts(self, source_id: str) -> dict[str, int]:
        return {table: int(self.db.value(f"SELECT count(*) FROM {table} WHERE source_id = ?", [source_id]))
                for table in SOURCE_TABLES}

    def purge_source(self, source_id: str) -> None:
        """Remove everything of a source (it left the config); the ledger keeps its history."""
        with self.db.transaction():
            hashes = [r[0] for r in self.db.rows("SELECT text_hash FROM staged_chunks WHERE source_id = ?", [source_id])]
            history.forget_source(self.db, source_id)
            # Its served_versions row goes too: what is served has changed for every in-memory copy.
            for table in SOURCE_TABLES:
                self.db.execute(f"DELETE FROM {table} WHERE source_id = ?", [source_id])
            if hashes:
                self.db.execute(f"DELETE FROM embedding_cache WHERE text_hash {_IN} "
                                f"AND {unused_by_staged('embedding_cache')}", [hashes])
            self.db.execute(
                "UPDATE ledger SET status = 'deleted', reason = 'source removed from the config', updated_at = ? "
                "WHERE source_id = ? AND status <> 'deleted'", [utcnow(), source_id])
