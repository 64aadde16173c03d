"""A source's documents through its parser workers, in discovery order.

Each document's bytes are read (a file through the folder's safety checks, a BEIR record, a listed
source's document in the version discovery hashed), compared with the hash discovery recorded, and
handed to a parser worker (`parse_worker.py`) under the source's limits;
several workers parse at once when the source asks for them, and results come back in order.
"""

from __future__ import annotations

import itertools
import json
import queue
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from rag_pipeline.config import SourceConfig
from rag_pipeline.core.ingestion import discovery, inputs, source_tree
from rag_pipeline.core.ingestion.parse_worker import ParserProcess, parse_workers_for, shared_parsers
from rag_pipeline.core.ingestion.parsing import ParseError, ParseJob, parse_document
from rag_pipeline.core.ingestion.sources import listed
from rag_pipeline.core.ingestion.sources.base import DocumentSource, ListedDocument
from rag_pipeline.core.ingestion.sources.registry import open_source

# While a document is being parsed, how often the wait looks up to report progress.
TICK_SECONDS = 1.0


def parsed_in_order(source: SourceConfig, todo: list[dict], parser: ParserProcess | None,
                     tick: Callable[[], None] = lambda: None, store_folder: Path | None = None):
    """(row, ParsedDocument or its ParseError) for every row, in order, from the source's parse
    workers at once (`parse_workers`), calling `tick` every second while it waits (a document
    may take minutes: progress still reports); a listed source keeps its cache in `store_folder`. The caller writes them in this order, so batches
    and the ledger read as with one worker. An interrupt stops every worker: their replies must
    not outlive the run (and each thread then ends at once, its worker gone)."""
    if not todo:
        return
    doc_ids = [r["doc_id"] for r in todo]
    if parser is not None or source.kind == "beir":
        parsers = [parser]
    else:
        parsers = shared_parsers(parse_workers_for(source.parse_workers, len(todo)))
        for worker in parsers:
            worker.use_memory_limit(source.limits.max_parser_memory_mb)
            worker.start(())  # from this thread (as before the pool): the kernel ends it with this one
    opened: list[DocumentSource] = []
    try:
        readers = [_reader(source, doc_ids, p, store_folder, opened) for p in parsers]
        yield from _in_order(source, todo, parsers, readers, tick)
    finally:
        for each in opened:
            each.close()


def _in_order(source: SourceConfig, todo: list[dict], parsers: list, readers: list, tick: Callable[[], None]):

    def attempt(read, row: dict):
        try:
            return read(row)
        except ParseError as exc:
            return exc

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
            result = _waited(future, tick)
            following = next(rows, None)
            if following is not None:
                pending.append((following, pool.submit(parse_one, following)))
            yield row, result
    except BaseException:
        for worker in parsers:
            if worker is not None:
                worker.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _waited(future: Future, tick: Callable[[], None]):
    """The future's result, calling `tick` every `TICK_SECONDS` while it is not there."""
    while True:
        try:
            return future.result(timeout=TICK_SECONDS)
        except FutureTimeout:
            tick()


def _reader(source: SourceConfig, doc_ids: Sequence[str], parser: ParserProcess | None,
            store_folder: Path | None = None, opened: list | None = None):
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
    limits = source.limits
    if source.is_folder:
        tree = inputs.source_tree(source)

        def read_bytes(row: dict) -> bytes:
            return tree.read(row["rel_path"])
    else:
        listed_source = open_source(source, store_folder)
        if opened is not None:
            opened.append(listed_source)

        def read_bytes(row: dict) -> bytes:
            # The version discovery listed, which is the one its hash was taken from.
            document = ListedDocument(row["rel_path"], listed.listed_version(row["stat_key"] or ""), row["size"],
                                      row["file_type"])
            return listed_source.fetch(document).data

    def read_file(row: dict):
        limit = limits.max_parse_bytes(row["file_type"])
        if row["size"] > limit:
            raise ParseError(f"{row['size'] / 2**20:,.1f} MB, over the {limit / 2**20:,.1f} MB limit for {row['file_type']} "
                             f"files (limits.max_file_mb_by_type.{row['file_type']}): refused before parsing")
        try:
            data = read_bytes(row)
        except source_tree.DocumentReadError as exc:
            raise ParseError(str(exc)) from None
        if discovery.sha256_bytes(data) != row["content_hash"]:
            raise ParseError("file changed between discovery and parsing; the next run picks up the new version")
        title = json.loads(row["meta_json"] or "{}").get("title")
        job = ParseJob(row["doc_id"], row["rel_path"], row["file_type"], data, row["content_hash"], title, limits.max_text_chars,
                       int(limits.max_unpacked_mb * 2**20), limits.max_elements)
        return parser.parse(job, limits.max_parse_seconds)

    return read_file
