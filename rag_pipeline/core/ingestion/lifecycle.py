"""Proofs that the index matches its sources: deletions propagated, freshness, golden labels current."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from rag_pipeline.config import SourceConfig
from rag_pipeline.core.ingestion import discovery
from rag_pipeline.core.ingestion.embedding import Embedder
from rag_pipeline.core.ingestion.lexical import analyze
from rag_pipeline.core.models import DiscoveredFile, SearchFilters
from rag_pipeline.core.storage import Store, utcnow
from rag_pipeline.core.verdicts import Table, Verdict, listed

# A deleted document must not come back from a search for its own text this deep.
DELETION_PROBE_DEPTH = 100


@dataclass
class DeletionReport:
    """Deleted documents that left something behind, and where."""

    checked: list[str]
    remnants: dict[str, list[str]] = field(default_factory=dict)
    retrievable: dict[str, str] = field(default_factory=dict)
    orphans: dict[str, list[str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not (self.remnants or self.retrievable or self.orphans)

    def problems(self) -> list[dict[str, str]]:
        rows = [{"doc_id": d, "problem": "rows left in " + ", ".join(t)} for d, t in self.remnants.items()]
        rows += [{"doc_id": d, "problem": f"still retrievable: {how}"} for d, how in self.retrievable.items()]
        rows += [{"doc_id": d, "problem": "orphan rows in " + ", ".join(t)} for d, t in self.orphans.items()]
        return rows

    def verdict(self) -> Verdict:
        """`deletions_propagated`: nothing of a deleted document left anywhere, none retrievable."""
        problems = self.problems()
        summary = (f"{len(self.checked)} deleted document(s) fully gone and not retrievable" if self.passed
                   else listed([f"{p['doc_id']}: {p['problem']}" for p in problems], 3))
        numbers = {"deleted_documents_checked": len(self.checked), "documents_with_remnants": len(self.remnants),
                   "documents_still_retrievable": len(self.retrievable), "orphan_documents": len(self.orphans)}
        return Verdict(self.passed, summary, numbers, {"problems": Table(problems, ["doc_id", "problem"])})


def deletion_report(
    store: Store, source_id: str, embedder: Embedder, run_id: str | None = None,
    probe_vectors: Mapping[str, np.ndarray] | None = None,
) -> DeletionReport:
    """Nothing of a deleted document is left in any table, and retrieval cannot return it.

    Every tombstoned document of the source is checked against every table; those deleted in
    `run_id` (all, when None) are also searched for with their former title and opening text,
    with no filter, by both retrievers: neither may return them in the top 100. Orphan rows
    (a chunk without its document, a vector or posting without its chunk) fail the check too.
    `probe_vectors` holds those texts already encoded (the switch encodes them before its
    transaction); the rest are encoded with `embedder`.
    """
    tombstones = store.served.tombstones(source_id)
    report = DeletionReport(checked=[t["doc_id"] for t in tombstones])
    report.remnants = store.served.remnants(report.checked)
    report.orphans = store.served.orphans()
    probes = [t for t in tombstones if run_id is None or t["run_id"] == run_id]
    if probes:
        queries = [f"{t['title'] or ''} {t['opening_text'] or ''}" for t in probes]
        known = probe_vectors or {}
        missing = [q for t, q in zip(probes, queries) if t["doc_id"] not in known]
        encoded = iter(embedder.encode(missing)) if missing else iter(())
        vectors = np.stack([known[t["doc_id"]] if t["doc_id"] in known else next(encoded) for t in probes])
        unfiltered = SearchFilters(unrestricted=True)
        search = store.search.in_database()  # inside the switch: see Search.in_database
        dense = search.dense_search(vectors, DELETION_PROBE_DEPTH, unfiltered)
        lexical = search.bm25_search([analyze(q) for q in queries], DELETION_PROBE_DEPTH, unfiltered, 0.9, 0.4)
        for tombstone, dense_hits, bm25_hits in zip(probes, dense, lexical):
            for name, hits in (("dense", dense_hits), ("bm25", bm25_hits)):
                rank = next((h.rank for h in hits if h.doc_id == tombstone["doc_id"]), None)
                if rank is not None:
                    report.retrievable[tombstone["doc_id"]] = f"{name} rank {rank} for its own former text"
    return report


@dataclass
class FreshnessReport:
    source_id: str
    max_staleness_hours: float
    stale: list[dict] = field(default_factory=list)
    index_age_hours: float | None = None
    indexed_documents: int = 0

    @property
    def oldest_stale_hours(self) -> float:
        return max((s["age_hours"] for s in self.stale), default=0.0)

    @property
    def passed(self) -> bool:
        return self.oldest_stale_hours < self.max_staleness_hours

    def verdict(self) -> Verdict:
        """`sources_fresh`: the oldest change not yet indexed is younger than the limit."""
        summary = (f"{len(self.stale)} unindexed change(s), oldest {self.oldest_stale_hours:.1f} h "
                   f"(limit {self.max_staleness_hours:g} h)")
        if not self.passed:
            summary += ": " + listed([f"{s['doc_id']} ({s['reason']}, {s['age_hours']:.0f} h)" for s in self.stale], 3)
        numbers = {"stale_documents": len(self.stale), "oldest_stale_hours": round(self.oldest_stale_hours, 3),
                   "max_staleness_hours": self.max_staleness_hours, "indexed_documents": self.indexed_documents}
        if self.index_age_hours is not None:
            numbers["index_age_hours"] = round(self.index_age_hours, 3)
        return Verdict(self.passed, summary, numbers, {"stale": Table(self.stale, ["doc_id", "reason", "age_hours"])})


def freshness_report(
    store: Store, source: SourceConfig, max_staleness_hours: float, now: datetime | None = None
) -> FreshnessReport:
    """Is what the index serves what the source holds now?

    A document is stale when its served content hash differs from the file's current hash (its
    new version failed or was not indexed yet, or the file cannot be read now), when the file is
    gone but still served, or when a supported file was never indexed and has no recorded
    failure (a failed document that serves nothing is the failed-documents check's business).
    Its age is the time since the file last changed (for a vanished file: since the source's
    last successful run). The check fails when the oldest unindexed change is older than
    `max_staleness_hours`.
    """
    now = now or utcnow()
    with store.db.session():
        served = {d["doc_id"]: d for d in store.served.indexed_documents(source.source_id)}
        failed = {d: r["content_hash"] for d, r in store.ledger.failures(source.source_id).items()}
        last_success = store.ledger.last_success(source.source_id)
    report = FreshnessReport(source.source_id, max_staleness_hours, indexed_documents=len(served))
    if last_success is not None:
        report.index_age_hours = (now - last_success).total_seconds() / 3600
    try:
        current = _current_documents(source)
    except discovery.SourceUnavailableError as exc:
        report.stale = [{"doc_id": d, "reason": f"source unreadable: {exc}", "age_hours": report.index_age_hours or 0.0}
                        for d in served]
        return report
    for doc in current:
        row = served.get(doc.doc_id)
        if row is not None and row["content_hash"] == doc.content_hash:
            continue
        if row is None and (doc.error or failed.get(doc.doc_id) == doc.content_hash):
            continue
        if doc.error:
            reason = f"cannot be read now ({doc.error}); the version indexed before is served"
        else:
            reason = "never indexed" if row is None else "changed since it was indexed"
        modified = datetime.fromtimestamp(doc.mtime_ns / 1e9, UTC).replace(tzinfo=None) if doc.mtime_ns else now
        report.stale.append({"doc_id": doc.doc_id, "reason": reason,
                             "age_hours": max(0.0, (now - modified).total_seconds() / 3600)})
    for doc_id in sorted(set(served) - {d.doc_id for d in current}):
        report.stale.append({"doc_id": doc_id, "reason": "deleted from the source but still served",
                             "age_hours": report.index_age_hours or 0.0})
    report.stale.sort(key=lambda s: -s["age_hours"])
    return report


def _current_documents(source: SourceConfig) -> list[DiscoveredFile]:
    """The source's supported documents as they are now (hashes, modification times, read errors)."""
    root = Path(source.path)
    if source.kind == "beir":
        modified = root.stat().st_mtime_ns
        return [replace(f, mtime_ns=modified)
                for f in discovery.discover_beir_corpus(source.source_id, root, max_text_chars=source.limits.max_text_chars)]
    files = discovery.discover_files(
        source.source_id, root, source.defaults.model_dump(), source.exclude, source.follow_symlinks,
        source.limits.max_file_bytes,
    )
    return [f for f in files if f.supported]
