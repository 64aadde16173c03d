"""Vector arithmetic shared by embedding, search and drift."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# A float32 score (a BLAS product, or pgvector's distance) is within this of the float64 cosine:
# candidates are every vector scoring this close to the k-th best, so that neither a true
# neighbour nor a tie at the edge of the top k is lost before the exact rescoring.
FLOAT32_SCORE_TOLERANCE = 1e-4


# The most float32 scores held at once by a search of many queries (64 MB): the queries are scored
# a block at a time, so that a probe of every document of a large index (100k queries against 100k
# vectors: 40 GB at once) holds one block's scores, not all of them.
MAX_SCORES_AT_ONCE = 1 << 24


def query_blocks(queries: int, vectors: int) -> range:
    """Start of each block of query rows whose scores against `vectors` vectors fit `MAX_SCORES_AT_ONCE`."""
    return range(0, queries, max(1, MAX_SCORES_AT_ONCE // max(vectors, 1)))


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (zero rows stay zero), so that dot products are cosines."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def cosines(query: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """cos(query, row) for each row of `matrix`, in float64, each pair computed on its own (the
    same bits whatever else is in the matrix); a zero vector scores 0."""
    rows = np.asarray(matrix, dtype=np.float64)
    q = np.asarray(query, dtype=np.float64)
    q_norm = np.sqrt((q * q).sum())
    norms = np.sqrt((rows * rows).sum(axis=1)) * q_norm
    return np.divide((rows * q).sum(axis=1), norms, out=np.zeros(len(rows)), where=norms > 0)


# Scores of a long row sampled to bound its `depth`-th best from below (`near_top`).
_SAMPLE = 1024


def near_top(scores: np.ndarray, depth: int) -> np.ndarray:
    """Indexes of every score within FLOAT32_SCORE_TOLERANCE of the `depth`-th best (ties included),
    in ascending order.

    A long row is not partitioned whole: the `depth`-th best of an evenly spaced sample is at most
    the row's, so the scores within the tolerance of the sample's hold every index asked for; the
    row's `depth`-th best is found among them (the same indexes, for a tenth of the work)."""
    count = len(scores)
    pool = None
    if count >= 4 * _SAMPLE and depth <= _SAMPLE // 4:
        sample = scores[:: count // _SAMPLE]
        floor = np.partition(sample, len(sample) - depth)[len(sample) - depth]
        pool = np.flatnonzero(scores >= floor - FLOAT32_SCORE_TOLERANCE)
        scores = scores[pool]
        count = len(scores)
    edge = np.partition(scores, count - depth)[count - depth]
    chosen = np.flatnonzero(scores >= edge - FLOAT32_SCORE_TOLERANCE)
    return chosen if pool is None else pool[chosen]


def rank(query: np.ndarray, ids: Sequence[str], matrix: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The k best (id, cosine) of these candidates, by score and then by id."""
    scores = cosines(query, matrix)
    order = np.argsort(-scores, kind="stable")
    ordered = scores[order]
    if len(ordered) > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
        # Equal scores: ordered by id, whatever order the candidates came in.
        return sorted(zip(ids, scores.tolist()), key=lambda pair: (-pair[1], pair[0]))[:k]
    top = order[:k].tolist()
    return [(ids[i], s) for i, s in zip(top, scores[top].tolist())]
