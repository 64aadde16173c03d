"""Search over the served index: dense (cosine) and BM25, with the caller's filters in the SQL.

Dense scores are computed the same way on every backend, so a metric never depends on the
engine: candidates come from the engine (DuckDB: one float32 matrix product over every filtered
vector; PostgreSQL: pgvector's nearest neighbours, by an exact scan or the HNSW index), then each
candidate's cosine is computed again in float64, pair by pair, and ties go to the smaller chunk id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from typing import TYPE_CHECKING

from rag_pipeline.core.models import Hit, SearchFilters
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.served import served_version

if TYPE_CHECKING:  # numpy and the in-memory copy are imported by a search: a no-change ingest needs neither
    import numpy as np

    from rag_pipeline.core.storage.memory import ServedCopy
    from rag_pipeline.core.storage.memory_cache import CopyCache

def load_served_copy(db: Database, version: tuple, records=None) -> ServedCopy:
    """The in-memory copy of the served `version` (memory.py, built by memory_load.py; `records`: there)."""
    from rag_pipeline.core.storage.memory_load import load_served_copy as load

    return load(db, version, records=records)


# Queries per BM25 statement: bounds the (query x posting) work of one statement.
QUERY_BATCH = 256
# From `Database.scan_once_queries` questions at once (32; DuckDB, which scores in the engine, 3), an
# exact search reads the filtered vectors once and scores them all here: a statement per question
# would scan every vector once each (a switch's queryable probe of 10k documents on PostgreSQL: 10k
# scans of 10k vectors).
# Questions scored per read of the vectors: each keeps its candidates' vectors until the scan ends
# (about 15 KB a question at k = 10), so the probe of a 100k-document build reads the vectors a few
# times rather than holding 1.5 GB of candidates.
SCAN_GROUP_QUERIES = 8192
_HIT_COLUMNS = "c.chunk_id, c.doc_id, c.source_id, c.title, c.heading_path, c.text, c.status, c.line_start, c.line_end"


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
    clauses.append(f"({alias}.visibility = 'public' OR {alias}.roles && ?::VARCHAR[])")
    params.append(list(filters.roles))
    clauses.append(f"{alias}.status = ANY(?::VARCHAR[])")
    params.append(list(filters.statuses))
    clauses.append(f"({alias}.effective_date IS NULL OR {alias}.effective_date <= ?)")
    params.append(filters.as_of or date.today())
    return " AND ".join(clauses), params


class Search:
    """Dense and BM25 search. With `memory` (the default), exact search runs on an in-memory copy
    of the served index (memory.py), rebuilt when a switch changed what is served, up to
    `memory_max_chunks`; beyond that, and for an approximate engine index, in the database."""

    def __init__(self, db: Database, memory: bool = True, memory_max_chunks: int = 2_000_000,
                 cache: bool = True) -> None:
        self.db = db
        self.memory = memory
        self.memory_max_chunks = memory_max_chunks
        self.cache = cache
        self._copy: ServedCopy | None = None

    def served_copy(self) -> ServedCopy | None:
        """The in-memory copy of what is served now, or None (disabled, or too large).

        Mapped from the cache folder when a process wrote this version's copy there already, else
        read from the database and written there (memory_cache.py; not inside a transaction, whose
        state may yet be rolled back)."""
        if not self.memory:
            return None
        stamp = self.db.change_stamp()
        if self._copy is not None and stamp is not None and stamp == self._copy.stamp:
            return self._copy  # nothing was written since the version was last confirmed
        cache = self._cache()
        for _ in range(3):
            version = served_version(self.db)
            if self._copy is not None and self._copy.version == version:
                self._copy.stamp = stamp
                return self._copy
            copy = cache.map(version) if cache is not None else None
            if copy is None:
                if self.db.value("SELECT count(*) FROM chunks") > self.memory_max_chunks:
                    self._copy = None
                    return None
                if cache is not None and not self.db.in_transaction:
                    copy, still = cache.build(self.db, version, load_served_copy)
                else:
                    copy = load_served_copy(self.db, version)
                    still = served_version(self.db) == version
                if not still:
                    continue
            elif copy.size > self.memory_max_chunks:
                self._copy = None
                return None
            copy.stamp = stamp
            self._copy = copy
            return copy
        return None  # switches keep landing while we read: search in the database this time

    def _cache(self) -> CopyCache | None:
        from rag_pipeline.core.storage.memory_cache import CopyCache

        return CopyCache.of(self.db) if self.cache else None

    def in_database(self) -> Search:
        """The same search without the in-memory copy, for a switch's probes: they search, once,
        a state not yet committed, and a copy of it (every vector, the postings, the filter
        columns) costs far more than their few questions (a one-page edit's switch: 0.4 s of its
        0.55 s; a copy of 100k chunks takes about 5 s to load)."""
        return Search(self.db, memory=False)

    def dense_search(self, query_vectors: np.ndarray, k: int, filters: SearchFilters) -> list[list[Hit]]:
        """Top-k chunks by cosine similarity for each query row, under the caller's filters."""
        import numpy as np

        from rag_pipeline.core.vectors import normalise_rows

        if len(query_vectors) == 0:
            return []
        queries = normalise_rows(np.asarray(query_vectors, dtype=np.float32))
        copy = None if self.db.approximate else self.served_copy()
        if copy is not None:
            return self._hits(copy.dense(queries, k, filters), copy)
        where, params = filter_sql(filters)
        scan_once = len(queries) >= self.db.scan_once_queries and not self.db.approximate
        first = None if scan_once else self.db.dense_candidates(queries[0], k, where, params, filters)
        if first is None:
            # Many questions, or no index of the engine's own: score every filtered vector, a batch
            # of rows at a time.
            sql = (f"SELECT c.chunk_id, {self.db.vector_expression('v.vector')} FROM chunks c "
                   f"JOIN vectors v USING (chunk_id) WHERE {where}")
            ranked = []
            for start in range(0, len(queries), SCAN_GROUP_QUERIES):
                group = queries[start:start + SCAN_GROUP_QUERIES]
                ranked += self._rank_all(group, self.db.vector_batches(sql, params), k)
        else:
            candidates = [first] + [self.db.dense_candidates(q, k, where, params, filters) for q in queries[1:]]
            ranked = [self._rescore(q, ids, k) for q, ids in zip(queries, candidates)]
        return self._hits(ranked)

    @staticmethod
    def _rank_all(queries: np.ndarray, batches: Iterable[tuple[list, np.ndarray]], k: int) -> list[list[tuple[str, float]]]:
        """Fast float32 scores of every vector pick the candidates; `rank` orders them.

        The vectors come a batch of rows at a time (memory: one batch, not every vector and its
        normalised copy); each query keeps the rows within FLOAT32_SCORE_TOLERANCE of its running
        k-th best (`near_top` over its kept rows and the batch). That edge only rises, so a row
        dropped early is below the final edge too: the kept rows are the candidates of one scan of
        all of them. Queries are scored a block at a time (`query_blocks`)."""
        import numpy as np

        from rag_pipeline.core.vectors import near_top, normalise_rows, query_blocks, rank

        kept: list[tuple[list, np.ndarray, np.ndarray]] = [([], np.zeros(0, np.float32), None) for _ in queries]
        for ids, matrix in batches:
            unit = normalise_rows(matrix).T
            step = query_blocks(len(queries), len(ids)).step
            for start in range(0, len(queries), step):
                block = queries[start:start + step]
                for i, row in enumerate(block @ unit, start):
                    kept_ids, kept_scores, kept_rows = kept[i]
                    scores = np.concatenate([kept_scores, row])
                    chosen = near_top(scores, min(k, len(scores)))
                    old = chosen[chosen < len(kept_ids)]
                    new = chosen[chosen >= len(kept_ids)] - len(kept_ids)
                    rows = matrix[new] if kept_rows is None else np.concatenate([kept_rows[old], matrix[new]])
                    kept[i] = ([kept_ids[j] for j in old] + [ids[j] for j in new], scores[chosen], rows)
        return [rank(query, ids, rows, k) if ids else [] for query, (ids, _, rows) in zip(queries, kept)]

    def _rescore(self, query: np.ndarray, candidates: Sequence[str], k: int) -> list[tuple[str, float]]:
        from rag_pipeline.core.vectors import rank

        if not candidates:
            return []
        ids, matrix = self.db.read_vectors(
            f"SELECT chunk_id, {self.db.vector_expression('vector')} FROM vectors "
            "WHERE chunk_id IN (SELECT unnest(?::VARCHAR[]))", [list(candidates)])
        return rank(query, ids, matrix, k)

    def document_frequencies(self, terms: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(served chunks, the number of them holding each term): the collection statistics of BM25's
        idf, for callers that weigh a question's terms by rarity (terms held nowhere count 0)."""
        chunks = int(self.db.rows("SELECT count(*) FROM chunks")[0][0])
        unique = sorted(set(terms))
        if not unique:
            return chunks, {}
        rows = self.db.rows("SELECT term, count(*) FROM postings WHERE term IN (SELECT unnest(?::VARCHAR[])) "
                            "GROUP BY term", [unique])
        found = {str(term): int(count) for term, count in rows}
        return chunks, {t: found.get(t, 0) for t in unique}

    def bm25_search(self, query_terms: Sequence[Sequence[str]], k: int, filters: SearchFilters,
                    k1: float, b: float) -> list[list[Hit]]:
        """Top-k chunks by Okapi BM25 for each analysed query.

        score(q, d) = sum over query terms t (with repeats) of
            idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)),
        idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))  (Lucene's non-negative idf).
        N, df and avgdl are collection statistics over all served chunks, as in Lucene; the
        filters only restrict which chunks may be returned. Scores equal to 1e-9 are ties, broken by
        chunk id: engines sum a chunk's terms in different orders, and the last bits must not decide.
        """
        if not query_terms:
            return []
        copy = self.served_copy()
        if copy is not None:
            return self._hits(copy.bm25(query_terms, k, filters, k1, b), copy)
        where, params = filter_sql(filters)
        ranked: list[list[tuple[str, float]]] = []
        for start in range(0, len(query_terms), QUERY_BATCH):
            batch = query_terms[start : start + QUERY_BATCH]
            pairs = [(qid, term) for qid, terms in enumerate(batch) for term in terms]
            if not pairs:
                ranked.extend([] for _ in batch)
                continue
            rows = self.db.rows(
                f"""
                WITH q AS (
                    SELECT qid, term, count(*) AS qtf
                    FROM (SELECT unnest(?::INTEGER[]) AS qid, unnest(?::VARCHAR[]) AS term) terms GROUP BY qid, term
                ),
                stats AS (SELECT count(*) AS n, avg(lex_len) AS avgdl FROM chunks),
                df AS (SELECT term, count(*) AS df FROM postings WHERE term IN (SELECT term FROM q) GROUP BY term),
                scored AS (
                    SELECT q.qid, p.chunk_id,
                           sum(q.qtf * ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
                               * p.tf * (? + 1) / (p.tf + ? * (1 - ? + ? * c.lex_len / s.avgdl))) AS score
                    FROM q JOIN df ON df.term = q.term JOIN postings p ON p.term = q.term
                    JOIN chunks c ON c.chunk_id = p.chunk_id CROSS JOIN stats s
                    WHERE {where}
                    GROUP BY q.qid, p.chunk_id
                ),
                ranked AS (
                    SELECT qid, chunk_id, score,
                           row_number() OVER (PARTITION BY qid ORDER BY floor(score * 1e9 + 0.5) DESC, chunk_id) AS position
                    FROM scored
                )
                SELECT qid, chunk_id, score FROM ranked WHERE position <= ? ORDER BY qid, position
                """,
                [[q for q, _ in pairs], [t for _, t in pairs], k1, k1, b, b, *params, k],
            )
            grouped: list[list[tuple[str, float]]] = [[] for _ in batch]
            for qid, chunk_id, score in rows:
                grouped[int(qid)].append((chunk_id, float(score)))
            ranked.extend(grouped)
        return self._hits(ranked)

    def _hits(self, ranked: Sequence[Sequence[tuple]], copy: ServedCopy | None = None) -> list[list[Hit]]:
        """Hits with their chunks' fields, in each list's order (ranks from 1). From the copy's
        records when it has them (each ranked entry gives its copy index third), else read from the
        database (the in-memory copy holds no text: it would cost more than the vectors); a chunk
        whose row is gone there (a switch landed since it was ranked) is left out."""
        if copy is not None and copy.records is not None:
            return [[_record_hit(chunk_id, float(score), rank, copy.records[index])
                     for rank, (chunk_id, score, index) in enumerate(hits, start=1)] for hits in ranked]
        chunks = {}
        wanted = sorted({hit[0] for hits in ranked for hit in hits})
        if wanted:
            for row in self.db.rows(f"SELECT {_HIT_COLUMNS} FROM chunks c WHERE c.chunk_id IN (SELECT unnest(?::VARCHAR[]))",
                                    [wanted]):
                chunks[row[0]] = (*row[:4], tuple(row[4] or ()), *row[5:])
        # Built for every ranked chunk of every query (an evaluation: 100 per question), so kept
        # lean; the score is made a Python float (numpy scalars slow every later round and sort).
        results = []
        for hits in ranked:
            out = []
            for chunk_id, score, *_ in hits:
                if chunk_id not in chunks:
                    continue
                _, doc_id, source_id, title, path, text, status, start, end = chunks[chunk_id]
                out.append(Hit(chunk_id, doc_id, float(score), len(out) + 1, source_id, title, path, text, status, start, end))
            results.append(out)
        return results


def _record_hit(chunk_id: str, score: float, rank: int, record: tuple) -> Hit:
    doc_id, *fields = record
    return Hit(chunk_id, doc_id, score, rank, *fields)
