"""Query-performance predictors as a third evidence measure, for `benchmarks/gaps.py` (issue 36).

The evidence score (`rag_pipeline/core/monitoring/gap_threshold.py`) is the mean of two percentile
ranks among the golden answerable cases: the best chunk's cosine and the idf-weighted coverage. A
post-retrieval predictor from the IR literature, ranked the same way, would make it

    score_3 = (F_cos + F_cov + F_p) / 3

with p one of, over s_1 >= ... >= s_k the question's k = DEPTH best dense cosines:

    standout = s_1 - mean(s_1 .. s_k)          (Zhou & Croft 2007's weighted information gain)
    nqc      = std(s_1 .. s_k) / mean(s_1 .. s_k)  (Shtok et al. 2012; the mean stands for the corpus score)

Reported, not used: the product adopts a predictor only if the per-question AUROC averaged over
the development runs rises and none falls by more than 0.01 (docs/limitations.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rag_pipeline.api import Retriever, SearchFilters
from rag_pipeline.core.monitoring.evidence import Evidence
from rag_pipeline.core.monitoring.gap_threshold import EvidenceScale, percentile_rank

# Fixed before any figure was seen: retrieval.k's default, the chunks an answer reads.
DEPTH = 10


def standout(cosines: Sequence[float]) -> float:
    return float(cosines[0] - np.mean(cosines)) if len(cosines) else 0.0


def nqc(cosines: Sequence[float]) -> float:
    mean = float(np.mean(cosines)) if len(cosines) else 0.0
    return float(np.std(cosines)) / mean if mean > 0 else 0.0


PREDICTORS: dict[str, Callable[[Sequence[float]], float]] = {"standout": standout, "nqc": nqc}


def _top_cosines(retriever: Retriever, texts: Sequence[str]) -> list[list[float]]:
    """Each question's DEPTH best dense cosines, best first (one batched search)."""
    results = retriever.search_many(list(texts), [SearchFilters()] * len(texts), "dense", k=DEPTH)
    return [sorted((h.score for h in r.candidates.get("dense", [])), reverse=True)[:DEPTH] for r in results]


def predictor_aurocs(retriever: Retriever, scale: EvidenceScale, golden: Sequence[str],
                     removed: Sequence[Evidence], answerable: Sequence[Evidence],
                     auroc: Callable[[list[float], list[float]], float]) -> dict[str, dict[str, float]]:
    """For each predictor: the AUROC (removed vs answerable) of the predictor alone and of score_3,
    the predictor ranked among the `golden` answerable questions' values."""
    retriever = Retriever(retriever.store, retriever.embedder,
                          retriever.config.model_copy(update={"k": DEPTH, "candidates": DEPTH}))
    tops = _top_cosines(retriever, [*golden, *(e.question.text for e in [*removed, *answerable])])
    golden_tops, removed_tops, answerable_tops = (tops[:len(golden)], tops[len(golden):len(golden) + len(removed)],
                                                  tops[len(golden) + len(removed):])
    figures = {}
    for name, predictor in PREDICTORS.items():
        reference = np.sort([predictor(t) for t in golden_tops])

        def combined(evidence: Sequence[Evidence], top: list[list[float]]) -> list[float]:
            return [(2 * scale.score(e) + percentile_rank(reference, predictor(t))) / 3 for e, t in zip(evidence, top, strict=True)]

        figures[name] = {
            "alone": auroc([predictor(t) for t in removed_tops], [predictor(t) for t in answerable_tops]),
            "third measure": auroc(combined(removed, removed_tops), combined(answerable, answerable_tops)),
        }
    return figures
