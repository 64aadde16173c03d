"""The ingestion stages over one source, each reading its input from and writing its output to the store.

Every stage is incremental: it works only on documents whose content (or the relevant setting)
changed since it last ran, and records each document's outcome in the ledger. A document that
fails a stage fails alone; the rest of the source goes on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_pipeline.config import ChunkingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core import discovery
from rag_pipeline.core.chunking import chunk_document
from rag_pipeline.core.embedding import Embedder
from rag_pipeline.core.lexical import term_frequencies
from rag_pipeline.core.models import DiscoveredFile, SearchFilters, StageFailure
from rag_pipeline.core.parsing import ParseError, parse_document, parser_version
from rag_pipeline.core.store import DuckDBStore

# Documents per staging write: one transaction each, so a crash loses at most one batch of work.
WRITE_BATCH = 500
EMBED_BATCH = 2048
# A document is queryable when a search with its own opening text finds it this high.
QUERYABLE_TOP_K = 10


@dataclass
class StageReport:
    """What one stage did to one source in one run: counts and per-document failures."""

    source_id: str
    stage: str
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[StageFailure] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def failure_rows(self) -> list[dict[str, str]]:
        return [{"doc_id": f.doc_id, "stage": f.stage, "reason": f.reason} for f in self.failures]


def _files_of(source: SourceConfig) -> list[DiscoveredFile]:
    defaults = source.defaults.model_dump()
    if source.kind == "beir":
        return discovery.discover_beir_corpus(source.source_id, Path(source.path), defaults)
    return discovery.discover_files(source.source_id, Path(source.path), defaults, source.exclude)


def discover_source(
    source: SourceConfig, store: DuckDBStore, lifecycle: LifecycleConfig, run_id: str
) -> StageReport:
    """Walk the source, diff with the previous manifest, refuse unsafe deletions, write the manifest."""
    source_id = source.source_id
    files = _files_of(source)
    previous = store.previous_manifest(source_id)
    diff = discovery.diff_manifest(files, previous)
    discovery.guard_against_mass_deletion(
        source_id, diff, len(previous), lifecycle.max_delete_fraction, lifecycle.allow_mass_delete
    )
    meta_json = {f.doc_id: discovery.meta_to_json(f.meta) for f in files if f.supported}
    store.write_manifest(source_id, files, meta_json)

    report = StageReport(source_id, "discovered")
    ledger: list[dict] = []
    for f in files:
        if not f.supported:
            ledger.append(_entry(f, "discovered", "skipped", reason=f.skip_reason))
        elif f.meta_error:
            ledger.append(_entry(f, "discovered", "failed", reason=f.meta_error))
            report.failures.append(StageFailure(f.doc_id, "discovered", f.meta_error))
        else:
            ledger.append(_entry(f, "discovered", "ok"))
    ledger.extend(
        {"doc_id": doc_id, "source_id": source_id, "stage": "deleted", "status": "deleted",
         "reason": "no longer in the source"}
        for doc_id in diff.deleted
    )
    store.record_ledger(ledger, run_id)
    supported = [f for f in files if f.supported]
    report.counts = {
        "discovered": len(supported),
        "skipped": len(files) - len(supported),
        "added": len(diff.added),
        "changed": len(diff.changed),
        "unchanged": len(diff.unchanged),
        "deleted": len(diff.deleted),
    }
    report.details = {
        "added": list(diff.added), "changed": list(diff.changed), "deleted": list(diff.deleted),
        "skipped": [f"{f.rel_path}: {f.skip_reason}" for f in files if not f.supported],
    }
    return report


def parse_source(source: SourceConfig, store: DuckDBStore, run_id: str) -> StageReport:
    """Parse the documents whose content or metadata differ from their parsed version.

    A document that failed with this exact content and parser is not retried: it would fail
    again, and its failure stays on record in the ledger.
    """
    source_id = source.source_id
    manifest = store.manifest_rows(source_id)
    parsed = store.parsed_versions(source_id)
    failed = store.ledger_failures(source_id)
    version = parser_version()
    todo = []
    for row in manifest:
        if not row["supported"] or row["meta_error"]:
            continue
        if parsed.get(row["doc_id"]) == (row["content_hash"], row["meta_json"]):
            continue
        failure = failed.get(row["doc_id"])
        if failure and failure["stage"] == "parsed" and failure["content_hash"] == row["content_hash"] \
                and failure["parser_version"] == version:
            continue
        todo.append(row)
    items = {f.doc_id: f for f in _files_for(source, [r["doc_id"] for r in todo])}
    report = StageReport(source_id, "parsed")
    ledger: list[dict] = []
    batch: list = []
    for row in todo:
        item = items.get(row["doc_id"])
        if item is None or item.content_hash != row["content_hash"]:
            reason = "file changed or vanished between discovery and parsing; rerun the source"
            report.failures.append(StageFailure(row["doc_id"], "parsed", reason))
            ledger.append(_row_entry(row, "parsed", "failed", reason=reason, parser_version=version))
            continue
        try:
            doc = parse_document(item)
        except ParseError as exc:
            report.failures.append(StageFailure(item.doc_id, "parsed", str(exc)))
            ledger.append(_row_entry(row, "parsed", "failed", reason=str(exc), parser_version=version))
            continue
        batch.append((doc, row["meta_json"]))
        ledger.append(_row_entry(row, "parsed", "ok", parser_version=doc.parser_version))
        if len(batch) >= WRITE_BATCH:
            store.save_parsed(source_id, batch)
            batch = []
    store.save_parsed(source_id, batch)
    store.record_ledger(ledger, run_id)
    report.counts = {"parsed": len(todo) - len(report.failures), "parse_failed": len(report.failures)}
    return report


def _files_for(source: SourceConfig, doc_ids: Sequence[str]) -> list[DiscoveredFile]:
    """Re-describe just these documents (for hashes and metadata at parse time)."""
    if not doc_ids:
        return []
    wanted = set(doc_ids)
    if source.kind == "beir":
        return [f for f in _files_of(source) if f.doc_id in wanted]
    root = Path(source.path)
    defaults = source.defaults.model_dump()
    found = []
    for doc_id in doc_ids:
        rel_path = doc_id.split(":", 1)[1]
        path = root / rel_path
        if path.is_file():
            found.append(discovery.describe_file(source.source_id, path, rel_path, defaults))
    return found


def chunk_source(source: SourceConfig, store: DuckDBStore, config: ChunkingConfig, run_id: str) -> StageReport:
    """(Re)chunk documents whose parsed content or the chunking settings changed; drop deleted ones."""
    source_id = source.source_id
    config = source.effective_chunking(config)
    fingerprint = config.fingerprint()
    manifest = {r["doc_id"]: r for r in store.manifest_rows(source_id) if r["supported"]}
    parsed = store.parsed_versions(source_id)
    staged = store.chunk_versions(source_id)
    gone = sorted((set(parsed) | set(staged)) - set(manifest))
    store.drop_staged_documents(gone)
    todo = [d for d, (content_hash, _) in parsed.items() if d in manifest and staged.get(d) != (content_hash, fingerprint)]
    report = StageReport(source_id, "chunked")
    ledger: list[dict] = []
    chunk_total = 0
    batch: list = []
    for doc in store.load_parsed(todo):
        chunks = chunk_document(doc, source_id, config)
        if not chunks:
            reason = "chunking produced no chunks (document has no body text)"
            report.failures.append(StageFailure(doc.doc_id, "chunked", reason))
            ledger.append(_doc_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "failed", reason))
            continue
        postings = [
            (chunk.chunk_id, term, tf) for chunk in chunks for term, tf in term_frequencies(chunk.embed_text).items()
        ]
        batch.append((doc.doc_id, doc.content_hash, chunks, postings))
        chunk_total += len(chunks)
        ledger.append(_doc_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "ok"))
        if len(batch) >= WRITE_BATCH:
            store.save_chunks(source_id, fingerprint, batch)
            batch = []
    store.save_chunks(source_id, fingerprint, batch)
    store.record_ledger(ledger, run_id)
    report.counts = {"chunked_documents": len(todo) - len(report.failures), "chunks": chunk_total, "dropped_deleted": len(gone)}
    report.details = {"dropped": gone}
    return report


def embed_source(source_id: str, store: DuckDBStore, embedder: Embedder, run_id: str) -> StageReport:
    """Embed staged chunks not yet embedded by this model, through the cache.

    The cache key is (embedder identity, hash of the embedded text): a chunk whose text was
    embedded before, by any document or chunking strategy, is never embedded again.
    """
    identity = embedder.identity
    pending = store.chunks_to_embed(source_id, identity)
    cached = store.cached_hashes(identity, [h for _, h, _ in pending])
    misses: dict[str, str] = {}
    for _, text_hash, text in pending:
        if text_hash not in cached:
            misses.setdefault(text_hash, text)
    report = StageReport(source_id, "embedded")
    # Sorted by length so that each batch pads little (what model.encode does within one call);
    # cached batch by batch, so that an interrupted run keeps what it already embedded.
    hashes = sorted(misses, key=lambda h: len(misses[h]))
    for start in range(0, len(hashes), EMBED_BATCH):
        batch = hashes[start : start + EMBED_BATCH]
        vectors = embedder.encode([misses[h] for h in batch])
        if not np.all(np.isfinite(vectors)):
            raise ValueError(f"embedder {identity} returned non-finite values; this batch was not cached")
        store.cache_vectors(identity, list(zip(batch, vectors)))
    store.mark_embedded([chunk_id for chunk_id, _, _ in pending], identity)
    embedded_docs = sorted({chunk_id.rsplit("#", 1)[0] for chunk_id, _, _ in pending})
    store.record_ledger(
        [{"doc_id": d, "source_id": source_id, "stage": "embedded", "status": "ok"} for d in embedded_docs], run_id
    )
    hits = sum(1 for _, h, _ in pending if h in cached)
    report.counts = {"embedded": len(misses), "cache_hits": hits, "chunks_pending": len(pending)}
    return report


def index_source(source: SourceConfig, store: DuckDBStore, embedder: Embedder, run_id: str) -> StageReport:
    """Publish the source's staged state to the served index in one transaction, then prove it.

    After publishing: deleted documents' cache entries are pruned, and every document indexed in
    this run is probed with a real search for its own opening text.
    """
    source_id = source.source_id
    before = {d["doc_id"]: d["content_hash"] for d in store.indexed_documents(source_id)}
    deleted_hashes = store.hashes_of_unstaged_documents(source_id)
    store.record_tombstones(source_id, run_id)
    counts = store.publish_source(source_id, embedder.identity)
    after = {d["doc_id"]: d for d in store.indexed_documents(source_id)}
    fresh = sorted(d for d, row in after.items() if before.get(d) != row["content_hash"])
    removed = sorted(set(before) - set(after))
    pruned = store.prune_cache(embedder.identity, deleted_hashes)
    ledger = [
        _doc_entry(d, source_id, after[d]["content_hash"], "indexed", "ok", parser_version=after[d]["parser_version"])
        for d in fresh
    ]
    report = StageReport(source_id, "indexed")
    queryable, not_found = probe_queryable(store, fresh)
    for doc_id in fresh:
        if doc_id in queryable:
            ledger.append(_doc_entry(doc_id, source_id, after[doc_id]["content_hash"], "queryable", "ok"))
        else:
            reason = not_found.get(doc_id, "not returned by a search for its own text")
            ledger.append(_doc_entry(doc_id, source_id, after[doc_id]["content_hash"], "queryable", "failed", reason))
            report.failures.append(StageFailure(doc_id, "queryable", reason))
    ledger.extend(
        {"doc_id": d, "source_id": source_id, "stage": stage, "status": "deleted", "reason": "removed from the index"}
        for d in removed for stage in ("indexed", "queryable")
    )
    store.record_ledger(ledger, run_id)
    store.record_source_run(source_id, str(source.path), run_id, success=True)
    report.counts = {
        "indexed": len(fresh),
        "queryable": len(queryable),
        "removed": len(removed),
        "served_documents": len(after),
        "kept_previous": counts["kept_previous"],
        "cache_pruned": pruned,
    }
    report.details = {"removed": removed}
    return report


def probe_queryable(store: DuckDBStore, doc_ids: Sequence[str]) -> tuple[set[str], dict[str, str]]:
    """Search, with no filter, for each document's opening chunk; queryable if it comes back in the top k."""
    vectors = store.first_chunk_vectors(doc_ids)
    missing = {d: "indexed without any chunk vector" for d in doc_ids if d not in vectors}
    ids = [d for d in doc_ids if d in vectors]
    if not ids:
        return set(), missing
    matrix = np.stack([vectors[d] for d in ids])
    results = store.dense_search(matrix, QUERYABLE_TOP_K, SearchFilters(unrestricted=True))
    queryable = set()
    for doc_id, hits in zip(ids, results):
        if any(hit.doc_id == doc_id for hit in hits):
            queryable.add(doc_id)
        else:
            top = hits[0].doc_id if hits else "nothing"
            missing[doc_id] = f"a search for its own opening text did not return it in the top {QUERYABLE_TOP_K} (top hit: {top})"
    return queryable, missing


def _entry(f: DiscoveredFile, stage: str, status: str, reason: str | None = None) -> dict:
    return {"doc_id": f.doc_id, "source_id": f.source_id, "stage": stage, "status": status,
            "content_hash": f.content_hash, "reason": reason}


def _row_entry(row: dict, stage: str, status: str, reason: str | None = None, parser_version: str | None = None) -> dict:
    return {"doc_id": row["doc_id"], "source_id": row["source_id"], "stage": stage, "status": status,
            "content_hash": row["content_hash"], "reason": reason, "parser_version": parser_version}


def _doc_entry(doc_id: str, source_id: str, content_hash: str | None, stage: str, status: str,
               reason: str | None = None, parser_version: str | None = None) -> dict:
    return {"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": status,
            "content_hash": content_hash, "reason": reason, "parser_version": parser_version}


def ingest_source(
    source: SourceConfig,
    store: DuckDBStore,
    embedder: Embedder,
    chunking: ChunkingConfig,
    lifecycle: LifecycleConfig,
    run_id: str,
) -> dict[str, StageReport]:
    """All stages for one source in order, without Dagster (benchmarks and tests of the core)."""
    stages = {
        "discovered": lambda: discover_source(source, store, lifecycle, run_id),
        "parsed": lambda: parse_source(source, store, run_id),
        "chunked": lambda: chunk_source(source, store, chunking, run_id),
        "embedded": lambda: embed_source(source.source_id, store, embedder, run_id),
        "indexed": lambda: index_source(source, store, embedder, run_id),
    }
    reports = {}
    for name, stage in stages.items():
        started = time.perf_counter()
        reports[name] = stage()
        reports[name].seconds = time.perf_counter() - started
    return reports
