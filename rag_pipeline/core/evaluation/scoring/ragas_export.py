"""A stored evaluation as a RAGAS dataset: the questions, answers, retrieved contexts and references.

Holdout cases are left out. The columns carry RAGAS's old and new names (`question`/`user_input`,
`answer`/`response`, `contexts`/`retrieved_contexts`, `ground_truth`/`reference`); read back as an
import, the file is refused, since its contexts are what retrieval returned.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.golden.cases import GoldenSet

if TYPE_CHECKING:
    from rag_pipeline.core.evaluation.scoring.results import EvalResult

# Holdout cases stay unseen (see holdout.py): their text is exported only when asked for.
_HOLDOUT = "holdout"


RAGAS_COLUMNS = ("case_id", "question", "answer", "contexts", "ground_truth",
                 "user_input", "response", "retrieved_contexts", "reference",
                 "retrieved_context_ids", "reference_context_ids", "retrieved_chunk_ids")


@dataclass
class ExportResult:
    path: Path
    rows: int
    context_k: int
    answers: int
    missing_chunks: list[str]
    cases_without_contexts: list[str]
    holdout_left_out: int = 0

    def summary(self) -> str:
        parts = [f"wrote {self.rows} rows to {self.path}", f"contexts: the top {self.context_k} retrieved chunks",
                 f"answers: {self.answers}" if self.answers else
                 "answers: none (the evaluation stored no answer: answers.generator none, or every answer errored)"]
        if self.holdout_left_out:
            parts.append(f"{self.holdout_left_out} holdout case(s) left out (their text stays unseen)")
        if self.cases_without_contexts:
            parts.append(f"{len(self.cases_without_contexts)} case(s) without contexts")
        if self.missing_chunks:
            parts.append(f"{len(self.missing_chunks)} chunk(s) no longer served, left out of contexts")
        return " | ".join(parts)


def export_ragas(
    evaluation: EvalResult | Mapping[str, Any],
    golden: GoldenSet,
    out_path: Path | str,
    chunk_texts: Callable[[Sequence[str]], Mapping[str, str]],
    context_k: int = 5,
    include_holdout: bool = False,
) -> ExportResult:
    """Write an evaluation as a RAGAS dataset: one row per case, JSONL (CSV when `out_path` ends
    in .csv, list columns JSON-encoded).

    Columns: `case_id`, `question` / `user_input` (the question), `answer` / `response` (the
    generated answer; empty when answers were not evaluated, or the answer errored),
    `contexts` / `retrieved_contexts` (texts of the top `context_k` final hits of the case's
    trace), `ground_truth` / `reference` (the reference), and the ids RAGAS's id-based context
    metrics compare: `retrieved_context_ids` (the document of each retrieved context, in order),
    `reference_context_ids` (the gold documents), and `retrieved_chunk_ids` (the chunks themselves).

    `evaluation`: an `EvalResult`, or a stored one as a mapping with `revision` and `traces`
    (case id -> its trace, holding its answer when answers were evaluated) and optionally
    `answer_texts` (case id -> answer text, instead of the traces' answers). Traces keep chunk
    ids, not texts: `chunk_texts` (e.g. `store.served.chunk_text_by_id`) gives the texts; a chunk
    no longer served is left out and counted. Holdout cases are left out (counted) unless
    `include_holdout`: a RAGAS file is for looking at, and holdout stays unseen.
    """
    out_path = Path(out_path)
    if hasattr(evaluation, "cases"):
        revision = evaluation.revision
        traces = {c.case.id: c.trace for c in evaluation.cases}
        answers = {c.case.id: c.answer["text"] for c in evaluation.cases
                   if c.answer and not c.answer.get("error") and c.answer.get("text")}
    else:
        revision, traces = evaluation["revision"], evaluation["traces"]
        # Not "answers": a stored evaluation's summary holds its answer metrics under that name.
        answers = dict(evaluation.get("answer_texts") or {
            case_id: trace["answer"]["text"] for case_id, trace in traces.items()
            if (trace.get("answer") or {}).get("text") and not trace["answer"].get("error")})
    if revision != golden.revision:
        raise InputError(f"the evaluation is of golden revision {revision}, the golden set given is {golden.revision}")
    by_id = {c.id: c for c in golden.cases}
    missing_cases = sorted(set(traces) - set(by_id))
    if missing_cases:
        raise InputError(f"cases not in golden set {golden.path.name}: {', '.join(missing_cases[:5])}")
    shown = {i: t for i, t in traces.items() if include_holdout or by_id[i].split != _HOLDOUT}
    finals = {case_id: (trace.get("final") or [])[:context_k] for case_id, trace in shown.items()}
    top = {case_id: [h["chunk_id"] for h in hits if h.get("chunk_id")] for case_id, hits in finals.items()}
    wanted = sorted({c for ids in top.values() for c in ids})
    texts = dict(chunk_texts(wanted)) if wanted else {}
    rows = []
    for case_id in top:
        case = by_id[case_id]
        kept = [h for h in finals[case_id] if h.get("chunk_id") in texts]
        contexts = [texts[h["chunk_id"]] for h in kept]
        answer = answers.get(case_id) or ""
        rows.append({"case_id": case_id, "question": case.question, "answer": answer, "contexts": contexts,
                     "ground_truth": case.reference, "user_input": case.question, "response": answer,
                     "retrieved_contexts": contexts, "reference": case.reference,
                     "retrieved_context_ids": [h["doc_id"] for h in kept], "reference_context_ids": list(case.gold_docs),
                     "retrieved_chunk_ids": [h["chunk_id"] for h in kept]})
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if out_path.suffix.lower() == ".csv":
        with out_path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=RAGAS_COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, list) else v for k, v in row.items()})
    else:
        out_path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return ExportResult(out_path, len(rows), context_k, sum(1 for r in rows if r["answer"]),
                        [c for c in wanted if c not in texts], [r["case_id"] for r in rows if not r["contexts"]],
                        len(traces) - len(shown))
