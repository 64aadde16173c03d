"""The corpus lifecycle's fail-safes and proofs: the mass-delete guard (over time, not per run),
deletions propagated, freshness."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from rag_pipeline.config import LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.errors import DomainError
from rag_pipeline.core.ingestion import discovery
from rag_pipeline.core.models import DiscoveredFile, ManifestDiff, SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze
from rag_pipeline.core.storage import Store, utcnow
from rag_pipeline.core.storage.ledger import HighPoint
from rag_pipeline.core.verdicts import Table, Verdict, listed

# A deleted document must not come back from a search for its own text this deep.
DELETION_PROBE_DEPTH = 100


def served_high_point(store: Store, source_id: str, window_days: float, now: datetime | None = None) -> HighPoint | None:
    """The most documents the source served at a switch in the last `window_days` (None: none recorded)."""
    if window_days <= 0:
        return None
    return store.ledger.served_high_point(source_id, (now or utcnow()) - timedelta(days=window_days))


def mass_deletion_refusal(
    source_id: str, diff: ManifestDiff, served: Collection[str], max_delete_fraction: float,
    high: HighPoint | None = None, window_days: float = 0.0,
) -> str | None:
    """Why a run must not delete what it would (None: it may), before the explicit flag is asked.

    A run that deletes served documents (`served`: the source's served ids) is refused when it
    would empty the source, when it deletes more than `max_delete_fraction` of what is served now,
    or when what would be left is more than that fraction below `high`, the most the source served
    in the window: six nightly runs that each delete 45% are refused at the one that crosses 50%
    of the high point. Only served documents count: files that failed and were never served are
    nothing to lose. A loader that suddenly returns little is far more often an outage than a real
    deletion.
    """
    lost = [d for d in diff.deleted if d in served]
    if not lost:
        return None
    current_count = len(diff.added) + len(diff.changed) + len(diff.unchanged) + len(diff.unreadable)
    share = len(lost) / len(served)
    sample = ", ".join(lost[:10]) + (" ..." if len(lost) > 10 else "")
    if current_count == 0 or share > max_delete_fraction:
        what = "is suddenly empty" if current_count == 0 else f"would lose {share:.0%} of its served documents"
        return (f"source {source_id!r} {what}: {len(lost)} of {len(served)} served documents would be deleted ({sample}). "
                f"Nothing was deleted (limit: {max_delete_fraction:.0%} per run)")
    if high is None or high.served_documents <= len(served):
        return None
    left = len(served) - len(lost)
    gone = high.served_documents - left
    if gone / high.served_documents <= max_delete_fraction:
        return None
    return (f"source {source_id!r} would serve {left} documents, {gone / high.served_documents:.0%} fewer than the "
            f"{high.served_documents} it served on {high.at:%Y-%m-%d %H:%M} UTC (the most it served in the last {window_days:g} "
            f"days): {high.served_documents - len(served)} went since by runs under the limit, and this run would "
            f"delete {len(lost)} more ({sample}). Nothing was deleted (limit: {max_delete_fraction:.0%} of the high point)")


def guard_against_mass_deletion(
    store: Store, source_id: str, diff: ManifestDiff, served: Collection[str], lifecycle: LifecycleConfig, run_id: str,
    now: datetime | None = None,
) -> str | None:
    """Raise SourceUnavailableError for a refused deletion, unless `lifecycle.allow_mass_delete`;
    a deletion that passes only by that flag is recorded (the high point counts afresh from it)
    and its reason returned, so that the run can say what the flag let through."""
    window = lifecycle.mass_delete_window_days
    high = served_high_point(store, source_id, window, now)
    reason = mass_deletion_refusal(source_id, diff, served, lifecycle.max_delete_fraction, high, window)
    if reason is None:
        return None
    if not lifecycle.allow_mass_delete:
        raise discovery.SourceUnavailableError(
            f"{reason}. If this is intended, rerun with lifecycle.allow_mass_delete: true")
    left = len(served) - len([d for d in diff.deleted if d in served])
    store.ledger.record_served(source_id, run_id, left, mass_delete_allowed=True)
    return reason


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
    probe_vectors: Mapping[str, np.ndarray] | None = None, touched: Sequence[str] | None = None,
) -> DeletionReport:
    """Nothing of a deleted document is left in any table, and retrieval cannot return it.

    Every tombstoned document of the source is checked against every table; those deleted in
    `run_id` (all, when None) are also searched for with their former title and opening text,
    with no filter, by both retrievers: neither may return them in the top 100. Orphan rows
    (a chunk without its document, a vector or posting without its chunk) fail the check too.

    Both retrievers return served chunks, each with the document id of its `chunks` row, read in
    the database (`Search.in_database`): a document with no row left in `chunks` cannot come
    back from either, so only the deleted documents that `remnants` finds there are searched
    for. The verdict is the one a search for every deleted document gives, without a search per
    deleted document (the searches of a 1% deletion grew with the square of the corpus).
    `probe_vectors` holds texts already encoded; the rest are encoded with `embedder`, only
    for the documents searched for.

    `touched` (an incremental proof): the documents the switch wrote or removed; only the
    tombstones of `run_id` are checked, and only these documents' rows for orphans.
    """
    tombstones = store.served.tombstones(source_id)
    if touched is not None:
        tombstones = [t for t in tombstones if t["run_id"] == run_id]
    report = DeletionReport(checked=[t["doc_id"] for t in tombstones])
    report.remnants = store.served.remnants(report.checked)
    report.orphans = store.served.orphans(None if touched is None else sorted(set(touched)))
    probes = [t for t in tombstones if (run_id is None or t["run_id"] == run_id)
              and "chunks" in report.remnants.get(t["doc_id"], ())]
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
        current = _current_documents(source, store)
    except (discovery.SourceUnavailableError, DomainError) as exc:
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


def _current_documents(source: SourceConfig, store: Store) -> list[DiscoveredFile]:
    """The source's supported documents as they are now (hashes, modification times, read errors);
    a listed source fetches only what changed since its latest discovery."""
    if not source.is_folder:
        from rag_pipeline.core.ingestion.sources.listed import discover_listed

        return [f for f in discover_listed(source, store)[0] if f.supported]
    root = Path(source.path)
    if source.kind == "beir":
        modified = root.stat().st_mtime_ns
        return [replace(f, mtime_ns=modified)
                for f in discovery.discover_beir_corpus(source.source_id, root, max_text_chars=source.limits.max_text_chars)]
    files = discovery.discover_files(
        source.source_id, root, source.defaults.model_dump(), source.exclude, source.follow_symlinks,
        source.limits.max_file_bytes, source.allow_hard_links, stage="freshness check",
    )
    return [f for f in files if f.supported]
