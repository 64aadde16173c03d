"""Coverage gaps: topics of production questions the served index holds no good evidence for.

A day's gaps are its weak questions (best evidence under the weak-evidence threshold,
`gap_threshold.py`) grouped into topics (`gap_topics.py`); a topic with at least `min_queries`
questions is a gap, ranked by its number of questions. Each gap shows its label (distinctive
terms), its questions and their share of the day's examined questions, the tenants that asked, and
its nearest document and section (the best chunk any of its questions reached, with that score).

Identity across days: a day's topic is the same gap as an open gap of an earlier day when their
centroids (mean of unit question vectors) are within `distance` (cosine) of each other, each
earlier gap matched at most once, closest pairs first; it keeps that gap's id and first day.

Closing: an open gap of an earlier day that is not asked again weakly is searched again, question by
question with each one's caller context, against what the index serves now. When at least half of
its questions (`CLOSING_SHARE`) reach the threshold, it is closed by the document that most of the
answered ones find first (ties: the higher best score).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date

import numpy as np

from rag_pipeline.core.monitoring.evidence import Evidence, Question
from rag_pipeline.core.monitoring.gap_topics import distinctive_terms, topics
from rag_pipeline.core.vectors import normalise_rows

# Share of a gap's questions that must reach the threshold for the gap to close.
CLOSING_SHARE = 0.5
NO_TENANT = "(no tenant)"


@dataclass(frozen=True)
class Member:
    """One question of a gap with its best evidence score when it was last searched."""

    question: Question
    best_score: float | None


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


def find_gaps(day: date, evidence: Sequence[Evidence], threshold: float, earlier: Sequence[Gap],
              distance: float, min_queries: int) -> list[Gap]:
    """The day's gaps from its examined questions' evidence, largest first (see the module docstring)."""
    weak = [e for e in evidence if e.weak(threshold)]
    if not weak:
        return []
    numbers = topics(np.array([e.vector for e in weak]), distance)
    groups: dict[int, list[Evidence]] = {}
    for item, number in zip(weak, numbers, strict=True):
        groups.setdefault(number, []).append(item)
    kept = [group for group in groups.values() if len(group) >= min_queries]
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
            members=tuple(Member(e.question, e.best_score) for e in group),
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


def closed(gap: Gap, evidence: Sequence[Evidence], threshold: float, day: date) -> Gap | None:
    """The gap closed on `day`, its questions' scores brought up to date; None while it stays open."""
    document = closing_document(evidence, threshold)
    if document is None:
        return None
    members = tuple(Member(e.question, e.best_score) for e in evidence)
    return replace(gap, members=members, closed_by=document, closed_on=day)
