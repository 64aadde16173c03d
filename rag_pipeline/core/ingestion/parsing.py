"""Parsing: `unstructured` partitioning of one document into elements with heading paths and lines."""

from __future__ import annotations

import importlib.metadata
import io
import logging
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath

from rag_pipeline.core.ingestion.batched_classification import PARTITION_LOCK, partition_batched
from rag_pipeline.core.ingestion.discovery import FRONT_MATTER_TYPES, split_front_matter
from rag_pipeline.core.ingestion.encoding import TextEncodingError, decode_text
from rag_pipeline.core.ingestion.markdown_fences import FENCES_VERSION, normalize_fences
from rag_pipeline.core.ingestion.markdown_text import MYST_VERSION, markdown_elements
from rag_pipeline.core.ingestion.notebook_text import NOTEBOOK_VERSION, NotebookError, notebook_elements
from rag_pipeline.core.ingestion.rst_text import RST_VERSION, RstError, rst_elements
from rag_pipeline.core.ingestion.structural_text import STRUCTURE_VERSION, Located, text_elements
from rag_pipeline.core.models import DiscoveredFile, Element, ParsedDocument

_TOKEN = re.compile(r"[a-z0-9]+")
_BUFFER_REPR = re.compile(r"<_io\.\w+ object at 0x[0-9a-f]+>")
# Heading categories of unstructured; everything else is body content under the current heading.
_TITLE_CATEGORIES = {"Title"}
_DROP_CATEGORIES = {"PageBreak", "Image", "Header", "Footer", "PageNumber"}
# A heading guessed from layout (a PDF's large text, no markup) nests under the one before it, at
# most this deep; past it, it becomes the sibling of the deepest. Unbounded, a PDF whose every page
# starts with a guessed heading gave page n a path of n headings: paths, and the breadcrumbs embedded
# with every chunk, grew with the square of the pages (a 5,000-page PDF took the main process to 5 GB).
MAX_GUESSED_HEADING_DEPTH = 6
# Part of the parser version: a change to how headings are nested changes elements, so documents parse again.
HEADINGS_VERSION = "1"


class ParseError(Exception):
    """A document could not be parsed; the message says why and what to do."""


@lru_cache(maxsize=1)
def parser_version() -> str:
    """Name and version of the parser, recorded in the ledger with every parsed document."""
    # From the installed distribution: importing unstructured itself costs seconds. The options of
    # `_PARTITION_OPTIONS` are not part of it: they give the elements unstructured's defaults give
    # (test_parsing_speed_options); an option that changes elements must change this string, as
    # the Markdown fence normalisation does (markdown_fences.py: documents parsed before it re-parse).
    # Markdown, plain text, reStructuredText and notebooks are read by their structure
    # (structural_text.py, markdown_text.py, rst_text.py, notebook_text.py): their rules and their parsers'
    # versions are part of the string too.
    version = importlib.metadata.version
    return (f"unstructured {version('unstructured')}; md fences {FENCES_VERSION}; "
            f"md/txt structure {STRUCTURE_VERSION} (markdown-it-py {version('markdown-it-py')}); "
            f"myst {MYST_VERSION} (mdit-py-plugins {version('mdit-py-plugins')}); "
            f"rst {RST_VERSION} (docutils {version('docutils')}); ipynb {NOTEBOOK_VERSION} (nbformat {version('nbformat')}); "
            f"layout headings {HEADINGS_VERSION}")


BEIR_PARSER = "beir-jsonl"


def parser_for(source_kind: str) -> str:
    """The parser version a source's documents are parsed with (BEIR records are read as JSON)."""
    return BEIR_PARSER if source_kind == "beir" else parser_version()


@dataclass(frozen=True)
class ParseJob:
    """One document to parse: its bytes as discovered (hashed), and what the parser needs to know."""

    doc_id: str
    rel_path: str
    file_type: str
    data: bytes
    content_hash: str
    title: str | None = None
    max_text_chars: int | None = None
    # A zip-based document (.docx): the most its members may inflate to, as its directory declares.
    max_unpacked_bytes: int | None = None
    # The most elements the document may have: checked in the worker, before they travel to the run.
    max_elements: int | None = None


def parse_document(item: DiscoveredFile, max_text_chars: int | None = None) -> ParsedDocument:
    """Parse one discovered document in this process (tests and tools; the pipeline isolates the
    parser in a process of its own, see parse_worker)."""
    if item.file_type == "beir":
        return _parse_beir_record(item)
    job = ParseJob(item.doc_id, item.rel_path, item.file_type, Path(item.abs_path).read_bytes(), item.content_hash,
                   item.meta.title, max_text_chars)
    return parse_job(job)


def parse_job(job: ParseJob, *, parser_defaults: bool = False) -> ParsedDocument:
    """Partition one document's bytes into elements; raise ParseError with a true reason.

    Markdown and plain text are read by their structure (`markdown_text`, `structural_text`), other formats by
    unstructured's partitioners. `parser_defaults` calls unstructured's own partitioner with its
    defaults for every format (the slower call this replaced; tests and benchmarks/ingest.py
    compare the two)."""
    data = job.data
    if not data:
        raise ParseError("empty file (0 bytes): add content or delete the file")
    if not data.strip():
        raise ParseError(f"no text: the file holds only white space ({len(data)} bytes); add content or delete it")
    line_offset = 0
    text: str | None = None
    if job.file_type == "docx":
        _check_docx(data, job.max_unpacked_bytes)
    if job.file_type in ("md", "txt", "html", "rst", "ipynb"):
        text = _decode_text(data, job.file_type)
        if not text.strip():
            raise ParseError("no text: the file holds only white space and a byte-order mark; add content or delete it")
        if job.file_type in FRONT_MATTER_TYPES:
            try:
                _, text, line_offset = split_front_matter(text)
            except ValueError as exc:
                raise ParseError(f"front matter: {exc}") from exc
            if not text.strip():
                raise ParseError("the file has front matter but no body text")
        if job.file_type == "md" and parser_defaults:
            text = normalize_fences(text)  # MkDocs fences with attributes are code, not prose
        if job.file_type != "ipynb":  # a notebook's JSON holds its outputs too: its text is counted once read
            _check_text_length(len(text), job.max_text_chars)
    if job.file_type in STRUCTURAL_TYPES and not (parser_defaults and job.file_type in ("md", "txt")):
        located = _structural(job.file_type, text)
        spans = [(item.line_start, item.line_end) for item in located]
        elements = _to_elements(job.doc_id, [item.element for item in located], spans, line_offset)
        if not elements:
            raise ParseError("no text could be extracted: the file holds only markup")
        _check_text_length(sum(len(e.text) for e in elements), job.max_text_chars)
        _check_element_count(len(elements), job.max_elements)
        title = job.title or _first_title(elements) or PurePosixPath(job.rel_path).stem
        return ParsedDocument(job.doc_id, job.content_hash, parser_version(), title, tuple(elements))
    with _ParserMessages() as messages:
        try:
            raw_elements = _partition(job.file_type, data, text, parser_defaults)
        except (ParseError, MemoryError):
            raise  # a MemoryError is the worker's memory limit: reported as such by the worker
        except Exception as exc:  # unstructured raises many types; the reason is what matters here
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            # The parser read from memory: name the file where its message shows the buffer.
            message = _BUFFER_REPR.sub(lambda _: job.rel_path, message)
            raise ParseError(f"{job.file_type} parser failed: {type(exc).__name__}: {message}") from exc
    elements = _to_elements(job.doc_id, raw_elements)
    if not elements:
        said = "; ".join(messages.lines[:3])
        raise ParseError(
            f"no text could be extracted; the parser reported: {said}" if said
            else "no text could be extracted: the document holds no text layer (a scanned image?) or only markup"
        )
    _check_text_length(sum(len(e.text) for e in elements), job.max_text_chars)
    _check_element_count(len(elements), job.max_elements)
    if text is not None:
        # The decoded text (an HTML page whole; Markdown after its front matter, hence the offset).
        elements = locate_lines(elements, text.splitlines(), line_offset)
    title = job.title or _first_title(elements) or PurePosixPath(job.rel_path).stem
    return ParsedDocument(job.doc_id, job.content_hash, parser_version(), title, tuple(elements))


# Read by their structure in this process (no NLP model); `parser_defaults` has unstructured's
# partitioners read Markdown and plain text instead (it has none for the other two).
STRUCTURAL_TYPES = ("md", "txt", "rst", "ipynb")


def _structural(file_type: str, text: str) -> list[Located]:
    """The elements of a text document read by its structure; ParseError for one its parser refuses."""
    readers = {"md": markdown_elements, "txt": text_elements, "rst": rst_elements, "ipynb": notebook_elements}
    try:
        return readers[file_type](text)
    except (RstError, NotebookError) as exc:
        raise ParseError(str(exc)) from None


def _check_text_length(chars: int, limit: int | None) -> None:
    if limit is not None and chars > limit:
        raise ParseError(f"{chars:,} characters of text, over the {limit:,} limit (limits.max_text_chars)")


def _check_element_count(count: int, limit: int | None) -> None:
    if limit is not None and count > limit:
        raise ParseError(f"{count:,} elements (headings, paragraphs, list items...), over the {limit:,} limit "
                         "(limits.max_elements): split the document, or raise the source's limit")


class _ParserMessages(logging.Handler):
    """Collects what the parser's libraries log at WARNING and above while one document is parsed
    (pypdf says "invalid pdf header" where unstructured just returns no elements)."""

    _IGNORED = ("Thank you for using Unstructured",)

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().strip()
        if message and not message.startswith(self._IGNORED) and message not in self.lines:
            self.lines.append(message.splitlines()[0][:300])

    def __enter__(self) -> _ParserMessages:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger().removeHandler(self)


def _decode_text(data: bytes, file_type: str) -> str:
    try:
        return decode_text(data, file_type)
    except TextEncodingError as exc:
        raise ParseError(str(exc)) from exc


def _check_docx(data: bytes, max_unpacked_bytes: int | None = None) -> None:
    """A .docx is a zip holding word/document.xml; anything else gets a reason a person can act on.

    Its members' inflated sizes, as the zip's directory declares them, must stay within
    `max_unpacked_bytes`: a few MB of zip can inflate to gigabytes of XML (a decompression bomb).
    The declared sizes bind: Python's zipfile stops a member at its declared size and fails its
    checksum, so an archive that understates them does not get further."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile:
        raise ParseError("not a readable Word .docx document (not a complete zip archive): truncated, an old .doc, "
                         "or another type renamed? re-save it from Word as .docx, or give it its real extension") from None
    names = {member.filename for member in members}
    unpacked = sum(member.file_size for member in members)
    if max_unpacked_bytes is not None and unpacked > max_unpacked_bytes:
        raise ParseError(f"the document's zip inflates to {unpacked / 2**20:,.0f} MB, over the "
                         f"{max_unpacked_bytes / 2**20:,.0f} MB limit (limits.max_unpacked_mb): refused before parsing")
    if "word/document.xml" not in names:
        raise ParseError("not a Word .docx document (a zip archive without word/document.xml): re-save it from "
                         "Word as .docx, or give it its real extension")


# The file types whose parser runs in the parser process (a BEIR corpus is read directly).
WARM_UP_TYPES = ("md", "html", "txt", "rst", "ipynb", "pdf", "docx")

def warm_up(file_type: str) -> None:
    """Import the partitioner of a file type, and for text formats run it once on a tiny page
    (spaCy loads on first use), so no document pays for it in its time limit."""
    samples = {"md": "# Warm up\n\nA short sentence.\n", "txt": "A short sentence.\n",
               "rst": "Warm up\n=======\n\nA short sentence.\n\n.. note:: A note.\n",
               "ipynb": '{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": '
                        '[{"cell_type": "markdown", "metadata": {}, "source": "# Warm up"}]}',
               "html": "<html><body><h1>Warm up</h1><p>A short sentence.</p></body></html>"}
    if file_type in STRUCTURAL_TYPES:
        _structural(file_type, samples[file_type])
        return
    if file_type in samples:
        _partition(file_type, samples[file_type].encode(), samples[file_type])
    elif file_type in ("pdf", "docx"):
        _partitioner(file_type)


def _partitioner(file_type: str):
    # unstructured's partitioners are imported lazily: they cost seconds and pull spaCy.
    if file_type == "md":
        from unstructured.partition.md import partition_md

        return partition_md
    if file_type == "html":
        from unstructured.partition.html import partition_html

        return partition_html
    if file_type == "txt":
        from unstructured.partition.text import partition_text

        return partition_text
    if file_type == "pdf":
        from unstructured.partition.pdf import partition_pdf

        return partition_pdf
    if file_type == "docx":
        from unstructured.partition.docx import partition_docx

        return partition_docx
    raise ParseError(f"no parser for file type {file_type!r}")


# unstructured options that skip work whose result the elements do not keep. `languages=[""]`
# turns language detection off (unstructured/partition/common/lang.py:547, in the `apply_metadata`
# step every partitioner runs, common/metadata.py:236-246): langdetect over the whole text only
# fills `metadata.languages`, which Element does not keep, and no classification reads it (md and
# html classify with `derive_element_type_from_text`, html/parser.py:1097, txt with
# `element_from_text`, text.py:113, both with fixed arguments). It was about a tenth of the md/html
# parse time, plus 0.3 s for langdetect's profiles on a worker's first document. The heavier part,
# spaCy in `is_possible_narrative_text` (text_type.py:27) choosing NarrativeText or Text for a <p>
# (three quarters of the time), has no public switch in unstructured 0.27: for HTML it stays, run
# in one batch per document (`batched_classification`) instead of once per paragraph; Markdown and
# plain text do not go through unstructured's partitioners at all (structural_text.py).
_PARTITION_OPTIONS: dict[str, dict] = {"html": {"languages": [""]}, "docx": {"languages": [""]}}


def _partition(file_type: str, data: bytes, text: str | None, parser_defaults: bool = False) -> list:
    partition = _partitioner(file_type)
    options = {} if parser_defaults else _PARTITION_OPTIONS.get(file_type, {})
    if file_type == "html" and not parser_defaults:
        return partition_batched(file_type, lambda: partition(text=text, **options))
    if file_type in ("md", "html", "txt"):
        with PARTITION_LOCK:
            return partition(text=text, **options)
    if file_type == "pdf":
        # "fast" reads the text layer with pdfminer; "hi_res" needs a layout model from a hub.
        return partition(file=io.BytesIO(data), strategy="fast", languages=["eng"])
    return partition(file=io.BytesIO(data), **options)


def _to_elements(doc_id: str, raw_elements: Sequence, spans: Sequence[tuple[int | None, int | None]] | None = None,
                 line_offset: int = 0) -> list[Element]:
    """Keep text-bearing elements and give each its heading path (and its line span, when the
    parser gave `spans`, one per raw element, counted after `line_offset` lines of front matter).

    unstructured sets `parent_id` only on some elements, so the path is built from a stack of the
    headings seen so far, ordered by `category_depth` (0 = top level).
    """
    elements: list[Element] = []
    stack: list[tuple[int, str]] = []
    for position, raw in enumerate(raw_elements):
        category = raw.category
        text = (raw.text or "").strip()
        if category in _DROP_CATEGORIES or not text:
            continue
        metadata = raw.metadata
        if category in _TITLE_CATEGORIES:
            depth = metadata.category_depth
            if depth is None:
                # A heading guessed from layout (no markup): nest it under the current heading, within bounds.
                depth = min(stack[-1][0] + 1, MAX_GUESSED_HEADING_DEPTH - 1) if stack else 0
            while stack and stack[-1][0] >= depth:
                stack.pop()
            heading_path = tuple(title for _, title in stack) + (text,)
            stack.append((depth, text))
        else:
            heading_path = tuple(title for _, title in stack)
        elements.append(
            Element(
                doc_id=doc_id,
                ordinal=len(elements),
                category=category,
                text=text,
                heading_path=heading_path,
                page_number=metadata.page_number,
                table_html=getattr(metadata, "text_as_html", None) if category == "Table" else None,
                **_span(spans[position] if spans else None, line_offset),
            )
        )
    return elements


def _span(span: tuple[int | None, int | None] | None, line_offset: int) -> dict:
    if span is None or span[0] is None:
        return {}
    return {"line_start": span[0] + line_offset, "line_end": (span[1] or span[0]) + line_offset}


def _first_title(elements: Sequence[Element]) -> str | None:
    for element in elements:
        if element.category in _TITLE_CATEGORIES:
            return element.text
    return None


def _parse_beir_record(item: DiscoveredFile) -> ParsedDocument:
    """A BEIR record is already clean text: title and body become two elements, no parser needed."""
    elements: list[Element] = []
    title = item.inline_title or ""
    if title:
        elements.append(Element(item.doc_id, 0, "Title", title, (title,)))
    if item.inline_text:
        elements.append(Element(item.doc_id, len(elements), "NarrativeText", item.inline_text, (title,) if title else ()))
    if not elements:
        raise ParseError("BEIR record has neither title nor text")
    return ParsedDocument(item.doc_id, item.content_hash, BEIR_PARSER, title or item.rel_path, tuple(elements))


def locate_lines(elements: Sequence[Element], lines: Sequence[str], line_offset: int = 0) -> list[Element]:
    """Attach 1-based line spans in the source file to elements, scanning forward in order.

    Parsers drop markup, so an element is matched by its words: it starts at the first line (at or
    after the previous element) holding its first words and ends at the first line holding its last
    words. Elements that cannot be placed keep no span rather than a wrong one.
    """
    line_tokens = [set(_TOKEN.findall(line.lower())) for line in lines]
    cursor = 0
    located: list[Element] = []
    for element in elements:
        tokens = _TOKEN.findall(element.text.lower())
        if not tokens:
            located.append(element)
            continue
        head, tail = set(tokens[:3]), set(tokens[-3:])
        start = _find_line(line_tokens, head, cursor)
        if start is None:
            located.append(element)
            continue
        end = _find_line(line_tokens, tail, start) or start
        cursor = start if end == start else end
        located.append(replace(element, line_start=start + 1 + line_offset, line_end=end + 1 + line_offset))
    return located


def _find_line(line_tokens: Sequence[set[str]], wanted: set[str], start: int) -> int | None:
    for index in range(start, len(line_tokens)):
        if wanted <= line_tokens[index]:
            return index
    return None


class _TableRows(HTMLParser):
    """Collect the cell texts of an HTML table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            if not self.rows:
                self.rows.append([])
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table_rows(table_html: str) -> list[list[str]]:
    """Rows of cell texts of an HTML table (the first row is taken as the header)."""
    parser = _TableRows()
    parser.feed(table_html)
    return [row for row in parser.rows if any(cell for cell in row)]
