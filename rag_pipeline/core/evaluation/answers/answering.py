"""Every case answered from its own retrieved context, and the answer checked: the answer as
stored with the case, and its `answer_*` metrics, kept beside the retrieval metrics (never
blended into them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rag_pipeline.core.evaluation.answers.checks import check_answer
from rag_pipeline.core.evaluation.answers.generators import Generator
from rag_pipeline.core.evaluation.golden.cases import GoldenCase
from rag_pipeline.core.retrieval.retriever import RetrievalResult


@dataclass(frozen=True)
class CaseAnswer:
    """One case's answer: the generator's record (text, citations, tokens, cost, error) and its checks."""

    record: dict
    metrics: dict[str, float]

    @property
    def trace_entry(self) -> dict:
        """What the case's trace keeps of the answer (withheld with it for holdout), so a stored
        evaluation's answers can be exported for other tools (`ragas_export.export_ragas`)."""
        return {key: self.record[key] for key in ("text", "citations", "abstained", "error")}


def answer_cases(
    cases: Sequence[GoldenCase], best_scores: Sequence[float | None], results: Sequence[RetrievalResult],
    generator: Generator, context_k: int, supersedes: Mapping[str, str],
    claim_judge: Callable[[str, str], bool | None] | None = None, decisions: Sequence[bool] | None = None,
) -> list[CaseAnswer]:
    """Answer each case from its top `context_k` hits. `decisions`: the abstention model's verdict
    per case (True: the corpus cannot answer), passed to the generator as `abstain`; without it
    the generator applies the no-result threshold to the case's best score."""
    superseded = set(supersedes.values())
    answers = []
    for index, (case, best_score, result) in enumerate(zip(cases, best_scores, results, strict=True)):
        context = result.hits[:context_k]
        if decisions is None:
            answer = generator.generate(case.question, context, best_score)
        else:
            answer = generator.generate(case.question, context, best_score, abstain=decisions[index])
        record = {"text": answer.text, "citations": answer.citations, "abstained": answer.abstained,
                  "generator": answer.generator, "model": answer.model, "prompt_version": answer.prompt_version,
                  "settings": answer.settings, "prompt_tokens": answer.prompt_tokens,
                  "completion_tokens": answer.completion_tokens, "cost": answer.cost, "error": answer.error}
        if answer.errored:
            answers.append(CaseAnswer(record, {}))
            continue
        check = check_answer(answer, {h.chunk_id: h.text for h in context}, case.reference, case.answerable,
                             claim_judge, case.prohibited_claims)
        if check.prohibited_made:
            record["prohibited_claims_made"] = check.prohibited_made
        values = check.as_metrics()
        if check.abstention_correct is not None:
            values["answer_abstained_correctly"] = float(check.abstention_correct)
        cited_docs = {c.rsplit("#", 1)[0] for c in answer.citations}
        if any(d in supersedes for d in case.gold_docs):
            # The current version must be the one cited, never the version it replaced.
            values["answer_cites_current_version"] = float(not (cited_docs & superseded))
        answers.append(CaseAnswer(record, values))
    return answers
