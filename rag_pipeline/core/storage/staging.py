"""Staging: what the ingestion stages write for a source (discovery, parsed elements, chunks and
their postings, the embedding cache). Search never reads it; the switch publishes from it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING

from rag_pipeline.core.models import Chunk, DiscoveredFile, EarlierRead, Element, ParsedDocument
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns

if TYPE_CHECKING:
    import numpy as np


def unused_by_staged(alias: str) -> str:
    """SQL: the row `alias` has a text hash that no staged chunk uses. An anti-join (`NOT EXISTS`):
    PostgreSQL runs `NOT IN (subquery)` as a scan of the subquery per row once it outgrows
    work_mem, quadratic in the corpus (the store's other anti-joins are written the same way)."""
    return f"NOT EXISTS (SELECT 1 FROM staged_chunks s WHERE s.text_hash = {alias}.text_hash)"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _epoch_ns(moment: datetime) -> int:
    """A naive UTC timestamp of the store as nanoseconds since the epoch (as file times are)."""
    return int(moment.replace(tzinfo=UTC).timestamp() * 1_000_000_000)


class Staging:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- discovery and the committed manifest ----------------------------------------------

    def previous_manifest(self, source_id: str) -> dict[str, tuple[str, str]]:
        """`doc_id -> (content hash, meta json)` of the source's supported documents at the last
        committed switch: what the index was built from, whatever later runs saw before they died."""
        rows = self.db.rows("SELECT doc_id, content_hash, meta_json FROM manifest WHERE source_id = ? AND supported",
                            [source_id])
        return {doc_id: (content_hash, meta_json) for doc_id, content_hash, meta_json in rows}

    def write_discovery(self, source_id: str, files: Sequence[DiscoveredFile], meta_json: dict[str, str],
                        started: datetime | None = None) -> None:
        """Replace the source's staged discovery: every name found, supported or not. `started`:
        when the discovery began to read the files (the next one trusts no read of a file changed
        around then). A file carried over from an earlier read keeps its row as it is (with the
        time of that read): a run that changed nothing rewrites none of the rows."""
        started = started or utcnow()
        kept = [f.doc_id for f in files if f.carried_over]
        rows = [
            (f.source_id, f.doc_id, f.rel_path, f.content_hash, meta_json.get(f.doc_id, ""), f.size,
             f.file_type, f.supported, f.skip_reason, f.error, started, f.mtime_ns, f.stat_key)
            for f in files if not f.carried_over
        ]
        with self.db.transaction():
            self.db.execute("DELETE FROM discovery WHERE source_id = ? AND NOT EXISTS "
                            "(SELECT 1 FROM (SELECT unnest(?::VARCHAR[]) AS doc_id) k WHERE k.doc_id = discovery.doc_id)",
                            [source_id, kept])
            self.db.insert("discovery", columns("discovery"), rows)

    def earlier_reads(self, source_id: str) -> dict[str, EarlierRead]:
        """`rel_path -> EarlierRead` of the source's staged discovery: the documents it read whole,
        which the next discovery need not read again while their stat key holds."""
        rows = self.db.rows("SELECT rel_path, stat_key, content_hash, meta_json, discovered_at FROM discovery "
                            "WHERE source_id = ? AND supported AND error IS NULL AND stat_key IS NOT NULL", [source_id])
        # A discovery stamps all its rows with one time: each distinct time is converted once.
        epoch: dict[datetime, int] = {}
        return {rel: EarlierRead(key, content_hash, meta, epoch.get(at) or epoch.setdefault(at, _epoch_ns(at)))
                for rel, key, content_hash, meta, at in rows}

    def discovery_rows(self, source_id: str, fields: Sequence[str] = ()) -> list[dict]:
        """The source's latest discovery (what the stages work towards); only `fields`, when given
        (a run reads it several times, and most readers want two of its twelve columns)."""
        return self.db.dicts(f"SELECT {', '.join(fields) or '*'} FROM discovery WHERE source_id = ? ORDER BY doc_id",
                             [source_id])

    def discovery_rows_of(self, source_id: str, doc_ids: Sequence[str]) -> list[dict]:
        """The latest discovery's rows of these documents (every column), in document order."""
        return self.db.dicts("SELECT * FROM discovery WHERE source_id = ? AND doc_id IN (SELECT unnest(?::VARCHAR[])) "
                             "ORDER BY doc_id", [source_id, list(doc_ids)])

    def manifest_rows(self, source_id: str, fields: Sequence[str] = ()) -> list[dict]:
        """The source's committed manifest (what the served index was built from); only `fields`, when given."""
        return self.db.dicts(f"SELECT {', '.join(fields) or '*'} FROM manifest WHERE source_id = ? ORDER BY doc_id",
                             [source_id])

    def gone_from_discovery(self, source_id: str) -> list[dict]:
        """Rows of the committed manifest whose name the latest discovery no longer holds as they
        were: documents no longer found as supported (`doc_id`, `supported` true), and skipped files no
        longer found at all (`supported` false, with their `skip_reason`)."""
        return self.db.dicts(
            "SELECT m.doc_id, m.supported, m.skip_reason FROM manifest m WHERE m.source_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM discovery d WHERE d.source_id = m.source_id AND d.doc_id = m.doc_id "
            "AND (d.supported OR NOT m.supported)) ORDER BY m.doc_id", [source_id])

    def commit_manifest(self, source_id: str) -> None:
        """The staged discovery becomes the committed manifest, and its inputs' fingerprint the
        committed one (part of the switch)."""
        names = ", ".join(columns("manifest"))
        # Only the rows that differ are written: a one-file edit of a large source moves one row. The
        # key (never null) is matched by equality, which an engine answers from its index: matched by
        # IS NOT DISTINCT FROM alone, PostgreSQL compared every row with every row (10,000 documents:
        # 24 s of a no-change switch).
        key = ("source_id", "doc_id")
        same = " AND ".join([f"a.{c} = b.{c}" for c in key]
                            + [f"a.{c} IS NOT DISTINCT FROM b.{c}" for c in columns("manifest") if c not in key])
        with self.db.transaction():
            self.db.execute(f"DELETE FROM manifest WHERE source_id = ? AND doc_id IN (SELECT a.doc_id FROM manifest a "
                            f"WHERE a.source_id = ? AND NOT EXISTS (SELECT 1 FROM discovery b WHERE {same}))",
                            [source_id, source_id])
            self.db.execute(f"INSERT INTO manifest ({names}) SELECT {names} FROM discovery a WHERE a.source_id = ? "
                            f"AND NOT EXISTS (SELECT 1 FROM manifest b WHERE {same})", [source_id])
            self.db.execute("UPDATE source_inputs SET committed = staged WHERE source_id = ?", [source_id])

    def stage_inputs(self, source_id: str, fingerprint: str) -> None:
        """The fingerprint of the inputs this discovery saw (committed by the switch)."""
        with self.db.transaction():
            committed = self.committed_inputs(source_id)
            self.db.execute("DELETE FROM source_inputs WHERE source_id = ?", [source_id])
            self.db.insert("source_inputs", columns("source_inputs"), [(source_id, fingerprint, committed)])

    def forget_committed_inputs(self, source_id: str) -> None:
        """The next run of the source runs whatever its files say (its served rows no longer follow them)."""
        self.db.execute("UPDATE source_inputs SET committed = NULL WHERE source_id = ?", [source_id])

    def committed_inputs(self, source_id: str) -> str | None:
        """The inputs' fingerprint of the last committed switch of the source, if any."""
        return self.db.value("SELECT committed FROM source_inputs WHERE source_id = ?", [source_id])

    # ---- parsed documents ------------------------------------------------------------------

    def parsed_versions(self, source_id: str) -> dict[str, tuple[str, str, str]]:
        """`doc_id -> (content hash, metadata json, parser version)` of the parsed documents."""
        rows = self.db.rows("SELECT doc_id, content_hash, meta_json, parser_version FROM parsed_docs WHERE source_id = ?",
                            [source_id])
        return {d: (h, m, v) for d, h, m, v in rows}

    def unparsed(self, source_id: str, parser_version: str) -> list[str]:
        """Supported, readable documents of the latest discovery whose parsed version is not of their
        content, metadata and this parser (or that have none): decided by the database, so that a
        run that changed nothing reads no row of a large source."""
        rows = self.db.rows(
            "SELECT m.doc_id FROM discovery m LEFT JOIN parsed_docs p ON p.doc_id = m.doc_id "
            "WHERE m.source_id = ? AND m.supported AND m.error IS NULL AND (p.doc_id IS NULL "
            "OR p.content_hash IS DISTINCT FROM m.content_hash OR p.meta_json IS DISTINCT FROM m.meta_json "
            "OR p.parser_version IS DISTINCT FROM ?) ORDER BY m.doc_id", [source_id, parser_version])
        return [doc_id for (doc_id,) in rows]

    def chunking_due(self, source_id: str, fingerprint: str) -> tuple[list[str], list[str]]:
        """(parsed documents of the latest discovery whose staged chunks are not of their parsed content
        and `fingerprint`, or that have none; staged documents the discovery no longer holds as
        supported), decided by the database."""
        current = "EXISTS (SELECT 1 FROM discovery m WHERE m.doc_id = {alias}.doc_id AND m.supported)"
        todo = self.db.rows(
            f"SELECT p.doc_id FROM parsed_docs p WHERE p.source_id = ? AND {current.format(alias='p')} "
            "AND (NOT EXISTS (SELECT 1 FROM staged_chunks s WHERE s.doc_id = p.doc_id) OR EXISTS (SELECT 1 "
            "FROM staged_chunks s WHERE s.doc_id = p.doc_id AND (s.content_hash IS DISTINCT FROM p.content_hash "
            "OR s.chunking_fingerprint IS DISTINCT FROM ?))) ORDER BY p.doc_id", [source_id, fingerprint])
        gone = self.db.rows(
            f"SELECT doc_id FROM parsed_docs p WHERE p.source_id = ? AND NOT {current.format(alias='p')} UNION "
            f"SELECT doc_id FROM staged_chunks s WHERE s.source_id = ? AND NOT {current.format(alias='s')} ORDER BY 1",
            [source_id, source_id])
        return [doc_id for (doc_id,) in todo], [doc_id for (doc_id,) in gone]

    def save_parsed(self, source_id: str, docs: Sequence[tuple[ParsedDocument, str]]) -> None:
        """Replace the parsed elements of these (document, meta json) pairs, in one transaction.

        Their staged chunks go with the old elements: a document parsed again (new content, new
        metadata, or a new parser giving other elements for the same bytes) is chunked again."""
        if not docs:
            return
        now = utcnow()
        element_rows = [
            (e.doc_id, source_id, e.ordinal, e.category, e.text, list(e.heading_path), e.page_number,
             e.table_html, e.line_start, e.line_end)
            for doc, _ in docs for e in doc.elements
        ]
        doc_rows = [(d.doc_id, source_id, d.content_hash, meta, d.title, d.parser_version, now, *_access(meta))
                    for d, meta in docs]
        replaced = [d.doc_id for d, _ in docs]
        with self.db.transaction():
            self.drop_staged_documents(replaced)
            self.db.insert("elements", columns("elements"), element_rows)
            self.db.insert("parsed_docs", columns("parsed_docs"), doc_rows)
            self.note_changes(source_id, replaced)

    def load_parsed(self, doc_ids: Sequence[str]) -> list[ParsedDocument]:
        if not doc_ids:
            return []
        wanted = [list(doc_ids)]
        with self.db.session():
            docs = self.db.rows(
                "SELECT doc_id, content_hash, parser_version, title FROM parsed_docs "
                "WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY doc_id", wanted)
            element_rows = self.db.rows(
                "SELECT doc_id, ordinal, category, text, heading_path, page_number, table_html, line_start, line_end "
                "FROM elements WHERE doc_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY doc_id, ordinal", wanted)
        by_doc: dict[str, list[Element]] = {}
        for doc_id, ordinal, category, text, path, page, html, start, end in element_rows:
            by_doc.setdefault(doc_id, []).append(Element(doc_id, ordinal, category, text, tuple(path or ()), page, html, start, end))
        return [ParsedDocument(doc_id, content_hash, parser, title, tuple(by_doc.get(doc_id, [])))
                for doc_id, content_hash, parser, title in docs]

    # ---- chunks ----------------------------------------------------------------------------

    def save_chunks(self, source_id: str, fingerprint: str,
                    docs: Sequence[tuple[str, str, Sequence[Chunk], Sequence[tuple[str, str, int]]]]) -> None:
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
        with self.db.transaction():
            self._drop([d[0] for d in docs], ("staged_chunks",), postings=True)
            self.db.insert("staged_chunks", columns("staged_chunks"), chunk_rows)
            self.db.insert("staged_postings", columns("staged_postings"), posting_rows)
            self.note_changes(source_id, [d[0] for d in docs])

    def note_changes(self, source_id: str, doc_ids: Sequence[str]) -> None:
        """These documents' staged rows changed: the source's next switch compares them with what it
        serves, whatever its proof (`staged_changes`, cleared by the switch that commits)."""
        if doc_ids:
            self.db.insert("staged_changes", columns("staged_changes"), [(source_id, d) for d in dict.fromkeys(doc_ids)])

    def clear_changes(self, source_id: str) -> None:
        """The source's switch committed: its staged changes are served (call inside the switch)."""
        self.db.execute("DELETE FROM staged_changes WHERE source_id = ?", [source_id])

    def drop_staged_documents(self, doc_ids: Sequence[str]) -> None:
        """Remove documents from every staging table (deleted ones, or ones about to be parsed again)."""
        if doc_ids:
            self._drop(doc_ids, ("staged_chunks", "elements", "parsed_docs"), postings=True)

    def _drop(self, doc_ids: Sequence[str], tables: Sequence[str], postings: bool) -> None:
        with self.db.transaction():
            if postings:
                self.db.execute(
                    "DELETE FROM staged_postings WHERE chunk_id IN (SELECT chunk_id FROM staged_chunks "
                    "WHERE doc_id IN (SELECT unnest(?::VARCHAR[])))", [list(doc_ids)])
            for table in tables:
                self.db.execute(f"DELETE FROM {table} WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))", [list(doc_ids)])

    # ---- embedding cache -------------------------------------------------------------------

    def chunks_to_embed(self, source_id: str, identity: str) -> list[tuple[str, str, str]]:
        """(chunk_id, text_hash, embed_text) of staged chunks not yet embedded by this embedder, or
        whose cached vector is gone (another source's switch pruned it in a race): embedded again."""
        return self.db.rows(
            "SELECT s.chunk_id, s.text_hash, s.embed_text FROM staged_chunks s "
            "WHERE s.source_id = ? AND (s.embedded_identity IS DISTINCT FROM ? OR NOT EXISTS "
            "(SELECT 1 FROM embedding_cache c WHERE c.identity = ? AND c.text_hash = s.text_hash)) ORDER BY s.chunk_id",
            [source_id, identity, identity])

    def cached_hashes(self, identity: str, text_hashes: Sequence[str]) -> set[str]:
        if not text_hashes:
            return set()
        rows = self.db.rows("SELECT text_hash FROM embedding_cache WHERE identity = ? "
                            "AND text_hash IN (SELECT unnest(?::VARCHAR[]))", [identity, list(set(text_hashes))])
        return {r[0] for r in rows}

    def cache_vectors(self, identity: str, items: Sequence[tuple[str, np.ndarray]]) -> None:
        import numpy as np

        if not items:
            return
        now = utcnow()
        # Another source's run may cache the same text meanwhile: one row per (identity, text).
        self.db.insert_missing("embedding_cache", columns("embedding_cache"), [(identity, h, now) for h, _ in items],
                               key=("identity", "text_hash"), vectors=np.stack([v for _, v in items]))

    def mark_embedded(self, chunk_ids: Sequence[str], identity: str) -> None:
        if chunk_ids:
            self.db.execute("UPDATE staged_chunks SET embedded_identity = ? WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))",
                            [identity, list(chunk_ids)])

    def prune_cache(self, identity: str, text_hashes: Iterable[str]) -> int:
        """Drop cache entries of these text hashes unless a staged chunk still uses them."""
        hashes = list(set(text_hashes))
        if not hashes:
            return 0
        rows = self.db.rows(
            "DELETE FROM embedding_cache WHERE identity = ? AND text_hash IN (SELECT unnest(?::VARCHAR[])) "
            f"AND {unused_by_staged('embedding_cache')} RETURNING text_hash", [identity, hashes])
        return len(rows)


def _access(meta_json: str) -> tuple:
    """(tenant, visibility, roles, status, effective_date, supersedes, superseded_by) of a document's
    metadata, as columns: the switch copies them to the served rows, in any engine's SQL."""
    meta = json.loads(meta_json) if meta_json else {}
    effective = meta.get("effective_date")
    return (meta.get("tenant"), meta.get("visibility"), list(meta.get("roles") or []), meta.get("status"),
            date.fromisoformat(effective) if effective else None, meta.get("supersedes"), meta.get("superseded_by"))

