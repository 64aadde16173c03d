"""The coverage ledger's verdict: is every supported document queryable, or is its failure on record?"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rag_pipeline.core.models import STAGES
from rag_pipeline.core.store import DuckDBStore


@dataclass
class CoverageReport:
    source_id: str
    supported: int
    counts_by_stage: dict[str, int]
    failed: list[dict] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)
    # Uncovered document -> how far its current version got ("embedded, never indexed").
    stopped_after: dict[str, str] = field(default_factory=dict)

    def uncovered_rows(self) -> list[dict[str, str]]:
        return [{"doc_id": d, "where": self.stopped_after.get(d, "")} for d in self.uncovered]

    @property
    def passed(self) -> bool:
        return not self.uncovered

    @property
    def queryable_share(self) -> float:
        return self.counts_by_stage.get("queryable", 0) / self.supported if self.supported else 1.0


def coverage_report(store: DuckDBStore, source_id: str) -> CoverageReport:
    """Per stage, how many of the source's current documents passed; which failed and why.

    The current documents are those of the latest discovery. A document is covered when its
    current content is queryable, or when a failure of its current content is recorded at some
    stage. Anything else fell through the pipeline silently.
    """
    manifest = store.discovery_rows(source_id)
    ledger = store.ledger_rows(source_id)
    current = {r["doc_id"]: r["content_hash"] for r in manifest if r["supported"]}
    by_doc: dict[str, dict[str, dict]] = {}
    for row in ledger:
        by_doc.setdefault(row["doc_id"], {})[row["stage"]] = row
    counts: Counter[str] = Counter()
    failed, uncovered = [], []
    stopped: dict[str, str] = {}
    for doc_id, content_hash in current.items():
        stages = by_doc.get(doc_id, {})
        for stage in STAGES:
            row = stages.get(stage)
            if row and row["status"] == "ok" and row["content_hash"] in (None, content_hash):
                counts[stage] += 1
        failure = next(
            (stages[s] for s in STAGES if s in stages and stages[s]["status"] == "failed"
             and stages[s]["content_hash"] in (None, content_hash)),
            None,
        )
        queryable = stages.get("queryable")
        is_queryable = queryable is not None and queryable["status"] == "ok" and queryable["content_hash"] == content_hash
        if failure is not None:
            failed.append({"doc_id": doc_id, "stage": failure["stage"], "reason": failure["reason"],
                           "since": failure["updated_at"], "run_id": failure["run_id"]})
        elif not is_queryable:
            uncovered.append(doc_id)
            reached = [s for s in STAGES if s in stages and stages[s]["status"] == "ok"
                       and stages[s]["content_hash"] in (None, content_hash)]
            missing = next((s for s in STAGES if s not in reached), "queryable")
            stopped[doc_id] = f"{reached[-1] if reached else 'not even discovered'}, never {missing}"
    skipped = [{"doc_id": r["doc_id"], "reason": r["skip_reason"]} for r in manifest if not r["supported"]]
    return CoverageReport(source_id, len(current), {s: counts.get(s, 0) for s in STAGES}, failed, uncovered, skipped,
                          stopped)
