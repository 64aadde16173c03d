"""The ingestion stages over one source, and the run protocol that makes them safe to kill.

Stage, verify, then serve:
- discovery, parsing, chunking and embedding write staging rows only (a staged discovery, parsed
  elements, chunks, the embedding cache); each is idempotent and works on what differs between
  staging and the latest discovery, so a rerun after any kill picks up where the dead run stopped;
- the switch (`switch.index_source`) serves the staged version in one transaction, only once
  it is proven; a kill at any point leaves the old version or the new one, never a mix.

A document that fails a stage fails alone, with its reason in the ledger; the rest goes on.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rag_pipeline.config import ChunkingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core import metadata
from rag_pipeline.core.embedding.embedder import Embedder
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.ingestion import discovery, inputs, source_tree
from rag_pipeline.core.ingestion.chunking import chunk_document
from rag_pipeline.core.ingestion.lifecycle import guard_against_mass_deletion
from rag_pipeline.core.ingestion.parse_pool import parsed_in_order
from rag_pipeline.core.ingestion.parse_worker import ParserProcess
from rag_pipeline.core.ingestion.parsing import (
    ParseError,
    parser_for,
)
from rag_pipeline.core.ingestion.reports import StageReport, ledger_entry
from rag_pipeline.core.ingestion.source_runs import skipped_by_reason
from rag_pipeline.core.ingestion.sources import listed
from rag_pipeline.core.ingestion.switch import index_source
from rag_pipeline.core.models import DiscoveredFile, StageFailure
from rag_pipeline.core.progress import Progress
from rag_pipeline.core.retrieval.lexical import term_frequencies
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.staging import utcnow

# Documents per staging write: each batch is kept as soon as it is done, so a crash loses at most
# one batch, and a batch is at most a quarter of the stage's work.
WRITE_BATCH = 500
# Texts per embedding call, each call's vectors cached at once: two of the model's batches, a few
# seconds of work (25 s on a machine loaded ten times over: the wait reports meanwhile). Fixed, not
# timed: which texts share a batch must not depend on the machine's speed (padding changes the last
# float bits).
EMBED_CALL = 64
# While a call encodes, how often the wait looks up to report progress.
TICK_SECONDS = 1.0


def batch_size(total: int, largest: int, smallest: int = 1) -> int:
    """Items per batch: a quarter of the work, within [smallest, largest]."""
    return max(smallest, min(largest, -(-total // 4)))


def _tree(source: SourceConfig) -> source_tree.SourceTree:
    return inputs.source_tree(source)


def discover_source(
    source: SourceConfig, store: Store, lifecycle: LifecycleConfig, run_id: str, settings: str = "",
    progress: Callable[[str], None] | None = None,
) -> StageReport:
    """Walk the source, diff with the committed manifest, refuse unsafe deletions, stage the discovery.

    The diff is against what the served index was built from, so the counts stay true after a
    run that died before its switch. Deleted documents are recorded as deleted by the switch
    that removes them, not here: until then they are still served.
    """
    source_id = source.source_id
    previous = store.staging.previous_manifest(source_id)
    started = utcnow()
    revision = None
    if not source.is_folder:
        files, digest, revision, incomplete = listed.discover_listed(source, store)
    elif source.kind == "beir":
        digest = inputs.file_digest(Path(source.path))
        files = discovery.discover_beir_corpus(
            source_id, Path(source.path), source.defaults.model_dump(), source.limits.max_text_chars
        )
    else:
        tree = _tree(source)
        entries, unreadable = tree.walk()
        digest = inputs.tree_digest(entries, unreadable)
        # Files whose size, times and inode are those an earlier discovery read them with are not read again.
        files = discovery.describe_entries(tree, entries, source.defaults.model_dump(),
                                           store.staging.earlier_reads(source_id), progress)
        # Before anything is written: a source of files it does not read fails loudly, the index keeps serving.
        discovery.refuse_mostly_unsupported(source_id, files, source.limits.max_unsupported_share,
                                            source.limits.min_unsupported_files)
        if unreadable:  # the committed manifest is read again only for what cannot be listed
            files += _behind_unreadable_folders(source_id, store.staging.manifest_rows(source_id), unreadable,
                                                {f.doc_id for f in files})
    meta_json = {f.doc_id: metadata.meta_to_json(f.meta) for f in files if f.supported}
    diff = discovery.diff_manifest(files, previous, meta_json)
    # Read only when something would be deleted: the guard counts served documents a run would lose.
    served = store.served.served_ids(source_id) if diff.deleted else set()
    allowed = guard_against_mass_deletion(store, source_id, diff, served, lifecycle, run_id)
    report = StageReport(source_id, "discovered", revision=revision)
    ledger: list[dict] = []
    for f in files:
        if f.carried_over:
            continue  # its `discovered ok` row, for this very content, was written by the discovery that read it
        if not f.supported:
            ledger.append(ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "skipped", f.skip_reason))
        elif f.error:
            ledger.append(ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "failed", f.error))
            report.failures.append(StageFailure(f.doc_id, "discovered", f.error))
        else:
            ledger.append(ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "ok"))
    # One transaction: a carried-over file's ledger row is the one written with its discovery row.
    with store.db.transaction():
        store.staging.write_discovery(source_id, files, meta_json, started)
        store.staging.stage_inputs(source_id, inputs.with_revision(inputs.inputs_fingerprint(source, digest, settings),
                                                                   revision))
        store.ledger.record(ledger, run_id)
    kill_point("discovered")
    supported = [f for f in files if f.supported]
    report.counts = {
        "discovered": len(supported),
        "skipped": len(files) - len(supported),
        "added": len(diff.added),
        "changed": len(diff.changed),
        "unchanged": len(diff.unchanged),
        "unreadable": len(diff.unreadable),
        "deleted": len(diff.deleted),
    }
    report.details = {
        "added": list(diff.added), "changed": list(diff.changed), "deleted": list(diff.deleted),
        "unreadable": list(diff.unreadable),
        "skipped": [f"{f.rel_path}: {f.skip_reason}" for f in files if not f.supported],
    }
    report.skipped_by_reason = skipped_by_reason(f.skip_reason for f in files if not f.supported)
    if allowed:
        report.details["mass_delete_allowed"] = [allowed]
    if not source.is_folder and incomplete:
        report.details["listing_incomplete"] = [incomplete]
    return report


def _behind_unreadable_folders(
    source_id: str, committed: Sequence[dict], folders: Sequence[str], listed: set[str]
) -> list[DiscoveredFile]:
    """Committed documents under folders that could not be listed: kept as they were (failed,
    with the reason), so that an unreadable folder keeps its served pages instead of deleting them."""
    kept = []
    for row in committed:
        folder = next((f for f in folders if row["rel_path"].startswith(f + "/")), None)
        if folder is None or not row["supported"] or row["doc_id"] in listed:
            continue
        kept.append(DiscoveredFile(
            doc_id=row["doc_id"], source_id=source_id, rel_path=row["rel_path"], abs_path="",
            content_hash=row["content_hash"], size=row["size"], file_type=row["file_type"], supported=True,
            meta=metadata.meta_from_json(row["meta_json"]),
            error=f"folder {folder} cannot be listed (permission denied?): its last indexed version stays served",
            mtime_ns=row["mtime_ns"] or 0,
        ))
    return kept


def parse_source(
    source: SourceConfig, store: Store, run_id: str, parser: ParserProcess | None = None,
    progress: Callable[[str], None] | None = None,
) -> StageReport:
    """Parse the documents whose content or metadata differ from their parsed version.

    Each document's bytes are read once, through the source's safety checks, compared with the
    hash discovery recorded, and handed to the parser process under the source's time limit.
    A document that failed with this exact content and parser is not retried: it would fail
    again, and its failure stays on record in the ledger.
    """
    source_id = source.source_id
    version = attempt_version(source)
    todo = documents_to_parse(source, store)
    report = StageReport(source_id, "parsed")
    ledger: list[dict] = []
    batch: list = []

    def fail(row: dict, reason: str) -> None:
        report.failures.append(StageFailure(row["doc_id"], "parsed", reason))
        ledger.append(ledger_entry(row["doc_id"], source_id, row["content_hash"], "parsed", "failed", reason, version))

    per_write = batch_size(len(todo), WRITE_BATCH)
    done = Progress(f"{source_id}: parsing", len(todo), progress)
    for row, doc in parsed_in_order(source, todo, parser, done.tick, store.folder):
        done.advance()
        if isinstance(doc, ParseError):
            fail(row, str(doc))
            continue
        batch.append((doc, row["meta_json"]))
        ledger.append(ledger_entry(row["doc_id"], source_id, row["content_hash"], "parsed", "ok", None, doc.parser_version))
        if len(batch) >= per_write:
            with store.db.session():
                store.staging.save_parsed(source_id, batch)
                store.ledger.record(ledger, run_id)
            batch, ledger = [], []
            kill_point("parse:batch")
    with store.db.session():
        store.staging.save_parsed(source_id, batch)
        store.ledger.record(ledger, run_id)
    kill_point("parsed")
    report.counts = {"parsed": len(todo) - len(report.failures), "parse_failed": len(report.failures)}
    return report


def attempt_version(source: SourceConfig) -> str:
    """What a failed parse is recorded with: the parser and the source's limits, so that a document
    refused by a limit is parsed again once the limit is raised (as its reason says to)."""
    limits = hashlib.sha256(source.limits.model_dump_json().encode()).hexdigest()[:8]
    return f"{parser_for(source.kind)}; limits {limits}"


def documents_to_parse(source: SourceConfig, store: Store) -> list[dict]:
    """Discovery rows whose content, metadata or parser differ from their parsed version (an
    upgraded parser may give other elements), except those that already failed with this content
    and parser (they would fail again)."""
    source_id = source.source_id
    version, attempt = parser_for(source.kind), attempt_version(source)
    with store.db.session():
        # Compared by the database: a run that changed nothing reads no discovery or parsed row.
        unparsed = store.staging.unparsed(source_id, version)
        failed = store.ledger.failures(source_id) if unparsed else {}
        if len(unparsed) <= 1000:
            rows = store.staging.discovery_rows_of(source_id, unparsed) if unparsed else []
        else:
            wanted = set(unparsed)  # many (a full build): one scan rather than a long list of ids
            rows = [row for row in store.staging.discovery_rows(source_id) if row["doc_id"] in wanted]

    def failed_before(row: dict) -> bool:
        failure = failed.get(row["doc_id"])
        return bool(failure and failure["stage"] == "parsed" and failure["content_hash"] == row["content_hash"]
                    and failure["parser_version"] == attempt)

    return [row for row in rows if not failed_before(row)]


def chunk_source(source: SourceConfig, store: Store, config: ChunkingConfig, run_id: str,
                 progress: Callable[[str], None] | None = None) -> StageReport:
    """(Re)chunk and post documents whose parsed content, the chunking settings or the lexical
    analyzer changed; drop deleted ones."""
    source_id = source.source_id
    config = source.effective_chunking(config)
    fingerprint = inputs.chunking_fingerprint(config)
    with store.db.session():
        # Compared by the database: a run that changed nothing reads no parsed or staged row.
        todo, gone = store.staging.chunking_due(source_id, fingerprint)
        store.staging.drop_staged_documents(gone)
    report = StageReport(source_id, "chunked")
    ledger: list[dict] = []
    chunk_total = 0
    batch: list = []
    per_write = batch_size(len(todo), WRITE_BATCH)
    done = Progress(f"{source_id}: chunking", len(todo), progress)
    for doc in store.staging.load_parsed(todo):
        done.advance()
        chunks = chunk_document(doc, source_id, config)
        reason = None
        if not chunks:
            reason = "chunking produced no chunks (document has no body text)"
        elif len(chunks) > source.limits.max_chunks:
            reason = (f"{len(chunks):,} chunks, over the {source.limits.max_chunks:,} limit (limits.max_chunks): split "
                      "the document, raise the source's limit, or chunk it in larger pieces (chunking.max_tokens)")
        if reason is not None:
            report.failures.append(StageFailure(doc.doc_id, "chunked", reason))
            ledger.append(ledger_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "failed", reason))
            continue
        postings = [
            (chunk.chunk_id, term, tf) for chunk in chunks for term, tf in term_frequencies(chunk.embed_text).items()
        ]
        batch.append((doc.doc_id, doc.content_hash, chunks, postings))
        chunk_total += len(chunks)
        ledger.append(ledger_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "ok"))
        if len(batch) >= per_write:
            with store.db.session():
                store.staging.save_chunks(source_id, fingerprint, batch)
                store.ledger.record(ledger, run_id)
            batch, ledger = [], []
            kill_point("chunk:batch")
    with store.db.session():
        store.staging.save_chunks(source_id, fingerprint, batch)
        store.ledger.record(ledger, run_id)
    kill_point("chunked")
    report.counts = {"chunked_documents": len(todo) - len(report.failures), "chunks": chunk_total, "dropped_deleted": len(gone)}
    report.details = {"dropped": gone}
    return report


def embed_source(source_id: str, store: Store, embedder: Embedder, run_id: str,
                 progress: Callable[[str], None] | None = None) -> StageReport:
    """Embed staged chunks not yet embedded by this model, through the cache.

    The cache key is (embedder identity, hash of the embedded text): a chunk whose text was
    embedded before, by any document or chunking strategy, is never embedded again.
    """
    identity = embedder.identity
    with store.db.session():
        pending = store.staging.chunks_to_embed(source_id, identity)
        cached = store.staging.cached_hashes(identity, [h for _, h, _ in pending])
    misses: dict[str, str] = {}
    for _, text_hash, text in pending:
        if text_hash not in cached:
            misses.setdefault(text_hash, text)
    report = StageReport(source_id, "embedded")
    # Sorted by length so that each batch pads little (what model.encode does within one call);
    # cached batch by batch, so that an interrupted run keeps what it already embedded.
    hashes = sorted(misses, key=lambda h: len(misses[h]))
    done = Progress(f"{source_id}: embedding", len(hashes), progress)
    for start in range(0, len(hashes), EMBED_CALL):
        batch = hashes[start : start + EMBED_CALL]
        vectors = _encoded(embedder, [misses[h] for h in batch], done.tick)
        done.advance(len(batch))
        if not np.all(np.isfinite(vectors)):
            raise ValueError(f"embedder {identity} returned non-finite values; this batch was not cached")
        store.staging.cache_vectors(identity, list(zip(batch, vectors)))
        kill_point("embed:batch")
    embedded_docs = sorted({chunk_id.rsplit("#", 1)[0] for chunk_id, _, _ in pending})
    with store.db.transaction():
        store.staging.mark_embedded([chunk_id for chunk_id, _, _ in pending], identity)
        store.staging.note_changes(source_id, embedded_docs)
        store.ledger.record(
            [{"doc_id": d, "source_id": source_id, "stage": "embedded", "status": "ok"} for d in embedded_docs], run_id
        )
    kill_point("embedded")
    hits = sum(1 for _, h, _ in pending if h in cached)
    report.counts = {"embedded": len(misses), "cache_hits": hits, "chunks_pending": len(pending)}
    return report


def _encoded(embedder: Embedder, texts: list[str], tick: Callable[[], None]) -> np.ndarray:
    """`embedder.encode(texts)` in a thread of its own while this one calls `tick` every second (a
    call may take long on a loaded machine, and progress must still report). A daemon thread: an
    interrupt ends the run at once, not after the call."""
    outcome: dict[str, object] = {}

    def encode() -> None:
        try:
            outcome["vectors"] = embedder.encode(texts)
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=encode, name="embed", daemon=True)
    worker.start()
    while True:
        worker.join(TICK_SECONDS)
        if not worker.is_alive():
            break
        tick()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["vectors"]


def ingest_source(
    source: SourceConfig,
    store: Store,
    embedder: Embedder,
    chunking: ChunkingConfig,
    lifecycle: LifecycleConfig,
    run_id: str,
) -> dict[str, StageReport]:
    """All stages for one source in order, without Dagster (benchmarks and tests of the core)."""
    stages = {
        "discovered": lambda: discover_source(source, store, lifecycle, run_id,
                                              inputs.settings_fingerprint(chunking, embedder.identity)),
        "parsed": lambda: parse_source(source, store, run_id),
        "chunked": lambda: chunk_source(source, store, chunking, run_id),
        "embedded": lambda: embed_source(source.source_id, store, embedder, run_id),
        "indexed": lambda: index_source(source, store, embedder, run_id, lifecycle,
                                        inputs.settings_fingerprint(chunking, embedder.identity)),
    }
    reports = {}
    for name, stage in stages.items():
        started = time.perf_counter()
        reports[name] = stage()
        reports[name].seconds = time.perf_counter() - started
    return reports
