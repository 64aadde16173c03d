"""Golden-set evaluation of retrieval: per-case results with traces, aggregated overall, weighted,
by slice and by split; unanswerable cases scored apart. Chunk hits roll up to documents (a
document's best chunk) for document metrics and match gold spans (`spans.py`) for span metrics.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from rag_pipeline.config import AnswersConfig, RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.evaluation import metrics
from rag_pipeline.core.evaluation.abstention import abstention_summary, calibrate_threshold, fit_abstention
from rag_pipeline.core.evaluation.answer_checks import abstention_table, check_answer
from rag_pipeline.core.evaluation.answers import Generator, make_claim_judge, make_generator
from rag_pipeline.core.evaluation.golden import (
    GoldenCase,
    GoldenSet,
    GoldenSetError,
    check_file_size,
    file_revision,
    load_golden_set,
)
from rag_pipeline.core.evaluation.holdout import WITHHELD_TRACE, withheld
from rag_pipeline.core.evaluation.spans import span_recall
from rag_pipeline.core.evaluation.suites import FULL, select_suite, suite_identity
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.fusion import rollup_documents
from rag_pipeline.core.retrieval.retriever import RetrievalResult, Retriever
from rag_pipeline.core.storage import Store

# Metrics rank documents: at least this many per case when the visible index holds them
# (Recall@100 at document level). Where chunks of a few documents fill the top EVAL_DEPTH chunks,
# deeper searches (4x each, up to MAX_EVAL_CHUNKS chunks) add the next documents behind them.
EVAL_DEPTH = 100
MAX_EVAL_CHUNKS = 6400
# Cases searched one at a time for the latency figures (p50, p95), chosen by sha256 of their id.
LATENCY_SAMPLE = 30
HEADLINE_METRICS = ("recall_at_1", "recall_at_3", "recall_at_5", "recall_at_10", "recall_at_100",
                    "mrr_at_10", "ndcg_at_10", "precision_at_5", "success_at_5")
SPAN_CUTOFFS = (5, 10)
ANSWER_PREFIX = "answer_"
# The cutoff of the report: a case fails when no gold document is in its top k (its success@k is 0).
DEFAULT_REPORT_K = 5


@dataclass
class CaseResult:
    case: GoldenCase
    ranked_docs: list[str]
    doc_scores: list[float]
    metrics: dict[str, float]
    first_gold_rank: int | None
    best_score: float | None
    forbidden_retrieved: list[str]
    stale_docs: list[str]
    latency_ms: float
    context_tokens: int
    trace: dict
    superseded_outranks: bool | None = None
    abstained: bool | None = None
    answer: dict | None = None
    report_k: int = DEFAULT_REPORT_K

    @property
    def scored(self) -> bool:
        """Counted in the retrieval metrics: answerable and none of its gold labels stale."""
        return self.case.answerable and not self.stale_docs

    @property
    def shown_trace(self) -> dict:
        """The trace that may be stored and shown: a holdout case's is withheld (`holdout.py`)."""
        return WITHHELD_TRACE if withheld(self.case) else self.trace

    @property
    def failed(self) -> bool:
        """A scored case with no gold document in the top `report_k` (success@k 0), or one that
        retrieved a forbidden document."""
        if self.forbidden_retrieved:
            return True
        return self.scored and (self.first_gold_rank is None or self.first_gold_rank > self.report_k)


@dataclass
class EvalResult:
    revision: str
    mode: str
    config_fingerprint: str
    index_state: dict[str, str]
    cases: list[CaseResult]
    no_result_threshold: float
    threshold_source: str
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))
    overall: dict[str, float] = field(default_factory=dict)
    weighted: dict[str, float] = field(default_factory=dict)
    by_slice: dict[str, dict[str, float]] = field(default_factory=dict)
    by_split: dict[str, dict[str, float]] = field(default_factory=dict)
    unanswerable: dict[str, float] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    answers: dict = field(default_factory=dict)
    # How abstention was decided and how well: the 2x2 per split, held-out balanced accuracy, curve.
    abstention: dict = field(default_factory=dict)
    # `full`, or `pr-<size>` (a fast subset, see suites.py): only evaluations of one suite are compared.
    suite: str = FULL
    report_k: int = DEFAULT_REPORT_K

    @property
    def eval_id(self) -> str:
        suite = "" if self.suite == FULL else f"-{self.suite}"
        return f"{self.revision}{suite}-{self.mode}-{self.config_fingerprint[:8]}-{self.created_at:%Y%m%dT%H%M%S}"

    def as_json(self) -> dict:
        return {
            "eval_id": self.eval_id, "revision": self.revision, "suite": self.suite, "cases": len(self.cases), "mode": self.mode,
            "config_fingerprint": self.config_fingerprint, "index_state": self.index_state,
            "overall": self.overall, "weighted": self.weighted, "by_slice": self.by_slice, "by_split": self.by_split,
            "unanswerable": self.unanswerable, "latency": self.latency, "answers": self.answers,
            "abstention": self.abstention,
            "no_result_threshold": self.no_result_threshold, "threshold_source": self.threshold_source,
            "report_k": self.report_k,
            "stale_cases": {c.case.id: c.stale_docs for c in self.cases if c.stale_docs and not withheld(c.case)},
        }


def case_filters(case: GoldenCase) -> SearchFilters:
    """The trusted caller context of a case: its tenant and roles, never anything read from the question."""
    return SearchFilters(tenant=case.tenant, roles=case.roles)


def _confidence(result: RetrievalResult) -> float | None:
    """The no-result signal: best dense cosine (dense, hybrid) or best BM25 score (bm25)."""
    source = result.candidates.get("dense") or result.candidates.get("bm25") or []
    return max((h.score for h in source), default=None)


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
) -> EvalResult:
    """Run every case through retrieval with its own caller context and score it; with a
    generator, also answer every case from its top `context_k` chunks and check the answer.
    `abstention_method`: `threshold` (the best score against the no-result threshold) or `model`
    (the abstention model fitted on the dev split, see abstention.py); both are reported per split.
    `latency_sample`: how many cases are also searched one at a time for the latency figures.
    `report_k`: the cutoff at which a case fails (listed in the report) and success@k is shown."""
    cases = golden.cases
    questions, filters = [c.question for c in cases], [case_filters(c) for c in cases]
    results = retriever.search_many(questions, filters, mode, EVAL_DEPTH)
    rankings = ranked_documents(retriever, questions, filters, results, mode)
    latencies = sampled_latencies(retriever, cases, filters, mode, latency_sample)
    outranks = _superseded_outranks(cases, retriever, mode, supersedes or {})
    case_results = []
    for index, (case, result, docs) in enumerate(zip(cases, results, rankings)):
        ranking = [d for d, _ in docs]
        relevant = {d: 1.0 for d in case.gold_docs}
        stale = golden.stale.get(case.id, [])
        values: dict[str, float] = {}
        if case.answerable and not stale:
            values = metrics.query_metrics(ranking, relevant, extra_cutoffs=(report_k,))
            if case.gold_spans:
                values |= {f"span_recall_at_{k}": span_recall(case.gold_spans, result.hits, k) for k in SPAN_CUTOFFS}
        top_k = set(ranking[: retriever.config.k])
        # What a reader needs: the top k of each retriever and the final top k, or the generator's
        # context when it is longer (metrics rank 100 documents: `ranked_docs` keeps them).
        trace = result.trace(depth=retriever.config.k, final_depth=max(retriever.config.k, context_k))
        case_results.append(
            CaseResult(
                case=case,
                ranked_docs=ranking,
                doc_scores=[s for _, s in docs],
                metrics=values,
                first_gold_rank=metrics.first_relevant_rank(ranking, relevant) if case.gold_docs else None,
                best_score=_confidence(result),
                forbidden_retrieved=sorted(d for d in case.forbidden_docs if d in top_k),
                stale_docs=stale,
                latency_ms=latencies.get(index, math.nan),
                context_tokens=trace["context_tokens"],
                trace=trace,
                superseded_outranks=outranks.get(case.id),
                report_k=report_k,
            )
        )
    threshold, source = (no_result_threshold, "configured") if no_result_threshold is not None else calibrate_threshold(case_results)
    model, features, how = fit_abstention(case_results, results, retriever, context_k, no_result_threshold is not None,
                                          abstention_method)
    scores = model.scores(features) if model else None
    for i, c in enumerate(case_results):
        c.abstained = bool(scores[i] < model.threshold) if model else c.best_score is None or c.best_score < threshold
    _require_scored_cases(golden, case_results)
    evaluation = EvalResult(golden.revision, mode, config_fingerprint, dict(index_state), case_results, threshold,
                            f"{source}; abstention: {how}", report_k=report_k)
    evaluation.abstention = abstention_summary(case_results, model, scores, threshold, how)
    if generator_for is not None:
        decisions = [c.abstained for c in case_results] if model else None
        answer_cases(case_results, results, generator_for(threshold), context_k, supersedes or {}, claim_judge, decisions)
    aggregate(evaluation)
    return evaluation


def ranked_documents(retriever: Retriever, questions: Sequence[str], filters: Sequence[SearchFilters],
                     results: Sequence[RetrievalResult], mode: str) -> list[list[tuple[str, float]]]:
    """Each case's documents in rank order (`rollup_documents` of its hits), filled to EVAL_DEPTH
    documents when its top chunks came from fewer: the documents of ever deeper searches of the
    same query are appended behind, in their order. The head is the retrieval's own, unchanged."""
    rankings = [rollup_documents(r.hits) for r in results]
    depth = EVAL_DEPTH

    def short(indexes, found) -> list[int]:  # cut at `depth` chunks with documents still missing
        return [i for i, r in zip(indexes, found) if len(rankings[i]) < EVAL_DEPTH and len(r.hits) >= depth]

    pending = short(range(len(results)), results)
    while pending and depth < MAX_EVAL_CHUNKS:
        depth *= 4
        vectors = np.stack([results[i].query_vector for i in pending]) if results[pending[0]].query_vector is not None else None
        deeper = retriever.search_many([questions[i] for i in pending], [filters[i] for i in pending], mode, depth, vectors)
        for i, result in zip(pending, deeper):
            ranked = {d for d, _ in rankings[i]}
            rankings[i] += [(d, score) for d, score in rollup_documents(result.hits) if d not in ranked][: EVAL_DEPTH - len(ranked)]
        pending = short(pending, deeper)
    return rankings


def sampled_latencies(retriever: Retriever, cases: Sequence[GoldenCase], filters: Sequence[SearchFilters], mode: str,
                      size: int) -> dict[int, float]:
    """Case index -> its latency searched on its own, for `size` cases (smallest sha256 of the id)."""
    chosen = sorted(range(len(cases)), key=lambda i: hashlib.sha256(cases[i].id.encode("utf-8")).hexdigest())[:size]
    timed = retriever.single_query_latencies([cases[i].question for i in chosen], [filters[i] for i in chosen], mode)
    return dict(zip(chosen, timed))


class EvaluationError(ValueError):
    """The evaluation cannot produce a truthful number; the message says why and what to do."""


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


def answer_cases(
    rows: Sequence[CaseResult], results: Sequence[RetrievalResult], generator: Generator, context_k: int,
    supersedes: Mapping[str, str], claim_judge: Callable[[str, str], bool | None] | None = None,
    decisions: Sequence[bool] | None = None,
) -> None:
    """Answer each case from its own retrieved context and record the answer checks as
    `answer_*` metrics beside the retrieval metrics (never blended into them). `decisions`: the
    abstention model's verdict per case (True: the corpus cannot answer), passed to the generator
    as `abstain`; without it the generator applies the no-result threshold to the best score."""
    superseded = set(supersedes.values())
    for index, (row, result) in enumerate(zip(rows, results)):
        context = result.hits[:context_k]
        if decisions is None:
            answer = generator.generate(row.case.question, context, row.best_score)
        else:
            answer = generator.generate(row.case.question, context, row.best_score, abstain=decisions[index])
        record = {"text": answer.text, "citations": answer.citations, "abstained": answer.abstained,
                  "generator": answer.generator, "model": answer.model, "prompt_version": answer.prompt_version,
                  "settings": answer.settings, "prompt_tokens": answer.prompt_tokens,
                  "completion_tokens": answer.completion_tokens, "cost": answer.cost, "error": answer.error}
        row.answer = record
        # Kept with the trace (withheld with it for holdout), so a stored evaluation's answers can
        # be exported for other tools (ragas_export.export_ragas).
        row.trace["answer"] = {"text": answer.text, "citations": answer.citations, "abstained": answer.abstained,
                               "error": answer.error}
        if answer.errored:
            continue
        check = check_answer(answer, {h.chunk_id: h.text for h in context}, row.case.reference, row.case.answerable,
                             claim_judge, row.case.prohibited_claims)
        if check.prohibited_made:
            record["prohibited_claims_made"] = check.prohibited_made
        values = check.as_metrics()
        if check.abstention_correct is not None:
            values["answer_abstained_correctly"] = float(check.abstention_correct)
        cited_docs = {c.rsplit("#", 1)[0] for c in answer.citations}
        if any(d in supersedes for d in row.case.gold_docs):
            # The current version must be the one cited, never the version it replaced.
            values["answer_cites_current_version"] = float(not (cited_docs & superseded))
        row.metrics.update(values)


def _superseded_outranks(
    cases: Sequence[GoldenCase], retriever: Retriever, mode: str, supersedes: Mapping[str, str]
) -> dict[str, bool]:
    """For cases whose gold document replaced an older one: with superseded documents allowed to
    compete, does the old version rank above the current one? (The goal: never.)"""
    relevant = [c for c in cases if c.answerable and any(d in supersedes for d in c.gold_docs)]
    if not relevant:
        return {}
    filters = [SearchFilters(tenant=c.tenant, roles=c.roles, statuses=("published", "superseded")) for c in relevant]
    results = retriever.search_many([c.question for c in relevant], filters, mode, EVAL_DEPTH)
    verdicts = {}
    for case, result in zip(relevant, results):
        ranking = [d for d, _ in rollup_documents(result.hits)]
        position = {d: i for i, d in enumerate(ranking)}
        verdict = False
        for gold in case.gold_docs:
            old = supersedes.get(gold)
            if old is not None and position.get(old, math.inf) < position.get(gold, math.inf):
                verdict = True
        verdicts[case.id] = verdict
    return verdicts


def _average(rows: Sequence[CaseResult], weighted: bool = False) -> dict[str, float]:
    scored = [r for r in rows if r.scored]
    if not scored:
        return {}
    keys = sorted({k for r in scored for k in r.metrics if not k.startswith(ANSWER_PREFIX)})
    out: dict[str, float] = {"cases": float(len(scored))}
    for key in keys:
        with_key = [r for r in scored if key in r.metrics]
        weights = [r.case.weight for r in with_key] if weighted else None
        out[key] = metrics.mean([r.metrics[key] for r in with_key], weights)
    return out


def aggregate(evaluation: EvalResult) -> None:
    """Fill the overall, weighted, per-slice, per-split and unanswerable sections."""
    rows = evaluation.cases
    evaluation.overall = _average(rows)
    evaluation.weighted = _average(rows, weighted=True)
    by_slice: dict[str, list[CaseResult]] = defaultdict(list)
    by_split: dict[str, list[CaseResult]] = defaultdict(list)
    for r in rows:
        by_slice[r.case.slice].append(r)
        by_split[r.case.split].append(r)
    evaluation.by_slice = {s: _average(v) | _slice_extras(v) for s, v in sorted(by_slice.items())}
    evaluation.by_split = {s: _average(v) for s, v in sorted(by_split.items())}
    unanswerable = [r for r in rows if not r.case.answerable]
    answerable = [r for r in rows if r.case.answerable]
    leaks = [r for r in rows if r.forbidden_retrieved]
    outranks = [r.superseded_outranks for r in rows if r.superseded_outranks is not None]
    evaluation.unanswerable = {
        "cases": float(len(unanswerable)),
        "abstained": float(sum(1 for r in unanswerable if r.abstained)),
        "abstain_rate": metrics.mean([1.0 if r.abstained else 0.0 for r in unanswerable]) if unanswerable else float("nan"),
        "false_abstain_rate": metrics.mean([1.0 if r.abstained else 0.0 for r in answerable]) if answerable else float("nan"),
        "forbidden_leak_cases": float(len(leaks)),
        "superseded_outranks_current_rate": metrics.mean([1.0 if o else 0.0 for o in outranks]) if outranks else float("nan"),
        "stale_cases": float(sum(1 for r in rows if r.stale_docs)),
        "no_result_threshold": evaluation.no_result_threshold,
        **_held_out_abstention(evaluation.abstention),
    }
    evaluation.answers = _answer_summary(rows)
    # Latency from the cases searched one at a time (the batch's own times are shared evenly).
    latencies = [r.latency_ms for r in rows if not math.isnan(r.latency_ms)]
    evaluation.latency = {
        "p50_latency_ms": metrics.nearest_rank_quantile(latencies, 0.50),
        "p95_latency_ms": metrics.nearest_rank_quantile(latencies, 0.95),
        "latency_cases": float(len(latencies)),
        "mean_context_tokens": metrics.mean([float(r.context_tokens) for r in rows]),
    }


def _held_out_abstention(summary: Mapping) -> dict[str, float]:
    """The held-out abstention rates (splits other than the fit split), flat, for the report."""
    held = summary.get("held_out") if summary else None
    if not held:
        return {}
    return {"held_out_abstain_rate": held["abstain_rate"], "held_out_false_abstain_rate": held["false_abstain_rate"],
            "held_out_balanced_accuracy": held["balanced_accuracy"]}


def _answer_means(rows: Sequence[CaseResult]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r.metrics if k.startswith(ANSWER_PREFIX)})
    return {k: metrics.mean([r.metrics[k] for r in rows if k in r.metrics]) for k in keys}


def _answer_summary(rows: Sequence[CaseResult]) -> dict:
    """Answer metrics overall and by slice, the 2x2 abstention table, errors, tokens and cost."""
    answered = [r for r in rows if r.answer is not None]
    if not answered:
        return {}
    by_slice: dict[str, list[CaseResult]] = defaultdict(list)
    for r in answered:
        by_slice[r.case.slice].append(r)
    first = answered[0].answer
    return {
        "generator": first["generator"], "model": first["model"], "prompt_version": first["prompt_version"],
        "settings": first["settings"],
        "overall": _answer_means(answered),
        "by_slice": {s: _answer_means(v) for s, v in sorted(by_slice.items())},
        "abstention": abstention_table([(r.case.answerable, r.answer["abstained"]) for r in answered if not r.answer["error"]]),
        "errored_cases": sum(1 for r in answered if r.answer["error"]),
        "prompt_tokens": sum(r.answer["prompt_tokens"] for r in answered),
        "completion_tokens": sum(r.answer["completion_tokens"] for r in answered),
        "cost": sum(r.answer["cost"] for r in answered),
    }


def _slice_extras(rows: Sequence[CaseResult]) -> dict[str, float]:
    extras: dict[str, float] = {"all_cases": float(len(rows))}
    unanswerable = [r for r in rows if not r.case.answerable]
    if unanswerable:
        extras["abstain_rate"] = metrics.mean([1.0 if r.abstained else 0.0 for r in unanswerable])
    if any(r.case.forbidden_docs for r in rows):
        extras["forbidden_leak_cases"] = float(sum(1 for r in rows if r.forbidden_retrieved))
    return extras


def golden_file_for_revision(golden_set: Path | None, store: Store, revision: str, folder: Path) -> Path:
    """The golden file of a revision: the configured file if it still has that content, else the
    snapshot kept when the revision was first seen, written to `folder` (a revision is frozen; the
    file may move on)."""
    if golden_set is None:
        raise GoldenSetError("no golden_set configured in the pipeline config")
    path = Path(golden_set)
    if path.is_file() and file_revision(path) == revision:
        check_file_size(path)  # the snapshot reads it whole: a file over the bound is refused first
        store.records.snapshot_golden(revision, str(path), path.read_text(encoding="utf-8"))
        return path
    content = store.records.golden_snapshot(revision)
    if content is None:
        raise GoldenSetError(
            f"golden-set revision {revision} is neither the current content of {path} "
            f"(now {file_revision(path) if path.is_file() else 'missing'}) nor a kept snapshot"
        )
    frozen = folder / f"{revision}.jsonl"
    frozen.parent.mkdir(parents=True, exist_ok=True)
    frozen.write_text(content, encoding="utf-8")
    return frozen


def headline_numbers(result: EvalResult) -> dict[str, float]:
    """The numbers worth a trend line: headline metrics, weighted ones, latency, abstention, leaks,
    answer metrics (None and NaN, where a kind of case is missing, are the caller's to drop)."""
    return {
        **{key: result.overall.get(key) for key in HEADLINE_METRICS},
        f"success_at_{result.report_k}": result.overall.get(f"success_at_{result.report_k}"),
        "weighted_recall_at_5": result.weighted.get("recall_at_5"),
        "weighted_ndcg_at_10": result.weighted.get("ndcg_at_10"),
        "p95_latency_ms": result.latency["p95_latency_ms"],
        "mean_context_tokens": result.latency["mean_context_tokens"],
        "unanswerable_abstain_rate": result.unanswerable["abstain_rate"],
        "forbidden_leak_cases": result.unanswerable["forbidden_leak_cases"],
        "stale_cases": result.unanswerable["stale_cases"],
        **(result.answers.get("overall", {}) if result.answers else {}),
    }


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
) -> tuple[GoldenSet, EvalResult]:
    """Load and validate the golden set against the index, evaluate the suite, and persist the result."""
    golden = load_golden_set(golden_path, served_hashes=store.served.document_hashes(), known_documents=store.ledger.document_history())
    golden = select_suite(golden, suite, pr_subset_size)
    index_state = {source_id: store.served.manifest_hash(source_id) for source_id in source_ids}
    retriever = Retriever(store, embedder, retrieval)
    result = evaluate(
        golden, retriever, mode or retrieval.mode, config_fingerprint, index_state,
        retrieval.no_result_threshold, store.served.supersession(),
        generator_for=(lambda threshold: make_generator(answers, threshold)) if answers and answers.generator != "none" else None,
        context_k=answers.context_k if answers else 5,
        claim_judge=make_claim_judge(answers) if answers and answers.generator != "none" else None,
        abstention_method=retrieval.abstention,
        report_k=report_k,
    )
    result.suite = suite_identity(suite, pr_subset_size)
    store.records.save_evaluation(result)
    return golden, result
