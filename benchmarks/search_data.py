"""search_scale.py's synthetic corpus: clustered vectors, Zipf postings and queries, loaded into a store.

Seeded block by block (a smaller corpus is a prefix of a larger one); see search_scale.py's docstring
for the laws they follow.
"""

from __future__ import annotations

import io
import time

import numpy as np

from rag_pipeline.api import Store
from rag_pipeline.core.storage.served import mark_changed

DIMENSION = 384
CENTRES = 2000
NOISE = 0.35
BLOCK = 50_000  # generation block (fixed, so that the data does not depend on --batch)
SOURCE = "bench"
IDENTITY = f"bench:clustered-{CENTRES}x{DIMENSION}"
VOCABULARY = 50_000
ZIPF_EXPONENT = 1.1
CHUNK_TERMS = (40, 200)  # tokens per chunk, uniform, inclusive
QUERY_TERMS = (2, 6)  # tokens per BM25 query, uniform, inclusive
QUERY_RANKS = (30, 20_000)  # query terms: the same Zipf law restricted to these frequency ranks
CHUNK_COLUMNS = [
    "chunk_id", "doc_id", "source_id", "ordinal", "title", "heading_path", "text", "embed_text", "text_hash",
    "token_count", "line_start", "line_end", "tenant", "visibility", "roles", "status", "lex_len",
]
VECTOR_COLUMNS = ["chunk_id", "source_id", "identity", "vector"]
POSTING_COLUMNS = ["chunk_id", "source_id", "term", "tf"]


# ---- data: vectors ---------------------------------------------------------------------------


def centres(seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 0]).standard_normal((CENTRES, DIMENSION), dtype=np.float32)


def _around(rng: np.random.Generator, centre_matrix: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, len(centre_matrix), count)
    points = centre_matrix[labels] + np.float32(NOISE) * rng.standard_normal((count, DIMENSION), dtype=np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return labels, points


def corpus(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(cluster label per vector, n x 384 float32 unit vectors), block by block."""
    centre_matrix = centres(seed)
    labels = np.empty(n, dtype=np.int64)
    matrix = np.empty((n, DIMENSION), dtype=np.float32)
    for start in range(0, n, BLOCK):
        block_labels, block = _around(np.random.default_rng([seed, 2, start // BLOCK]), centre_matrix, BLOCK)
        take = min(BLOCK, n - start)
        labels[start : start + take] = block_labels[:take]
        matrix[start : start + take] = block[:take]
    return labels, matrix


def queries(count: int, seed: int, stream: int = 1) -> np.ndarray:
    """Query vectors drawn around the corpus's centres (stream 1: timed; stream 3: warm-up)."""
    return _around(np.random.default_rng([seed, stream]), centres(seed), count)[1]


def chunk_id(i: int) -> str:
    return f"bench:d{i:07d}#0"


# ---- data: postings --------------------------------------------------------------------------


def term_name(index: int) -> str:
    """The term of frequency rank index + 1 (rank order is not the name order)."""
    return f"w{(index * 7919) % VOCABULARY:05d}"


TERMS = [term_name(i) for i in range(VOCABULARY)]


def zipf_cdf(low: int, high: int) -> np.ndarray:
    """Cumulative probabilities of the frequency ranks low..high (1-based) under p(r) ~ r^-ZIPF_EXPONENT."""
    cdf = np.cumsum(np.arange(low, high + 1, dtype=np.float64) ** -ZIPF_EXPONENT)
    return cdf / cdf[-1]


def draw_terms(rng: np.random.Generator, cdf: np.ndarray, low: int, count: int) -> np.ndarray:
    """`count` term indexes (rank - 1) drawn by inverting `cdf` (ranks low..)."""
    return (low - 1 + np.searchsorted(cdf, rng.random(count), side="right")).astype(np.int32)


def postings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(chunk, term, tf) per posting, sorted by chunk then term, and each chunk's length.

    A chunk is a bag of L ~ U{40..200} tokens drawn from the Zipf law over VOCABULARY ranks; tf is
    a term's count in the bag, the length (chunks.lex_len) the sum of its tf. Block by block, with
    a seed per block (a smaller corpus is a prefix of a larger one, as for the vectors)."""
    cdf = zipf_cdf(1, VOCABULARY)
    chunks, terms, tfs, lengths = [], [], [], np.empty(n, dtype=np.int32)
    for start in range(0, n, BLOCK):
        rng = np.random.default_rng([seed, 4, start // BLOCK])
        block_lengths = rng.integers(CHUNK_TERMS[0], CHUNK_TERMS[1] + 1, BLOCK)
        tokens = draw_terms(rng, cdf, 1, int(block_lengths.sum()))
        take = min(BLOCK, n - start)
        owner = np.repeat(np.arange(BLOCK, dtype=np.int64), block_lengths)
        keep = owner < take
        keys, counts = np.unique(owner[keep] * VOCABULARY + tokens[keep], return_counts=True)
        chunks.append((keys // VOCABULARY + start).astype(np.int32))
        terms.append((keys % VOCABULARY).astype(np.int32))
        tfs.append(counts.astype(np.int32))
        lengths[start : start + take] = block_lengths[:take]
    return np.concatenate(chunks), np.concatenate(terms), np.concatenate(tfs), lengths


def bm25_queries(count: int, seed: int, stream: int = 5) -> list[np.ndarray]:
    """Term indexes of each query: 2-6 tokens from the Zipf law restricted to ranks QUERY_RANKS
    (no stop-word-like head, no tail that matches nothing); repeats allowed (stream 5: timed; 6: warm-up)."""
    rng = np.random.default_rng([seed, stream])
    cdf = zipf_cdf(*QUERY_RANKS)
    sizes = rng.integers(QUERY_TERMS[0], QUERY_TERMS[1] + 1, count)
    return [draw_terms(rng, cdf, QUERY_RANKS[0], int(size)) for size in sizes]


# ---- loading ---------------------------------------------------------------------------------


def chunk_rows(start: int, labels: np.ndarray, lengths: np.ndarray) -> list[tuple]:
    rows = []
    for offset, (label, length) in enumerate(zip(labels.tolist(), lengths.tolist())):
        i = start + offset
        text = f"Synthetic benchmark passage {i} about topic {label}, one of {CENTRES} clusters."
        rows.append((
            chunk_id(i), f"bench:d{i:07d}", SOURCE, 0, f"Benchmark document {i}", [f"Topic {label}"], text,
            f"Benchmark document {i}\n{text}", f"{i:016x}", len(text.split()), 1, 1, None, "public", [], "published",
            length,
        ))
    return rows


def insert_postings(store: Store, start: int, end: int, chunk: np.ndarray, term: np.ndarray, tf: np.ndarray) -> None:
    """The postings of chunks start..end-1: DuckDB through `store.db.insert`; PostgreSQL by a text
    COPY on the store's connection (the store's own insert sends 1,000 rows a statement)."""
    ids = [chunk_id(i) for i in range(start, end)]
    chunk_ids = [ids[c - start] for c in chunk.tolist()]
    terms = [TERMS[t] for t in term.tolist()]
    if store.db.dialect == "postgres":
        payload = io.StringIO("".join(f"{c}\t{SOURCE}\t{t}\t{f}\n" for c, t, f in zip(chunk_ids, terms, tf.tolist())))
        with store.db.connection() as connection, connection.cursor() as cursor:
            cursor.copy_expert(f"COPY postings ({', '.join(POSTING_COLUMNS)}) FROM STDIN", payload)
    else:
        store.db.insert("postings", POSTING_COLUMNS, list(zip(chunk_ids, [SOURCE] * len(terms), terms, tf.tolist())))


def load(store: Store, labels: np.ndarray, matrix: np.ndarray, lengths: np.ndarray, posting_data: tuple | None,
         batch: int) -> dict[str, float]:
    """Insert every chunk and vector through the store's Database API, `batch` chunks at a time, then
    (with `posting_data`) their postings; then a served-version token, so the in-memory copy has a
    version to be keyed by (the switch writes one; these rows do not come through the switch)."""
    seconds = {"load_s": 0.0, "postings_load_s": 0.0}
    for start in range(0, len(matrix), batch):
        end = min(start + batch, len(matrix))
        with store.transaction():
            started = time.perf_counter()
            store.db.insert("chunks", CHUNK_COLUMNS, chunk_rows(start, labels[start:end], lengths[start:end]))
            store.db.insert("vectors", VECTOR_COLUMNS, [(chunk_id(i), SOURCE, IDENTITY) for i in range(start, end)],
                            vectors=matrix[start:end])
            seconds["load_s"] += time.perf_counter() - started
            if posting_data is not None:
                started = time.perf_counter()
                chunk, term, tf = posting_data
                lo, hi = np.searchsorted(chunk, [start, end])
                insert_postings(store, start, end, chunk[lo:hi], term[lo:hi], tf[lo:hi])
                seconds["postings_load_s"] += time.perf_counter() - started
    with store.transaction():
        mark_changed(store.db, SOURCE)
    return {name: round(value, 2) for name, value in seconds.items()}
