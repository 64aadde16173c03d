"""Evaluating a past index state again: every source served as it was at a state or a time, inside a
transaction that is rolled back (`Store.scratch`), and measured as an evaluation measures it.

Nothing served changes and nothing is stored: the result is compared with the evaluation that
measured the same states with the same config when it was made, which it equals (the same rows,
the same retrieval, the same cases).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path

from rag_pipeline.config import AnswersConfig, RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.answers.generators import make_claim_judge, make_generator
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.results import DEFAULT_REPORT_K, EvalResult
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.states import IndexState, StateError


@dataclass(frozen=True)
class PastEvaluation:
    """A past state measured again, beside what was measured on it then (if anything was)."""

    states: dict[str, IndexState | None]
    result: EvalResult
    recorded: str | None  # the evaluation that measured the same states and config, when one did
    largest_difference: float | None  # the largest |then - now| over its overall metrics

    def as_json(self) -> dict:
        return {"at": {s: (state.state_id if state else None) for s, state in self.states.items()},
                "recorded_eval_id": self.recorded, "largest_difference": self.largest_difference,
                **{k: v for k, v in self.result.as_json().items() if k != "eval_id"}}


def states_at(store: Store, source_ids: Sequence[str], at: str) -> dict[str, IndexState | None]:
    """What each source served at `at`: a state id (its source at that state, the others as they
    were when it was recorded), or an ISO date (its end, UTC) or date-time. None: nothing yet."""
    try:
        state = store.states.get(at)
    except StateError:
        state = None
    if state is not None:
        when = state.created_at
    else:
        when = _moment(at)
    found = {source_id: store.states.at(source_id, when) for source_id in source_ids}
    if state is not None:
        found[state.source_id] = state
    if not any(found.values()):
        raise InputError(f"--at {at}: no source had an index state then (the first states are recorded by the first "
                         "switch of each source); `rag-pipeline index list --source SOURCE` lists them")
    return found


def _moment(at: str) -> datetime:
    try:
        if len(at) == 10:
            return datetime.combine(date.fromisoformat(at), time()) + timedelta(days=1)
        return datetime.fromisoformat(at).replace(tzinfo=None)
    except ValueError:
        raise InputError(f"--at {at!r} is neither a state id nor a date (YYYY-MM-DD) or date-time (YYYY-MM-DDTHH:MM)") from None


def evaluate_at(
    golden_path: Path, store: Store, embedder: Embedder, retrieval: RetrievalConfig, config_fingerprint: str,
    states: dict[str, IndexState | None], mode: str | None = None, answers: AnswersConfig | None = None,
    report_k: int = DEFAULT_REPORT_K,
) -> PastEvaluation:
    """Serve `states` in a rolled-back transaction and evaluate the golden set there."""
    with store.scratch() as past:
        for source_id, state in states.items():
            past.states.restore(source_id, state)
        golden = load_golden_set(golden_path, served_hashes=past.served.document_hashes(),
                                 known_documents=past.ledger.document_history())
        index_state = {source_id: past.served.manifest_hash(source_id) for source_id in states}
        generating = answers is not None and answers.generator != "none"
        result = evaluate(
            golden, Retriever(past, embedder, retrieval), mode or retrieval.mode, config_fingerprint, index_state,
            retrieval.no_result_threshold, past.served.supersession(),
            generator_for=(lambda threshold: make_generator(answers, threshold)) if generating else None,
            context_k=answers.context_k if answers else 5, claim_judge=make_claim_judge(answers) if generating else None,
            abstention_method=retrieval.abstention, report_k=report_k,
        )
    recorded = next((e for e in store.records.evaluations_of(index_state, config_fingerprint)
                     if store.records.evaluation_summary(e).get("mode") == result.mode), None)
    difference = None
    if recorded is not None:
        then = store.records.evaluation_summary(recorded)["overall"]
        shared = [k for k in then if k in result.overall and then[k] is not None]
        difference = max((abs(then[k] - result.overall[k]) for k in shared), default=0.0)
    return PastEvaluation(states, result, recorded, difference)
