"""Evaluation on the sample corpus (hashing embedder): metrics against pytrec_eval on a real run,
permissioned pairs, filters before fusion, thresholds and spans."""

import math

import pytest
import pytrec_eval

from rag_pipeline.config import RetrievalConfig
from rag_pipeline.core.evaluation.answers.abstention import calibrate_threshold
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.golden.cases import GoldenCase, GoldSpan
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.ranking import EVAL_DEPTH, LATENCY_SAMPLE, case_filters
from rag_pipeline.core.evaluation.scoring.results import CaseResult
from rag_pipeline.core.evaluation.scoring.spans import span_hit
from rag_pipeline.core.models import Hit, SearchFilters
from rag_pipeline.core.retrieval.fusion import reciprocal_rank_fusion, rollup_documents
from rag_pipeline.core.retrieval.retriever import Retriever

MODES = ("dense", "bm25", "hybrid")


@pytest.fixture(scope="module")
def evaluations(sample_index):
    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    results = {}
    for mode in MODES:
        retriever = Retriever(store, embedder, RetrievalConfig(mode=mode))
        results[mode] = evaluate(golden, retriever, mode, "fp", {}, supersedes=store.served.supersession())
    return golden, results


@pytest.mark.parametrize("mode", MODES)
def test_real_run_metrics_equal_pytrec_eval(evaluations, mode):
    _, results = evaluations
    result = results[mode]
    scored = [c for c in result.cases if c.scored]
    qrels = {c.case.id: {d: 1 for d in c.case.gold_docs} for c in scored}
    run = {c.case.id: {d: float(len(c.ranked_docs) - i) for i, d in enumerate(c.ranked_docs)} for c in scored}
    run = {q: docs or {"__none__": 0.0} for q, docs in run.items()}
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"recall.1,5,10,100", "ndcg_cut.10", "P.5"}).evaluate(run)
    cut = {q: dict(list(docs.items())[:10]) for q, docs in run.items()}
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
    pairs = {"recall_at_1": "recall_1", "recall_at_5": "recall_5", "recall_at_10": "recall_10",
             "recall_at_100": "recall_100", "ndcg_at_10": "ndcg_cut_10", "precision_at_5": "P_5"}
    for ours, theirs in pairs.items():
        expected = sum(reference[q][theirs] for q in qrels) / len(qrels)
        assert result.overall[ours] == pytest.approx(expected, abs=1e-9), ours
    assert result.overall["mrr_at_10"] == pytest.approx(sum(rr[q]["recip_rank"] for q in qrels) / len(qrels), abs=1e-9)


@pytest.mark.parametrize("mode", MODES)
def test_denied_callers_retrieve_nothing_restricted(evaluations, mode):
    golden, results = evaluations
    denied = [c for c in results[mode].cases if c.case.forbidden_docs]
    assert denied, "the sample golden set has denied permissioned cases"
    for c in denied:
        assert not set(c.case.forbidden_docs) & set(c.ranked_docs), (c.case.id, c.case.forbidden_docs)
    assert results[mode].unanswerable["forbidden_leak_cases"] == 0


def test_permitted_twin_finds_the_page_the_denied_one_cannot(evaluations):
    golden, results = evaluations
    by_id = {c.case.id: c for c in results["hybrid"].cases}
    pairs = [(by_id[i[:-1] + "a"], by_id[i]) for i in by_id if i.startswith("perm-") and i.endswith("b")]
    assert pairs
    for permitted, denied in pairs:
        restricted = set(denied.case.forbidden_docs)
        assert restricted & set(permitted.ranked_docs), permitted.case.id


def test_filters_apply_before_fusion(sample_index):
    """A globex caller's candidate lists (dense, bm25) and the fused list never hold acme pages."""
    _, store, embedder = sample_index
    retriever = Retriever(store, embedder, RetrievalConfig(mode="hybrid", candidates=200))
    result = retriever.search("acme SSO entity ID okta certificate", SearchFilters(tenant="globex", roles=("customer",)), k=200)
    for stage in ("dense", "bm25", "fused"):
        assert result.candidates[stage], stage
        assert not any("acme" in h.doc_id for h in result.candidates[stage]), stage
    unrestricted = retriever.search("acme SSO entity ID okta certificate", SearchFilters(unrestricted=True))
    assert any("acme" in h.doc_id for h in unrestricted.hits)


def test_rrf_formula():
    a = [Hit("x", "d1", 0.9, 1), Hit("y", "d2", 0.8, 2)]
    b = [Hit("y", "d2", 7.0, 1), Hit("z", "d3", 5.0, 2)]
    fused = reciprocal_rank_fusion({"dense": a, "bm25": b}, {"dense": 1.0, "bm25": 2.0}, 60, 10)
    scores = {h.chunk_id: h.score for h in fused}
    assert scores["y"] == pytest.approx(1 / 62 + 2 / 61)
    assert scores["x"] == pytest.approx(1 / 61) and scores["z"] == pytest.approx(2 / 62)
    assert [h.chunk_id for h in fused] == ["y", "z", "x"] and [h.rank for h in fused] == [1, 2, 3]


def _case_result(best: float, answerable: bool, split: str = "dev") -> CaseResult:
    case = GoldenCase("c", "q", "r", ("d",) if answerable else (), "s", split, answerable=answerable)
    return CaseResult(case, [], [], {}, None, best, [], [], 0.0, 0, {})


def test_threshold_separates_answerable_from_unanswerable():
    rows = [_case_result(s, True) for s in (0.8, 0.7, 0.6)] + [_case_result(s, False) for s in (0.3, 0.4)]
    threshold, source = calibrate_threshold(rows)
    assert 0.4 < threshold < 0.6 and "dev" in source
    assert calibrate_threshold([_case_result(0.5, True)])[0] == 0.0


def test_holdout_cases_never_tune_the_threshold():
    # Dev has no unanswerable case; validation's decide, holdout's (lower, which would move it) do not.
    rows = ([_case_result(s, True) for s in (0.8, 0.7)] + [_case_result(0.5, False, "validation")]
            + [_case_result(s, False, "holdout") for s in (0.1, 0.65)])
    threshold, source = calibrate_threshold(rows)
    assert threshold == pytest.approx(0.6) and source == "calibrated on the dev and validation splits"
    only_holdout = [_case_result(s, True) for s in (0.8, 0.7)] + [_case_result(0.3, False, "holdout")]
    assert calibrate_threshold(only_holdout) == (0.0, "no unanswerable case outside holdout: never abstain")


def test_span_matching_by_lines_and_heading():
    hit = Hit("c", "d", 1.0, 1, heading_path=("Policy", "Leave"), line_start=10, line_end=20)
    assert span_hit(GoldSpan("d", lines=(18, 25)), hit)
    assert not span_hit(GoldSpan("d", lines=(21, 25)), hit)
    assert span_hit(GoldSpan("d", heading_path=("Policy", "Leave", "Parental")), hit)
    assert not span_hit(GoldSpan("d", heading_path=("Policy", "Sick")), hit)
    assert not span_hit(GoldSpan("other", lines=(10, 20)), hit)


def test_superseded_and_draft_documents_are_not_retrieved_by_default(evaluations, sample_index):
    _, store, _ = sample_index
    with store.db.connection() as con:
        hidden = {d for (d,) in con.execute("SELECT doc_id FROM documents WHERE status <> 'published'").fetchall()}
    assert hidden, "the sample corpus has superseded and draft documents"
    _, results = evaluations
    for c in results["hybrid"].cases:
        assert not hidden & set(c.ranked_docs), c.case.id
    # With superseded versions allowed to compete, the rate at which they outrank their successor is measured.
    assert 0.0 <= results["hybrid"].unanswerable["superseded_outranks_current_rate"] <= 1.0


def test_an_evaluation_with_no_scorable_case_fails_with_the_reason(sample_index, tmp_path):
    import json

    from rag_pipeline.core.evaluation.evaluate import EvaluationError

    config, store, embedder = sample_index
    lines = [json.dumps({"id": f"gone-{i}", "question": "What is the refund window?", "reference": "14 days",
                         "gold_docs": [f"helpcenter:removed-{i}.html"], "slice": "exact_fact", "split": "dev"})
             for i in range(3)]
    path = tmp_path / "golden.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # The documents were held once and are gone now: the cases are stale, so nothing can be scored.
    golden = load_golden_set(path, served_hashes=store.served.document_hashes())
    retriever = Retriever(store, embedder, RetrievalConfig(mode="bm25"))
    with pytest.raises(EvaluationError, match=r"0 of 3 cases could be scored \(3 stale, 0 unanswerable\)"):
        evaluate(golden, retriever, "bm25", "fp", {})


def test_documents_are_ranked_to_the_depth_not_to_the_chunks(evaluations, sample_index):
    # The top 100 chunks of the sample corpus come from 22 to 36 of its 54 documents: Recall@100
    # and "not in the top 100" must be about 100 documents (or all the caller can see).
    _, store, embedder = sample_index
    _, results = evaluations
    retriever = Retriever(store, embedder, RetrievalConfig(mode="dense"))
    deepened = 0
    for c in results["dense"].cases[:12]:
        filters = case_filters(c.case)
        head = [d for d, _ in rollup_documents(retriever.search(c.case.question, filters, "dense", EVAL_DEPTH).hits)]
        visible = {d for d, _ in rollup_documents(retriever.search(c.case.question, filters, "dense", 5000).hits)}
        deepened += len(head) < len(visible)
        assert c.ranked_docs[: len(head)] == head  # the retrieval's own order, unchanged
        assert len(c.ranked_docs) == len(set(c.ranked_docs)) == len(visible) and set(c.ranked_docs) == visible
    assert deepened >= 3  # callers who see more documents than their top 100 chunks hold


@pytest.mark.parametrize("mode", MODES)
def test_latency_comes_from_cases_searched_one_at_a_time(evaluations, mode):
    _, results = evaluations
    result = results[mode]
    timed = [c.latency_ms for c in result.cases if c.latency_ms == c.latency_ms]  # not NaN
    assert len(timed) == result.latency["latency_cases"] == min(LATENCY_SAMPLE, len(result.cases))
    # A batch's time shared evenly would give every case the same figure.
    assert len(set(timed)) > 1 and result.latency["p95_latency_ms"] == max(sorted(timed)[: math.ceil(0.95 * len(timed))])
