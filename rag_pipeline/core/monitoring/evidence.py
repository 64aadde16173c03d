"""The best evidence the served index holds for a question, as the asking user may see it.

Two measures, both searched with the question's own tenant and roles (the filters every retriever
applies), so they say what the answering system could ground an answer in:

- `best_score`: the dense cosine similarity between the question and its best chunk. Rank-fusion
  scores are not used: they are ranks, the same for a question the corpus answers well and one it
  barely touches.
- `coverage`: the share of the question's information that its best BM25 chunk holds, each term
  weighted by its idf (BM25's, over all served chunks): sum of idf(t) over the question's distinct
  content terms the chunk holds / sum of idf(t) over all of them (content terms: the analysed
  terms without the words that only make it a question, "how", "what", "my"). A cosine is weak evidence where documents
  resemble one another (a claim looks like many abstracts); the rare words of a question a corpus
  does not cover are in none of its chunks.

The evidence score that the threshold, the group test and closing read (`gap_threshold.py`) puts
the two on one calibrated scale: the mean of their percentile ranks among the golden set's
answerable cases (`EvidenceScale`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.config import RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.models import Hit, SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze, content_terms
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.memory import bm25_idf


@dataclass(frozen=True)
class Question:
    """A question as asked: its text and the caller context it was asked with."""

    text: str
    tenant: str | None = None
    roles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """A question's best chunk: its cosine (None when the caller may see nothing), document and section;
    the idf-weighted coverage of its terms by its best BM25 chunk; and `strength`, the evidence score on
    the golden scale once `EvidenceScale.apply` set it."""

    question: Question
    best_score: float | None
    doc_id: str | None = None
    section: str = ""
    vector: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), compare=False, repr=False)
    coverage: float | None = None
    strength: float | None = None

    @property
    def score(self) -> float | None:
        """What the threshold and the group test read: the strength when scaled, else the cosine."""
        return self.strength if self.strength is not None else self.best_score

    def weak(self, threshold: float) -> bool:
        """Weaker than the threshold, or nothing at all."""
        return self.score is None or self.score < threshold


def evidence_retriever(store: Store, embedder: Embedder, retrieval: RetrievalConfig) -> Retriever:
    """A retriever that looks for one chunk per mode: the best one is all the evidence needs."""
    return Retriever(store, embedder, retrieval.model_copy(update={"mode": "dense", "k": 1, "candidates": 1}))


def idf_coverage(question_terms: Sequence[str], chunk_terms: set[str], idf: dict[str, float]) -> float:
    """The idf-weighted share of the question's distinct terms the chunk holds (1.0 without any term:
    a question of stop words asks for nothing the corpus could lack)."""
    terms = set(question_terms)
    # fsum, the correctly rounded sum, not sum: a set iterates in an order that string hashing
    # changes from process to process, and float addition in another order can end one unit in the
    # last place apart; equal shares must stay equal, since the golden scale ranks them at or under
    # one another (a tie one ulp apart moved the weak-evidence threshold a whole rank, issue 36).
    total = math.fsum(idf[t] for t in terms)
    return math.fsum(idf[t] for t in terms if t in chunk_terms) / total if total else 1.0


def _idf(store: Store, terms: set[str]) -> dict[str, float]:
    """BM25's idf (Lucene's non-negative form) over all served chunks."""
    chunks, frequencies = store.search.document_frequencies(sorted(terms))
    return {t: bm25_idf(chunks, df) for t, df in frequencies.items()}


def best_evidence(retriever: Retriever, questions: Sequence[Question]) -> list[Evidence]:
    """Each question's best chunk in the served index and its coverage, with the question's own filters."""
    if not questions:
        return []
    texts = [q.text for q in questions]
    filters = [SearchFilters(tenant=q.tenant, roles=q.roles) for q in questions]
    results = retriever.search_many(texts, filters, "dense")
    lexical = retriever.search_many(texts, filters, "bm25")
    terms = [content_terms(text) for text in texts]
    idf = _idf(retriever.store, {t for ts in terms for t in ts})
    found = []
    for question, result, words, bm25 in zip(questions, results, terms, lexical, strict=True):
        coverage = _coverage(words, bm25.candidates.get("bm25", []), idf)
        best = max(result.candidates.get("dense", []), key=lambda h: h.score, default=None)
        vector = result.query_vector if result.query_vector is not None else np.zeros(0, dtype=np.float32)
        if best is None:
            found.append(Evidence(question, None, vector=vector, coverage=coverage))
        else:
            section = " > ".join(best.heading_path) or best.title
            found.append(Evidence(question, float(best.score), best.doc_id, section, vector, coverage))
    return found


def _coverage(words: Sequence[str], hits: Sequence[Hit], idf: dict[str, float]) -> float:
    """Coverage by the best BM25 chunk; 0 when the caller may see no chunk holding any of the words."""
    if not hits:
        return 0.0 if words else 1.0
    best = hits[0]
    # Its title and headings too: the chunk's postings were made with its breadcrumbs.
    return idf_coverage(words, set(analyze(" ".join([best.title, *best.heading_path, best.text]))), idf)
