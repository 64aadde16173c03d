"""The coverage ledger's verdict: is every supported document queryable, or is its failure on record?"""

from __future__ import annotations

from collections import Counter
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
    """
    with store.db.session():
        manifest = store.staging.discovery_rows(source_id, ("doc_id", "content_hash", "supported", "skip_reason"))
        ledger = store.ledger.rows(source_id)
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
