"""What a stage of a source's run reports (counts, per-document failures, the switch's verdict) and the ledger rows it writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_pipeline.core.ingestion.coverage import CoverageReport
from rag_pipeline.core.ingestion.lifecycle import DeletionReport
from rag_pipeline.core.ingestion.proof_scope import ProofScope
from rag_pipeline.core.models import StageFailure


@dataclass
class StageReport:
    """What one stage did to one source in one run: counts and per-document failures."""

    source_id: str
    stage: str
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[StageFailure] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    # Discovery: how many files were skipped, by reason ("unsupported file type '.png'": 3).
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    # What the source as a whole was at (a git commit), for a source that says.
    revision: str | None = None

    def failure_rows(self) -> list[dict[str, str]]:
        return [{"doc_id": f.doc_id, "stage": f.stage, "reason": f.reason} for f in self.failures]


@dataclass
class IndexReport(StageReport):
    """The switch: whether it committed, and the two proofs it was judged by."""

    switched: bool = False
    coverage: CoverageReport | None = None
    deletions: DeletionReport | None = None
    # The state the switch recorded (`storage/states.py`), or None, and the manifest hash of what it serves.
    state: str | None = None
    manifest_hash: str | None = None
    # Why the served rows were left alone: the source is pinned to a state or disabled (a sentence).
    pinned: str | None = None
    # The proofs the switch ran: full (the whole source) or incremental (what the run changed), and why.
    proof: ProofScope | None = None

    @property
    def refusal(self) -> str | None:
        """Why the switch was refused (None when it committed)."""
        if self.switched or self.pinned:
            return None
        reasons = []
        if self.coverage is not None and not self.coverage.passed:
            reasons.append(f"coverage: {len(self.coverage.uncovered)} document(s) neither queryable nor failed with a reason")
        if self.deletions is not None and not self.deletions.passed:
            reasons.append(f"deletions_propagated: {len(self.deletions.problems())} problem(s)")
        return "; ".join(reasons) or "switch refused"


def ledger_entry(doc_id: str, source_id: str, content_hash: str | None, stage: str, status: str,
                 reason: str | None = None, parser_version: str | None = None) -> dict:
    """One ledger row: a document's outcome at one stage, for one version of its content."""
    return {"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": status,
            "content_hash": content_hash, "reason": reason, "parser_version": parser_version}

