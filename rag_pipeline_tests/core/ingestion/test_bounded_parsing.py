"""Parsing is bounded: a file over its type's size limit is refused unread, a zip bomb is refused by
the sizes its zip declares or stopped by the worker's memory limit, the rest of the source is
served, and a worker never outlives the process that started it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from docx import Document

from rag_pipeline.config import ChunkingConfig, DocumentLimits, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.ingestion.embedding import HashingEmbedder
from rag_pipeline.core.ingestion.parse_worker import ParserProcess, shared_parsers
from rag_pipeline.core.ingestion.stages import discover_source, ingest_source, parse_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

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
    os.link(bomb, root / "bomb.docx")
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
    parser.peak_memory_bytes = 0
    reports = ingest_source(source, store, HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(),
                            LifecycleConfig(), "r1")
    (failure,) = reports["parsed"].failures
    assert failure.doc_id == "docs:bomb.docx"
    assert "inflates to 1,025 MB, over the 256 MB limit (limits.max_unpacked_mb): refused before parsing" in failure.reason
    assert _served(store) == {"docs:guide.md", "docs:faq.md", "docs:notes.docx"}
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
    assert failure.reason == ("28.7 MB, over the 8.0 MB limit of .md files (limits.max_file_mb_by_type.md): "
                              "refused before parsing")
    assert report.counts["parsed"] == 1

    # Alone in its source, it starts no parser at all.
    (root / "small.md").unlink()
    store = duckdb_store(tmp_path / "alone.duckdb")
    discover_source(source, store, LifecycleConfig(), "r2")
    parser = ParserProcess()
    assert parse_source(source, store, "r2", parser=parser).counts["parse_failed"] == 1
    assert parser.pid is None


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
