"""Another system's retrieval scored as this pipeline's is: the team's production RAG service, a
vendor's search, a run made last year, read from a run file (run_files.py).

Every golden case gets the run's ranking (none when the run left it out: a miss), the same
metrics (metrics.py), slices, splits and report as an evaluation of the index; the evaluation
keeps whose run it is (the file's name and tags) and is gated against this index's baseline only
when asked (`eval --run FILE --gate`). Unanswerable
cases count as abstained when the run ranked nothing for them or said `abstained: true`. The
run's answers are kept with the traces (so `golden export-ragas` hands them to RAGAS); they are
not graded here. Latency comes from the run's `latency_ms` where it gives one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from pathlib import Path

from rag_pipeline.core.evaluation.golden.cases import GoldenSet
from rag_pipeline.core.evaluation.golden.doc_refs import Resolver, known_documents
from rag_pipeline.core.evaluation.golden.suites import FULL, select_suite, suite_identity
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring import metrics
from rag_pipeline.core.evaluation.scoring.aggregate import aggregate
from rag_pipeline.core.evaluation.scoring.results import DEFAULT_REPORT_K, CaseResult, EvalResult
from rag_pipeline.core.evaluation.scoring.run_files import ExternalRun, read_run
from rag_pipeline.core.storage import Store

RUN_MODE = "run"
ABSTENTION_RULE = "the run's own: an empty ranking, or abstained: true"


def run_fingerprint(path: Path) -> str:
    """The identity of a run file: sha256 of its bytes (the config fingerprint of its evaluation)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def score_run(golden: GoldenSet, run: ExternalRun, index_state: Mapping[str, str],
              report_k: int = DEFAULT_REPORT_K, suite: str = FULL) -> EvalResult:
    """An EvalResult of the run's rankings of the golden cases (see the module docstring)."""
    rows = []
    for case in golden.cases:
        ranking = run.rankings.get(case.id, [])
        docs = [d for d, _ in ranking]
        relevant = {d: 1.0 for d in case.gold_docs}
        stale = golden.stale.get(case.id, [])
        values = metrics.query_metrics(docs, relevant, extra_cutoffs=(report_k,)) if case.answerable and not stale else {}
        scores = [s for _, s in ranking]
        known_scores = [s for s in scores if s is not None]
        trace = {"run": run.path.name, "final": [{"doc_id": d, "rank": i, "score": s}
                                                 for i, (d, s) in enumerate(ranking[:max(report_k, 10)], start=1)]}
        if case.id in run.answers:
            trace["answer"] = {"text": run.answers[case.id], "abstained": run.abstained.get(case.id, False), "error": None}
        rows.append(CaseResult(
            case=case, ranked_docs=docs,
            doc_scores=[s if s is not None else math.nan for s in scores],
            metrics=values,
            first_gold_rank=metrics.first_relevant_rank(docs, relevant) if case.gold_docs else None,
            best_score=max(known_scores) if known_scores else None,
            forbidden_retrieved=sorted(d for d in case.forbidden_docs if d in set(docs[:report_k])),
            stale_docs=stale,
            latency_ms=run.latency_ms.get(case.id, math.nan),
            context_tokens=None,  # the run says nothing of the context it handed a generator
            trace=trace,
            abstained=run.abstained.get(case.id, not docs),
            report_k=report_k,
        ))
    return EvalResult(golden.revision, RUN_MODE, run_fingerprint(run.path), dict(index_state), rows, math.nan,
                      ABSTENTION_RULE, **aggregate(rows, math.nan), suite=suite, report_k=report_k,
                      external_run=run.identity())


def evaluate_run_file(golden_path: Path, run_path: Path, store: Store, source_ids: list[str], suite: str = FULL,
                      pr_subset_size: int = 30, report_k: int = DEFAULT_REPORT_K) -> tuple[GoldenSet, EvalResult, str]:
    """Load the golden set (against the store's documents when it has any), read and score the run
    file, and persist the evaluation; (golden set, result, the run's summary line)."""
    history = store.ledger.document_history()
    served = store.served.document_hashes()
    # Without any ingested document, ids are taken as written: the other system's corpus may never
    # have been ingested here.
    golden = load_golden_set(golden_path, served_hashes=served if served else None,
                             known_documents=history if history else None)
    golden = select_suite(golden, suite, pr_subset_size)
    resolver = Resolver(known_documents(store)) if history else None
    run = read_run(run_path, golden.cases, resolver)
    index_state = {source_id: store.served.manifest_hash(source_id) for source_id in source_ids}
    result = score_run(golden, run, index_state, report_k, suite_identity(suite, pr_subset_size))
    store.records.save_evaluation(result)
    return golden, result, run.summary(golden.cases)
