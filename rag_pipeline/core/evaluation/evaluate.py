"""Golden-set evaluation of retrieval (and answers): every case searched with its own caller
context, scored, decided on abstention, answered when a generator is configured, and the result
built once from all of it; then stored.

Chunk hits roll up to documents (a document's best chunk) for document metrics (`scoring/ranking.py`)
and match gold spans for span metrics (`scoring/spans.py`); unanswerable cases are scored apart
(`scoring/aggregate.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from rag_pipeline.config import AnswersConfig, RetrievalConfig, flat_settings
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.answers.abstention import abstention_summary, calibrate_threshold, fit_abstention
from rag_pipeline.core.evaluation.answers.answering import CaseAnswer, answer_cases
from rag_pipeline.core.evaluation.answers.generators import Generator, make_claim_judge, make_generator
from rag_pipeline.core.evaluation.golden.cases import GoldenCase, GoldenSet
from rag_pipeline.core.evaluation.golden.suites import FULL, select_suite, suite_identity
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring import metrics
from rag_pipeline.core.evaluation.scoring.aggregate import aggregate
from rag_pipeline.core.evaluation.scoring.ranking import (
    EVAL_DEPTH,
    LATENCY_SAMPLE,
    case_filters,
    confidence,
    ranked_documents,
    sampled_latencies,
    superseded_outranks,
)
from rag_pipeline.core.evaluation.scoring.results import DEFAULT_REPORT_K, CaseResult, EvalResult
from rag_pipeline.core.evaluation.scoring.spans import span_recall
from rag_pipeline.core.retrieval.retriever import RetrievalResult, Retriever
from rag_pipeline.core.storage import Store

SPAN_CUTOFFS = (5, 10)


class EvaluationError(InputError):
    """The evaluation cannot produce a truthful number; the message says why and what to do."""


def evaluate(
    golden: GoldenSet,
    retriever: Retriever,
    mode: str,
    config_fingerprint: str,
    index_state: Mapping[str, str],
    no_result_threshold: float | None = None,
    supersedes: Mapping[str, str] | None = None,
    generator_for: Callable[[float], Generator] | None = None,
    context_k: int = 5,
    claim_judge: Callable[[str, str], bool | None] | None = None,
    abstention_method: str = "threshold",
    latency_sample: int = LATENCY_SAMPLE,
    report_k: int = DEFAULT_REPORT_K,
    suite: str = FULL,
    settings: Mapping[str, object] | None = None,
    served_states: Mapping[str, str] | None = None,
) -> EvalResult:
    """Run every case through retrieval with its own caller context and score it; with a
    generator, also answer every case from its top `context_k` chunks and check the answer.
    `abstention_method`: `threshold` (the best score against the no-result threshold) or `model`
    (the abstention model fitted on the dev split, see abstention.py); both are reported per split.
    `latency_sample`: how many cases are also searched one at a time for the latency figures.
    `report_k`: the cutoff at which a case fails (listed in the report) and success@k is shown.
    `suite`: the identity of the cases evaluated (`suites.suite_identity`). `settings` and
    `served_states`: what it ran with and on (recorded, see `EvalResult`)."""
    cases = golden.cases
    questions, filters = [c.question for c in cases], [case_filters(c) for c in cases]
    results = retriever.search_many(questions, filters, mode, EVAL_DEPTH)
    rankings = ranked_documents(retriever, questions, filters, results, mode)
    latencies = sampled_latencies(retriever, cases, filters, mode, latency_sample)
    outranks = superseded_outranks(cases, retriever, mode, supersedes or {})
    retrieved = [
        _retrieval_result(case, result, ranking, golden.stale.get(case.id, []), latencies.get(index, math.nan),
                          outranks.get(case.id), retriever.config.k, context_k, report_k)
        for index, (case, result, ranking) in enumerate(zip(cases, results, rankings, strict=True))
    ]
    _require_scored_cases(golden, retrieved)

    # Abstention: the configured threshold, one calibrated on the dev split, or the fitted model.
    threshold, source = (no_result_threshold, "configured") if no_result_threshold is not None else calibrate_threshold(retrieved)
    model, features, how = fit_abstention(retrieved, results, retriever, context_k, no_result_threshold is not None,
                                          abstention_method)
    scores = model.scores(features) if model else None
    abstained = [bool(scores[i] < model.threshold) if model else r.best_score is None or r.best_score < threshold
                 for i, r in enumerate(retrieved)]
    abstention = abstention_summary(retrieved, abstained, model, scores, threshold, how)

    answers: Sequence[CaseAnswer | None] = [None] * len(retrieved)
    if generator_for is not None:
        answers = answer_cases(cases, [r.best_score for r in retrieved], results, generator_for(threshold), context_k,
                               supersedes or {}, claim_judge, abstained if model else None)
    final = [_with_decisions(row, decided, answer) for row, decided, answer in zip(retrieved, abstained, answers, strict=True)]
    return EvalResult(golden.revision, mode, config_fingerprint, dict(index_state), final, threshold,
                      f"{source}; abstention: {how}", **aggregate(final, threshold, abstention),
                      abstention=abstention, suite=suite, report_k=report_k, settings=dict(settings or {}),
                      embedding=retriever.embedder.identity, served_states=dict(served_states or {}))


def _retrieval_result(case: GoldenCase, result: RetrievalResult, docs: list[tuple[str, float]], stale: list[str],
                      latency_ms: float, outranks: bool | None, k: int, context_k: int, report_k: int) -> CaseResult:
    """A case's result as retrieval alone decides it (abstention and answer not yet known)."""
    ranking = [d for d, _ in docs]
    relevant = {d: 1.0 for d in case.gold_docs}
    values: dict[str, float] = {}
    if case.answerable and not stale:
        values = metrics.query_metrics(ranking, relevant, extra_cutoffs=(report_k,))
        if case.gold_spans:
            values |= {f"span_recall_at_{cut}": span_recall(case.gold_spans, result.hits, cut) for cut in SPAN_CUTOFFS}
    top_k = set(ranking[:k])
    # What a reader needs: the top k of each retriever and the final top k, or the generator's
    # context when it is longer (metrics rank 100 documents: `ranked_docs` keeps them).
    trace = result.trace(depth=k, final_depth=max(k, context_k))
    return CaseResult(
        case=case,
        ranked_docs=ranking,
        doc_scores=[s for _, s in docs],
        metrics=values,
        first_gold_rank=metrics.first_relevant_rank(ranking, relevant) if case.gold_docs else None,
        best_score=confidence(result),
        forbidden_retrieved=sorted(d for d in case.forbidden_docs if d in top_k),
        stale_docs=stale,
        latency_ms=latency_ms,
        context_tokens=trace["context_tokens"],
        trace=trace,
        superseded_outranks=outranks,
        report_k=report_k,
    )


def _with_decisions(row: CaseResult, abstained: bool, answer: CaseAnswer | None) -> CaseResult:
    """The case's final result: its abstention decision and, when it was answered, the answer and its checks."""
    if answer is None:
        return replace(row, abstained=abstained)
    return replace(row, abstained=abstained, answer=answer.record, metrics={**row.metrics, **answer.metrics},
                   trace={**row.trace, "answer": answer.trace_entry})


def _require_scored_cases(golden: GoldenSet, results: Sequence[CaseResult]) -> None:
    """Refuse an evaluation in which no case could be scored: its metrics would be empty, not zero."""
    if any(r.scored for r in results):
        return
    stale = [r for r in results if r.stale_docs]
    unanswerable = sum(1 for r in results if not r.case.answerable)
    examples = "; ".join(f"{r.case.id}: {r.stale_docs[0]}" for r in stale[:3])
    raise EvaluationError(
        f"golden set {golden.path.name} (revision {golden.revision}): 0 of {len(results)} cases could be scored "
        f"({len(stale)} stale, {unanswerable} unanswerable)"
        + (f"; stale labels, e.g. {examples}" if stale else "")
        + ". Ingest the sources the gold documents come from, or relabel the cases."
    )


def run_golden_evaluation(
    golden_path: Path,
    store: Store,
    embedder: Embedder,
    retrieval: RetrievalConfig,
    config_fingerprint: str,
    source_ids: Sequence[str],
    mode: str | None = None,
    answers: AnswersConfig | None = None,
    suite: str = FULL,
    pr_subset_size: int = 30,
    report_k: int = DEFAULT_REPORT_K,
    settings: Mapping[str, object] | None = None,
) -> tuple[GoldenSet, EvalResult]:
    """Load and validate the golden set against the index, evaluate the suite, and persist the result.
    `settings`: the config's flat settings (`PipelineConfig.retrieval_settings`), recorded with it."""
    golden = load_golden_set(golden_path, served_hashes=store.served.document_hashes(), known_documents=store.ledger.document_history())
    golden = select_suite(golden, suite, pr_subset_size)
    index_state = {source_id: store.served.manifest_hash(source_id) for source_id in source_ids}
    states = {source_id: state.state_id for source_id in source_ids if (state := store.states.latest(source_id))}
    generating = answers is not None and answers.generator != "none"
    result = evaluate(
        golden, Retriever(store, embedder, retrieval), mode or retrieval.mode, config_fingerprint, index_state,
        retrieval.no_result_threshold, store.served.supersession(),
        generator_for=(lambda threshold: make_generator(answers, threshold)) if generating else None,
        context_k=answers.context_k if answers else 5,
        claim_judge=make_claim_judge(answers) if generating else None,
        abstention_method=retrieval.abstention,
        report_k=report_k,
        suite=suite_identity(suite, pr_subset_size),
        settings={**flat_settings({"retrieval": retrieval.model_dump(mode="json")}), **(settings or {}),
                  "retrieval.mode": mode or retrieval.mode},
        served_states=states,
    )
    store.records.save_evaluation(result)
    return golden, result
