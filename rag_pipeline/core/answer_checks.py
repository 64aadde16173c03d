"""Deterministic checks of an answer against its context and the golden case.

- citations: every cited id was in the context; an answer that is not an abstention cites something;
- faithfulness proxy: every quantity of the answer (amounts, percentages, numbers, codes such as
  TLY-4012) appears in the text of the chunks it cites;
- required facts: the quantities and codes of the reference answer appear in the answer;
- abstention: scored against answerability as a 2x2 table, never as one rate;
- claim support (a lexical proxy, and named so): each cited sentence of the answer is supported
  when at least 60% of its content terms occur in the chunks it cites.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rag_pipeline.core.answers import Answer, parse_citations, split_sentences
from rag_pipeline.core.lexical import analyze

# Amounts with a currency sign, percentages, codes like TLY-4012 or ERR_42, then plain numbers.
_QUANTITY = re.compile(r"[€$£]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?%|\b[A-Z]{2,}[-_]\d+\b|\b\d[\d,]*(?:\.\d+)?\b")
CLAIM_SUPPORT_SHARE = 0.6


def quantities(text: str) -> list[str]:
    """Normalised quantities of a text (commas and spaces dropped, codes upper-cased)."""
    return [q.replace(",", "").replace(" ", "").upper() for q in _QUANTITY.findall(text)]


def _normalised(text: str) -> str:
    return text.replace(",", "").replace(" ", "").upper()


@dataclass
class AnswerCheck:
    citations_valid: bool
    unsupported_quantities: list[str] = field(default_factory=list)
    missing_facts: list[str] | None = None
    abstention_correct: bool | None = None
    claims: int = 0
    supported_claims: int = 0
    judge: str = "proxy"

    @property
    def faithful(self) -> bool:
        return not self.unsupported_quantities

    def as_metrics(self) -> dict[str, float]:
        """Answer metrics beside (never blended with) the retrieval metrics of a case."""
        metrics = {"answer_citations_valid": float(self.citations_valid), "answer_faithful": float(self.faithful)}
        if self.missing_facts is not None:
            metrics["answer_required_facts"] = float(not self.missing_facts)
        if self.claims:
            # The key says which judge it was: never mistake the lexical proxy for entailment.
            metrics[f"answer_claim_support_{self.judge}"] = self.supported_claims / self.claims
        return metrics


def check_answer(
    answer: Answer, context: Mapping[str, str], reference: str, answerable: bool,
    claim_judge: Callable[[str, str], bool | None] | None = None,
) -> AnswerCheck:
    """Check one answer; `context` maps each chunk id given to the generator to its text.

    Claim support uses `claim_judge(claim, cited text)` when given (an LLM grader), else the
    lexical proxy.
    """
    cited = answer.citations or parse_citations(answer.text)
    valid = all(c in context for c in cited) and (answer.abstained or bool(cited))
    cited_text = _normalised(" ".join(context.get(c, "") for c in cited))
    body = re.sub(r"\[[^\[\]\s]+#\d+\]", " ", answer.text)
    unsupported = [q for q in dict.fromkeys(quantities(body)) if q not in cited_text]
    check = AnswerCheck(valid, unsupported)
    if answerable:
        required = list(dict.fromkeys(quantities(reference)))
        if required and not answer.abstained:
            check.missing_facts = [q for q in required if q not in _normalised(body)]
        elif required:
            check.missing_facts = required
    else:
        check.abstention_correct = answer.abstained and not cited
    for sentence in split_sentences(answer.text):
        ids = parse_citations(sentence)
        if not ids:
            continue
        claim = re.sub(r"\[[^\[\]\s]+#\d+\]", " ", sentence).strip()
        cited_passage = " ".join(context.get(i, "") for i in ids)
        if claim_judge is not None:
            verdict = claim_judge(claim, cited_passage)
            check.judge = "llm"
            if verdict is None:
                continue
            check.claims += 1
            check.supported_claims += verdict
            continue
        terms, support = set(analyze(claim)), set(analyze(cited_passage))
        check.claims += 1
        if terms and len(terms & support) / len(terms) >= CLAIM_SUPPORT_SHARE:
            check.supported_claims += 1
    return check


def abstention_table(rows: Sequence[tuple[bool, bool]]) -> dict[str, int]:
    """2x2 counts from (answerable, abstained) pairs."""
    table = {"answered_answerable": 0, "abstained_answerable": 0, "answered_unanswerable": 0, "abstained_unanswerable": 0}
    for answerable, abstained in rows:
        key = ("abstained" if abstained else "answered") + ("_answerable" if answerable else "_unanswerable")
        table[key] += 1
    return table
