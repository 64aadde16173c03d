"""Deterministic checks of an answer against its context and the golden case.

- citations: every cited id was in the context; an answer that is not an abstention cites something;
- faithfulness proxy: every quantity of the answer (amounts, percentages, numbers, codes such as
  TLY-4012) appears in the text of the chunks it cites;
- required facts: the quantities and codes of the reference answer appear in the answer.
  Quantities compare by value and unit: "€55", "EUR 55" and "55 euros" are one amount; a unit
  left out on one side still matches ("55" and "€55"), a different one does not ("$55");
- abstention: scored against answerability as a 2x2 table, never as one rate;
- claim support (a lexical proxy, and named so): each cited sentence of the answer is supported
  when at least 60% of its content terms occur in the chunks it cites;
- prohibited claims (the case's `prohibited_claims`): the proxy says an answer makes a claim when
  one of its sentences holds every content term of the claim (BM25's analyzer: stemmed, stop
  words dropped; numbers compared as written) with the same polarity (a negation word in both or
  in neither: "refunds are not issued after 30 days" does not make "refunds are issued after 30
  days"). With an LLM judge, the judge decides whether the answer states the claim. An abstention
  makes no claim.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rag_pipeline.core.evaluation.answers.generators import Answer, parse_citations, split_sentences
from rag_pipeline.core.retrieval.lexical import analyze

CLAIM_SUPPORT_SHARE = 0.6
# Words that turn a statement around; `analyze` drops "no" and "not" as stop words, so polarity is
# read from the raw words.
_NEGATIONS = frozenset("not no never none nor cannot without neither".split())
_WORDS = re.compile(r"[\w']+")

# Currency signs, ISO codes and words (keys lower-case), each to its ISO code: "€55", "EUR 55" and
# "55 euros" are one amount. Codes are listed (not any three capitals) so that "API 120" stays a
# plain number.
_CURRENCIES = {
    "€": "EUR", "$": "USD", "£": "GBP", "¥": "JPY", "euro": "EUR", "euros": "EUR", "dollar": "USD",
    "dollars": "USD", "pound": "GBP", "pounds": "GBP", "franc": "CHF", "francs": "CHF",
    **{code.lower(): code for code in "EUR USD GBP CHF JPY CAD AUD NZD SEK NOK DKK PLN CZK HUF INR BRL MXN ZAR SGD HKD CNY".split()},
}
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_UNIT = "|".join(sorted((k for k in _CURRENCIES if k.isalpha()), key=len, reverse=True))
_QUANTITY = re.compile(
    rf"(?P<pre>[€$£¥]|\b(?:{_UNIT})\b)\s?(?P<pre_value>{_NUMBER})"  # €55, EUR 55
    rf"|(?P<value>{_NUMBER})\s?(?:(?P<percent>%|\s?per\s?cent\b|\s?percent\b)"  # 5%, 5 percent
    rf"|(?P<post>[€$£¥]|\b(?:{_UNIT})\b))?"  # 55 euros, 55€, or a plain number
    r"|(?P<code>\b(?-i:[A-Z]{2,})[-_]\d+\b)",  # TLY-4012, ERR_42 (capitals only: not "top-10")
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Quantity:
    """A number with its unit: an ISO currency code, "%", "code" (the whole code is the value), or ""."""

    unit: str
    value: str

    def __str__(self) -> str:
        if self.unit == "code" or not self.unit:
            return self.value
        return f"{self.value}%" if self.unit == "%" else f"{self.unit} {self.value}"

    def matches(self, other: Quantity) -> bool:
        """Same value, and the same unit or a unit left out on one side ("55" matches "€55", not "$55")."""
        if "code" in (self.unit, other.unit):
            return self == other
        return self.value == other.value and (self.unit == other.unit or not self.unit or not other.unit)


def _canonical_number(text: str) -> str:
    number = text.replace(",", "")
    return number.rstrip("0").rstrip(".") if "." in number else number


def parse_quantities(text: str) -> list[Quantity]:
    """The quantities of a text in order, without repeats."""
    found: dict[Quantity, None] = {}
    for match in _QUANTITY.finditer(text):
        if match["code"]:
            quantity = Quantity("code", match["code"].upper().replace("_", "-"))
        elif match["pre"]:
            quantity = Quantity(_CURRENCIES[match["pre"].lower()], _canonical_number(match["pre_value"]))
        elif match["percent"]:
            quantity = Quantity("%", _canonical_number(match["value"]))
        elif match["post"]:
            quantity = Quantity(_CURRENCIES[match["post"].lower()], _canonical_number(match["value"]))
        else:
            quantity = Quantity("", _canonical_number(match["value"]))
        found[quantity] = None
    return list(found)


def quantities(text: str) -> list[str]:
    """The quantities of a text as canonical strings: "EUR 1000", "2.5%", "TLY-4012", "30"."""
    return [str(q) for q in parse_quantities(text)]


def _missing(wanted: Sequence[Quantity], available: Sequence[Quantity]) -> list[str]:
    return [str(q) for q in wanted if not any(q.matches(a) for a in available)]


@dataclass
class AnswerCheck:
    citations_valid: bool
    unsupported_quantities: list[str] = field(default_factory=list)
    missing_facts: list[str] | None = None
    abstention_correct: bool | None = None
    claims: int = 0
    supported_claims: int = 0
    judge: str = "proxy"
    # None: the case names no prohibited claim; else the ones the answer made (empty: none).
    prohibited_made: list[str] | None = None

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
        if self.prohibited_made is not None:
            metrics[f"answer_no_prohibited_claims_{self.judge}"] = float(not self.prohibited_made)
        return metrics


def _negated(text: str) -> bool:
    return any(w in _NEGATIONS or w.endswith("n't") for w in _WORDS.findall(text.lower()))


def prohibited_claims_made(
    answer: Answer, claims: Sequence[str], claim_judge: Callable[[str, str], bool | None] | None = None,
) -> list[str]:
    """The prohibited claims this answer makes (see the module's rule; `claim_judge(claim, answer
    text)` replaces the proxy when given; a judge that cannot tell counts the claim as not made)."""
    if answer.abstained or not claims:
        return []
    body = _strip_citations(answer.text)
    if claim_judge is not None:
        return [claim for claim in claims if claim_judge(claim, body)]
    sentences = [(set(analyze(s)), _negated(s)) for s in split_sentences(body)]
    made = []
    for claim in claims:
        terms, negated = set(analyze(claim)), _negated(claim)
        if terms and any(terms <= words and negated == polarity for words, polarity in sentences):
            made.append(claim)
    return made


def _strip_citations(text: str) -> str:
    return re.sub(r"\[[^\[\]\s]+#\d+\]", " ", text)


def check_answer(
    answer: Answer, context: Mapping[str, str], reference: str, answerable: bool,
    claim_judge: Callable[[str, str], bool | None] | None = None, prohibited_claims: Sequence[str] = (),
) -> AnswerCheck:
    """Check one answer; `context` maps each chunk id given to the generator to its text.

    Claim support uses `claim_judge(claim, cited text)` when given (an LLM grader), else the
    lexical proxy; so does the check for the case's prohibited claims.
    """
    cited = answer.citations or parse_citations(answer.text)
    valid = all(c in context for c in cited) and (answer.abstained or bool(cited))
    cited_quantities = parse_quantities(" ".join(context.get(c, "") for c in cited))
    answer_quantities = parse_quantities(_strip_citations(answer.text))
    check = AnswerCheck(valid, _missing(answer_quantities, cited_quantities))
    if prohibited_claims:
        check.prohibited_made = prohibited_claims_made(answer, prohibited_claims, claim_judge)
        if claim_judge is not None:
            check.judge = "llm"
    if answerable:
        required = parse_quantities(reference)
        if required and not answer.abstained:
            check.missing_facts = _missing(required, answer_quantities)
        elif required:
            check.missing_facts = [str(q) for q in required]
    else:
        check.abstention_correct = answer.abstained and not cited
    for sentence in split_sentences(answer.text):
        ids = parse_citations(sentence)
        if not ids:
            continue
        claim = _strip_citations(sentence).strip()
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
