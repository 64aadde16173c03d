"""The switch: a source's staged version served in one transaction, only once it is proven.

`index_source` replaces the source's served rows, probes every document that needs it, writes the
ledger, prunes the cache, commits the manifest and proves coverage and deletions, all inside one
transaction: for what the run changed, or for the whole source when a full proof is due
(`proof_scope.py`). It commits only when both proofs pass; otherwise it rolls back and the previous
version stays served. A kill at any point leaves the old version or the new one, never a mix, and
never a record that disagrees with what is served.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import numpy as np

from rag_pipeline.config import LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.inputs import revision_of
from rag_pipeline.core.ingestion.lifecycle import deletion_report
from rag_pipeline.core.ingestion.proof_scope import proof_scope
from rag_pipeline.core.ingestion.reports import IndexReport, ledger_entry
from rag_pipeline.core.models import SearchFilters, StageFailure
from rag_pipeline.core.progress import Progress
from rag_pipeline.core.retrieval.lexical import analyzer_identity
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.served import SERVED_FIELDS, Replaced, document_version
from rag_pipeline.core.storage.staging import utcnow
from rag_pipeline.core.storage.states import IndexState

# A document is queryable when a search with its own opening text finds it this high.
QUERYABLE_TOP_K = 10
# Documents probed per search: each search is one pass over the vectors, and a progress line can
# follow each (a full build of a large source is probed in a few passes, not one per document).
PROBE_BATCH = 1000


class _Refused(Exception):
    """Rolls the switch back: a proof failed."""


def index_source(source: SourceConfig, store: Store, embedder: Embedder, run_id: str,
                 lifecycle: LifecycleConfig | None = None, settings: str = "",
                 progress: Callable[[str], None] | None = None, full_proof: str | None = None) -> IndexReport:
    """The switch: serve the source's staged state only if it is proven, in one transaction.

    Inside the transaction: the served rows are replaced, every served document whose current
    version was never proven queryable is probed, the ledger gets its indexed / queryable /
    deleted rows, the cache loses entries only deleted documents used, the discovery becomes the
    committed manifest; then coverage and deletion propagation are proven on that state. Both
    pass: commit. Either fails: roll back (the previous version stays served, the refusal is
    recorded with the source). The ledger is reconciled with what is served, not with what an
    earlier run believed, so a run after any kill converges. What is served becomes the source's
    next index state (`settings`: what shaped it besides its files), older states are pruned as
    `lifecycle` says, and a source pinned to a state (or disabled) is left alone.

    The proofs are those of what changed (`proof_scope.py`), unless a full proof is due or asked
    for (`full_proof`: why, as the run's metadata will say): then every served document is probed
    again and every tombstone and orphan of the source is checked.
    """
    source_id = source.source_id
    lifecycle = lifecycle or LifecycleConfig()
    report = IndexReport(source_id, "indexed")
    pin = store.states.pinned(source_id)
    if pin is not None:
        report.pinned = pin.sentence()
        return report
    scope = proof_scope(store, source_id, lifecycle, full_proof)
    report.proof = scope
    leaving = store.served.leaving_documents(source_id)
    try:
        with store.transaction():
            kill_point("switch:begin")
            store.served.record_tombstones(source_id, leaving, run_id)
            replaced = store.served.replace_served(source_id, embedder.identity, keep_history=lifecycle.keep_states > 0,
                                                   analyzer=analyzer_identity(), whole=scope.full)
            store.staging.clear_changes(source_id)
            kill_point("switch:replaced")
            ledger, probed, failures, written = _reconcile_ledger(store, source_id, replaced, scope.full, progress)
            store.ledger.record(ledger, run_id)
            pruned = store.staging.prune_cache(embedder.identity, [h for d in leaving for h in d["text_hashes"]])
            store.staging.commit_manifest(source_id)
            revision = revision_of(store.staging.committed_inputs(source_id))
            store.ledger.record_source_run(source_id, served_from(source, revision), run_id)
            report.coverage = coverage_report(store, source_id)
            # A deleted document is searched for (its former text encoded) only if one of its
            # chunks is still served: none is, unless the switch failed to remove it.
            report.deletions = deletion_report(store, source_id, embedder, run_id,
                                               touched=None if scope.full else [*replaced.previous, *replaced.written])
            if not (report.coverage.passed and report.deletions.passed):
                raise _Refused
            served_count = store.served.served_count(source_id)
            store.ledger.record_served(source_id, run_id, served_count)
            store.ledger.record_proof(source_id, run_id, scope.name, scope.reason)
            state = _record_state(store, source_id, run_id, settings, embedder.identity, lifecycle, revision)
            report.state, report.manifest_hash = state.state_id, state.manifest_hash
            kill_point("switch:verified")
        report.switched = True
        kill_point("switch:committed")
    except _Refused:
        # A refusal of a listed source keeps the revision recorded with its last switch.
        store.ledger.record_source_run(source_id, source.location if source.is_folder else None, run_id,
                                       failure=report.refusal)
        return report
    removed = sorted(set(replaced.previous) - set(replaced.written))
    report.failures = failures
    report.counts = {
        # A new served version: new bytes, or new metadata (who may see it, status, dates).
        "indexed": sum(1 for doc_id, row in written.items() if doc_id not in replaced.previous
                       or document_version(replaced.previous[doc_id]) != document_version(row)),
        "queryable": report.coverage.counts_by_stage.get("queryable", 0),
        "probed": probed,
        "removed": len(removed),
        "served_documents": served_count,
        "kept_previous": replaced.counts["kept_previous"],
        # Documents whose served rows were written by this switch (the others were already current).
        "rewritten": replaced.counts["rewritten"],
        "cache_pruned": pruned,
    }
    report.details = {"removed": removed}
    return report


def served_from(source: SourceConfig, revision: str | None) -> str:
    """Where a switch served the source from, as the ledger keeps it: its path, or its location
    and the revision it was at (`git REPO REF@COMMIT`)."""
    return f"{source.location}@{revision}" if revision else source.location


def _record_state(store: Store, source_id: str, run_id: str, settings: str, model: str,
                  lifecycle: LifecycleConfig, revision: str | None = None) -> IndexState:
    """Record what the source now serves as its next state, and prune the states retention lets go."""
    state = store.states.record(source_id, run_id, "switch", settings, model,
                                lambda: store.served.manifest_hash(source_id), revision=revision)
    since = utcnow() - timedelta(days=lifecycle.keep_state_days)
    measured = store.records.evaluated_manifests(since).get(source_id, set())
    keep = [s.state_id for s in store.states.list(source_id) if s.manifest_hash in measured]
    store.states.prune(source_id, lifecycle.keep_states, since, keep)
    return state


def _reconcile_ledger(
    store: Store, source_id: str, replaced: Replaced, full: bool, progress: Callable[[str], None] | None = None,
) -> tuple[list[dict], int, list[StageFailure], dict[str, dict]]:
    """Ledger rows that make the record match what is now served (call inside the switch).

    Served documents get an `indexed` row for their served version (new bytes, another parser,
    or the same bytes served with new metadata: the row says which fields changed); those whose
    served version was never proven queryable (or failed the probe before) are probed now, and with
    `full` every served document is probed again, whatever the ledger says; documents no longer in
    the source get their `deleted` rows. `replaced`: what the switch wrote and what it replaced.
    Only the documents the switch wrote and those the ledger does not prove are read (`full`: all):
    a one-document edit of a large source reads one document's rows. Also returns the served
    rows of the documents written.
    """
    unproven = store.ledger.unproven(source_id)
    if full:
        served = {d["doc_id"]: d for d in store.served.indexed_documents(source_id)}
    else:
        served = {d["doc_id"]: d for d in store.served.indexed_documents(source_id, sorted({*replaced.written, *unproven}))}
    rows = {(r["doc_id"], r["stage"]): r
            for r in store.ledger.rows(source_id, ("indexed", "queryable"), None if full else list(served))}

    def proven(doc_id: str, stage: str) -> bool:
        row, doc = rows.get((doc_id, stage)), served[doc_id]
        if row is None or row["status"] != "ok" or row["content_hash"] != doc["content_hash"]:
            return False
        # Indexed again by another parser (same bytes, maybe other elements): a new ledger row says so.
        return stage != "indexed" or row["parser_version"] == doc["parser_version"]

    ledger = [
        ledger_entry(d, source_id, row["content_hash"], "indexed", "ok", parser_version=row["parser_version"])
        for d, row in served.items() if not proven(d, "indexed")
    ]
    fresh = {entry["doc_id"] for entry in ledger}
    for doc_id in replaced.written:
        row, old = served[doc_id], replaced.previous.get(doc_id)
        if doc_id not in fresh and old is not None and document_version(old) != document_version(row):
            changed = [f for f in SERVED_FIELDS if str(old.get(f)) != str(row.get(f))]
            ledger.append(ledger_entry(doc_id, source_id, row["content_hash"], "indexed", "ok",
                                        f"served with new metadata: {', '.join(changed)}",
                                        parser_version=row["parser_version"]))
    to_probe = sorted(served) if full else sorted(d for d in served if not proven(d, "queryable"))
    queryable, not_found = set(), {}
    done = Progress(f"{source_id}: probing", len(to_probe), progress)
    for start in range(0, len(to_probe), PROBE_BATCH):
        found, missing = probe_queryable(store, to_probe[start:start + PROBE_BATCH])
        queryable |= found
        not_found |= missing
        done.advance(len(to_probe[start:start + PROBE_BATCH]))
    failures = []
    for doc_id in to_probe:
        content_hash = served[doc_id]["content_hash"]
        if doc_id in queryable:
            ledger.append(ledger_entry(doc_id, source_id, content_hash, "queryable", "ok"))
        else:
            reason = not_found.get(doc_id, "not returned by a search for its own text")
            ledger.append(ledger_entry(doc_id, source_id, content_hash, "queryable", "failed", reason))
            failures.append(StageFailure(doc_id, "queryable", reason))
    gone = store.staging.gone_from_discovery(source_id)
    removed = set(replaced.previous) - set(replaced.written)
    for doc_id in sorted({r["doc_id"] for r in gone if r["supported"]} | removed):
        ledger.append({"doc_id": doc_id, "source_id": source_id, "stage": "deleted", "status": "deleted",
                       "reason": "no longer in the source"})
        if doc_id in removed:
            ledger.extend({"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": "deleted",
                           "reason": "removed from the index"} for stage in ("indexed", "queryable"))
    # Skipped files (not documents) that are gone: their record says so too, not "skipped" for ever.
    for row in gone:
        if not row["supported"]:
            ledger.append({"doc_id": row["doc_id"], "source_id": source_id, "stage": "deleted", "status": "deleted",
                           "reason": f"no longer in the source (it was skipped: {row['skip_reason']})"})
    return ledger, len(to_probe), failures, {d: served[d] for d in replaced.written}


def probe_queryable(store: Store, doc_ids: Sequence[str]) -> tuple[set[str], dict[str, str]]:
    """Search, with no filter, for each document's opening chunk; queryable if it comes back in the
    top k, or if the k-th hit scores as high as the chunk itself (it is tied with identical chunks
    of other documents, and only the tie-break by chunk id left it out). In the database: the
    switch calls it on a state not yet committed (`Search.in_database`)."""
    vectors = store.served.first_chunk_vectors(doc_ids)
    missing = {d: "indexed without any chunk vector" for d in doc_ids if d not in vectors}
    ids = [d for d in doc_ids if d in vectors]
    if not ids:
        return set(), missing
    matrix = np.stack([vectors[d] for d in ids])
    results = store.search.in_database().dense_search(matrix, QUERYABLE_TOP_K, SearchFilters(unrestricted=True))
    queryable = set()
    for doc_id, query, hits in zip(ids, matrix, results):
        own = 1.0 if np.any(query) else 0.0  # the cosine of the chunk with itself
        tied = len(hits) == QUERYABLE_TOP_K and hits[-1].score >= own - 1e-6
        if tied or any(hit.doc_id == doc_id for hit in hits):
            queryable.add(doc_id)
        else:
            top = hits[0].doc_id if hits else "nothing"
            missing[doc_id] = f"a search for its own opening text did not return it in the top {QUERYABLE_TOP_K} (top hit: {top})"
    return queryable, missing
