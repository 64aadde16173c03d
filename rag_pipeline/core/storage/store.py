"""The DuckDB store: staging tables per pipeline stage, the served index, the ledger, the cache.

Layout:
- staging (written stage by stage, never read by search): `manifest`, `parsed_docs`, `elements`,
  `staged_chunks`, `staged_postings`;
- the served index (replaced per source in one transaction by `publish_source`): `documents`,
  `chunks`, `vectors`, `postings`;
- `embedding_cache` keyed by (embedder identity, text hash); `ledger` (document x stage);
  `source_runs`.

A failed stage leaves the served index as it was: search only reads the served tables.
DuckDB allows one writing process per file, so connections are short-lived and retried while
another process holds the lock.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from rag_pipeline.core.ingestion.embedding import normalise_rows
from rag_pipeline.core.models import (
    Chunk,
    DiscoveredFile,
    Element,
    Hit,
    ParsedDocument,
    SearchFilters,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS manifest (
    source_id VARCHAR, doc_id VARCHAR, rel_path VARCHAR, content_hash VARCHAR, meta_json VARCHAR,
    size BIGINT, file_type VARCHAR, supported BOOLEAN, skip_reason VARCHAR, error VARCHAR,
    discovered_at TIMESTAMP, mtime_ns BIGINT
);
CREATE TABLE IF NOT EXISTS discovery (
    source_id VARCHAR, doc_id VARCHAR, rel_path VARCHAR, content_hash VARCHAR, meta_json VARCHAR,
    size BIGINT, file_type VARCHAR, supported BOOLEAN, skip_reason VARCHAR, error VARCHAR,
    discovered_at TIMESTAMP, mtime_ns BIGINT
);
CREATE TABLE IF NOT EXISTS parsed_docs (
    doc_id VARCHAR, source_id VARCHAR, content_hash VARCHAR, meta_json VARCHAR, title VARCHAR,
    parser_version VARCHAR, parsed_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS elements (
    doc_id VARCHAR, source_id VARCHAR, ordinal INTEGER, category VARCHAR, text VARCHAR,
    heading_path VARCHAR[], page_number INTEGER, table_html VARCHAR, line_start INTEGER, line_end INTEGER
);
CREATE TABLE IF NOT EXISTS staged_chunks (
    chunk_id VARCHAR, doc_id VARCHAR, source_id VARCHAR, ordinal INTEGER, title VARCHAR,
    heading_path VARCHAR[], text VARCHAR, embed_text VARCHAR, text_hash VARCHAR, token_count INTEGER,
    line_start INTEGER, line_end INTEGER, page_number INTEGER, content_hash VARCHAR,
    chunking_fingerprint VARCHAR, embedded_identity VARCHAR
);
CREATE TABLE IF NOT EXISTS staged_postings (chunk_id VARCHAR, source_id VARCHAR, term VARCHAR, tf INTEGER);
CREATE TABLE IF NOT EXISTS embedding_cache (
    identity VARCHAR, text_hash VARCHAR, vector FLOAT[], created_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS documents (
    doc_id VARCHAR, source_id VARCHAR, rel_path VARCHAR, title VARCHAR, file_type VARCHAR,
    content_hash VARCHAR, tenant VARCHAR, visibility VARCHAR, roles VARCHAR[], status VARCHAR,
    effective_date DATE, supersedes VARCHAR, superseded_by VARCHAR, parser_version VARCHAR,
    chunk_count INTEGER, indexed_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id VARCHAR, doc_id VARCHAR, source_id VARCHAR, ordinal INTEGER, title VARCHAR,
    heading_path VARCHAR[], text VARCHAR, embed_text VARCHAR, text_hash VARCHAR, token_count INTEGER,
    line_start INTEGER, line_end INTEGER, page_number INTEGER, tenant VARCHAR, visibility VARCHAR,
    roles VARCHAR[], status VARCHAR, effective_date DATE, lex_len INTEGER
);
CREATE TABLE IF NOT EXISTS vectors (chunk_id VARCHAR, source_id VARCHAR, identity VARCHAR, vector FLOAT[]);
CREATE TABLE IF NOT EXISTS postings (chunk_id VARCHAR, source_id VARCHAR, term VARCHAR, tf INTEGER);
CREATE TABLE IF NOT EXISTS ledger (
    doc_id VARCHAR, source_id VARCHAR, stage VARCHAR, status VARCHAR, content_hash VARCHAR,
    parser_version VARCHAR, reason VARCHAR, updated_at TIMESTAMP, run_id VARCHAR
);
CREATE TABLE IF NOT EXISTS tombstones (
    doc_id VARCHAR, source_id VARCHAR, title VARCHAR, opening_text VARCHAR, text_hashes VARCHAR[],
    deleted_at TIMESTAMP, run_id VARCHAR
);
CREATE TABLE IF NOT EXISTS baselines (revision VARCHAR, eval_id VARCHAR, promoted_at TIMESTAMP, note VARCHAR);
CREATE TABLE IF NOT EXISTS experiments (
    experiment_id VARCHAR, created_at TIMESTAMP, component VARCHAR, hypothesis VARCHAR, config_diff VARCHAR,
    baseline_eval VARCHAR, candidate_eval VARCHAR, deltas VARCHAR, worst_slice VARCHAR, worst_slice_delta DOUBLE,
    decision VARCHAR, bundle BOOLEAN
);
CREATE TABLE IF NOT EXISTS production_samples (
    day DATE, query VARCHAR, logged_at TIMESTAMP, tenant VARCHAR, roles VARCHAR[], log_source VARCHAR,
    best_score DOUBLE, no_result BOOLEAN, top_docs VARCHAR[], overlap DOUBLE, latency_ms DOUBLE
);
CREATE TABLE IF NOT EXISTS monitoring_days (day DATE, kind VARCHAR, measures VARCHAR, created_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS golden_snapshots (revision VARCHAR, path VARCHAR, content VARCHAR, saved_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS eval_runs (
    eval_id VARCHAR, revision VARCHAR, mode VARCHAR, config_fingerprint VARCHAR, index_state VARCHAR,
    created_at TIMESTAMP, summary VARCHAR
);
CREATE TABLE IF NOT EXISTS eval_cases (
    eval_id VARCHAR, case_id VARCHAR, slice VARCHAR, split VARCHAR, weight DOUBLE, answerable BOOLEAN,
    first_gold_rank INTEGER, best_score DOUBLE, abstained BOOLEAN, stale VARCHAR[], forbidden_retrieved VARCHAR[],
    latency_ms DOUBLE, context_tokens INTEGER, metrics VARCHAR, ranked_docs VARCHAR[], trace VARCHAR
);
CREATE TABLE IF NOT EXISTS source_runs (
    source_id VARCHAR, root VARCHAR, last_run_at TIMESTAMP, last_success_at TIMESTAMP,
    manifest_hash VARCHAR, run_id VARCHAR, last_failure VARCHAR, last_failure_at TIMESTAMP
);
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER);
"""

SCHEMA_VERSION = 2
# Forward migrations: version -> statements that bring a file of that version to the next one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 1 -> 2: the run protocol. The manifest becomes the committed one (written by the switch),
    # discovery stages its own; sources remember why their last switch was refused.
    1: (
        "ALTER TABLE manifest RENAME COLUMN meta_error TO error",
        "ALTER TABLE manifest ADD COLUMN mtime_ns BIGINT",
        "INSERT INTO discovery SELECT * FROM manifest",
        "ALTER TABLE source_runs ADD COLUMN last_failure VARCHAR",
        "ALTER TABLE source_runs ADD COLUMN last_failure_at TIMESTAMP",
    ),
}

# Tables whose rows belong to one source; a purge of the source clears them all.
SOURCE_TABLES = (
    "manifest", "discovery", "parsed_docs", "elements", "staged_chunks", "staged_postings",
    "documents", "chunks", "vectors", "postings", "source_runs",
)
# Tables holding something of a document (checked by the deletion check).
DOCUMENT_TABLES = ("parsed_docs", "elements", "staged_chunks", "documents", "chunks")
CHUNK_TABLES = ("staged_postings", "vectors", "postings")

_LOCK_WAIT_SECONDS = 120.0
# Queries per search statement: bounds the (query x chunk) work of one statement.
QUERY_BATCH = 256
# From this many queries on, dense search scores with one matrix product instead of per-pair SQL.
MATRIX_SEARCH_MIN_QUERIES = 16
# The final step of every search: the top-k rows of `top` (qid, chunk_id, score) with their chunk.
_HIT_SELECT = """
    SELECT top.qid, c.chunk_id, c.doc_id, top.score, c.source_id, c.title, c.heading_path, c.text,
           c.status, c.line_start, c.line_end
    FROM top JOIN chunks c USING (chunk_id)
    ORDER BY top.qid, top.score DESC, c.chunk_id
"""


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class DuckDBStore:
    """All persistent state of the pipeline in one DuckDB file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._initialised = False
        self._active: duckdb.DuckDBPyConnection | None = None

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection (waiting while another process holds DuckDB's file lock), or,
        inside `transaction()`, that transaction's connection."""
        if self._active is not None:
            yield self._active
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        delay = 0.05
        while True:
            try:
                con = duckdb.connect(str(self.path))
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        try:
            if not self._initialised:
                _prepare_schema(con, self.path)
                self._initialised = True
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All store calls inside the block share one transaction: committed together at its end,
        rolled back together by an exception (or by the death of the process)."""
        if self._active is not None:
            raise RuntimeError("a store transaction is already open")
        with self.connect() as con:
            con.execute("BEGIN")
            self._active = con
            try:
                yield con
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            finally:
                self._active = None

    @contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection whose statements commit together: the open transaction's, or a new one."""
        if self._active is not None:
            yield self._active
            return
        with self.transaction() as con:
            yield con

    # ---- manifest -------------------------------------------------------------------------

    def previous_manifest(self, source_id: str) -> dict[str, tuple[str, str]]:
        """`doc_id -> (content hash, meta json)` of the source's supported documents at the last
        committed switch: what the index was built from, whatever later runs saw before they died."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT doc_id, content_hash, meta_json FROM manifest WHERE source_id = ? AND supported",
                [source_id],
            ).fetchall()
        return {doc_id: (content_hash, meta_json) for doc_id, content_hash, meta_json in rows}

    def write_discovery(self, source_id: str, files: Sequence[DiscoveredFile], meta_json: dict[str, str]) -> None:
        """Replace the source's staged discovery: every name found, supported or not (staging only)."""
        now = utcnow()
        rows = [
            (f.source_id, f.doc_id, f.rel_path, f.content_hash, meta_json.get(f.doc_id, ""), f.size,
             f.file_type, f.supported, f.skip_reason, f.error, now, f.mtime_ns)
            for f in files
        ]
        with self._write() as con:
            con.execute("DELETE FROM discovery WHERE source_id = ?", [source_id])
            _insert_rows(con, "discovery", rows)

    def discovery_rows(self, source_id: str) -> list[dict]:
        """The source's latest discovery (what the stages work towards)."""
        with self.connect() as con:
            return _dicts(con.execute("SELECT * FROM discovery WHERE source_id = ? ORDER BY doc_id", [source_id]))

    def manifest_rows(self, source_id: str) -> list[dict]:
        """The source's committed manifest (what the served index was built from)."""
        with self.connect() as con:
            return _dicts(con.execute("SELECT * FROM manifest WHERE source_id = ? ORDER BY doc_id", [source_id]))

    def commit_manifest(self, source_id: str) -> None:
        """The staged discovery becomes the committed manifest (part of the switch)."""
        with self._write() as con:
            con.execute("DELETE FROM manifest WHERE source_id = ?", [source_id])
            con.execute("INSERT INTO manifest SELECT * FROM discovery WHERE source_id = ?", [source_id])

    def leaving_documents(self, source_id: str) -> list[dict]:
        """Served documents the latest discovery no longer holds: `doc_id`, `title`,
        `opening_text` (first chunk) and `text_hashes`; what their tombstones and probes need."""
        with self.connect() as con:
            return _dicts(con.execute(
                """
                SELECT c.doc_id, any_value(c.title) AS title, arg_min(c.text, c.ordinal) AS opening_text,
                       list(DISTINCT c.text_hash ORDER BY c.text_hash) AS text_hashes
                FROM chunks c
                WHERE c.source_id = ?
                  AND c.doc_id NOT IN (SELECT doc_id FROM discovery WHERE source_id = ? AND supported)
                GROUP BY c.doc_id ORDER BY c.doc_id
                """,
                [source_id, source_id],
            ))

    # ---- parsing --------------------------------------------------------------------------

    def parsed_versions(self, source_id: str) -> dict[str, tuple[str, str]]:
        with self.connect() as con:
            rows = con.execute(
                "SELECT doc_id, content_hash, meta_json FROM parsed_docs WHERE source_id = ?", [source_id]
            ).fetchall()
        return {d: (h, m) for d, h, m in rows}

    def save_parsed(self, source_id: str, docs: Sequence[tuple[ParsedDocument, str]]) -> None:
        """Replace the parsed elements of these (document, meta json) pairs, in one transaction (staging only)."""
        if not docs:
            return
        now = utcnow()
        element_rows = [
            (e.doc_id, source_id, e.ordinal, e.category, e.text, list(e.heading_path), e.page_number,
             e.table_html, e.line_start, e.line_end)
            for doc, _ in docs for e in doc.elements
        ]
        doc_rows = [(d.doc_id, source_id, d.content_hash, meta, d.title, d.parser_version, now) for d, meta in docs]
        with self._write() as con:
            con.execute("CREATE OR REPLACE TEMP TABLE replaced AS SELECT unnest(?::VARCHAR[]) AS doc_id", [[d.doc_id for d, _ in docs]])
            con.execute("DELETE FROM elements WHERE doc_id IN (SELECT doc_id FROM replaced)")
            con.execute("DELETE FROM parsed_docs WHERE doc_id IN (SELECT doc_id FROM replaced)")
            _insert_rows(con, "elements", element_rows)
            _insert_rows(con, "parsed_docs", doc_rows)

    def load_parsed(self, doc_ids: Sequence[str]) -> list[ParsedDocument]:
        if not doc_ids:
            return []
        with self.connect() as con:
            con.execute("CREATE OR REPLACE TEMP TABLE wanted AS SELECT unnest(?::VARCHAR[]) AS doc_id", [list(doc_ids)])
            docs = con.execute(
                "SELECT doc_id, content_hash, parser_version, title FROM parsed_docs JOIN wanted USING (doc_id)"
            ).fetchall()
            element_rows = con.execute(
                "SELECT e.* FROM elements e JOIN wanted USING (doc_id) ORDER BY e.doc_id, e.ordinal"
            ).fetchall()
        by_doc: dict[str, list[Element]] = {}
        for doc_id, _source, ordinal, category, text, path, page, html, start, end in element_rows:
            by_doc.setdefault(doc_id, []).append(
                Element(doc_id, ordinal, category, text, tuple(path or ()), page, html, start, end)
            )
        return [
            ParsedDocument(doc_id, content_hash, parser, title, tuple(by_doc.get(doc_id, [])))
            for doc_id, content_hash, parser, title in docs
        ]

    # ---- chunking -------------------------------------------------------------------------

    def chunk_versions(self, source_id: str) -> dict[str, tuple[str, str]]:
        """`doc_id -> (content hash, chunking fingerprint)` of the staged chunks."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT DISTINCT doc_id, content_hash, chunking_fingerprint FROM staged_chunks WHERE source_id = ?",
                [source_id],
            ).fetchall()
        return {d: (h, f) for d, h, f in rows}

    def save_chunks(
        self, source_id: str, fingerprint: str,
        docs: Sequence[tuple[str, str, Sequence[Chunk], Sequence[tuple[str, str, int]]]],
    ) -> None:
        """Replace the staged chunks and lexical postings of these documents in one transaction.

        `docs` holds (doc_id, content_hash, chunks, postings as (chunk_id, term, tf)).
        """
        if not docs:
            return
        chunk_rows = [
            (c.chunk_id, c.doc_id, source_id, c.ordinal, c.title, list(c.heading_path), c.text, c.embed_text,
             c.text_hash, c.token_count, c.line_start, c.line_end, c.page_number, content_hash, fingerprint, None)
            for _, content_hash, chunks, _ in docs for c in chunks
        ]
        posting_rows = [(chunk_id, source_id, term, tf) for *_, postings in docs for chunk_id, term, tf in postings]
        with self._write() as con:
            con.execute("CREATE OR REPLACE TEMP TABLE replaced AS SELECT unnest(?::VARCHAR[]) AS doc_id", [[d[0] for d in docs]])
            con.execute(
                "DELETE FROM staged_postings WHERE chunk_id IN "
                "(SELECT chunk_id FROM staged_chunks WHERE doc_id IN (SELECT doc_id FROM replaced))"
            )
            con.execute("DELETE FROM staged_chunks WHERE doc_id IN (SELECT doc_id FROM replaced)")
            _insert_rows(con, "staged_chunks", chunk_rows)
            _insert_rows(con, "staged_postings", posting_rows)

    def drop_staged_documents(self, doc_ids: Sequence[str]) -> None:
        """Remove deleted documents from every staging table."""
        if not doc_ids:
            return
        with self._write() as con:
            con.execute("CREATE OR REPLACE TEMP TABLE gone AS SELECT unnest(?::VARCHAR[]) AS doc_id", [list(doc_ids)])
            con.execute(
                "DELETE FROM staged_postings WHERE chunk_id IN "
                "(SELECT chunk_id FROM staged_chunks WHERE doc_id IN (SELECT doc_id FROM gone))"
            )
            for table in ("staged_chunks", "elements", "parsed_docs"):
                con.execute(f"DELETE FROM {table} WHERE doc_id IN (SELECT doc_id FROM gone)")

    # ---- embedding ------------------------------------------------------------------------

    def chunks_to_embed(self, source_id: str, identity: str) -> list[tuple[str, str, str]]:
        """(chunk_id, text_hash, embed_text) of staged chunks not yet embedded by this embedder."""
        with self.connect() as con:
            return con.execute(
                "SELECT chunk_id, text_hash, embed_text FROM staged_chunks "
                "WHERE source_id = ? AND embedded_identity IS DISTINCT FROM ? ORDER BY chunk_id",
                [source_id, identity],
            ).fetchall()

    def cached_hashes(self, identity: str, text_hashes: Sequence[str]) -> set[str]:
        if not text_hashes:
            return set()
        with self.connect() as con:
            rows = con.execute(
                "SELECT text_hash FROM embedding_cache WHERE identity = ? AND list_contains(?::VARCHAR[], text_hash)",
                [identity, list(set(text_hashes))],
            ).fetchall()
        return {r[0] for r in rows}

    def cache_vectors(self, identity: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        if not items:
            return
        now = utcnow()
        matrix = np.stack([v for _, v in items]).astype(np.float32)
        # Built column-wise from the matrix: converting vectors to Python lists costs seconds per 10k.
        vectors = pa.ListArray.from_arrays(
            pa.array(np.arange(0, matrix.size + 1, matrix.shape[1], dtype=np.int32)), pa.array(matrix.ravel())
        )
        table = pa.table({"identity": [identity] * len(items), "text_hash": [h for h, _ in items],
                          "vector": vectors, "created_at": [now] * len(items)})
        with self.connect() as con:
            con.register("new_vectors", table)
            con.execute("INSERT INTO embedding_cache SELECT * FROM new_vectors")
            con.unregister("new_vectors")

    def mark_embedded(self, chunk_ids: Sequence[str], identity: str) -> None:
        if not chunk_ids:
            return
        with self.connect() as con:
            con.register("embedded_ids", pa.table({"chunk_id": list(chunk_ids)}))
            con.execute(
                "UPDATE staged_chunks SET embedded_identity = ? WHERE chunk_id IN (SELECT chunk_id FROM embedded_ids)",
                [identity],
            )
            con.unregister("embedded_ids")

    def prune_cache(self, identity: str, text_hashes: Iterable[str]) -> int:
        """Drop cache entries of these text hashes unless a staged chunk still uses them."""
        hashes = list(set(text_hashes))
        if not hashes:
            return 0
        with self.connect() as con:
            rows = con.execute(
                "DELETE FROM embedding_cache WHERE identity = ? AND list_contains(?::VARCHAR[], text_hash) "
                "AND text_hash NOT IN (SELECT text_hash FROM staged_chunks) RETURNING text_hash",
                [identity, hashes],
            ).fetchall()
        return len(rows)

    # ---- publishing -----------------------------------------------------------------------

    def replace_served(self, source_id: str, identity: str) -> dict[str, int]:
        """Replace the served rows of one source with its staged state (call inside `transaction()`).

        A document is published when its staged version is the one discovery found (same content
        hash and metadata) and every staged chunk has a cached vector; a document still in the
        source but not ready keeps its previously served version, so a failed stage never removes
        what was searchable; a document no longer in the source leaves the index.
        """
        with self._write() as con:
            return self._publish(con, source_id, identity)

    def _publish(self, con: duckdb.DuckDBPyConnection, source_id: str, identity: str) -> dict[str, int]:
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE ready AS
            SELECT s.doc_id FROM staged_chunks s
            JOIN discovery m ON m.doc_id = s.doc_id AND m.content_hash = s.content_hash AND m.error IS NULL
            JOIN parsed_docs p ON p.doc_id = s.doc_id AND p.content_hash = m.content_hash AND p.meta_json = m.meta_json
            LEFT JOIN embedding_cache c ON c.identity = ? AND c.text_hash = s.text_hash
            WHERE s.source_id = ?
            GROUP BY s.doc_id HAVING count(*) = count(c.text_hash)
            """,
            [identity, source_id],
        )
        # Documents still in the source but not ready keep their served rows untouched.
        con.execute(
            """
            CREATE OR REPLACE TEMP TABLE keep_old AS
            SELECT d.doc_id FROM documents d
            WHERE d.source_id = ? AND d.doc_id NOT IN (SELECT doc_id FROM ready)
              AND d.doc_id IN (SELECT doc_id FROM discovery WHERE source_id = ? AND supported)
            """,
            [source_id, source_id],
        )
        replaced = "source_id = ? AND doc_id NOT IN (SELECT doc_id FROM keep_old)"
        con.execute(f"DELETE FROM postings WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE {replaced})", [source_id])
        con.execute(f"DELETE FROM vectors WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE {replaced})", [source_id])
        con.execute(f"DELETE FROM chunks WHERE {replaced}", [source_id])
        con.execute(f"DELETE FROM documents WHERE {replaced}", [source_id])
        con.execute(
            """
            INSERT INTO documents
            SELECT p.doc_id, p.source_id, m.rel_path, p.title, m.file_type, p.content_hash,
                   json_extract_string(p.meta_json, '$.tenant'),
                   json_extract_string(p.meta_json, '$.visibility'),
                   CAST(json_extract(p.meta_json, '$.roles') AS VARCHAR[]),
                   json_extract_string(p.meta_json, '$.status'),
                   TRY_CAST(json_extract_string(p.meta_json, '$.effective_date') AS DATE),
                   json_extract_string(p.meta_json, '$.supersedes'),
                   json_extract_string(p.meta_json, '$.superseded_by'),
                   p.parser_version,
                   (SELECT count(*) FROM staged_chunks s WHERE s.doc_id = p.doc_id),
                   now()
            FROM parsed_docs p JOIN ready USING (doc_id) JOIN discovery m USING (doc_id)
            """
        )
        con.execute(
            """
            INSERT INTO chunks
            SELECT s.chunk_id, s.doc_id, s.source_id, s.ordinal, s.title, s.heading_path, s.text, s.embed_text,
                   s.text_hash, s.token_count, s.line_start, s.line_end, s.page_number,
                   d.tenant, d.visibility, d.roles, d.status, d.effective_date,
                   (SELECT coalesce(sum(tf), 0) FROM staged_postings p WHERE p.chunk_id = s.chunk_id)
            FROM staged_chunks s JOIN ready USING (doc_id) JOIN documents d USING (doc_id)
            """
        )
        con.execute(
            """
            INSERT INTO vectors
            SELECT s.chunk_id, s.source_id, c.identity, c.vector
            FROM staged_chunks s JOIN ready USING (doc_id)
            JOIN embedding_cache c ON c.identity = ? AND c.text_hash = s.text_hash
            """,
            [identity],
        )
        con.execute(
            "INSERT INTO postings SELECT p.* FROM staged_postings p "
            "JOIN staged_chunks s USING (chunk_id) JOIN ready USING (doc_id)"
        )
        indexed = con.execute("SELECT count(*) FROM ready").fetchall()[0][0]
        kept = con.execute("SELECT count(*) FROM keep_old").fetchall()[0][0]
        return {"indexed": int(indexed), "kept_previous": int(kept)}

    def record_tombstones(self, source_id: str, leaving: Sequence[dict], run_id: str) -> None:
        """Remember documents about to leave the index (title, opening text, text hashes), so that
        their deletion can be proven afterwards."""
        if not leaving:
            return
        now = utcnow()
        with self._write() as con:
            con.execute("DELETE FROM tombstones WHERE list_contains(?::VARCHAR[], doc_id)", [[d["doc_id"] for d in leaving]])
            _insert_rows(con, "tombstones", [
                (d["doc_id"], source_id, d["title"], d["opening_text"], list(d["text_hashes"]), now, run_id) for d in leaving
            ])

    def tombstones(self, source_id: str, run_id: str | None = None) -> list[dict]:
        """Deleted documents of a source that have not come back (optionally: deleted in one run)."""
        sql = (
            "SELECT * FROM tombstones WHERE source_id = ? "
            "AND doc_id NOT IN (SELECT doc_id FROM manifest WHERE supported)"
        )
        params: list = [source_id]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        with self.connect() as con:
            return _dicts(con.execute(sql + " ORDER BY doc_id", params))

    def remnants(self, doc_ids: Sequence[str]) -> dict[str, list[str]]:
        """For each document id, the tables that still hold something of it."""
        if not doc_ids:
            return {}
        found: dict[str, list[str]] = {}
        with self.connect() as con:
            con.execute("CREATE OR REPLACE TEMP TABLE probe AS SELECT unnest(?::VARCHAR[]) AS doc_id", [list(doc_ids)])
            for table in DOCUMENT_TABLES:
                for (doc_id,) in con.execute(
                    f"SELECT DISTINCT doc_id FROM {table} WHERE doc_id IN (SELECT doc_id FROM probe)"
                ).fetchall():
                    found.setdefault(doc_id, []).append(table)
            for table in CHUNK_TABLES:
                # Chunk ids are `<doc id>#<ordinal>`: a row of a deleted document keeps its prefix.
                for (doc_id,) in con.execute(
                    f"SELECT DISTINCT p.doc_id FROM {table} t JOIN probe p ON starts_with(t.chunk_id, p.doc_id || '#')"
                ).fetchall():
                    found.setdefault(doc_id, []).append(table)
            for doc_id, hashes in con.execute(
                "SELECT doc_id, text_hashes FROM tombstones WHERE doc_id IN (SELECT doc_id FROM probe)"
            ).fetchall():
                leftover = con.execute(
                    "SELECT count(*) FROM embedding_cache WHERE list_contains(?::VARCHAR[], text_hash) "
                    "AND text_hash NOT IN (SELECT text_hash FROM staged_chunks)",
                    [list(hashes or [])],
                ).fetchall()[0][0]
                if leftover:
                    found.setdefault(doc_id, []).append("embedding_cache")
        return found

    def orphans(self) -> dict[str, list[str]]:
        """Served rows whose parent is gone: chunks without a document, vectors or postings without a chunk."""
        found: dict[str, list[str]] = {}
        with self.connect() as con:
            for (doc_id,) in con.execute(
                "SELECT DISTINCT doc_id FROM chunks WHERE doc_id NOT IN (SELECT doc_id FROM documents)"
            ).fetchall():
                found.setdefault(doc_id, []).append("chunks")
            for table in ("vectors", "postings"):
                for (chunk_id,) in con.execute(
                    f"SELECT DISTINCT chunk_id FROM {table} WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)"
                ).fetchall():
                    found.setdefault(chunk_id.rsplit("#", 1)[0], []).append(table)
        return found

    def document_hashes(self) -> dict[str, str]:
        """Served document id -> content hash of the indexed version."""
        with self.connect() as con:
            return dict(con.execute("SELECT doc_id, content_hash FROM documents").fetchall())

    def last_success(self, source_id: str):
        with self.connect() as con:
            rows = con.execute("SELECT last_success_at FROM source_runs WHERE source_id = ?", [source_id]).fetchall()
        return rows[0][0] if rows else None

    def indexed_documents(self, source_id: str) -> list[dict]:
        with self.connect() as con:
            return _dicts(con.execute("SELECT * FROM documents WHERE source_id = ? ORDER BY doc_id", [source_id]))

    def first_chunk_vectors(self, doc_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The served vector of each document's first chunk (the queryable probe's query)."""
        if not doc_ids:
            return {}
        with self.connect() as con:
            rows = con.execute(
                """
                SELECT c.doc_id, v.vector FROM chunks c JOIN vectors v USING (chunk_id)
                WHERE list_contains(?::VARCHAR[], c.doc_id)
                QUALIFY row_number() OVER (PARTITION BY c.doc_id ORDER BY c.ordinal) = 1
                """,
                [list(doc_ids)],
            ).fetchall()
        return {doc_id: np.asarray(vector, dtype=np.float32) for doc_id, vector in rows}

    def purge_source(self, source_id: str) -> None:
        """Remove everything of a source (it left the config); the ledger keeps its history."""
        with self._write() as con:
            hashes = [r[0] for r in con.execute("SELECT text_hash FROM staged_chunks WHERE source_id = ?", [source_id]).fetchall()]
            for table in SOURCE_TABLES:
                con.execute(f"DELETE FROM {table} WHERE source_id = ?", [source_id])
            if hashes:
                con.execute(
                    "DELETE FROM embedding_cache WHERE list_contains(?::VARCHAR[], text_hash) "
                    "AND text_hash NOT IN (SELECT text_hash FROM staged_chunks)",
                    [hashes],
                )
            now = utcnow()
            con.execute(
                "UPDATE ledger SET status = 'deleted', reason = 'source removed from the config', updated_at = ? "
                "WHERE source_id = ? AND status <> 'deleted'",
                [now, source_id],
            )

    # ---- search ---------------------------------------------------------------------------

    def dense_search(
        self, query_vectors: np.ndarray, k: int, filters: SearchFilters
    ) -> list[list[Hit]]:
        """Top-k chunks by cosine similarity for each query row; the filters are part of the SQL.

        Scores are computed for (query, chunk) pairs only; `max_by(..., k)` keeps each query's
        top k before any chunk text is joined, so memory stays bounded by queries x k.
        """
        if len(query_vectors) == 0:
            return []
        where, params = filter_sql(filters)
        if len(query_vectors) >= MATRIX_SEARCH_MIN_QUERIES:
            return self._dense_search_matrix(query_vectors, k, where, params)
        results: list[list[Hit]] = []
        for start in range(0, len(query_vectors), QUERY_BATCH):
            batch = query_vectors[start : start + QUERY_BATCH]
            with self.connect() as con:
                con.register("query_rows", pa.table({"qid": list(range(len(batch))), "qvec": list(batch.astype(np.float32))}))
                rows = con.execute(
                    f"""
                    WITH scored AS (
                        SELECT q.qid, c.chunk_id, list_cosine_similarity(v.vector, q.qvec::FLOAT[]) AS score
                        FROM query_rows q, chunks c JOIN vectors v USING (chunk_id)
                        WHERE {where}
                    ),
                    top AS (
                        SELECT qid, unnest(max_by({{'chunk_id': chunk_id, 'score': score}}, score, ?), recursive := true)
                        FROM scored GROUP BY qid
                    )
                    {_HIT_SELECT}
                    """,
                    [*params, k],
                ).fetchall()
                con.unregister("query_rows")
            results.extend(_group_hits(rows, len(batch)))
        return results

    def _dense_search_matrix(self, query_vectors: np.ndarray, k: int, where: str, params: list) -> list[list[Hit]]:
        """The same ranking for large batches: the filtered vectors are read once (filters still in
        the SQL) and scored with one matrix product, 20-50x faster than per-pair SQL."""
        with self.connect() as con:
            table = con.sql(
                f"SELECT c.chunk_id, v.vector FROM chunks c JOIN vectors v USING (chunk_id) WHERE {where}", params=params
            ).to_arrow_table()
            if table.num_rows == 0:
                return [[] for _ in query_vectors]
            ids = table.column("chunk_id").to_pylist()
            vectors = table.column("vector").combine_chunks()
            matrix = vectors.flatten().to_numpy().astype(np.float32).reshape(table.num_rows, -1)
            queries = query_vectors.astype(np.float32)
            scores = normalise_rows(queries) @ normalise_rows(matrix).T
            depth = min(k, len(ids))
            top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
            rows = [(qid, ids[j], float(scores[qid, j])) for qid in range(len(queries)) for j in top[qid]]
            con.register("top", pa.table({"qid": [r[0] for r in rows], "chunk_id": [r[1] for r in rows], "score": [r[2] for r in rows]}))
            hits = con.execute(_HIT_SELECT).fetchall()
            con.unregister("top")
        return _group_hits(hits, len(query_vectors))

    def bm25_search(
        self, query_terms: Sequence[Sequence[str]], k: int, filters: SearchFilters, k1: float, b: float
    ) -> list[list[Hit]]:
        """Top-k chunks by Okapi BM25 for each analysed query.

        score(q, d) = sum over query terms t (with repeats) of
            idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)),
        idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))  (Lucene's non-negative idf).
        N, df and avgdl are collection statistics over all served chunks, as in Lucene; the
        filters only restrict which chunks may be returned.
        """
        if not query_terms:
            return []
        where, params = filter_sql(filters)
        results: list[list[Hit]] = []
        for start in range(0, len(query_terms), QUERY_BATCH):
            batch = query_terms[start : start + QUERY_BATCH]
            qrows = [(qid, term) for qid, terms in enumerate(batch) for term in terms]
            if not qrows:
                results.extend([] for _ in batch)
                continue
            with self.connect() as con:
                con.register("qterms", pa.table({"qid": [q for q, _ in qrows], "term": [t for _, t in qrows]}))
                rows = con.execute(
                    f"""
                    WITH stats AS (SELECT count(*) AS n, avg(lex_len) AS avgdl FROM chunks),
                    q AS (SELECT qid, term, count(*) AS qtf FROM qterms GROUP BY qid, term),
                    df AS (SELECT term, count(*) AS df FROM postings WHERE term IN (SELECT term FROM q) GROUP BY term),
                    scored AS (
                        SELECT q.qid, p.chunk_id,
                               sum(q.qtf * ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
                                   * p.tf * (? + 1) / (p.tf + ? * (1 - ? + ? * c.lex_len / s.avgdl))) AS score
                        FROM q JOIN df USING (term) JOIN postings p USING (term)
                        JOIN chunks c ON c.chunk_id = p.chunk_id CROSS JOIN stats s
                        WHERE {where}
                        GROUP BY q.qid, p.chunk_id
                    ),
                    top AS (
                        SELECT qid, unnest(max_by({{'chunk_id': chunk_id, 'score': score}}, score, ?), recursive := true)
                        FROM scored GROUP BY qid
                    )
                    {_HIT_SELECT}
                    """,
                    [k1, k1, b, b, *params, k],
                ).fetchall()
                con.unregister("qterms")
            results.extend(_group_hits(rows, len(batch)))
        return results

    # ---- ledger ---------------------------------------------------------------------------

    def record_ledger(self, entries: Sequence[dict], run_id: str) -> None:
        """Upsert (doc_id, stage) rows: status ok / failed / skipped / deleted, with the reason."""
        if not entries:
            return
        now = utcnow()
        rows = [
            (e["doc_id"], e["source_id"], e["stage"], e["status"], e.get("content_hash"),
             e.get("parser_version"), e.get("reason"), now, run_id)
            for e in entries
        ]
        with self._write() as con:
            keys = pa.table({"doc_id": [r[0] for r in rows], "stage": [r[2] for r in rows]})
            con.register("incoming_keys", keys)
            con.execute("DELETE FROM ledger WHERE (doc_id, stage) IN (SELECT (doc_id, stage) FROM incoming_keys)")
            con.unregister("incoming_keys")
            _insert_rows(con, "ledger", rows)

    def ledger_rows(self, source_id: str | None = None) -> list[dict]:
        with self.connect() as con:
            if source_id is None:
                return _dicts(con.execute("SELECT * FROM ledger ORDER BY doc_id, stage"))
            return _dicts(con.execute("SELECT * FROM ledger WHERE source_id = ? ORDER BY doc_id, stage", [source_id]))

    def document_history(self) -> dict[str, str | None]:
        """Every document id the ledger has ever recorded -> None, or its skip reason when its
        latest discovery skipped it (not a document): what golden labels are checked against."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT doc_id, max(CASE WHEN stage = 'discovered' AND status = 'skipped' THEN reason END), "
                "bool_or(stage <> 'discovered' OR status <> 'skipped') FROM ledger GROUP BY doc_id"
            ).fetchall()
        return {doc_id: None if is_document else reason for doc_id, reason, is_document in rows}

    def ledger_failures(self, source_id: str) -> dict[str, dict]:
        """Per document, its latest recorded failure (stage and reason), if any."""
        with self.connect() as con:
            rows = _dicts(
                con.execute(
                    "SELECT * FROM ledger WHERE source_id = ? AND status = 'failed' ORDER BY updated_at",
                    [source_id],
                )
            )
        return {r["doc_id"]: r for r in rows}

    def record_source_run(self, source_id: str, root: str, run_id: str, failure: str | None = None) -> None:
        """A switch of the source committed (`failure` None), or was refused with this reason."""
        now = utcnow()
        with self._write() as con:
            previous = con.execute(
                "SELECT last_success_at, last_failure, last_failure_at FROM source_runs WHERE source_id = ?", [source_id]
            ).fetchall()
            last_success, last_failure, last_failure_at = previous[0] if previous else (None, None, None)
            if failure is None:
                last_success, last_failure, last_failure_at = now, None, None
            else:
                last_failure, last_failure_at = failure, now
            con.execute("DELETE FROM source_runs WHERE source_id = ?", [source_id])
            con.execute(
                "INSERT INTO source_runs VALUES (?,?,?,?,?,?,?,?)",
                [source_id, root, now, last_success, None, run_id, last_failure, last_failure_at],
            )

    def manifest_hash(self, source_id: str) -> str:
        """A hash of the served state of one source (doc ids and content hashes)."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT doc_id, content_hash FROM documents WHERE source_id = ? ORDER BY doc_id", [source_id]
            ).fetchall()
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]

    def save_evaluation(self, result) -> None:
        """Persist one evaluation (an `EvalResult`): its summary and every case with its trace."""
        rows = [
            (result.eval_id, c.case.id, c.case.slice, c.case.split, c.case.weight, c.case.answerable,
             c.first_gold_rank, c.best_score, c.abstained, c.stale_docs, c.forbidden_retrieved, c.latency_ms,
             c.context_tokens, json.dumps(c.metrics), c.ranked_docs[:100], json.dumps(c.trace))
            for c in result.cases
        ]
        with self._write() as con:
            con.execute(
                "INSERT INTO eval_runs VALUES (?,?,?,?,?,?,?)",
                [result.eval_id, result.revision, result.mode, result.config_fingerprint,
                 json.dumps(result.index_state), result.created_at, json.dumps(result.as_json(), default=str)],
            )
            _insert_rows(con, "eval_cases", rows)

    def evaluation_record(self, eval_id: str) -> dict:
        """An evaluation's summary plus `cases`: case id -> metrics, for scored cases (the gate's input),
        and `case_slices`: case id -> slice."""
        record = self.evaluation_summary(eval_id)
        with self.connect() as con:
            rows = con.execute("SELECT case_id, slice, metrics FROM eval_cases WHERE eval_id = ?", [eval_id]).fetchall()
        record["cases"] = {case_id: json.loads(m) for case_id, _, m in rows if m and m != "{}"}
        record["case_slices"] = {case_id: slice_name for case_id, slice_name, _ in rows}
        return record

    def latest_evaluation(self, revision: str | None = None) -> str | None:
        sql, params = "SELECT eval_id FROM eval_runs", []
        if revision is not None:
            sql, params = sql + " WHERE revision = ?", [revision]
        with self.connect() as con:
            rows = con.execute(sql + " ORDER BY created_at DESC LIMIT 1", params).fetchall()
        return rows[0][0] if rows else None

    def baseline(self, revision: str) -> str | None:
        """The promoted baseline evaluation of a golden revision, if any."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT eval_id FROM baselines WHERE revision = ? ORDER BY promoted_at DESC LIMIT 1", [revision]
            ).fetchall()
        return rows[0][0] if rows else None

    def latest_baseline(self) -> tuple[str, str] | None:
        with self.connect() as con:
            rows = con.execute("SELECT revision, eval_id FROM baselines ORDER BY promoted_at DESC LIMIT 1").fetchall()
        return (rows[0][0], rows[0][1]) if rows else None

    def promote(self, revision: str, eval_id: str, note: str) -> None:
        with self.connect() as con:
            con.execute("INSERT INTO baselines VALUES (?,?,?,?)", [revision, eval_id, utcnow(), note])

    def log_experiment(self, row: dict) -> None:
        with self.connect() as con:
            con.execute(
                "INSERT INTO experiments VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [row["experiment_id"], row["created_at"], row["component"], row["hypothesis"],
                 json.dumps(row["config_diff"]), row["baseline_eval"], row["candidate_eval"], json.dumps(row["deltas"]),
                 row["worst_slice"], row["worst_slice_delta"], row["decision"], row["bundle"]],
            )

    def experiment_log(self) -> list[dict]:
        with self.connect() as con:
            rows = _dicts(con.execute("SELECT * FROM experiments ORDER BY created_at"))
        for row in rows:
            row["config_diff"] = json.loads(row["config_diff"])
            row["deltas"] = json.loads(row["deltas"])
        return rows

    def save_sample(self, day, results, measures: dict) -> None:
        """Replace one day's production sample and its measures."""
        rows = [
            (day, r.query.query, r.query.timestamp, r.query.tenant, list(r.query.roles), r.query.source,
             r.best_score, r.no_result, r.top_docs, r.overlap, r.latency_ms)
            for r in results
        ]
        with self._write() as con:
            con.execute("DELETE FROM production_samples WHERE day = ?", [day])
            _insert_rows(con, "production_samples", rows)
            con.execute("DELETE FROM monitoring_days WHERE day = ? AND kind = 'sample'", [day])
            con.execute("INSERT INTO monitoring_days VALUES (?, 'sample', ?, ?)", [day, json.dumps(measures), utcnow()])

    def sample_rows(self, day) -> list[dict]:
        with self.connect() as con:
            return _dicts(con.execute("SELECT * FROM production_samples WHERE day = ? ORDER BY logged_at, log_source", [day]))

    def save_monitoring(self, day, kind: str, measures: dict) -> None:
        with self.connect() as con:
            con.execute("DELETE FROM monitoring_days WHERE day = ? AND kind = ?", [day, kind])
            con.execute("INSERT INTO monitoring_days VALUES (?, ?, ?, ?)", [day, kind, json.dumps(measures), utcnow()])

    def monitoring_history(self, kind: str, until) -> list[dict]:
        with self.connect() as con:
            rows = con.execute(
                "SELECT day, measures FROM monitoring_days WHERE kind = ? AND day <= ? ORDER BY day", [kind, until]
            ).fetchall()
        return [{"day": day, **json.loads(measures)} for day, measures in rows]

    def snapshot_golden(self, revision: str, path: str, content: str) -> None:
        """Keep the text of a golden-set revision, so that it stays evaluable after the file moves on."""
        with self.connect() as con:
            if not con.execute("SELECT 1 FROM golden_snapshots WHERE revision = ?", [revision]).fetchall():
                con.execute("INSERT INTO golden_snapshots VALUES (?,?,?,?)", [revision, path, content, utcnow()])

    def golden_snapshot(self, revision: str) -> str | None:
        with self.connect() as con:
            rows = con.execute("SELECT content FROM golden_snapshots WHERE revision = ?", [revision]).fetchall()
        return rows[0][0] if rows else None

    def evaluation_summary(self, eval_id: str) -> dict:
        with self.connect() as con:
            rows = con.execute("SELECT summary FROM eval_runs WHERE eval_id = ?", [eval_id]).fetchall()
        if not rows:
            raise KeyError(f"no evaluation {eval_id!r} in {self.path}")
        return json.loads(rows[0][0])

    def write_trec_run(self, eval_id: str, out: Path, tag: str = "rag_pipeline") -> Path:
        """`qid Q0 docid rank score tag` for every case of a stored evaluation.

        The score column is `len(ranking) - rank + 1`: strictly decreasing, so any tool that sorts
        by score (trec_eval does, breaking ties by document id) reproduces our order exactly.
        """
        with self.connect() as con:
            rows = con.execute(
                "SELECT case_id, ranked_docs FROM eval_cases WHERE eval_id = ? ORDER BY case_id", [eval_id]
            ).fetchall()
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as handle:
            for case_id, docs in rows:
                for rank, doc_id in enumerate(docs or [], start=1):
                    handle.write(f"{case_id} Q0 {doc_id} {rank} {len(docs) - rank + 1} {tag}\n")
        return out

    def supersession(self) -> dict[str, str]:
        """Served document id -> id of the document it supersedes (same source)."""
        with self.connect() as con:
            rows = con.execute("SELECT doc_id, source_id, supersedes FROM documents WHERE supersedes IS NOT NULL").fetchall()
        return {doc_id: f"{source_id}:{old}" for doc_id, source_id, old in rows}

    def known_sources(self) -> list[str]:
        with self.connect() as con:
            rows = con.execute(
                "SELECT DISTINCT source_id FROM manifest UNION SELECT DISTINCT source_id FROM documents ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]

    def table_counts(self, source_id: str) -> dict[str, int]:
        with self.connect() as con:
            return {
                table: con.execute(f"SELECT count(*) FROM {table} WHERE source_id = ?", [source_id]).fetchall()[0][0]
                for table in SOURCE_TABLES
            }


def filter_sql(filters: SearchFilters, alias: str = "c") -> tuple[str, list]:
    """The WHERE clause of the caller's filters over a chunks row; applied inside every retriever."""
    if filters.unrestricted:
        return "TRUE", []
    clauses: list[str] = []
    params: list = []
    if filters.tenant is None:
        clauses.append(f"{alias}.tenant IS NULL")
    else:
        clauses.append(f"({alias}.tenant IS NULL OR {alias}.tenant = ?)")
        params.append(filters.tenant)
    clauses.append(f"({alias}.visibility = 'public' OR list_has_any({alias}.roles, ?::VARCHAR[]))")
    params.append(list(filters.roles))
    clauses.append(f"list_contains(?::VARCHAR[], {alias}.status)")
    params.append(list(filters.statuses))
    clauses.append(f"({alias}.effective_date IS NULL OR {alias}.effective_date <= ?)")
    params.append(filters.as_of or date.today())
    return " AND ".join(clauses), params


def _group_hits(rows: Sequence[tuple], n_queries: int) -> list[list[Hit]]:
    grouped: list[list[Hit]] = [[] for _ in range(n_queries)]
    for qid, chunk_id, doc_id, score, source_id, title, path, text, status, start, end in rows:
        hits = grouped[int(qid)]
        hits.append(
            Hit(chunk_id, doc_id, float(score), len(hits) + 1, source_id, title, tuple(path or ()), text,
                status, start, end)
        )
    return grouped


class SchemaError(RuntimeError):
    """The database file cannot be used by this version of rag_pipeline."""


def _prepare_schema(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Create missing tables and bring an older file forward, in one transaction."""
    con.execute("BEGIN")
    try:
        con.execute(SCHEMA)
        rows = con.execute("SELECT version FROM schema_version").fetchall()
        if rows:
            version = rows[0][0]
        else:
            # A file from before the version table: its manifest still has the old column.
            old = con.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_name = 'manifest' AND column_name = 'meta_error'"
            ).fetchall()[0][0]
            version = 1 if old else SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"{path} has schema version {version}, newer than this rag_pipeline's {SCHEMA_VERSION}: upgrade rag_pipeline"
            )
        for from_version in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[from_version]:
                con.execute(statement)
        con.execute("DELETE FROM schema_version")
        con.execute("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[tuple]) -> None:
    """Bulk insert through a column-wise relation: executemany runs one statement per row."""
    if not rows:
        return
    columns = [d[0] for d in con.execute(f"SELECT * FROM {table} LIMIT 0").description]
    data = pa.table({name: [row[i] for row in rows] for i, name in enumerate(columns)})
    con.register("incoming_rows", data)
    con.execute(f"INSERT INTO {table} SELECT * FROM incoming_rows")
    con.unregister("incoming_rows")


def _dicts(result: duckdb.DuckDBPyConnection) -> list[dict]:
    columns = [d[0] for d in result.description]
    return [dict(zip(columns, row)) for row in result.fetchall()]
