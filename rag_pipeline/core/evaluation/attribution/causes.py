"""The vocabulary of causes and what attribution finds for one case: the metric that moved, the
cause, the counterfactual that proves it, and every candidate tried."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# The causes, in the order they are tried (`candidates.py`), then the verdict when none recovers.
GOLDEN_CHANGED = "golden_changed"  # the case's own labels differ between the two golden revisions
CONFIG_CHANGED = "config_changed"  # a recorded setting differs (the key is named)
MODEL_CHANGED = "model_changed"  # the embedder's identity differs
GOLD_DELETED = "gold_deleted"  # a gold document is no longer served
GOLD_CHANGED = "gold_changed"  # the gold document's text (or who may see it) changed; the section is named
GOLD_RECHUNKED = "gold_rechunked"  # the same text, other chunks (a chunker or parser change)
OUTRANKED = "outranked"  # a new or changed document now ranks above the gold (or no longer does)
UNEXPLAINED = "unexplained"  # no single change undone brings the case back
KINDS = (GOLDEN_CHANGED, CONFIG_CHANGED, MODEL_CHANGED, GOLD_DELETED, GOLD_CHANGED, GOLD_RECHUNKED, OUTRANKED,
         UNEXPLAINED)
# A replayed value equal to the baseline's within this is the baseline's value.
RECOVERY_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Cause:
    kind: str
    doc: str | None = None  # the document to look at (`source:path`), where the cause is one
    detail: str = ""

    def as_json(self) -> dict:
        return {"kind": self.kind, "doc": self.doc, "detail": self.detail}


@dataclass(frozen=True)
class Tried:
    """One candidate cause and its counterfactual: the case replayed with that change undone."""

    cause: Cause
    undone: str  # what the replay changed back, in words
    metric: float | None = None  # the case's metric in the replay (None: the replay could not be made)
    first_gold_rank: int | None = None
    recovered: bool = False
    # Why the counterfactual could not be made (the rows of that version were not kept, say).
    untestable: str = ""

    def as_json(self) -> dict:
        return {"kind": self.cause.kind, "doc": self.cause.doc, "undone": self.undone, "metric": self.metric,
                "first_gold_rank": self.first_gold_rank, "recovered": self.recovered,
                **({"untestable": self.untestable} if self.untestable else {})}


@dataclass(frozen=True)
class CaseChange:
    """A case whose metric moved between the baseline and the candidate, and why."""

    case_id: str
    slice: str
    metric: str
    baseline: float
    candidate: float
    baseline_rank: int | None
    candidate_rank: int | None
    # Counted by the gate in both evaluations; False when its labels were stale on one side (a
    # deleted gold document makes a case stale: its value here is what its ranking scores).
    scored: bool
    cause: Cause
    counterfactual: Tried | None
    tried: tuple[Tried, ...] = ()

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def fell(self) -> bool:
        return self.delta < 0

    def as_json(self) -> dict:
        proof = None if self.counterfactual is None else {
            "undone": self.counterfactual.undone, "metric": self.counterfactual.metric,
            "first_gold_rank": self.counterfactual.first_gold_rank, "recovered": self.counterfactual.recovered}
        return {"case_id": self.case_id, "slice": self.slice, "metric": self.metric, "baseline": self.baseline,
                "candidate": self.candidate, "delta": self.delta,
                "first_gold_rank": {"baseline": self.baseline_rank, "candidate": self.candidate_rank},
                "scored": self.scored, "cause": self.cause.as_json(), "counterfactual": proof,
                "tried": [t.as_json() for t in self.tried]}


@dataclass(frozen=True)
class CaseChanges:
    """Every case that moved against one baseline, falls first, and what could not be shown."""

    baseline_id: str
    changes: list[CaseChange] = field(default_factory=list)
    # Holdout cases that moved: counted, never named (holdout stays unseen).
    holdout_moved: int = 0
    # What limited the search for causes (a baseline state no longer kept, settings not recorded).
    notes: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        """Cause kind -> cases, every kind present (0 where none)."""
        found = Counter(c.cause.kind for c in self.changes)
        return {kind: found.get(kind, 0) for kind in KINDS}

    @property
    def fell(self) -> list[CaseChange]:
        return [c for c in self.changes if c.fell]

    @property
    def unproven(self) -> list[CaseChange]:
        """Causes claimed without a counterfactual that recovers: none, by construction (tests hold it)."""
        return [c for c in self.changes if c.cause.kind != UNEXPLAINED
                and (c.counterfactual is None or not c.counterfactual.recovered)]


def recovered(metric_value: float | None, rank: int | None, baseline_value: float, baseline_rank: int | None,
              candidate_rank: int | None) -> bool:
    """Whether a replay brings the case back: its metric equals the baseline's (within
    RECOVERY_TOLERANCE), or, when the first gold document's rank moved, it is back at the baseline's."""
    if metric_value is not None and abs(metric_value - baseline_value) <= RECOVERY_TOLERANCE:
        return True
    return baseline_rank != candidate_rank and rank == baseline_rank and metric_value is not None
