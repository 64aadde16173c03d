"""Coverage gaps: topics of production questions the served index holds no good evidence for.

A day's examined questions are grouped into topics (`gap_topics.py`, cut at `distance`, which the
day calibrates on the golden set: `gap_topics.calibrated_distance`). A topic of
at least `min_queries` questions is a gap when its questions' evidence scores (`gap_threshold.py`:
cosine and term coverage ranked among the golden answerable cases) sit lower, as a group, than the
golden set's answerable cases' (`gap_group.py`: one-sided Mann-Whitney, the day's
topics adjusted together by Benjamini-Hochberg, significant at `alpha`), even when few of them fall
under the per-question threshold. The weak questions left (evidence score under the weak-evidence
threshold) are grouped into topics among themselves, and one of at least
`min_queries` is a gap too: a handful of questions with no evidence at all is a gap whatever the
rest of its topic does. Gaps are ranked by their number of questions. Each shows its label
(distinctive terms), its questions and their share of the day's examined questions, the tenants
that asked, and its nearest document and section (the best chunk any of its questions reached,
with its cosine).

Identity across days: a day's topic is the same gap as an open gap of an earlier day when their
centroids (mean of unit question vectors) are within `distance` (cosine) of each other, each
earlier gap matched at most once, closest pairs first; it keeps that gap's id and first day.

Closing: an open gap of an earlier day that is not a gap again that day is searched again, question by
question with each one's caller context, against what the index serves now. When at least half of
its questions (`CLOSING_SHARE`) reach the threshold and, as a group, they no longer score lower than
the golden answerable cases (the same test, alone, at `alpha`), it is closed by the document that
most of the answered ones find first (ties: the higher best score).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date

import numpy as np

from rag_pipeline.core.monitoring.evidence import Evidence, Question
from rag_pipeline.core.monitoring.gap_group import adjusted_pvalues, is_low
from rag_pipeline.core.monitoring.gap_topics import distinctive_terms, topics
from rag_pipeline.core.vectors import normalise_rows

# Share of a gap's questions that must reach the threshold for the gap to close.
CLOSING_SHARE = 0.5
NO_TENANT = "(no tenant)"


@dataclass(frozen=True)
class Member:
    """One question of a gap when it was last searched: its best chunk's cosine and its evidence score."""

    question: Question
    best_score: float | None
    score: float | None = None


@dataclass(frozen=True)
class Gap:
    gap_id: str
    first_seen: date
    last_seen: date
    label: str
    members: tuple[Member, ...]
    share: float
    nearest_doc: str | None
    nearest_section: str
    best_score: float | None
    centroid: tuple[float, ...] = field(repr=False)
    closed_by: str | None = None
    closed_on: date | None = None

    @property
    def count(self) -> int:
        return len(self.members)

    @property
    def tenants(self) -> list[str]:
        return sorted({m.question.tenant or NO_TENANT for m in self.members})

    @property
    def status(self) -> str:
        return "closed" if self.closed_by else "open"

    def new_on(self, day: date) -> bool:
        return self.first_seen == day and not self.closed_by

    def as_json(self) -> dict:
        """What `monitor --json` shows: all of the gap's questions under `queries`."""
        return {"gap_id": self.gap_id, "label": self.label, "queries": [m.question.text for m in self.members],
                "count": self.count, "share": round(self.share, 4), "tenants": self.tenants,
                "nearest_doc": self.nearest_doc, "nearest_section": self.nearest_section,
                "best_score": None if self.best_score is None else round(self.best_score, 4),
                "first_seen": self.first_seen.isoformat(), "last_seen": self.last_seen.isoformat(),
                "status": self.status, "closed_by": self.closed_by,
                "closed_on": self.closed_on.isoformat() if self.closed_on else None}


def _centroid(vectors: np.ndarray) -> np.ndarray:
    mean = normalise_rows(np.asarray(vectors, dtype=np.float64)).mean(axis=0)
    norm = np.linalg.norm(mean)
    return mean / norm if norm else mean


def _gap_id(day: date, questions: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join([day.isoformat(), *sorted(questions)]).encode()).hexdigest()
    return f"gap-{digest[:10]}"


def match(centroids: Sequence[np.ndarray], earlier: Sequence[Gap], distance: float) -> list[Gap | None]:
    """For each new centroid, the earlier open gap it continues (or None): pairs within `distance`,
    closest first, each earlier gap used once."""
    matched: list[Gap | None] = [None] * len(centroids)
    if not centroids or not earlier:
        return matched
    similarity = np.array(centroids) @ np.array([g.centroid for g in earlier]).T
    pairs = sorted(((-similarity[i, j], i, j) for i in range(len(centroids)) for j in range(len(earlier))
                    if 1.0 - similarity[i, j] <= distance))
    used: set[int] = set()
    for _, i, j in pairs:
        if matched[i] is None and j not in used:
            matched[i], used = earlier[j], used | {j}
    return matched


def _score(item: Evidence) -> float:
    """A question's evidence score for the group test; nothing at all counts as 0 (as in the calibration)."""
    return item.score if item.score is not None else 0.0


def _group(items: Sequence[Evidence], vectors_of: Sequence[Evidence], distance: float) -> list[list[Evidence]]:
    numbers = topics(np.array([e.vector for e in vectors_of]), distance)
    groups: dict[int, list[Evidence]] = {}
    for item, number in zip(items, numbers, strict=True):
        groups.setdefault(number, []).append(item)
    return list(groups.values())


def gap_topics(evidence: Sequence[Evidence], threshold: float, distance: float, min_queries: int,
               golden: Sequence[float], alpha: float) -> list[list[Evidence]]:
    """The day's topics that are gaps (see the module docstring): low topics first, then the
    topics of the weak questions left."""
    candidates = [g for g in _group(evidence, evidence, distance) if len(g) >= min_queries]
    adjusted = adjusted_pvalues([[_score(e) for e in g] for g in candidates], golden)
    low = [g for g, p in zip(candidates, adjusted, strict=True) if p <= alpha]
    in_low = {id(e) for g in low for e in g}
    weak = [e for e in evidence if e.weak(threshold) and id(e) not in in_low]
    return low + [g for g in _group(weak, weak, distance) if len(g) >= min_queries]


def find_gaps(day: date, evidence: Sequence[Evidence], threshold: float, earlier: Sequence[Gap],
              distance: float, min_queries: int, golden: Sequence[float] = (), alpha: float = 0.05) -> list[Gap]:
    """The day's gaps from its examined questions' evidence, largest first (see the module docstring);
    `golden` the golden set's answerable scores the group test compares with."""
    kept = gap_topics(evidence, threshold, distance, min_queries, golden, alpha)
    if not kept:
        return []
    in_gaps = {id(e) for group in kept for e in group}
    labels = distinctive_terms([[e.question.text for e in group] for group in kept],
                               [e.question.text for e in evidence if id(e) not in in_gaps])
    centroids = [_centroid(np.array([e.vector for e in group])) for group in kept]
    gaps = []
    for group, terms, centroid, continued in zip(kept, labels, centroids, match(centroids, earlier, distance), strict=True):
        nearest = max((e for e in group if e.best_score is not None), key=lambda e: e.best_score, default=None)
        questions = [e.question.text for e in group]
        gaps.append(Gap(
            gap_id=continued.gap_id if continued else _gap_id(day, questions),
            first_seen=continued.first_seen if continued else day, last_seen=day,
            label=", ".join(terms) or questions[0][:60],
            members=tuple(Member(e.question, e.best_score, e.score) for e in group),
            share=len(group) / len(evidence),
            nearest_doc=nearest.doc_id if nearest else None, nearest_section=nearest.section if nearest else "",
            best_score=nearest.best_score if nearest else None, centroid=tuple(float(x) for x in centroid),
        ))
    return sorted(gaps, key=lambda g: (-g.count, g.label, g.gap_id))


def closing_document(evidence: Sequence[Evidence], threshold: float) -> str | None:
    """The document that closes a gap whose questions now have this evidence, or None while fewer
    than CLOSING_SHARE of them reach the threshold."""
    answered = [e for e in evidence if not e.weak(threshold)]
    if not evidence or len(answered) < CLOSING_SHARE * len(evidence):
        return None
    votes = Counter(e.doc_id for e in answered)
    best = {doc: max(e.best_score for e in answered if e.doc_id == doc) for doc in votes}
    return min(votes, key=lambda doc: (-votes[doc], -best[doc], doc))


def closed(gap: Gap, evidence: Sequence[Evidence], threshold: float, day: date, golden: Sequence[float] = (),
           alpha: float = 0.05) -> Gap | None:
    """The gap closed on `day`, its questions' scores brought up to date; None while it stays open:
    fewer than CLOSING_SHARE of them reach the threshold, or as a group they still score lower
    than the golden set's answerable cases (`golden`) at `alpha`."""
    document = closing_document(evidence, threshold)
    if document is None or is_low([_score(e) for e in evidence], golden, alpha):
        return None
    members = tuple(Member(e.question, e.best_score, e.score) for e in evidence)
    return replace(gap, members=members, closed_by=document, closed_on=day)
