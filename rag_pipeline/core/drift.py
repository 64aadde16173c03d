"""Drift of production traffic against the golden set, and the queries that should become new cases.

The distance is the coverage distance: the mean, over the production queries of the window, of
1 - (cosine similarity to the nearest golden question). Its threshold is calibrated on the golden
set itself: each golden question's leave-one-out distance to its nearest other golden question is
what a query drawn from the golden distribution looks like; the means of `B` bootstrap resamples
of the production sample's size give the null distribution, and the threshold is its
(1 - alpha) quantile. Traffic the golden set describes stays under it; a new topic pushes it over.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.core.lexical import analyze


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


def nearest(queries: np.ndarray, reference: np.ndarray, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest reference row, cosine distance to it) for every query row."""
    similarity = _normalise(queries) @ _normalise(reference).T
    if exclude_self:
        np.fill_diagonal(similarity, -np.inf)
    index = similarity.argmax(axis=1)
    return index, 1.0 - similarity[np.arange(len(queries)), index]


def calibrate_threshold(golden_vectors: np.ndarray, sample_size: int, samples: int = 1000, alpha: float = 0.05,
                        seed: int = 0) -> tuple[float, list[float]]:
    """(threshold, null distribution) of the mean coverage distance of `sample_size` queries."""
    _, loo = nearest(golden_vectors, golden_vectors, exclude_self=True)
    rng = random.Random(seed)
    values = loo.tolist()
    means = sorted(sum(rng.choice(values) for _ in range(sample_size)) / sample_size for _ in range(samples))
    return means[min(samples - 1, int(math.ceil((1 - alpha) * samples)) - 1)], means


@dataclass
class DriftReport:
    day: str
    distance: float
    threshold: float
    production_queries: int
    golden_cases: int
    length_production: list[int] = field(default_factory=list)
    length_golden: list[int] = field(default_factory=list)
    slice_mix: dict[str, int] = field(default_factory=dict)
    golden_slice_mix: dict[str, int] = field(default_factory=dict)
    unseen_terms: list[tuple[str, int]] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)
    sources_hit: dict[str, int] = field(default_factory=dict)
    golden_per_source: dict[str, int] = field(default_factory=dict)
    null_distribution: list[float] = field(default_factory=list)
    distances: list[float] = field(default_factory=list)

    @property
    def drifted(self) -> bool:
        return self.distance > self.threshold


def drift_report(
    day: str,
    production_queries: Sequence[str],
    production_vectors: np.ndarray,
    golden_questions: Sequence[str],
    golden_texts: Sequence[str],
    golden_slices: Sequence[str],
    golden_vectors: np.ndarray,
    golden_docs: Sequence[Sequence[str]],
    hit_docs: Sequence[Sequence[str]] = (),
    candidates: int = 15,
    bootstrap_samples: int = 1000,
    alpha: float = 0.05,
) -> DriftReport:
    """Production window against the golden set: distance and threshold, lengths, slice mix,
    unseen vocabulary, sources hit, and the production queries farthest from every golden case."""
    index, distances = nearest(production_vectors, golden_vectors)
    threshold, null = calibrate_threshold(golden_vectors, len(production_queries), bootstrap_samples, alpha)
    report = DriftReport(
        day=day,
        distance=float(distances.mean()) if len(distances) else float("nan"),
        threshold=threshold,
        production_queries=len(production_queries),
        golden_cases=len(golden_questions),
        length_production=[len(q.split()) for q in production_queries],
        length_golden=[len(q.split()) for q in golden_questions],
        slice_mix=dict(Counter(golden_slices[i] for i in index)),
        golden_slice_mix=dict(Counter(golden_slices)),
        null_distribution=null,
        distances=distances.tolist(),
    )
    golden_vocabulary = {t for text in golden_texts for t in analyze(text)}
    unseen = Counter(t for q in production_queries for t in set(analyze(q)) if t not in golden_vocabulary and not t.isdigit())
    report.unseen_terms = unseen.most_common(20)
    seen: set[str] = set()
    for position in np.argsort(-distances):
        text = production_queries[position]
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        report.candidates.append({"query": text, "distance": float(distances[position]),
                                  "nearest_golden": golden_questions[index[position]]})
        if len(report.candidates) >= candidates:
            break
    report.sources_hit = dict(Counter(d.split(":", 1)[0] for docs in hit_docs for d in docs[:1]))
    report.golden_per_source = dict(Counter(d.split(":", 1)[0] for docs in golden_docs for d in docs))
    return report
