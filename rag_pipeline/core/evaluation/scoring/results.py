"""What an evaluation measured: a result per golden case (its metrics, ranking, trace, abstention
and answer) and the evaluation's result (aggregates, identity, JSON form). Both are built once,
when everything they hold is known, and never changed afterwards."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.evaluation.golden.holdout import WITHHELD_TRACE, withheld
from rag_pipeline.core.evaluation.golden.suites import FULL

# The cutoff of the report: a case fails when no gold document is in its top k (its success@k is 0).
DEFAULT_REPORT_K = 5
HEADLINE_METRICS = ("recall_at_1", "recall_at_3", "recall_at_5", "recall_at_10", "recall_at_100",
                    "mrr_at_10", "ndcg_at_10", "precision_at_5", "success_at_5")
# Answer checks are recorded beside the retrieval metrics under this prefix, never blended into them.
ANSWER_PREFIX = "answer_"


@dataclass(frozen=True)
class CaseResult:
    """One golden case as evaluated: its document ranking and metrics, with the trace a reader needs."""

    case: GoldenCase
    ranked_docs: list[str]
    doc_scores: list[float]
    metrics: dict[str, float]
    first_gold_rank: int | None
    best_score: float | None
    forbidden_retrieved: list[str]
    stale_docs: list[str]
    latency_ms: float
    # Tokens of the context handed to a generator; None when unknown (another system's run).
    context_tokens: int | None
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


@dataclass(frozen=True)
class EvalResult:
    """One evaluation of a golden revision: every case's result and the figures over them."""

    revision: str
    mode: str
    config_fingerprint: str
    index_state: dict[str, str]
    cases: list[CaseResult]
    no_result_threshold: float
    threshold_source: str
    # The figures over the cases (`aggregate.aggregate` computes them all at once).
    overall: dict[str, float]
    weighted: dict[str, float]
    by_slice: dict[str, dict[str, float]]
    by_split: dict[str, dict[str, float]]
    unanswerable: dict[str, float]
    latency: dict[str, float]
    answers: dict
    # How abstention was decided and how well: the 2x2 per split, held-out balanced accuracy, curve.
    abstention: dict = field(default_factory=dict)
    # `full`, or `pr-<size>` (a fast subset, see suites.py): only evaluations of one suite are compared.
    suite: str = FULL
    report_k: int = DEFAULT_REPORT_K
    # What the evaluation ran with, so that two evaluations can be told apart key by key (why a case
    # moved, `attribution/`): the flat settings (`PipelineConfig.retrieval_settings`), the embedder's
    # identity, and the index state each source served (`index_state` holds their manifest hashes).
    settings: dict = field(default_factory=dict)
    embedding: str = ""
    served_states: dict[str, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))
    # Another system's run (mode `run`): its file's name, format and tags (`ExternalRun.identity`).
    external_run: dict | None = None

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
            "report_k": self.report_k, "external_run": self.external_run, "settings": self.settings,
            "embedding": self.embedding, "served_states": self.served_states,
            "stale_cases": {c.case.id: c.stale_docs for c in self.cases if c.stale_docs and not withheld(c.case)},
        }


def gold_rank_text(rank: int | None, listed: int, verb: str = "listed") -> str:
    """A case's first gold rank in words, to the depth its ranking has: `7`, `not in the top 10
    listed` (a run that lists 10 documents), `none: nothing retrieved`."""
    if rank:
        return str(rank)
    return f"not in the top {listed} {verb}" if listed else f"none: nothing {verb}"


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
