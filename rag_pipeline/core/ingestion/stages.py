"""The ingestion stages over one source, and the run protocol that makes them safe to kill.

Stage, verify, then serve:
- discovery, parsing, chunking and embedding write staging rows only (a staged discovery, parsed
  elements, chunks, the embedding cache); each is idempotent and works on what differs between
  staging and the latest discovery, so a rerun after any kill picks up where the dead run stopped;
- the switch (`index_source`) replaces the source's served rows, probes every document that
  needs it, writes the ledger, prunes the cache, commits the manifest and proves coverage and
  deletions, all inside one transaction. It commits only when both proofs pass; otherwise it rolls
  back and the previous version stays served. A kill at any point leaves the old version or the
  new one, never a mix, and never a record that disagrees with what is served.

A document that fails a stage fails alone, with its reason in the ledger; the rest goes on.
"""

from __future__ import annotations

import itertools
import json
import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rag_pipeline.config import ChunkingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.ingestion import discovery, inputs, metadata
from rag_pipeline.core.ingestion.chunking import chunk_document
from rag_pipeline.core.ingestion.coverage import CoverageReport, coverage_report
from rag_pipeline.core.ingestion.embedding import Embedder
from rag_pipeline.core.ingestion.lexical import term_frequencies
from rag_pipeline.core.ingestion.lifecycle import DeletionReport, deletion_report, guard_against_mass_deletion
from rag_pipeline.core.ingestion.parse_worker import ParserProcess, parse_workers_for, shared_parsers
from rag_pipeline.core.ingestion.parsing import (
    ParseError,
    ParseJob,
    parse_document,
    parser_for,
)
from rag_pipeline.core.models import DiscoveredFile, SearchFilters, StageFailure
from rag_pipeline.core.progress import Progress
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.served import SERVED_FIELDS, document_version

# Documents per staging write, and texts per embedding call: each batch is kept as soon as it is
# done, so a crash loses at most one batch, and a batch is at most a quarter of the stage's work.
WRITE_BATCH = 500
EMBED_BATCH = 2048
MIN_EMBED_BATCH = 64


def batch_size(total: int, largest: int, smallest: int = 1) -> int:
    """Items per batch: a quarter of the work, within [smallest, largest]."""
    return max(smallest, min(largest, -(-total // 4)))
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


@dataclass
class IndexReport(StageReport):
    """The switch: whether it committed, and the two proofs it was judged by."""

    switched: bool = False
    coverage: CoverageReport | None = None
    deletions: DeletionReport | None = None

    @property
    def refusal(self) -> str | None:
        """Why the switch was refused (None when it committed)."""
        if self.switched:
            return None
        reasons = []
        if self.coverage is not None and not self.coverage.passed:
            reasons.append(f"coverage: {len(self.coverage.uncovered)} document(s) neither queryable nor failed with a reason")
        if self.deletions is not None and not self.deletions.passed:
            reasons.append(f"deletions_propagated: {len(self.deletions.problems())} problem(s)")
        return "; ".join(reasons) or "switch refused"


def _tree(source: SourceConfig) -> discovery.SourceTree:
    return inputs.source_tree(source)


def discover_source(
    source: SourceConfig, store: Store, lifecycle: LifecycleConfig, run_id: str, settings: str = ""
) -> StageReport:
    """Walk the source, diff with the committed manifest, refuse unsafe deletions, stage the discovery.

    The diff is against what the served index was built from, so the counts stay true after a
    run that died before its switch. Deleted documents are recorded as deleted by the switch
    that removes them, not here: until then they are still served.
    """
    source_id = source.source_id
    previous = store.staging.previous_manifest(source_id)
    if source.kind == "beir":
        digest = inputs.file_digest(Path(source.path))
        files = discovery.discover_beir_corpus(
            source_id, Path(source.path), source.defaults.model_dump(), source.limits.max_text_chars
        )
    else:
        tree = _tree(source)
        entries, unreadable = tree.walk()
        digest = inputs.tree_digest(entries, unreadable)
        files = discovery.describe_entries(tree, entries, source.defaults.model_dump())
        files += _behind_unreadable_folders(source_id, store.staging.manifest_rows(source_id), unreadable, {f.doc_id for f in files})
    diff = discovery.diff_manifest(files, previous)
    served = {d for d in store.served.document_hashes() if d.startswith(f"{source_id}:")}
    allowed = guard_against_mass_deletion(store, source_id, diff, served, lifecycle, run_id)
    meta_json = {f.doc_id: metadata.meta_to_json(f.meta) for f in files if f.supported}
    report = StageReport(source_id, "discovered")
    ledger: list[dict] = []
    for f in files:
        if not f.supported:
            ledger.append(_ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "skipped", f.skip_reason))
        elif f.error:
            ledger.append(_ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "failed", f.error))
            report.failures.append(StageFailure(f.doc_id, "discovered", f.error))
        else:
            ledger.append(_ledger_entry(f.doc_id, source_id, f.content_hash, "discovered", "ok"))
    with store.db.session():
        store.staging.write_discovery(source_id, files, meta_json)
        store.staging.stage_inputs(source_id, inputs.inputs_fingerprint(source, digest, settings))
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
    if allowed:
        report.details["mass_delete_allowed"] = [allowed]
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
    version = parser_for(source.kind)
    todo = documents_to_parse(source, store)
    report = StageReport(source_id, "parsed")
    ledger: list[dict] = []
    batch: list = []

    def fail(row: dict, reason: str) -> None:
        report.failures.append(StageFailure(row["doc_id"], "parsed", reason))
        ledger.append(_ledger_entry(row["doc_id"], source_id, row["content_hash"], "parsed", "failed", reason, version))

    per_write = batch_size(len(todo), WRITE_BATCH)
    done = Progress(f"{source_id}: parsing", len(todo), progress)
    for row, doc in _parsed_in_order(source, todo, parser):
        done.advance()
        if isinstance(doc, ParseError):
            fail(row, str(doc))
            continue
        batch.append((doc, row["meta_json"]))
        ledger.append(_ledger_entry(row["doc_id"], source_id, row["content_hash"], "parsed", "ok", None, doc.parser_version))
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


def documents_to_parse(source: SourceConfig, store: Store) -> list[dict]:
    """Discovery rows whose content, metadata or parser differ from their parsed version (an
    upgraded parser may give other elements), except those that already failed with this content
    and parser (they would fail again)."""
    source_id = source.source_id
    with store.db.session():
        parsed = store.staging.parsed_versions(source_id)
        failed = store.ledger.failures(source_id)
        rows = store.staging.discovery_rows(source_id)
    version = parser_for(source.kind)
    todo = []
    for row in rows:
        if not row["supported"] or row["error"]:
            continue
        if parsed.get(row["doc_id"]) == (row["content_hash"], row["meta_json"], version):
            continue
        failure = failed.get(row["doc_id"])
        if failure and failure["stage"] == "parsed" and failure["content_hash"] == row["content_hash"] \
                and failure["parser_version"] == version:
            continue
        todo.append(row)
    return todo


def _parsed_in_order(source: SourceConfig, todo: list[dict], parser: ParserProcess | None):
    """(row, ParsedDocument or its ParseError) for every row, in order, from the source's parse
    workers at once (`parse_workers`). The caller writes them in this order, so batches and the
    ledger read as with one worker. An interrupt stops every worker: their replies must not
    outlive the run (and each thread then ends at once, its worker gone)."""
    doc_ids = [r["doc_id"] for r in todo]
    if parser is not None or source.kind == "beir":
        parsers = [parser]
    else:
        parsers = shared_parsers(parse_workers_for(source.parse_workers, len(todo)))
        for worker in parsers:
            worker.use_memory_limit(source.limits.max_parser_memory_mb)
    readers = [_reader(source, doc_ids, p) for p in parsers]

    def attempt(read, row: dict):
        try:
            return read(row)
        except ParseError as exc:
            return exc

    if len(readers) == 1:
        for row in todo:
            yield row, attempt(readers[0], row)
        return
    workers = len(readers)
    idle: queue.SimpleQueue = queue.SimpleQueue()
    for read in readers:
        idle.put(read)

    def parse_one(row: dict):
        read = idle.get()
        try:
            return attempt(read, row)
        finally:
            idle.put(read)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"parse-{source.source_id}")
    try:
        # At most two documents per worker in flight: a source's bytes are not all read ahead.
        pending: deque = deque()
        rows = iter(todo)
        for row in itertools.islice(rows, 2 * workers):
            pending.append((row, pool.submit(parse_one, row)))
        while pending:
            row, future = pending.popleft()
            result = future.result()
            following = next(rows, None)
            if following is not None:
                pending.append((following, pool.submit(parse_one, following)))
            yield row, result
    except BaseException:
        for worker in parsers:
            worker.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _reader(source: SourceConfig, doc_ids: Sequence[str], parser: ParserProcess | None):
    """A function row -> ParsedDocument for this source's kind; raises ParseError with the reason.
    Files go to `parser`; BEIR records are parsed here (`parser` is None for them)."""
    if source.kind == "beir":
        wanted = set(doc_ids)
        records = {f.doc_id: f for f in discovery.discover_beir_corpus(source.source_id, Path(source.path),
                                                                       max_text_chars=source.limits.max_text_chars)
                   if f.doc_id in wanted} if wanted else {}

        def read_record(row: dict):
            item = records.get(row["doc_id"])
            if item is None or item.content_hash != row["content_hash"]:
                raise ParseError("record changed or vanished between discovery and parsing; rerun the source")
            return parse_document(item)

        return read_record
    tree = _tree(source)
    limits = source.limits

    def read_file(row: dict):
        limit = limits.max_parse_bytes(row["file_type"])
        if row["size"] > limit:
            raise ParseError(f"{row['size'] / 2**20:,.1f} MB, over the {limit / 2**20:,.1f} MB limit for {row['file_type']} "
                             f"files (limits.max_file_mb_by_type.{row['file_type']}): refused before parsing")
        try:
            data = tree.read(row["rel_path"])
        except discovery.DocumentReadError as exc:
            raise ParseError(str(exc)) from None
        if discovery.sha256_bytes(data) != row["content_hash"]:
            raise ParseError("file changed between discovery and parsing; the next run picks up the new version")
        title = json.loads(row["meta_json"] or "{}").get("title")
        job = ParseJob(row["doc_id"], row["rel_path"], row["file_type"], data, row["content_hash"], title, limits.max_text_chars,
                       int(limits.max_unpacked_mb * 2**20))
        return parser.parse(job, limits.max_parse_seconds)

    return read_file


def chunk_source(source: SourceConfig, store: Store, config: ChunkingConfig, run_id: str,
                 progress: Callable[[str], None] | None = None) -> StageReport:
    """(Re)chunk documents whose parsed content or the chunking settings changed; drop deleted ones."""
    source_id = source.source_id
    config = source.effective_chunking(config)
    fingerprint = config.fingerprint()
    with store.db.session():
        current = {r["doc_id"] for r in store.staging.discovery_rows(source_id) if r["supported"]}
        parsed = {doc_id: (content_hash, meta)
                  for doc_id, (content_hash, meta, _) in store.staging.parsed_versions(source_id).items()}
        staged = store.staging.chunk_versions(source_id)
        gone = sorted((set(parsed) | set(staged)) - current)
        store.staging.drop_staged_documents(gone)
    todo = [d for d, (content_hash, _) in parsed.items() if d in current and staged.get(d) != (content_hash, fingerprint)]
    report = StageReport(source_id, "chunked")
    ledger: list[dict] = []
    chunk_total = 0
    batch: list = []
    per_write = batch_size(len(todo), WRITE_BATCH)
    done = Progress(f"{source_id}: chunking", len(todo), progress)
    for doc in store.staging.load_parsed(todo):
        done.advance()
        chunks = chunk_document(doc, source_id, config)
        if not chunks:
            reason = "chunking produced no chunks (document has no body text)"
            report.failures.append(StageFailure(doc.doc_id, "chunked", reason))
            ledger.append(_ledger_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "failed", reason))
            continue
        postings = [
            (chunk.chunk_id, term, tf) for chunk in chunks for term, tf in term_frequencies(chunk.embed_text).items()
        ]
        batch.append((doc.doc_id, doc.content_hash, chunks, postings))
        chunk_total += len(chunks)
        ledger.append(_ledger_entry(doc.doc_id, source_id, doc.content_hash, "chunked", "ok"))
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
    per_call = batch_size(len(hashes), EMBED_BATCH, MIN_EMBED_BATCH)
    done = Progress(f"{source_id}: embedding", len(hashes), progress)
    for start in range(0, len(hashes), per_call):
        batch = hashes[start : start + per_call]
        vectors = embedder.encode([misses[h] for h in batch])
        done.advance(len(batch))
        if not np.all(np.isfinite(vectors)):
            raise ValueError(f"embedder {identity} returned non-finite values; this batch was not cached")
        store.staging.cache_vectors(identity, list(zip(batch, vectors)))
        kill_point("embed:batch")
    embedded_docs = sorted({chunk_id.rsplit("#", 1)[0] for chunk_id, _, _ in pending})
    with store.db.session():
        store.staging.mark_embedded([chunk_id for chunk_id, _, _ in pending], identity)
        store.ledger.record(
            [{"doc_id": d, "source_id": source_id, "stage": "embedded", "status": "ok"} for d in embedded_docs], run_id
        )
    kill_point("embedded")
    hits = sum(1 for _, h, _ in pending if h in cached)
    report.counts = {"embedded": len(misses), "cache_hits": hits, "chunks_pending": len(pending)}
    return report


class _Refused(Exception):
    """Rolls the switch back: a proof failed."""


def index_source(source: SourceConfig, store: Store, embedder: Embedder, run_id: str) -> IndexReport:
    """The switch: serve the source's staged state only if it is proven, in one transaction.

    Inside the transaction: the served rows are replaced, every served document whose current
    version was never proven queryable is probed, the ledger gets its indexed / queryable /
    deleted rows, the cache loses entries only deleted documents used, the discovery becomes the
    committed manifest; then coverage and deletion propagation are proven on that state. Both
    pass: commit. Either fails: roll back (the previous version stays served, the refusal is
    recorded with the source). The ledger is reconciled with what is served, not with what an
    earlier run believed, so a run after any kill converges.
    """
    source_id = source.source_id
    report = IndexReport(source_id, "indexed")
    leaving = store.served.leaving_documents(source_id)
    # Probing needs the model; encode the leaving documents' own text before the transaction.
    probe_texts = [f"{d['title'] or ''} {d['opening_text'] or ''}" for d in leaving]
    probe_vectors = dict(zip([d["doc_id"] for d in leaving], embedder.encode(probe_texts))) if leaving else {}
    try:
        with store.transaction():
            kill_point("switch:begin")
            before = {d["doc_id"]: d for d in store.served.indexed_documents(source_id)}
            store.served.record_tombstones(source_id, leaving, run_id)
            counts = store.served.replace_served(source_id, embedder.identity)
            kill_point("switch:replaced")
            ledger, probed, failures = _reconcile_ledger(store, source_id, before)
            store.ledger.record(ledger, run_id)
            pruned = store.staging.prune_cache(embedder.identity, [h for d in leaving for h in d["text_hashes"]])
            store.staging.commit_manifest(source_id)
            store.ledger.record_source_run(source_id, str(source.path), run_id)
            report.coverage = coverage_report(store, source_id)
            report.deletions = deletion_report(store, source_id, embedder, run_id, probe_vectors)
            served = store.served.indexed_documents(source_id)
            if not (report.coverage.passed and report.deletions.passed):
                raise _Refused
            store.ledger.record_served(source_id, run_id, len(served))
            kill_point("switch:verified")
        report.switched = True
        kill_point("switch:committed")
    except _Refused:
        store.ledger.record_source_run(source_id, str(source.path), run_id, failure=report.refusal)
        return report
    after = {d["doc_id"] for d in served}
    report.failures = failures
    report.counts = {
        # A new served version: new bytes, or new metadata (who may see it, status, dates).
        "indexed": sum(1 for d in served if d["doc_id"] not in before
                       or document_version(before[d["doc_id"]]) != document_version(d)),
        "queryable": report.coverage.counts_by_stage.get("queryable", 0),
        "probed": probed,
        "removed": len(set(before) - after),
        "served_documents": len(served),
        "kept_previous": counts["kept_previous"],
        # Documents whose served rows were written by this switch (the others were already current).
        "rewritten": counts["rewritten"],
        "cache_pruned": pruned,
    }
    report.details = {"removed": sorted(set(before) - after)}
    return report


def _reconcile_ledger(
    store: Store, source_id: str, before: dict[str, dict]
) -> tuple[list[dict], int, list[StageFailure]]:
    """Ledger rows that make the record match what is now served (call inside the switch).

    Served documents get an `indexed` row for their served version (new bytes, another parser,
    or the same bytes served with new metadata: the row says which fields changed); those whose
    served version was never proven queryable (or failed the probe before) are probed now;
    documents no longer in the source get their `deleted` rows. `before`: the served rows before.
    """
    served = {d["doc_id"]: d for d in store.served.indexed_documents(source_id)}
    rows = {(r["doc_id"], r["stage"]): r for r in store.ledger.rows(source_id) if r["stage"] in ("indexed", "queryable")}

    def proven(doc_id: str, stage: str) -> bool:
        row, doc = rows.get((doc_id, stage)), served[doc_id]
        if row is None or row["status"] != "ok" or row["content_hash"] != doc["content_hash"]:
            return False
        # Indexed again by another parser (same bytes, maybe other elements): a new ledger row says so.
        return stage != "indexed" or row["parser_version"] == doc["parser_version"]

    ledger = [
        _ledger_entry(d, source_id, row["content_hash"], "indexed", "ok", parser_version=row["parser_version"])
        for d, row in served.items() if not proven(d, "indexed")
    ]
    fresh = {entry["doc_id"] for entry in ledger}
    for doc_id, row in served.items():
        old = before.get(doc_id)
        if doc_id not in fresh and old is not None and document_version(old) != document_version(row):
            changed = [f for f in SERVED_FIELDS if str(old.get(f)) != str(row.get(f))]
            ledger.append(_ledger_entry(doc_id, source_id, row["content_hash"], "indexed", "ok",
                                        f"served with new metadata: {', '.join(changed)}",
                                        parser_version=row["parser_version"]))
    to_probe = sorted(d for d in served if not proven(d, "queryable"))
    queryable, not_found = probe_queryable(store, to_probe)
    failures = []
    for doc_id in to_probe:
        content_hash = served[doc_id]["content_hash"]
        if doc_id in queryable:
            ledger.append(_ledger_entry(doc_id, source_id, content_hash, "queryable", "ok"))
        else:
            reason = not_found.get(doc_id, "not returned by a search for its own text")
            ledger.append(_ledger_entry(doc_id, source_id, content_hash, "queryable", "failed", reason))
            failures.append(StageFailure(doc_id, "queryable", reason))
    discovered = store.staging.discovery_rows(source_id)
    current = {r["doc_id"] for r in discovered if r["supported"]}
    manifest = store.staging.manifest_rows(source_id)
    committed = {r["doc_id"] for r in manifest if r["supported"]}
    for doc_id in sorted((committed | set(before)) - current):
        ledger.append({"doc_id": doc_id, "source_id": source_id, "stage": "deleted", "status": "deleted",
                       "reason": "no longer in the source"})
        if doc_id in before:
            ledger.extend({"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": "deleted",
                           "reason": "removed from the index"} for stage in ("indexed", "queryable"))
    # Skipped files (not documents) that are gone: their record says so too, not "skipped" for ever.
    names = {r["doc_id"] for r in discovered}
    for row in manifest:
        if not row["supported"] and row["doc_id"] not in names:
            ledger.append({"doc_id": row["doc_id"], "source_id": source_id, "stage": "deleted", "status": "deleted",
                           "reason": f"no longer in the source (it was skipped: {row['skip_reason']})"})
    return ledger, len(to_probe), failures


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


def _ledger_entry(doc_id: str, source_id: str, content_hash: str | None, stage: str, status: str,
                  reason: str | None = None, parser_version: str | None = None) -> dict:
    """One ledger row: a document's outcome at one stage, for one version of its content."""
    return {"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": status,
            "content_hash": content_hash, "reason": reason, "parser_version": parser_version}


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
        "indexed": lambda: index_source(source, store, embedder, run_id),
    }
    reports = {}
    for name, stage in stages.items():
        started = time.perf_counter()
        reports[name] = stage()
        reports[name].seconds = time.perf_counter() - started
    return reports
