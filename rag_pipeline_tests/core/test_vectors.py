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
