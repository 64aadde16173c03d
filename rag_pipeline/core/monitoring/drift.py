"""Drift of production traffic against the golden set, and the queries that should become new cases.

The distance is the squared maximum mean discrepancy (MMD², unbiased estimate) between the
embeddings of the production sample and of the golden questions, with a Gaussian kernel whose
bandwidth is the median pairwise squared distance among golden questions:

    MMD² = mean k(p, p') + mean k(g, g') - 2 mean k(p, g),   k(x, y) = exp(-|x - y|² / median)

Both sides are embedded as typed, with the retrieval model: how users ask (a new phrasing) is
part of what the golden set must keep describing, not only what they ask about.

Its threshold is calibrated on the golden set itself: `B` times, a random subset of the golden
questions of the production sample's size is compared with the rest; the (1 - alpha) quantile of
those MMD² values is what two samples of golden-like queries show by chance. (The rest is smaller
than the whole golden set the production sample is compared with, so this null is a little wider
than the exact one: the threshold errs towards fewer alarms.) The threshold is only as meaningful
as the golden set is a sample of the traffic it should describe: a golden set written in another
style than its users type is flagged from the first day, and rightly so.

The smallest shift the check can see is stated with it. A share e of the sample moved to a new
topic N gives the mixture P = (1 - e) G + e N, whose population MMD² is e² |mu_N - mu_G|² =
e² (mean k(n, n') + mean k(g, g') - 2 mean k(n, g)). That is largest, 1 + mean k(g, g'), for a
topic of identical questions with no golden question near it; so below

    e_min = sqrt(threshold / (1 + mean over distinct golden pairs of k(g, g')))

the expected MMD² of any new topic stays under the threshold: a topic holding less than e_min of
the day cannot be told from chance, however foreign; a looser topic, or one near golden questions,
needs more. A small golden set (a wide null) or a small sample raises e_min.

Candidates for new golden cases are ranked by the MMD witness function at each production query,

    witness(q) = mean over other production queries p of k(q, p) - mean over golden questions g of k(q, g),

the production density around q in excess of the golden density there: it is largest where many
users ask about something few golden cases cover. A topic that fifty users ask and one golden case
touches outranks a single odd query; each candidate also shows its cosine distance to, and the
text of, its nearest golden question.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
from rag_pipeline.core.evaluation.scoring.metrics import nearest_rank_quantile
from rag_pipeline.core.retrieval.lexical import analyze, analyze_words
from rag_pipeline.core.vectors import normalise_rows
from rag_pipeline.core.verdicts import Table, Verdict

# Function and question words: phrasing, not topic.
_FUNCTION_WORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then there these
    they this to was will with how what when where which who why do does did can could should would may might
    must i me my we our us you your he she his her them its am been being have has had get got please hi hello
    hey so just also any some here im ive dont cant about from up out than too very really thanks thank need
    want know tell anyone way still""".split()
)
_WORD = re.compile(r"[a-z0-9][a-z0-9\-]*")


def topic_text(text: str) -> str:
    """The content words of a query, in order: what it asks about, without how it is phrased.
    Candidates that differ only in this way (case, filler words) are listed once."""
    return " ".join(w for w in _WORD.findall(text.lower().replace("'", "")) if w not in _FUNCTION_WORDS)


def nearest(queries: np.ndarray, reference: np.ndarray, exclude_self: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest reference row, cosine distance to it) for every query row."""
    similarity = normalise_rows(queries) @ normalise_rows(reference).T
    if exclude_self:
        np.fill_diagonal(similarity, -np.inf)
    index = similarity.argmax(axis=1)
    return index, 1.0 - similarity[np.arange(len(queries)), index]


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0)


def witness(x: np.ndarray, y: np.ndarray, bandwidth: float) -> np.ndarray:
    """The MMD witness at every row of x: mean kernel to the other rows of x minus mean kernel to y."""
    kxx = np.exp(-_squared_distances(x, x) / bandwidth)
    own = (kxx.sum(1) - np.diag(kxx)) / max(len(x) - 1, 1)
    return own - np.exp(-_squared_distances(x, y) / bandwidth).mean(1)


def mmd2(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """Unbiased MMD² between samples x and y with the kernel exp(-|a - b|² / bandwidth)."""
    kxx = np.exp(-_squared_distances(x, x) / bandwidth)
    kyy = np.exp(-_squared_distances(y, y) / bandwidth)
    kxy = np.exp(-_squared_distances(x, y) / bandwidth)
    n, m = len(x), len(y)
    return float((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean())


def min_detectable_share(golden_vectors: np.ndarray, threshold: float, bandwidth: float) -> float:
    """e_min of the module docstring: sqrt(threshold / (1 + mean kernel over distinct golden pairs))."""
    m = len(golden_vectors)
    kernel = np.exp(-_squared_distances(golden_vectors, golden_vectors) / bandwidth)
    golden_mean = (kernel.sum() - np.trace(kernel)) / (m * (m - 1))
    return float(min(1.0, np.sqrt(max(threshold, 0.0) / (1.0 + golden_mean))))


def median_bandwidth(golden_vectors: np.ndarray) -> float:
    distances = _squared_distances(golden_vectors, golden_vectors)
    return float(np.median(distances[distances > 0]))


def calibrate_threshold(golden_vectors: np.ndarray, sample_size: int, samples: int = 1000, alpha: float = 0.05,
                        seed: int = 0, bandwidth: float | None = None) -> tuple[float, list[float]]:
    """(threshold, null distribution): MMD² of random golden subsets of the sample's size against
    the remaining golden questions; the threshold is the nearest-rank (1 - alpha) quantile.

    The golden kernel matrix is computed once; each resample's block sums follow from the subset's
    own block and the row sums (sum over the rest = total - 2 * subset rows + subset block), so a
    resample costs O(size²), not O(golden²): large golden sets stay cheap.
    """
    m = len(golden_vectors)
    if m < 4:
        raise GoldenSetError(f"the golden set has {m} questions: at least 4 are needed to calibrate a drift threshold")
    bandwidth = bandwidth if bandwidth is not None else median_bandwidth(golden_vectors)
    kernel = np.exp(-_squared_distances(golden_vectors, golden_vectors) / bandwidth)
    size = max(2, min(sample_size, m // 2))
    rest = m - size
    row_sums, total, diagonal = kernel.sum(1), kernel.sum(), np.diag(kernel)
    rng = random.Random(seed)
    indexes = list(range(m))
    null = []
    for _ in range(samples):
        rng.shuffle(indexes)
        subset = np.array(indexes[:size])
        within = kernel[np.ix_(subset, subset)].sum()
        subset_rows = row_sums[subset].sum()
        across = subset_rows - within
        within_rest = total - 2 * subset_rows + within
        diagonal_subset = diagonal[subset].sum()
        null.append(float(
            (within - diagonal_subset) / (size * (size - 1))
            + (within_rest - (diagonal.sum() - diagonal_subset)) / (rest * (rest - 1))
            - 2 * across / (size * rest)
        ))
    null.sort()
    return nearest_rank_quantile(null, 1 - alpha), null


# Gold references that match no document the sources ever held are counted under this "source".
UNRESOLVED = "(no such document)"


@dataclass
class PageCounts:
    """One page's production hits (first, and in the top documents) and golden labels."""

    top1: int = 0
    hits: int = 0
    labels: int = 0


def page_counts(hit_docs: Sequence[Sequence[str]], golden_docs: Sequence[Sequence[str]]) -> dict[str, PageCounts]:
    """Page -> its counts: each sampled query's top documents (the first counts as top-1 too), and
    each golden case's gold documents."""
    pages: dict[str, PageCounts] = {}
    for docs in hit_docs:
        for rank, doc in enumerate(dict.fromkeys(docs)):
            counts = pages.setdefault(doc, PageCounts())
            counts.hits += 1
            counts.top1 += rank == 0
    for docs in golden_docs:
        for doc in dict.fromkeys(docs):
            pages.setdefault(doc, PageCounts()).labels += 1
    return pages


def page_source(doc_id: str) -> str:
    """The source of a document id (`source:path`), or UNRESOLVED for a reference that is none."""
    return doc_id.split(":", 1)[0] if ":" in doc_id else UNRESOLVED


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
    # Per page: how often production ranked it first and in a query's top documents, and how many
    # golden labels it has (gold references resolved to documents as the evaluation resolves them).
    pages: dict[str, PageCounts] = field(default_factory=dict)
    # The query-log lines the sample could not read (the first ones), and how many there were.
    refused_lines: list[dict] = field(default_factory=list)
    refused_count: int = 0
    null_distribution: list[float] = field(default_factory=list)
    distances: list[float] = field(default_factory=list)
    quantile: float = 0.95
    # Documents the sample's queries found first that no golden case names: where the golden set should
    # grow next ({source, doc_id, hits}, most hit first).
    uncovered_pages: list[dict] = field(default_factory=list)
    # The smallest share of the sample a new topic must hold before its expected MMD² reaches the
    # threshold (module docstring).
    min_detectable_share: float = float("nan")

    @property
    def drifted(self) -> bool:
        return self.distance > self.threshold

    @property
    def p_value(self) -> float:
        """Share of golden resamples at least as far apart as production is from the golden set (+1 smoothed)."""
        at_least = sum(1 for value in self.null_distribution if value >= self.distance)
        return (at_least + 1) / (len(self.null_distribution) + 1)

    def verdict(self) -> Verdict:
        """`drift_within_threshold` (WARN): the distance against the golden-calibrated threshold."""
        summary = (f"MMD² {self.distance:.4f} vs threshold {self.threshold:.4f} (p = {self.p_value:.3f}, "
                   f"calibrated on the golden set)")
        if self.drifted and self.candidates:
            summary += f"; top candidate: {self.candidates[0]['query'][:120]}"
        if not self.drifted:
            summary += f"; a new topic under {self.min_detectable_share:.0%} of the day cannot be seen"
        numbers = {"mmd2_distance": round(self.distance, 6), "drift_threshold": round(self.threshold, 6),
                   "min_detectable_share": round(self.min_detectable_share, 4),
                   "p_value": round(self.p_value, 4), "production_queries": self.production_queries,
                   "golden_cases": self.golden_cases}
        return Verdict(not self.drifted, summary, numbers,
                       {"candidates": Table(self.candidates[:10], ["excess_density", "distance", "query", "nearest_golden"])})


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
    shown_questions: Sequence[str] | None = None,
) -> DriftReport:
    """Production window against the golden set: distance and threshold, lengths, slice mix,
    unseen vocabulary, the pages production hits and golden cases label (`golden_docs`: document
    ids, resolved by the caller), and the candidates for new golden cases (by witness).
    `shown_questions` replace the golden questions where the report shows one (holdout withheld)."""
    index, distances = nearest(production_vectors, golden_vectors)
    bandwidth = median_bandwidth(golden_vectors)
    threshold, null = calibrate_threshold(golden_vectors, len(production_queries), bootstrap_samples, alpha, bandwidth=bandwidth)
    distance = mmd2(production_vectors, golden_vectors, bandwidth) if len(production_queries) > 1 else float("nan")
    excess = witness(production_vectors, golden_vectors, bandwidth)
    report = DriftReport(
        day=day,
        distance=distance,
        threshold=threshold,
        production_queries=len(production_queries),
        golden_cases=len(golden_questions),
        length_production=[len(q.split()) for q in production_queries],
        length_golden=[len(q.split()) for q in golden_questions],
        slice_mix=dict(Counter(golden_slices[i] for i in index)),
        golden_slice_mix=dict(Counter(golden_slices)),
        null_distribution=null,
        distances=distances.tolist(),
        quantile=1 - alpha,
        min_detectable_share=min_detectable_share(golden_vectors, threshold, bandwidth),
    )
    golden_vocabulary = {t for text in golden_texts for t in analyze(text)}
    unseen: Counter[str] = Counter()
    written: dict[str, Counter[str]] = {}
    for query in production_queries:
        pairs = [(w, t) for w, t in analyze_words(query) if t not in golden_vocabulary and not t.isdigit()]
        unseen.update({t for _, t in pairs})
        for word, term in pairs:
            written.setdefault(term, Counter())[word] += 1
    # Counted by term (so "excuse" and "excused" are one), shown as users most often wrote it.
    report.unseen_terms = [(written[t].most_common(1)[0][0], n) for t, n in unseen.most_common(20)]
    seen: set[str] = set()
    # Stable sort: ties (repeated queries) keep their sample order, so the report is reproducible.
    for position in np.argsort(-excess, kind="stable"):
        text = production_queries[position]
        if topic_text(text) in seen:
            continue
        seen.add(topic_text(text))
        report.candidates.append({"query": text, "excess_density": float(excess[position]),
                                  "distance": float(distances[position]),
                                  "nearest_golden": (shown_questions or golden_questions)[index[position]]})
        if len(report.candidates) >= candidates:
            break
    report.pages = page_counts(hit_docs, golden_docs)
    covered = {d for docs in golden_docs for d in docs}
    first_hits = Counter(docs[0] for docs in hit_docs if docs)
    report.uncovered_pages = [{"source": d.split(":", 1)[0], "doc_id": d, "hits": n}
                              for d, n in sorted(first_hits.items(), key=lambda item: (-item[1], item[0])) if d not in covered]
    return report
