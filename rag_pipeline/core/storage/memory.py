"""Exact search at the speed of numpy: an in-memory copy of the served index in each process.

The copy holds every served chunk's filter columns (tenant, visibility, roles, status, effective
date) as small integer codes, its vector as stored (float32) with its norm, and its postings as a
term x chunk matrix in compressed rows (CSR). It is keyed by the served version (`served_versions`:
one token per source, replaced by every switch and purge), checked at each search call (DuckDB: a
stat of its files, a small query when they changed), and rebuilt when a switch changed what is
served (memory_load.py reads it; memory_cache.py keeps it in the cache folder for later processes).

It ranks exactly as the SQL path does, so a metric never depends on where a query ran:

- filters are the same predicates as `search.filter_sql`, as boolean masks;
- dense: float32 scores `raw @ q / |raw|` pick every candidate within FLOAT32_SCORE_TOLERANCE of
  the k-th best, and `vectors.rank` orders them by the float64 cosine of the stored vectors, ties
  to the smaller chunk id;
- BM25: the same formula and collection statistics (N, df, avgdl over all served chunks), summed
  in float64; scores equal to 1e-9 are ties, broken by chunk id.

Memory, and nothing per chunk or posting as a Python object: 4 bytes per dimension per chunk for
the vectors (1,536 MB for a million chunks of 384 floats), 5 or 6 bytes per posting (an int32
chunk index, a one- or two-byte tf), about 60 bytes per chunk for its id (packed) and filter codes. What a hit
shows (text, titles) stays in the database: a search reads its hits' rows, as the SQL path does; a copy
mapped from the cache folder (memory_cache.py) holds them in a file (`HitRecords`), whose pages only
the hits touch.

The rankings give each chunk's index in the copy beside its id and score, so that its record is
read by position, never looked up by id.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date

import numpy as np

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.vectors import near_top, query_blocks, rank

NO_DATE = np.iinfo(np.int64).min
EPOCH = date(1970, 1, 1)
# Filter masks kept per copy (one byte per chunk each).
_KEPT_MASKS = 8


class PackedStrings(Sequence[str]):
    """Strings in one UTF-8 buffer and an offset each: their bytes plus 8, where a list holds a
    Python object of 50 bytes and more per string (a million chunk ids: ~25 MB against ~80 MB)."""

    def __init__(self, data: bytes, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets  # int64, len + 1: string i is data[offsets[i]:offsets[i + 1]]

    @classmethod
    def pack(cls, batches: Iterable[Sequence[str]]) -> PackedStrings:
        pieces, lengths = [], [np.zeros(1, dtype=np.int64)]
        for strings in batches:
            encoded = [s.encode() for s in strings]
            pieces.append(b"".join(encoded))
            lengths.append(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
        return cls(b"".join(pieces), np.cumsum(np.concatenate(lengths)))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index) -> str:
        if isinstance(index, slice):
            raise TypeError("PackedStrings takes one index at a time")
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.data[self.offsets[index] : self.offsets[index + 1]].decode()

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    @property
    def nbytes(self) -> int:
        return len(self.data) + self.offsets.nbytes


class HitRecords:
    """What a hit shows of each chunk (doc id, source, title, heading path, text, status, lines), one
    JSON array per chunk in one buffer (a mapped file), found by its copy index: `starts` and `lengths`."""

    def __init__(self, data, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.data = data  # bytes or a read-only mmap (slicing either gives bytes)
        self.starts = starts
        self.lengths = lengths

    def __getitem__(self, index: int) -> tuple:
        start = int(self.starts[index])
        doc_id, source_id, title, path, text, status, line_start, line_end = json.loads(
            self.data[start : start + int(self.lengths[index])])
        return doc_id, source_id, title, tuple(path), text, status, line_start, line_end

    @staticmethod
    def encode(doc_id, source_id, title, heading_path, text, status, line_start, line_end) -> bytes:
        return json.dumps([doc_id, source_id, title, list(heading_path or ()), text, status, line_start, line_end],
                          ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class TermPostings:
    """Postings grouped by term (CSR): term t's are `chunks[indptr[t]:indptr[t + 1]]` (chunk
    indexes) with their `tf`; within a term, in no particular order."""

    indptr: np.ndarray  # int64, one more than the terms
    chunks: np.ndarray  # int32
    tf: np.ndarray  # the narrowest integer type that holds every tf (uint16 in practice)

    @property
    def nnz(self) -> int:
        return len(self.chunks)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.chunks.nbytes + self.tf.nbytes


@dataclass
class ServedCopy:
    version: tuple
    chunk_ids: PackedStrings  # sorted: an index order is a chunk id order
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
    terms: dict[str, int]  # term -> its row of `postings`
    postings: TermPostings
    # The database's change stamp when the copy's version was last confirmed.
    stamp: object = None
    # Each chunk's hit fields, when the copy is mapped from the cache (else read from the database).
    records: HitRecords | None = None
    # Masks of filters asked before (a few at most: callers use a handful), and the mean length.
    _masks: dict = field(default_factory=dict, repr=False)
    _avgdl: float | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return len(self.chunk_ids)

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays and packed ids (not the term table's Python objects)."""
        arrays = (self.vectors, self.norms, self.has_vector, self.lex_len, self.tenant, self.public, self.role_set,
                  self.status, self.effective_day)
        return sum(a.nbytes for a in arrays if a is not None) + self.postings.nbytes + self.chunk_ids.nbytes

    # ---- filters ---------------------------------------------------------------------------

    def mask(self, filters: SearchFilters) -> np.ndarray | None:
        """The chunks the caller may see: `search.filter_sql`'s predicates, as a boolean mask; None
        when every chunk is visible. Kept per filters (the same few are asked again and again: the
        O(chunks) work is done once, not per query)."""
        if filters.unrestricted:
            return None
        key = _mask_key(filters)
        return self._remember(key, lambda: self._mask(filters, key[-1]))

    def _remember(self, key: tuple, make):
        if key not in self._masks:
            if len(self._masks) >= _KEPT_MASKS:
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = make()
        return self._masks[key]

    def _mask(self, filters: SearchFilters, as_of: date) -> np.ndarray:
        if filters.tenant is None:
            keep = self.tenant == -1
        else:
            keep = (self.tenant == -1) | (self.tenant == self.tenants.get(filters.tenant, -2))
        roles = set(filters.roles)
        allowed = [i for i, role_set in enumerate(self.role_sets) if role_set & roles]
        keep &= self.public | np.isin(self.role_set, allowed)
        keep &= np.isin(self.status, [self.statuses[s] for s in filters.statuses if s in self.statuses])
        day = (as_of - EPOCH).days
        keep &= (self.effective_day == NO_DATE) | (self.effective_day <= day)
        return keep

    def _visible_vectors(self, filters: SearchFilters) -> tuple[np.ndarray | None, int]:
        """The mask of chunks with a vector the caller may see (None: every chunk), and their count."""
        def make() -> tuple[np.ndarray | None, int]:
            mask = self.mask(filters)
            if not bool(self.has_vector.all()):
                mask = self.has_vector if mask is None else mask & self.has_vector
            return mask, self.size if mask is None else int(mask.sum())

        return self._remember(("vectors", *(() if filters.unrestricted else _mask_key(filters))), make)

    # ---- dense -----------------------------------------------------------------------------

    def dense(self, queries: np.ndarray, k: int, filters: SearchFilters) -> list[list[tuple[str, float, int]]]:
        """Per query row (unit length), the k best (chunk id, cosine, index) under the filters."""
        if self.vectors is None:
            return [[] for _ in queries]
        visible, count = self._visible_vectors(filters)
        if count == 0:
            return [[] for _ in queries]
        depth = min(k, count)
        out = []
        step = query_blocks(len(queries), self.size).step
        for start in range(0, len(queries), step):
            block = queries[start:start + step]
            # Every row is scored and the hidden ones masked: cheaper than copying the visible rows.
            # One question: a matrix-vector product (BLAS gemv), as numpy's own `matrix @ q` runs.
            fast = ((self.vectors @ block[0])[None, :] if len(block) == 1 else block @ self.vectors.T) / self.norms
            if visible is not None:
                fast[:, ~visible] = -np.inf
            for query, row in zip(block, fast):
                chosen = near_top(row, depth).tolist()
                where = {self.chunk_ids[j]: j for j in chosen}
                out.append([(c, s, where[c]) for c, s in rank(query, list(where), self.vectors[chosen], k)])
        return out

    # ---- BM25 ------------------------------------------------------------------------------

    def bm25(self, query_terms: Sequence[Sequence[str]], k: int, filters: SearchFilters, k1: float,
             b: float) -> list[list[tuple[str, float, int]]]:
        """Per analysed query, the k best (chunk id, BM25 score, index) under the filters (formula:
        search.bm25_search). The work is the postings of its terms (and one pass over a score per
        chunk), not a length norm per chunk recomputed each query."""
        n = self.size
        if n == 0:
            return [[] for _ in query_terms]
        visible = self.mask(filters)
        if self._avgdl is None:
            self._avgdl = float(self.lex_len.mean())
        avgdl = self._avgdl
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
                start, end = self.postings.indptr[row], self.postings.indptr[row + 1]
                chunks = self.postings.chunks[start:end]
                tf = self.postings.tf[start:end].astype(np.float64)  # the formula in float64, as in SQL
                df = end - start
                idf = bm25_idf(n, df)
                norm = k1 * (1 - b + b * self.lex_len[chunks] / avgdl)
                scores[chunks] += qtf * idf * tf * (k1 + 1) / (tf + norm)
            matched = np.flatnonzero(scores > 0 if visible is None else (scores > 0) & visible)
            out.append(_top_by_key(matched, scores[matched], k, self.chunk_ids))
        return out


def bm25_idf(chunks: int, df: int) -> float:
    """BM25's idf of a term held by `df` of `chunks` chunks, Lucene's non-negative form (as the SQL
    path computes it, `Search.bm25_search`): ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1 + (chunks - df + 0.5) / (df + 0.5))


def _mask_key(filters: SearchFilters) -> tuple:
    """What decides a filters mask (the day included: `as_of` None means today)."""
    return filters.tenant, frozenset(filters.roles), tuple(filters.statuses), filters.as_of or date.today()


def _top_by_key(indexes: np.ndarray, scores: np.ndarray, k: int, chunk_ids: Sequence[str]) -> list[tuple[str, float, int]]:
    """The k best by score rounded to 1e-9, ties by chunk id (`indexes` ascending = chunk id order)."""
    if len(indexes) == 0:
        return []
    keys = np.floor(scores * 1e9 + 0.5)
    depth = min(k, len(keys))
    edge = np.partition(keys, len(keys) - depth)[len(keys) - depth]
    chosen = np.flatnonzero(keys >= edge)
    order = chosen[np.lexsort((indexes[chosen], -keys[chosen]))][:k]
    return [(chunk_ids[int(indexes[j])], float(scores[j]), int(indexes[j])) for j in order]
