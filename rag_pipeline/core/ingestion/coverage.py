"""The coverage ledger's verdict: is every supported document queryable, or is its failure on record?"""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_pipeline.core.models import STAGES
from rag_pipeline.core.storage import Store
from rag_pipeline.core.verdicts import Table, Verdict, listed


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

    def verdict(self) -> Verdict:
        """`coverage`: every current document queryable or failed with a reason."""
        numbers = {f"{stage}_documents": n for stage, n in self.counts_by_stage.items()}
        numbers |= {"supported_documents": self.supported, "failed_documents": len(self.failed),
                    "uncovered_documents": len(self.uncovered), "queryable_share": round(self.queryable_share, 4)}
        tables = {"failures": Table(self.failed, ["doc_id", "stage", "reason"])}
        if self.uncovered:
            tables["uncovered"] = Table(self.uncovered_rows(), ["doc_id", "where"])
        summary = (f"{self.counts_by_stage.get('queryable', 0)} of {self.supported} documents queryable, "
                   f"{len(self.failed)} failed with a reason" if self.passed else
                   f"{len(self.uncovered)} document(s) neither queryable nor failed with a reason: {listed(self.uncovered)}")
        return Verdict(self.passed, summary, numbers, tables)

    def failed_documents_verdict(self, run_id: str) -> Verdict:
        """`no_failed_documents` (WARN): the documents whose current version failed a stage."""
        new = [f for f in self.failed if f.get("run_id") == run_id]
        summary = ("no document failed" if not self.failed else
                   f"{len(self.failed)} document(s) failed ({len(new)} in this run): "
                   + listed([f"{f['doc_id']} at {f['stage']} ({f['reason']})" for f in self.failed], 3))
        return Verdict(not self.failed, summary, {"failed_documents": len(self.failed), "failed_in_this_run": len(new)},
                       {"failures": Table(self.failed, ["doc_id", "stage", "reason", "since"])})

    @property
    def passed(self) -> bool:
        return not self.uncovered

    @property
    def queryable_share(self) -> float:
        return self.counts_by_stage.get("queryable", 0) / self.supported if self.supported else 1.0


def coverage_report(store: Store, source_id: str) -> CoverageReport:
    """Per stage, how many of the source's current documents passed; which failed and why.

    The current documents are those of the latest discovery. A document is covered when its
    current content is queryable, or when a failure of its current content is recorded at some
    stage. Anything else fell through the pipeline silently.

    Counted by the database (joins of the discovery and the ledger): the rows of the covered
    documents never come to Python, so a run at 100k documents does not read 600k ledger rows.
    """
    stages = list(STAGES)
    supported, counts, failures, uncovered, reached, skipped = store.ledger.coverage_facts(source_id, stages)
    # A document's failure: the one at its earliest failed stage (documents in the database's order).
    first: dict[str, dict] = {}
    for row in failures:
        kept = first.get(row["doc_id"])
        if kept is None or stages.index(row["stage"]) < stages.index(kept["stage"]):
            first[row["doc_id"]] = row
    failed = [{"doc_id": d, "stage": row["stage"], "reason": row["reason"], "since": row["updated_at"],
               "run_id": row["run_id"]} for d, row in first.items()]
    ok: dict[str, set[str]] = {}
    for doc_id, stage in reached:
        ok.setdefault(doc_id, set()).add(stage)
    stopped: dict[str, str] = {}
    for doc_id in uncovered:
        passed = [s for s in STAGES if s in ok.get(doc_id, ())]
        missing = next((s for s in STAGES if s not in passed), "queryable")
        stopped[doc_id] = f"{passed[-1] if passed else 'not even discovered'}, never {missing}"
    return CoverageReport(source_id, supported, {s: int(counts.get(s, 0)) for s in STAGES}, failed, uncovered, skipped,
                          stopped)
