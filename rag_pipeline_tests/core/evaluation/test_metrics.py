"""Our metric functions against pytrec_eval (trec_eval's own C code) on random runs."""

import random

import pytest
import pytrec_eval

from rag_pipeline.core.evaluation.scoring import metrics

# Our key -> pytrec_eval measure name.
TREC_NAMES = {
    **{f"recall_at_{k}": f"recall_{k}" for k in metrics.RECALL_CUTOFFS},
    **{f"precision_at_{k}": f"P_{k}" for k in metrics.PRECISION_CUTOFFS},
    **{f"success_at_{k}": f"success_{k}" for k in metrics.SUCCESS_CUTOFFS},
    "ndcg_at_10": "ndcg_cut_10",
}


def trec_reference(rankings: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """pytrec_eval's values for our rankings; scores strictly decrease with rank so its sort keeps our order."""
    run = {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in rankings.items()}
    cut_run = {q: {d: float(len(docs) - i) for i, d in enumerate(docs[:10])} for q, docs in rankings.items()}
    cut = lambda ks: ",".join(str(k) for k in ks)  # noqa: E731
    measures = {f"recall.{cut(metrics.RECALL_CUTOFFS)}", f"P.{cut(metrics.PRECISION_CUTOFFS)}",
                f"success.{cut(metrics.SUCCESS_CUTOFFS)}", "ndcg_cut.10"}
    full = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut_run)
    return {q: {**full[q], "recip_rank_10": rr[q]["recip_rank"]} for q in full}


def assert_equal_to_trec(rankings, qrels):
    reference = trec_reference(rankings, qrels)
    for query_id, ranking in rankings.items():
        ours = metrics.query_metrics(ranking, qrels[query_id])
        for key, trec_name in TREC_NAMES.items():
            assert ours[key] == pytest.approx(reference[query_id][trec_name], abs=1e-9), (query_id, key)
        assert ours["mrr_at_10"] == pytest.approx(reference[query_id]["recip_rank_10"], abs=1e-9)


@pytest.mark.parametrize("seed", range(5))
def test_metrics_equal_pytrec_eval_on_random_runs(seed):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(300)]
    rankings, qrels = {}, {}
    for q in range(40):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        # Graded judgements, some zero (judged not relevant), at least one relevant.
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in judged}
        qrels[qid][judged[0]] = max(1, qrels[qid][judged[0]])
        rankings[qid] = rng.sample(docs, rng.randint(1, 150))
        if rng.random() < 0.5 and judged[0] not in rankings[qid]:  # make early hits likely
            rankings[qid].insert(rng.randint(0, 5), judged[0])
    assert_equal_to_trec(rankings, qrels)


def test_hand_computed_values():
    ranking = ["a", "x", "b", "y"]
    rel = {"a": 1, "b": 1, "c": 1}
    assert metrics.recall_at(ranking, rel, 3) == pytest.approx(2 / 3)
    assert metrics.precision_at(ranking, rel, 10) == pytest.approx(2 / 10)
    assert metrics.reciprocal_rank_at(["x", "a"], rel, 10) == 0.5
    assert metrics.reciprocal_rank_at(["x", "a"], rel, 1) == 0.0
    # DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) + 1/log2(4)
    assert metrics.ndcg_at(ranking, rel, 10) == pytest.approx(1.5 / (1 + 1 / 1.5849625007211562 + 0.5))
    assert metrics.first_relevant_rank(["x", "y", "b"], rel) == 3
    assert metrics.mean([1.0, 0.0], [3, 1]) == 0.75
