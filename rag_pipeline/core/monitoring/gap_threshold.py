"""The evidence score and the weak-evidence threshold: under it, a question counts as one the
corpus cannot answer.

Calibrated on the golden set, whose cases say whether the corpus answers them. Each case outside
holdout (holdout never tunes anything) is searched as its own caller would (`evidence.py`).

The evidence score of a question puts its two measures on one scale, the golden set's answerable
cases (`EvidenceScale`):

    score = (F_cos(best cosine) + F_cov(coverage)) / 2

with F the share of answerable cases whose measure is at or under the question's (its percentile
rank; no evidence at all ranks 0). Neither measure is weighted by a constant fitted anywhere: each
counts as far as it ranks a question among questions the corpus answers, and the scores of the
answerable cases themselves spread over (0, 1]. Then, on the cases' scores,

    t_J   = the threshold maximising Youden's J = TPR - FPR over answerable (score >= t) against
            unanswerable (score < t) cases: the same argmax as balanced accuracy (J = 2 BA - 1);
    t_cap = the nearest-rank `max_flag_rate` quantile of the answerable cases' best scores, so that
            fewer than that share of answerable cases score under it;
    t     = min(t_J, t_cap).

The cap exists because golden sets are written with near-miss unanswerable cases (the topic is in
the corpus, the fact is not): J alone then sets t among the scores of answered questions and calls
much ordinary traffic a gap. A golden set without unanswerable cases gives t = t_cap (stated).

The same golden questions set the distance the day's questions are grouped into topics at
(`gap_topics.calibrated_distance`, from the answerable cases' embeddings): calibrated here with
the threshold since both read one search of the golden set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.answers.abstention import best_threshold
from rag_pipeline.core.evaluation.golden.holdout import withheld
from rag_pipeline.core.evaluation.scoring.metrics import nearest_rank_quantile
from rag_pipeline.core.monitoring.evidence import Evidence, Question, best_evidence
from rag_pipeline.core.monitoring.gap_topics import calibrated_distance
from rag_pipeline.core.retrieval.retriever import Retriever


class NoAnswerableCasesError(InputError):
    """The golden set has no answerable case to calibrate on."""


@dataclass(frozen=True)
class EvidenceScale:
    """The answerable golden cases' best cosines and coverages, sorted: what a question's measures rank
    among (module docstring). Empty: the cosine alone is the score (no golden case to rank among)."""

    cosines: tuple[float, ...] = ()
    coverages: tuple[float, ...] = ()

    @classmethod
    def of(cls, answerable: Sequence[Evidence]) -> EvidenceScale:
        return cls(tuple(sorted(e.best_score if e.best_score is not None else 0.0 for e in answerable)),
                   tuple(sorted(e.coverage if e.coverage is not None else 0.0 for e in answerable)))

    def score(self, evidence: Evidence) -> float:
        if evidence.best_score is None:
            return 0.0
        if not self.cosines:
            return evidence.best_score
        return (percentile_rank(self.cosines, evidence.best_score) + percentile_rank(self.coverages, evidence.coverage or 0.0)) / 2

    def apply(self, evidence: Sequence[Evidence]) -> list[Evidence]:
        """The evidence with its strength set."""
        return [replace(e, strength=self.score(e)) for e in evidence]


def percentile_rank(sorted_values: Sequence[float], value: float) -> float:
    """The share of the values at or under `value`."""
    return float(np.searchsorted(np.asarray(sorted_values), value, side="right")) / len(sorted_values)


@dataclass(frozen=True)
class WeakThreshold:
    """The threshold, how it was set, and what it does on the golden set it was set on."""

    value: float
    rule: str
    answerable: int
    unanswerable: int
    # Share of answerable golden cases under the threshold, and of unanswerable ones (NaN without any).
    answerable_flagged: float
    unanswerable_caught: float
    # The answerable cases' evidence scores: what a topic's scores are compared with as a group (gap_group.py).
    answerable_scores: tuple[float, ...] = ()
    # The scale a day's questions are scored on (the answerable cases' measures).
    scale: EvidenceScale = field(default_factory=EvidenceScale)
    # The cosine distance the day's questions are grouped into topics at (gap_topics.py), and the
    # quantile of the answerable cases' pairwise distances it is (NaN: not calibrated).
    topic_distance: float = math.nan
    topic_quantile: float = math.nan

    def measures(self) -> dict[str, float]:
        return {"weak_threshold": self.value, "golden_answerable_flagged": self.answerable_flagged,
                "golden_unanswerable_caught": self.unanswerable_caught, "topic_distance": self.topic_distance,
                "topic_quantile": self.topic_quantile}


def calibrate(scores: Sequence[float], answerable: Sequence[bool], max_flag_rate: float) -> WeakThreshold:
    """The threshold of the module docstring from the cases' best scores and labels."""
    kept = sum(1 for a in answerable if a)
    if not kept:
        raise NoAnswerableCasesError("the golden set has no answerable case outside holdout: the weak-evidence "
                                     "threshold of coverage gaps needs some (mark cases answerable: true)")
    answered = [s for s, a in zip(scores, answerable, strict=True) if a]
    unanswered = [s for s, a in zip(scores, answerable, strict=True) if not a]
    cap = nearest_rank_quantile(answered, max_flag_rate)
    if unanswered:
        youden = best_threshold(scores, answerable)
        value = min(youden, cap)
        rule = (f"Youden's J on {len(answered)} answerable and {len(unanswered)} unanswerable golden cases "
                f"({youden:.4f})" + (f", capped at the {max_flag_rate:.0%} quantile of answerable cases' scores "
                                     f"({cap:.4f})" if cap < youden else ""))
    else:
        value = cap
        rule = (f"no unanswerable golden case: the {max_flag_rate:.0%} quantile of {len(answered)} answerable "
                f"cases' scores")
    return WeakThreshold(
        value=float(value), rule=rule, answerable=len(answered), unanswerable=len(unanswered),
        answerable_flagged=sum(1 for s in answered if s < value) / len(answered),
        unanswerable_caught=sum(1 for s in unanswered if s < value) / len(unanswered) if unanswered else math.nan,
        answerable_scores=tuple(float(s) for s in answered),
    )


def golden_threshold(cases: Sequence, retriever: Retriever, max_flag_rate: float,
                     topic_quantile: float) -> WeakThreshold:
    """Calibrate on the golden cases outside holdout, each searched with its own tenant and roles and
    scored on the scale of the answerable ones; a case whose caller may see nothing scores 0. The
    topic cut is the `topic_quantile` of the answerable questions' pairwise distances."""
    tunable = [c for c in cases if not withheld(c)]
    evidence = best_evidence(retriever, [Question(c.question, c.tenant, tuple(c.roles)) for c in tunable])
    answerable = [e for e, c in zip(evidence, tunable, strict=True) if c.answerable]
    scale = EvidenceScale.of(answerable)
    threshold = calibrate([scale.score(e) for e in evidence], [c.answerable for c in tunable], max_flag_rate)
    distance = calibrated_distance(np.array([e.vector for e in answerable]), topic_quantile)
    return replace(threshold, scale=scale, topic_distance=distance, topic_quantile=topic_quantile)
