"""Parsing is bounded: a file over its type's size limit is refused unread, a zip bomb is refused by
the sizes its zip declares or stopped by the worker's memory limit, the rest of the source is
served, and a worker never outlives the process that started it."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
import zlib
from pathlib import Path

import pytest
from docx import Document

from rag_pipeline.config import ChunkingConfig, DocumentLimits, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.parse_worker import ParserProcess, shared_parsers
from rag_pipeline.core.ingestion.parsing import MAX_GUESSED_HEADING_DEPTH, ParseError, ParseJob
from rag_pipeline.core.ingestion.stages import discover_source, ingest_source, parse_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.many_pages import many_page_pdf

pytestmark = pytest.mark.slow
MB = 2**20


def make_docx_bomb(path: Path, inflated_bytes: int) -> Path:
    """A valid .docx whose word/document.xml inflates to `inflated_bytes` of XML (a few MB of zip:
    blocks of one paragraph repeated, a numbered one between them)."""
    template = io.BytesIO()
    document = Document()
    document.add_paragraph("A short first paragraph.")
    document.save(template)
    source = zipfile.ZipFile(io.BytesIO(template.getvalue()))
    xml = source.read("word/document.xml").decode()
    head, tail = xml.split("<w:body>")[0] + "<w:body>", "</w:body>" + xml.split("</w:body>")[1]
    block = ("<w:p><w:r><w:t>The same sentence again, as a bomb repeats it.</w:t></w:r></w:p>" * 200).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as bomb:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                bomb.writestr(item, source.read(item.filename))
        with bomb.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(head.encode())
            written = count = 0
            while written < inflated_bytes:
                numbered = f"<w:p><w:r><w:t>Paragraph {count}</w:t></w:r></w:p>".encode()
                member.write(block + numbered)
                written += len(block) + len(numbered)
                count += 1
            member.write(tail.encode())
    return path


def billion_laughs_docx() -> bytes:
    """A .docx whose XML defines entities ten deep, ten of the one below each: 10^10 'lol's on expansion."""
    template = io.BytesIO()
    document = Document()
    document.add_paragraph("x")
    document.save(template)
    source = zipfile.ZipFile(io.BytesIO(template.getvalue()))
    xml = source.read("word/document.xml").decode()
    body = xml[xml.index("?>") + 2:].lstrip()
    body = body.split("<w:body>")[0] + "<w:body><w:p><w:r><w:t>&l9;</w:t></w:r></w:p></w:body>" + body.split("</w:body>")[1]
    entities = '<!ENTITY l0 "lol lol lol lol lol lol lol lol lol lol">' + "".join(
        f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
    laughs = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><!DOCTYPE w:document [{entities}]>{body}'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            archive.writestr(item, laughs.encode() if item.filename == "word/document.xml" else source.read(item.filename))
    return out.getvalue()


def pdf_stream_bomb(inflated_bytes: int) -> bytes:
    """A one-page PDF saying "Hello", with a second content stream of `inflated_bytes` of deflated spaces."""
    deflate = zlib.compressobj(9)
    spaces = b"".join(deflate.compress(b" " * MB) for _ in range(inflated_bytes // MB)) + deflate.flush()
    hello = zlib.compress(b"BT /F1 12 Tf 72 720 Td (Hello) Tj ET\n")
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents [4 0 R 5 0 R] "
               b"/Resources << /Font << /F1 6 0 R >> >> >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(hello), hello),
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(spaces), spaces),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    pdf, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(pdf))
        pdf += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(pdf)
    pdf += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    pdf += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, table)
    return bytes(pdf)


def _word_file(path: Path, text: str) -> None:
    document = Document()
    document.add_heading("Release notes", level=1)
    document.add_paragraph(text)
    document.save(path)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory) -> Path:
    return make_docx_bomb(tmp_path_factory.mktemp("bomb") / "bomb.docx", 1 << 30)


def _source_with(tmp_path: Path, bomb: Path, limits: DocumentLimits) -> SourceConfig:
    root = write_tree(tmp_path / "docs", {
        "guide.md": "# Guide\n\nInstall the client, then set a timeout of five seconds on it.\n",
        "faq.md": "# FAQ\n\nProxies are configured on the transport, not on the client.\n",
    })
    _word_file(root / "notes.docx", "Version 2 moves retries to the transport and drops the old setting.")
    shutil.copyfile(bomb, root / "bomb.docx")  # a copy: a hard link is skipped unless the source allows it
    return SourceConfig(name="docs", path=root, limits=limits)


def _outcome(store, source_id: str) -> dict[str, tuple[str, str | None]]:
    """doc id -> (status at its last stage, reason) from the ledger."""
    rows = store.ledger.rows(source_id)
    return {row["doc_id"]: (row["status"], row["reason"]) for row in sorted(rows, key=lambda r: r["updated_at"])}


def _served(store) -> set[str]:
    return set(store.served.document_hashes())


def test_the_bomb_really_is_one(bomb):
    with zipfile.ZipFile(bomb) as archive:
        inflated = sum(member.file_size for member in archive.infolist())
    assert bomb.stat().st_size < 5 * MB and inflated > 1000 * MB


def test_a_zip_bomb_is_refused_by_its_declared_size_and_the_rest_is_served(tmp_path, bomb):
    source = _source_with(tmp_path, bomb, DocumentLimits())
    store = duckdb_store(tmp_path / "index.duckdb")
    parser = shared_parsers(1)[0]
    parser.close()  # a fresh worker: its peak is for its whole life, and an earlier test may have fed it a large file
    parser.peak_memory_bytes = 0
    reports = ingest_source(source, store, HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
                            LifecycleConfig(), "r1")
    (failure,) = reports["parsed"].failures
    assert failure.doc_id == "docs:bomb.docx"
    assert "inflates to 1,025 MB, over the 256 MB limit (limits.max_unpacked_mb): refused before parsing" in failure.reason
    assert _served(store) == {"docs:guide.md", "docs:faq.md", "docs:notes.docx"}
    print(f"zip bomb (1 GiB of XML in {bomb.stat().st_size / MB:.1f} MB) refused by its declared size: worker peak "
          f"{parser.peak_memory_bytes / MB:,.0f} MB")
    assert parser.peak_memory_bytes < 1024 * MB  # its directory was read, never its XML


def test_a_zip_bomb_let_through_is_stopped_by_the_memory_limit_and_the_rest_is_served(tmp_path, bomb):
    limits = DocumentLimits(max_unpacked_mb=4096)  # the declared size no longer stops it: the memory limit must
    source = _source_with(tmp_path, bomb, limits)
    store = duckdb_store(tmp_path / "index.duckdb")
    parser = shared_parsers(1)[0]
    parser.peak_memory_bytes = 0
    reports = ingest_source(source, store, HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
                            LifecycleConfig(), "r1")
    (failure,) = reports["parsed"].failures
    assert failure.doc_id == "docs:bomb.docx"
    assert "reached its memory limit while parsing: its 3,072 MB address space (limits.max_parser_memory_mb)" in failure.reason
    peak = parser.peak_memory_bytes
    print(f"zip bomb (1 GiB of XML in {bomb.stat().st_size / MB:.1f} MB): worker peak {peak / MB:,.0f} MB "
          f"under a {limits.max_parser_memory_mb:,} MB limit")
    assert 500 * MB < peak < limits.max_parser_memory_mb * MB  # it did parse, up to the limit and not past it
    assert _served(store) == {"docs:guide.md", "docs:faq.md", "docs:notes.docx"}


@pytest.mark.parametrize("bomb", ["billion laughs in a .docx", "a PDF stream of 1 GiB of spaces"])
def test_other_bombs_fail_alone_or_parse_within_the_memory_limit(bomb):
    limits = DocumentLimits()
    data, file_type = (billion_laughs_docx(), "docx") if bomb.startswith("billion") else (pdf_stream_bomb(1 << 30), "pdf")
    parser = ParserProcess(limits.max_parser_memory_mb)
    job = ParseJob(f"s:bomb.{file_type}", f"bomb.{file_type}", file_type, data, "h", None, limits.max_text_chars,
                   int(limits.max_unpacked_mb * MB))
    try:
        try:
            outcome = f"parsed: {[e.text for e in parser.parse(job, limits.max_parse_seconds).elements]}"
        except ParseError as exc:
            outcome = f"failed: {exc}"
        if file_type == "docx":  # libxml2 refuses the expansion itself
            assert "amplification factor exceeded" in outcome
        else:  # pdfminer inflates the stream and reads the page's one word, or pypdf's check flags the stream
            assert outcome == "parsed: ['Hello']" or "exceeds pypdf's decode limit" in outcome, outcome
        print(f"{bomb} ({len(data) / MB:.2f} MB): {outcome[:90]}; worker peak {parser.peak_memory_bytes / MB:,.0f} MB")
        assert parser.peak_memory_bytes < limits.max_parser_memory_mb * MB
        assert parser.parse(ParseJob("s:a.md", "a.md", "md", b"# After\n\nThe next page.\n", "h"), 120).title == "After"
    finally:
        parser.close()


def test_a_file_over_its_types_size_limit_is_refused_unread(tmp_path):
    root = write_tree(tmp_path / "docs", {"small.md": "# Small\n\nA page a person wrote.\n"})
    (root / "huge.md").write_bytes(b"# Huge\n\n" + b"A generated line of text, many times over.\n" * 700_000)  # 30 MB
    source = SourceConfig(name="docs", path=root)
    store = duckdb_store(tmp_path / "index.duckdb")
    discover_source(source, store, LifecycleConfig(), "r1")
    parser = ParserProcess()
    try:
        report = parse_source(source, store, "r1", parser=parser)
    finally:
        parser.close()
    (failure,) = report.failures
    assert failure.doc_id == "docs:huge.md"
    assert failure.reason == ("28.7 MB, over the 8.0 MB limit for md files (limits.max_file_mb_by_type.md): "
                              "refused before parsing")
    assert report.counts["parsed"] == 1

    # Alone in its source, it starts no parser at all.
    (root / "small.md").unlink()
    store = duckdb_store(tmp_path / "alone.duckdb")
    discover_source(source, store, LifecycleConfig(), "r2")
    parser = ParserProcess()
    assert parse_source(source, store, "r2", parser=parser).counts["parse_failed"] == 1
    assert parser.pid is None


def test_a_pdf_of_many_pages_parses_to_bounded_heading_paths():
    # Every page starts with a heading guessed from its layout: unbounded, page n's path held n headings.
    pages = 400
    parser = ParserProcess()
    try:
        doc = parser.parse(ParseJob("s:long.pdf", "long.pdf", "pdf", many_page_pdf(pages), "h"), 300)
    finally:
        parser.close()
    assert len(doc.elements) == 2 * pages
    assert max(len(e.heading_path) for e in doc.elements) == MAX_GUESSED_HEADING_DEPTH
    last = doc.elements[-1]
    assert last.heading_path[-1] == f"Section {pages}" and last.page_number == pages
    assert sum(len(e.heading_path) for e in doc.elements) <= 2 * pages * MAX_GUESSED_HEADING_DEPTH


def test_a_document_over_its_element_or_chunk_limit_fails_alone(tmp_path):
    root = write_tree(tmp_path / "docs", {"guide.md": "# Guide\n\nInstall the client, then set a timeout.\n",
                                          "list.md": "# List\n\n" + "".join(f"- item {i}\n" for i in range(300))})
    (root / "long.pdf").write_bytes(many_page_pdf(200))
    source = SourceConfig(name="docs", path=root, limits=DocumentLimits(max_elements=250))
    store = duckdb_store(tmp_path / "index.duckdb")
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    reports = ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "r1")
    failures = {f.doc_id: f.reason for f in reports["parsed"].failures}
    assert failures == {
        "docs:long.pdf": "400 elements (headings, paragraphs, list items...), over the 250 limit (limits.max_elements): "
                         "split the document, or raise the source's limit",
        "docs:list.md": "301 elements (headings, paragraphs, list items...), over the 250 limit (limits.max_elements): "
                        "split the document, or raise the source's limit"}
    assert _served(store) == {"docs:guide.md"}
    # The element limit raised (as its reason says), list.md is parsed again; over the chunk limit, the PDF fails
    # when chunked, alone.
    source = SourceConfig(name="docs", path=root, limits=DocumentLimits(max_chunks=20))
    reports = ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "r2")
    (failure,) = reports["chunked"].failures
    assert failure.doc_id == "docs:long.pdf"
    assert re.fullmatch(r"\d\d chunks, over the 20 limit \(limits.max_chunks\): split the document, raise the source's "
                        r"limit, or chunk it in larger pieces \(chunking.max_tokens\)", failure.reason), failure.reason
    assert _served(store) == {"docs:guide.md", "docs:list.md"}


# A process that starts a parser worker (from its main thread, or another), prints the worker's
# pid once the worker is busy, and waits to be killed.
PARENT = """
import sys, threading, time
from rag_pipeline.core.ingestion.parse_worker import ParserProcess
from rag_pipeline.core.ingestion.parsing import ParseJob
parser = ParserProcess()
slow = ("# Long\\n\\n" + "\\n\\n".join(f"Paragraph {i} holds a sentence." for i in range(60000))).encode()
def work():
    parser.parse(ParseJob("s:warm.md", "warm.md", "md", b"# Warm\\n\\nup.\\n", "h"), 600)
    threading.Timer(1.0, lambda: print(parser.pid, flush=True)).start()
    parser.parse(ParseJob("s:slow.md", "slow.md", "md", slow, "h"), 600)
if sys.argv[1] == "main":
    work()
else:
    threading.Thread(target=work).start()
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """Running (not gone, and not a zombie waiting to be reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("started_from", ["main", "another thread"])
def test_a_worker_dies_with_its_parent_killed_by_sigkill(started_from):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PARENT), started_from], stdout=subprocess.PIPE,
                              text=True)
    try:
        worker = int(parent.stdout.readline())
        assert _alive(worker)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), f"parser worker {worker} outlived its parent"
    finally:
        parent.kill()
        parent.wait()
