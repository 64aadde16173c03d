"""The exact ranking every search path shares: float64 cosines, ties by id."""

import numpy as np

from rag_pipeline.core.vectors import cosines, near_top, rank


def _reference(query, ids, matrix, k):
    scores = cosines(query, matrix).tolist()
    return sorted(zip(ids, scores), key=lambda pair: (-pair[1], pair[0]))[:k]


def test_rank_equals_sorting_by_score_then_id_with_and_without_ties():
    rng = np.random.default_rng(3)
    query = rng.standard_normal(16).astype(np.float32)
    matrix = rng.standard_normal((50, 16)).astype(np.float32)
    ids = [f"c{i:03d}" for i in rng.permutation(50)]
    assert rank(query, ids, matrix, 10) == _reference(query, ids, matrix, 10)
    # Duplicated vectors tie exactly: the smaller id comes first, whatever the input order.
    tied = np.vstack([matrix, matrix[:5]])
    tied_ids = ids + [f"b{i}" for i in range(5)]
    ranked = rank(query, tied_ids, tied, 55)
    assert ranked == _reference(query, tied_ids, tied, 55)
    for i in range(5):
        pair = [cid for cid, _ in ranked if cid in (ids[i], f"b{i}")]
        assert pair == sorted(pair)
    assert rank(query, ids[:1], matrix[:1], 5) == _reference(query, ids[:1], matrix[:1], 5)


def test_near_top_keeps_every_score_within_tolerance_of_the_edge():
    # The 2nd best is 0.50005: 0.49996 is within 1e-4 of it and kept, 0.4998 is not.
    scores = np.array([0.9, 0.5, 0.50005, 0.4998, 0.49996, 0.1], dtype=np.float32)
    assert near_top(scores, 2).tolist() == [0, 1, 2, 4]


def _near_top_whole_row(scores: np.ndarray, depth: int) -> np.ndarray:
    edge = np.partition(scores, len(scores) - depth)[len(scores) - depth]
    return np.flatnonzero(scores >= edge - 1e-4)


def test_near_top_of_a_long_row_equals_partitioning_the_whole_row():
    """Long rows are cut down by a sample's edge first: the same indexes, in the same order, with
    ties, masked (-inf) scores, and sorted rows whose sample is all low scores."""
    rng = np.random.default_rng(27)
    for trial in range(400):
        count = int(rng.integers(4096, 20000))
        depth = int(rng.integers(1, 257))
        scores = rng.standard_normal(count).astype(np.float32)
        if trial % 4 == 1:
            scores = np.round(scores, 1).astype(np.float32)
        elif trial % 4 == 2:
            scores[rng.random(count) < 0.7] = -np.inf
        elif trial % 4 == 3:
            scores = np.sort(scores)
        assert np.array_equal(near_top(scores, depth), _near_top_whole_row(scores, depth)), (trial, count, depth)
