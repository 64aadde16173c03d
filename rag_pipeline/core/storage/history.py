"""The rows of document versions no longer served, kept for the index states that served them.

A served document's `version` is a hash of everything its served rows hold (the document row, each
chunk's id, text hash, heading path, lines and page, the analyzer of its postings, and the embedding
identity of its vectors), so equal versions mean equal rows. When a version leaves the served index (replaced or deleted), its
rows are copied to the `history_*` tables, which nothing searches; a restore copies them back.
"""

from __future__ import annotations

from collections.abc import Sequence

from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns

# The expression of a served document's version, over `documents d` (every NULL spelled out, so
# that two different rows never print alike). Its vectors' identity is looked up chunk by chunk: as a
# join, PostgreSQL planned it without statistics (a full build's rows are inserted in the same
# transaction) as a scan of every vector for each document (a 100,000-document build sat 20+ minutes in it).
_FIELDS = ("d.doc_id", "d.rel_path", "d.title", "d.file_type", "d.content_hash", "d.tenant", "d.visibility",
           "array_to_string(d.roles, ',')", "d.status", "CAST(d.effective_date AS VARCHAR)", "d.supersedes",
           "d.superseded_by", "d.parser_version")
_CHUNK_FIELDS = ("c.chunk_id", "c.text_hash", "array_to_string(c.heading_path, '/')", "c.title",
                 "CAST(c.line_start AS VARCHAR)", "CAST(c.line_end AS VARCHAR)", "CAST(c.page_number AS VARCHAR)",
                 "CAST(c.token_count AS VARCHAR)", "c.tenant", "c.visibility", "c.status", "c.analyzer")


def _joined(fields: Sequence[str], separator: str) -> str:
    return f"concat_ws('{separator}', " + ", ".join(f"coalesce({f}, '~')" for f in fields) + ")"


VERSION_SQL = f"""
SELECT d.doc_id, md5({_joined(_FIELDS, '|')}
    || '|' || coalesce((SELECT min((SELECT min(v.identity) FROM vectors v WHERE v.chunk_id = c.chunk_id))
                        FROM chunks c WHERE c.doc_id = d.doc_id), '~')
    || '|' || coalesce((SELECT string_agg({_joined(_CHUNK_FIELDS, ';')}, ',' ORDER BY c.ordinal)
                        FROM chunks c WHERE c.doc_id = d.doc_id), '~')) AS version
FROM documents d
"""
DOCUMENT_COLUMNS = [c for c in columns("documents") if c != "version"]
CHUNK_COLUMNS = columns("chunks")


def stamp_versions(db: Database, source_id: str, only_missing: bool = True) -> None:
    """Give the source's served documents their version (those without one, by default)."""
    where = "d.source_id = ?" + (" AND d.version IS NULL" if only_missing else "")
    db.execute(f"UPDATE documents SET version = v.version FROM ({VERSION_SQL} WHERE {where}) v "
               "WHERE documents.doc_id = v.doc_id", [source_id])


def archive_leaving(db: Database, source_id: str, leaving_sql: str, params: Sequence = ()) -> None:
    """Keep the rows of the source's served documents that `leaving_sql` selects (a query of doc
    ids, about to be replaced or removed), unless their version is kept already."""
    stamp_versions(db, source_id)
    db.execute("DROP TABLE IF EXISTS archiving")
    db.execute("CREATE TEMP TABLE archiving AS SELECT d.doc_id, d.version FROM documents d "
               f"WHERE d.source_id = ? AND d.doc_id IN ({leaving_sql}) AND d.version IS NOT NULL "
               "AND NOT EXISTS (SELECT 1 FROM history_documents h WHERE h.version = d.version)", [source_id, *params])
    db.execute(f"INSERT INTO history_documents (version, {', '.join(DOCUMENT_COLUMNS)}) "
               f"SELECT a.version, {_prefixed('d', DOCUMENT_COLUMNS)} FROM documents d JOIN archiving a USING (doc_id)")
    db.execute(f"INSERT INTO history_chunks (version, {', '.join(CHUNK_COLUMNS)}) "
               f"SELECT a.version, {_prefixed('c', CHUNK_COLUMNS)} FROM chunks c JOIN archiving a USING (doc_id)")
    for table, cols in _CHUNK_ROW_TABLES.items():
        db.execute(f"INSERT INTO history_{table} (version, {', '.join(cols)}) SELECT a.version, {_prefixed('t', cols)} "
                   f"FROM {table} t JOIN chunks c USING (chunk_id) JOIN archiving a ON a.doc_id = c.doc_id")


def bring_back(db: Database, source_id: str, arriving_table: str) -> None:
    """Serve again the kept rows of the versions in `arriving_table` (`doc_id`, `version`), whose
    documents the source does not serve now."""
    db.execute(f"INSERT INTO documents ({', '.join(DOCUMENT_COLUMNS)}, version) "
               f"SELECT {_prefixed('h', DOCUMENT_COLUMNS)}, h.version FROM history_documents h "
               f"JOIN {arriving_table} a ON a.version = h.version")
    db.execute(f"INSERT INTO chunks ({', '.join(CHUNK_COLUMNS)}) SELECT {_prefixed('h', CHUNK_COLUMNS)} "
               f"FROM history_chunks h JOIN {arriving_table} a ON a.version = h.version")
    for table, cols in _CHUNK_ROW_TABLES.items():
        db.execute(f"INSERT INTO {table} (source_id, {', '.join(cols)}) SELECT ?, {_prefixed('h', cols)} "
                   f"FROM history_{table} h JOIN {arriving_table} a ON a.version = h.version", [source_id])


def forget_source(db: Database, source_id: str) -> None:
    """Remove the kept rows of every version the source ever served (its states go with its rows)."""
    for table in ("history_documents", "history_chunks", "history_vectors", "history_postings"):
        db.execute(f"DELETE FROM {table} WHERE version IN (SELECT version FROM served_spans WHERE source_id = ?)", [source_id])


# The rows of a chunk kept beside it, and their columns other than the chunk's source.
_CHUNK_ROW_TABLES = {"vectors": ("chunk_id", "identity", "vector"), "postings": ("chunk_id", "term", "tf")}


def _prefixed(alias: str, names: Sequence[str]) -> str:
    return ", ".join(f"{alias}.{name}" for name in names)
