"""Reading the served index into a ServedCopy a batch at a time, straight into compact arrays.

No table becomes a list of Python rows: the chunks' filter columns are read a batch at a time and
coded; vectors are written in place into one float32 matrix; postings go straight into their
term x chunk CSR arrays, sized beforehand from each term's count. The database numbers the chunks
(their rank by chunk id, the copy's order) and the terms, so vector and posting rows arrive as
numbers (`Database.each_batch`: Arrow batches from DuckDB, a binary COPY from PostgreSQL).

The peak is the finished copy plus one batch and the engine's own join state: a million chunks
of 384 floats with 78M postings (tf below 256: one byte) make a copy of about 1,960 MB
(vectors 1,536 MB, postings 390 MB).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.memory import EPOCH, NO_DATE, HitRecords, PackedStrings, ServedCopy, TermPostings

# Each served chunk's place in the copy: its rank by chunk id, as the chunk rows are read.
_POSITIONS = "SELECT chunk_id, CAST(row_number() OVER (ORDER BY chunk_id) - 1 AS INTEGER) AS position FROM chunks"
# The terms of the served chunks' postings, numbered in term order, with their count and tf range.
_TERMS = ("SELECT p.term, count(*), min(p.tf), max(p.tf) FROM postings p JOIN chunks c ON c.chunk_id = p.chunk_id "
          "GROUP BY p.term ORDER BY p.term")
_TERM_IDS = ("SELECT term, CAST(row_number() OVER (ORDER BY term) - 1 AS INTEGER) AS term_id FROM "
             "(SELECT DISTINCT p.term FROM postings p JOIN chunks c ON c.chunk_id = p.chunk_id) t")
# Vectors per batch read: 12 MB of 384 floats (the batch and the engine's own copy of it are transient).
_VECTOR_ROWS = 8_192
# Chunk rows per batch of hit records (their texts: a few MB of Python strings a batch).
_RECORD_ROWS = 4_096
# Rows of the norms computed at once: bounds the temporary (a row's norm does not depend on the others).
_NORM_ROWS = 65_536


def load_served_copy(db: Database, version: tuple,
                     records: Callable[[int, np.ndarray, list[bytes]], None] | None = None) -> ServedCopy:
    """Read the served index into memory (the caller checks the version before and after: a switch
    landing while it reads is caught there; here its rows are only kept in bounds). `records`, when
    given, receives each chunk's hit fields (`HitRecords.encode`) with its copy index, a batch at
    a time, in the same snapshot (the cache writes them to a file: they are not kept here)."""
    with db.transaction(), db.passing_reads():  # one snapshot where the engine gives one (DuckDB)
        chunks = _read_chunks(db)
        vectors, has_vector = _read_vectors(db, chunks["size"])
        terms, postings = _read_postings(db, chunks["size"])
        if records is not None:
            _read_records(db, chunks["size"], records)
    norms = None
    if vectors is not None:
        norms = np.empty(len(vectors), dtype=np.float32)
        for start in range(0, len(vectors), _NORM_ROWS):
            norms[start : start + _NORM_ROWS] = np.linalg.norm(vectors[start : start + _NORM_ROWS], axis=1)
        norms[norms == 0] = 1  # a zero vector scores 0, never NaN
    return ServedCopy(
        version=version, chunk_ids=chunks["chunk_ids"], tenant=chunks["tenant"], tenants=chunks["tenants"],
        public=chunks["public"], role_sets=list(chunks["role_sets"]), role_set=chunks["role_set"],
        status=chunks["status"], statuses=chunks["statuses"], effective_day=chunks["effective_day"],
        vectors=vectors, norms=norms, has_vector=has_vector, lex_len=chunks["lex_len"], terms=terms, postings=postings,
    )


class _Codes:
    """Integer codes of values met batch by batch (None is -1), and the value -> code table."""

    def __init__(self) -> None:
        self.table: dict = {}

    def __call__(self, values: Sequence) -> np.ndarray:
        table = self.table
        return np.fromiter((-1 if v is None else table.setdefault(v, len(table)) for v in values), dtype=np.int32,
                           count=len(values))


def _read_chunks(db: Database) -> dict:
    """Each chunk's id (packed) and filter columns, in chunk id order, a batch of rows at a time."""
    tenants, role_sets, statuses = _Codes(), _Codes(), _Codes()
    columns: dict[str, list[np.ndarray]] = {name: [] for name in
                                            ("tenant", "public", "role_set", "status", "effective_day", "lex_len")}
    ids: list[list[str]] = []
    for rows in db.row_batches("SELECT chunk_id, tenant, visibility, roles, status, effective_date, lex_len "
                               "FROM chunks ORDER BY chunk_id"):
        ids.append([r[0] for r in rows])
        columns["tenant"].append(tenants([r[1] for r in rows]))
        columns["public"].append(np.fromiter((r[2] == "public" for r in rows), dtype=bool, count=len(rows)))
        columns["role_set"].append(role_sets([frozenset(r[3] or ()) for r in rows]))
        columns["status"].append(statuses([r[4] for r in rows]))
        columns["effective_day"].append(np.fromiter(((r[5] - EPOCH).days if r[5] is not None else NO_DATE for r in rows),
                                                    dtype=np.int64, count=len(rows)))
        columns["lex_len"].append(np.fromiter((r[6] or 0 for r in rows), dtype=np.float64, count=len(rows)))
    empty = {"tenant": np.int32, "public": bool, "role_set": np.int32, "status": np.int32, "effective_day": np.int64,
             "lex_len": np.float64}
    out = {name: np.concatenate(parts) if parts else np.zeros(0, dtype=empty[name]) for name, parts in columns.items()}
    out["chunk_ids"] = PackedStrings.pack(ids)
    del ids
    out.update(size=len(out["chunk_ids"]), tenants=tenants.table, role_sets=role_sets.table, statuses=statuses.table)
    return out


def _read_vectors(db: Database, size: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Each served chunk's vector in its row of one float32 matrix (zeros without one), written
    batch by batch; None when no chunk has a vector."""
    matrix: list[np.ndarray] = []  # the matrix, once the first batch tells its width
    has_vector = np.zeros(size, dtype=bool)

    def place(columns: list[np.ndarray]) -> None:
        positions, block = columns
        if not matrix:
            matrix.append(np.zeros((size, block.shape[1]), dtype=np.float32))
        inside = positions < size  # a chunk added since the chunks were read: dropped (the version check reloads)
        if not inside.all():
            positions, block = positions[inside], block[inside]
        matrix[0][positions] = block
        has_vector[positions] = True

    db.each_batch(f"WITH positions AS ({_POSITIONS}) SELECT s.position, {db.vector_expression('v.vector')} "
                  "FROM vectors v JOIN positions s ON s.chunk_id = v.chunk_id", ["int32", "vector"], place,
                  size=_VECTOR_ROWS)
    return (matrix[0] if matrix else None), has_vector


def _read_postings(db: Database, size: int) -> tuple[dict[str, int], TermPostings]:
    """The served chunks' postings as CSR arrays by term: each term's count sizes its row first,
    then every (term, chunk, tf) row is written into the next free slot of its term's row."""
    terms: dict[str, int] = {}
    counts, low, high = [], 0, 0
    for rows in db.row_batches(_TERMS):
        for term, count, least, most in rows:
            terms[term] = len(terms)
            counts.append(count)
            low, high = min(low, least), max(high, most)
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    chunks = np.zeros(int(indptr[-1]), dtype=np.int32)
    tf = np.zeros(int(indptr[-1]), dtype=_tf_type(low, high))
    filled = indptr[:-1].copy()  # each term's next free slot

    def place(columns: list[np.ndarray]) -> None:
        term_ids, positions, counts = columns
        inside = (positions < size) & (term_ids < len(filled))  # rows of a switch landing meanwhile: dropped
        order = np.argsort(term_ids[inside], kind="stable")
        term_ids, positions, counts = term_ids[inside][order], positions[inside][order], counts[inside][order]
        # Row i's slot: its term's next free one, plus how many rows of its term come before it in the batch.
        first = np.searchsorted(term_ids, term_ids, side="left")
        slots = filled[term_ids] + (np.arange(len(term_ids)) - first)
        room = slots < indptr[term_ids + 1]
        chunks[slots[room]] = positions[room]
        tf[slots[room]] = counts[room]
        batch_terms, per_term = np.unique(term_ids[room], return_counts=True)
        filled[batch_terms] += per_term

    db.each_batch(f"WITH positions AS ({_POSITIONS}), term_ids AS ({_TERM_IDS}) "
                  "SELECT i.term_id, s.position, p.tf FROM postings p JOIN positions s ON s.chunk_id = p.chunk_id "
                  "JOIN term_ids i ON i.term = p.term", ["int32", "int32", "int32"], place)
    return terms, TermPostings(indptr=indptr, chunks=chunks, tf=tf)


def _read_records(db: Database, size: int, write: Callable[[int, np.ndarray, list[bytes]], None]) -> None:
    """Each served chunk's hit fields, encoded, with its copy index (in no particular order; `size`
    first: the number of chunks)."""
    for rows in db.row_batches(f"WITH positions AS ({_POSITIONS}) SELECT s.position, c.doc_id, c.source_id, c.title, "
                               "c.heading_path, c.text, c.status, c.line_start, c.line_end "
                               "FROM chunks c JOIN positions s ON s.chunk_id = c.chunk_id", size=_RECORD_ROWS):
        kept = [row for row in rows if row[0] < size]  # a chunk added since the chunks were read: dropped
        write(size, np.fromiter((row[0] for row in kept), dtype=np.int64, count=len(kept)),
              [HitRecords.encode(*row[1:]) for row in kept])


def _tf_type(low: int, high: int) -> type:
    """The narrowest integer type holding every tf between low and high (one or two bytes in practice)."""
    for kind in (np.uint8, np.uint16, np.uint32) if low >= 0 else (np.int32,):
        if high <= np.iinfo(kind).max:
            return kind
    return np.int64
