"""Exact search at the speed of numpy: an in-memory copy of the served index in each process.

The copy holds every served chunk's filter columns (tenant, visibility, roles, status, effective
date) as small integer codes, its vector as stored (float32) with its norm, and its postings as a
sparse term x chunk matrix. It is keyed by the served version (`served_versions`: one token per
source, replaced by every switch and purge), checked with one small query per search call, and
rebuilt when a switch changed what is served.

It ranks exactly as the SQL path does, so a metric never depends on where a query ran:

- filters are the same predicates as `search.filter_sql`, as boolean masks;
- dense: float32 scores `raw @ q / |raw|` pick every candidate within FLOAT32_SCORE_TOLERANCE of
  the k-th best, and `vectors.rank` orders them by the float64 cosine of the stored vectors, ties
  to the smaller chunk id;
- BM25: the same formula and collection statistics (N, df, avgdl over all served chunks), summed
  in float64; scores equal to 1e-9 are ties, broken by chunk id.

Memory: 4 bytes per dimension per chunk for the vectors (154 MB per 100k chunks of 384 floats),
about 12 bytes per posting, and each chunk's id, text and titles (what a hit shows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

import numpy as np

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.storage.database import arrow_to_numpy
from rag_pipeline.core.vectors import near_top, query_blocks, rank

if TYPE_CHECKING:
    import scipy.sparse

_NO_DATE = np.iinfo(np.int64).min
_EPOCH = date(1970, 1, 1)


def _codes(values: Sequence) -> tuple[np.ndarray, dict]:
    """Integer codes of `values` (None is -1) and the value -> code table."""
    table: dict = {}
    codes = np.fromiter((-1 if v is None else table.setdefault(v, len(table)) for v in values), dtype=np.int32,
                        count=len(values))
    return codes, table


@dataclass
class ServedCopy:
    version: tuple
    chunk_ids: list[str]  # sorted: an index order is a chunk id order
    tenant: np.ndarray
    tenants: dict
    public: np.ndarray
    role_sets: list[frozenset]
    role_set: np.ndarray
    status: np.ndarray
    statuses: dict
    effective_day: np.ndarray
    vectors: np.ndarray | None  # float32 as stored, rows in chunk id order; None without vectors
    norms: np.ndarray | None  # a zero vector's norm is stored as 1: it scores 0, never NaN
    has_vector: np.ndarray
    lex_len: np.ndarray
    terms: dict[str, int]
    tf: scipy.sparse.csr_matrix  # terms x chunks
    # What a hit shows, per chunk (so a search reads nothing from the database once the copy is current).
    shown: list[tuple]
    position: dict[str, int]
    # The database's change stamp when the copy's version was last confirmed.
    stamp: object = None

    @property
    def size(self) -> int:
        return len(self.chunk_ids)

    # ---- filters ---------------------------------------------------------------------------

    def mask(self, filters: SearchFilters) -> np.ndarray:
        """The chunks the caller may see: `search.filter_sql`'s predicates, as a boolean mask."""
        if filters.unrestricted:
            return np.ones(self.size, dtype=bool)
        if filters.tenant is None:
            keep = self.tenant == -1
        else:
            keep = (self.tenant == -1) | (self.tenant == self.tenants.get(filters.tenant, -2))
        roles = set(filters.roles)
        allowed = [i for i, role_set in enumerate(self.role_sets) if role_set & roles]
        keep &= self.public | np.isin(self.role_set, allowed)
        keep &= np.isin(self.status, [self.statuses[s] for s in filters.statuses if s in self.statuses])
        as_of = ((filters.as_of or date.today()) - _EPOCH).days
        keep &= (self.effective_day == _NO_DATE) | (self.effective_day <= as_of)
        return keep

    # ---- dense -----------------------------------------------------------------------------

    def dense(self, queries: np.ndarray, k: int, filters: SearchFilters) -> list[list[tuple[str, float]]]:
        """Per query row (unit length), the k best (chunk id, cosine) under the filters."""
        if self.vectors is None:
            return [[] for _ in queries]
        visible = self.mask(filters) & self.has_vector
        count = int(visible.sum())
        if count == 0:
            return [[] for _ in queries]
        depth = min(k, count)
        out = []
        step = query_blocks(len(queries), self.size).step
        for start in range(0, len(queries), step):
            block = queries[start:start + step]
            # Every row is scored and the hidden ones masked: cheaper than copying the visible rows.
            fast = (block @ self.vectors.T) / self.norms
            if count < self.size:
                fast[:, ~visible] = -np.inf
            for query, row in zip(block, fast):
                chosen = near_top(row, depth)
                out.append(rank(query, [self.chunk_ids[j] for j in chosen], self.vectors[chosen], k))
        return out

    # ---- BM25 ------------------------------------------------------------------------------

    def bm25(self, query_terms: Sequence[Sequence[str]], k: int, filters: SearchFilters, k1: float,
             b: float) -> list[list[tuple[str, float]]]:
        """Per analysed query, the k best (chunk id, BM25 score) under the filters (formula: search.bm25_search)."""
        n = self.size
        if n == 0:
            return [[] for _ in query_terms]
        visible = self.mask(filters)
        avgdl = float(self.lex_len.mean())
        norm = k1 * (1 - b + b * self.lex_len / avgdl)
        out = []
        for terms in query_terms:
            scores = np.zeros(n)
            counts: dict[str, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            for term, qtf in counts.items():
                row = self.terms.get(term)
                if row is None:
                    continue
                start, end = self.tf.indptr[row], self.tf.indptr[row + 1]
                chunks, tf = self.tf.indices[start:end], self.tf.data[start:end]
                df = end - start
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                scores[chunks] += qtf * idf * tf * (k1 + 1) / (tf + norm[chunks])
            matched = np.flatnonzero((scores > 0) & visible)
            out.append(_top_by_key(matched, scores[matched], k, self.chunk_ids))
        return out


def _top_by_key(indexes: np.ndarray, scores: np.ndarray, k: int, chunk_ids: Sequence[str]) -> list[tuple[str, float]]:
    """The k best by score rounded to 1e-9, ties by chunk id (`indexes` ascending = chunk id order)."""
    if len(indexes) == 0:
        return []
    keys = np.floor(scores * 1e9 + 0.5)
    depth = min(k, len(keys))
    edge = np.partition(keys, len(keys) - depth)[len(keys) - depth]
    chosen = np.flatnonzero(keys >= edge)
    order = chosen[np.lexsort((indexes[chosen], -keys[chosen]))][:k]
    return [(chunk_ids[indexes[j]], float(scores[j])) for j in order]


def load_served_copy(db, version: tuple) -> ServedCopy:
    """Read the served index into memory (the caller checks the version before and after)."""
    rows = db.rows("SELECT chunk_id, tenant, visibility, roles, status, effective_date, lex_len, doc_id, source_id, "
                   "title, heading_path, text, line_start, line_end FROM chunks ORDER BY chunk_id")
    chunk_ids = [r[0] for r in rows]
    position = {c: i for i, c in enumerate(chunk_ids)}
    tenant, tenants = _codes([r[1] for r in rows])
    role_set, role_table = _codes([frozenset(r[3] or ()) for r in rows])
    status, statuses = _codes([r[4] for r in rows])
    effective = np.fromiter(((r[5] - _EPOCH).days if r[5] is not None else _NO_DATE for r in rows), dtype=np.int64,
                            count=len(rows))
    ids, matrix = db.read_vectors(
        f"SELECT chunk_id, {db.vector_expression('vector')} FROM vectors ORDER BY chunk_id")
    vectors = norms = None
    has_vector = np.zeros(len(rows), dtype=bool)
    if ids:
        vectors = np.zeros((len(rows), matrix.shape[1]), dtype=np.float32)
        places = np.fromiter((position.get(c, -1) for c in ids), dtype=np.int64, count=len(ids))
        known = places >= 0
        vectors[places[known]] = matrix[known]
        has_vector[places[known]] = True
        norms = np.linalg.norm(vectors, axis=1).astype(np.float32)
        norms[norms == 0] = 1
    # Postings as dictionary-encoded columns: tens of millions of rows never become Python tuples.
    term_list, term_rows, posting_chunks, chunk_codes, counts = [], np.zeros(0, np.int64), [], np.zeros(0, np.int64), np.zeros(0)
    postings = db.arrow("SELECT term, chunk_id, tf FROM postings")
    if postings is not None:
        import pyarrow.compute as pc

        def coded(name: str) -> tuple[list, np.ndarray]:
            encoded = pc.dictionary_encode(postings.column(name)).combine_chunks()
            return encoded.dictionary.to_pylist(), arrow_to_numpy(encoded.indices).astype(np.int64)

        term_list, term_rows = coded("term")
        posting_chunks, chunk_codes = coded("chunk_id")
        counts = arrow_to_numpy(postings.column("tf").combine_chunks()).astype(np.float64)
        del postings
    places = np.fromiter((position.get(c, -1) for c in posting_chunks), dtype=np.int64, count=len(posting_chunks))
    columns = places[chunk_codes] if len(chunk_codes) else np.zeros(0, dtype=np.int64)
    terms = {t: i for i, t in enumerate(term_list)}
    kept = columns >= 0
    from scipy import sparse  # only where a copy is built: a no-change run imports this module too

    tf = sparse.csr_matrix((counts[kept], (term_rows[kept], columns[kept])), shape=(len(terms), len(rows)))
    tf.sum_duplicates()
    tf.sort_indices()
    return ServedCopy(
        version=version, chunk_ids=chunk_ids, tenant=tenant, tenants=tenants,
        public=np.array([r[2] == "public" for r in rows], dtype=bool),
        role_sets=list(role_table), role_set=role_set, status=status, statuses=statuses, effective_day=effective,
        vectors=vectors, norms=norms, has_vector=has_vector,
        lex_len=np.array([r[6] or 0 for r in rows], dtype=np.float64), terms=terms, tf=tf,
        shown=[(r[0], r[7], r[8], r[9], tuple(r[10] or ()), r[11], r[4], r[12], r[13]) for r in rows], position=position,
    )
