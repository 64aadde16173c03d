"""The best evidence the served index holds for a question, as the asking user may see it.

The evidence score is the dense cosine similarity between the question and its best chunk, searched
with the question's own tenant and roles (the filters every retriever applies): what the answering
system could ground an answer in. Rank-fusion scores are not used: they are ranks, the same for a
question the corpus answers well and one it barely touches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.config import RetrievalConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store


@dataclass(frozen=True)
class Question:
    """A question as asked: its text and the caller context it was asked with."""

    text: str
    tenant: str | None = None
    roles: tuple[str, ...] = ()


@dataclass(frozen=True)
class Evidence:
    """A question's best chunk: its cosine (None when the caller may see nothing), document and section."""

    question: Question
    best_score: float | None
    doc_id: str | None = None
    section: str = ""
    vector: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), compare=False, repr=False)

    def weak(self, threshold: float) -> bool:
        """Weaker than the threshold, or nothing at all."""
        return self.best_score is None or self.best_score < threshold


def evidence_retriever(store: Store, embedder: Embedder, retrieval: RetrievalConfig) -> Retriever:
    """A dense retriever that looks for one chunk: the best one is all the evidence score needs."""
    return Retriever(store, embedder, retrieval.model_copy(update={"mode": "dense", "k": 1, "candidates": 1}))


def best_evidence(retriever: Retriever, questions: Sequence[Question]) -> list[Evidence]:
    """Each question's best chunk in the served index, with the question's own filters."""
    if not questions:
        return []
    results = retriever.search_many([q.text for q in questions],
                                    [SearchFilters(tenant=q.tenant, roles=q.roles) for q in questions], "dense")
    found = []
    for question, result in zip(questions, results, strict=True):
        dense = result.candidates.get("dense", [])
        best = max(dense, key=lambda h: h.score, default=None)
        vector = result.query_vector if result.query_vector is not None else np.zeros(0, dtype=np.float32)
        if best is None:
            found.append(Evidence(question, None, vector=vector))
        else:
            section = " > ".join(best.heading_path) or best.title
            found.append(Evidence(question, float(best.score), best.doc_id, section, vector))
    return found
