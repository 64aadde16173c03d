"""Frozen records passed between the pipeline stages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

DocStatus = Literal["published", "draft", "superseded"]
Visibility = Literal["public", "internal"]

# Ledger stages in pipeline order; "queryable" is proven by a real search.
STAGES: tuple[str, ...] = ("discovered", "parsed", "chunked", "embedded", "indexed", "queryable")


@dataclass(frozen=True)
class DocumentMeta:
    """Access and lifecycle metadata of one document (front matter, sidecar or source defaults)."""

    title: str | None = None
    tenant: str | None = None
    visibility: Visibility = "public"
    roles: tuple[str, ...] = ()
    status: DocStatus = "published"
    effective_date: date | None = None
    supersedes: str | None = None
    superseded_by: str | None = None


@dataclass(frozen=True)
class DiscoveredFile:
    """One file found under a source root, supported or not."""

    doc_id: str
    source_id: str
    rel_path: str
    abs_path: str
    content_hash: str
    size: int
    file_type: str
    supported: bool
    skip_reason: str | None = None
    meta: DocumentMeta = DocumentMeta()
    # Why this document failed at discovery: bad metadata, unreadable, a dangling link, over a limit.
    error: str | None = None
    mtime_ns: int = 0
    # The file's state when it was read (`discovery.stat_key`); None when it must be read next time.
    stat_key: str | None = None
    # For records of a BEIR corpus, the text lives in the record rather than in a file of its own.
    inline_text: str | None = None
    inline_title: str | None = None
    # Not read: an earlier discovery read this very state of the file, and its staged row (and its
    # `discovered` ledger row) hold as they are.
    carried_over: bool = False


@dataclass(frozen=True)
class EarlierRead:
    """What an earlier discovery read from a file: its hash and metadata, the file's `stat_key`
    then, and when that discovery started (epoch ns)."""

    stat_key: str
    content_hash: str
    meta_json: str
    started_ns: int


@dataclass(frozen=True)
class ManifestDiff:
    """What changed in a source since its previous manifest."""

    added: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]
    deleted: tuple[str, ...]
    # Present but not read (permission denied, over the size limit, a dangling link): neither
    # added nor changed, whatever they were; a served version of them stays served.
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class Element:
    """One parsed element of a document (a heading, paragraph, list item, table, code block)."""

    doc_id: str
    ordinal: int
    category: str
    text: str
    heading_path: tuple[str, ...] = ()
    page_number: int | None = None
    table_html: str | None = None
    line_start: int | None = None
    line_end: int | None = None


@dataclass(frozen=True)
class ParsedDocument:
    doc_id: str
    content_hash: str
    parser_version: str
    title: str
    elements: tuple[Element, ...]


@dataclass(frozen=True)
class Chunk:
    """A retrievable unit: its text, what gets embedded, and where it came from."""

    chunk_id: str
    doc_id: str
    source_id: str
    ordinal: int
    title: str
    heading_path: tuple[str, ...]
    text: str
    embed_text: str
    text_hash: str
    token_count: int
    line_start: int | None = None
    line_end: int | None = None
    page_number: int | None = None


@dataclass(frozen=True)
class StageFailure:
    """A document that could not pass a stage, and why."""

    doc_id: str
    stage: str
    reason: str


@dataclass(frozen=True)
class SearchFilters:
    """The trusted caller context and lifecycle filters, applied inside every retriever."""

    tenant: str | None = None
    roles: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ("published",)
    as_of: date | None = None
    # No filter at all: used by probes that must see every indexed row (queryable, deletions).
    unrestricted: bool = False


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk with its score and rank (1-based) in one retriever's list."""

    chunk_id: str
    doc_id: str
    score: float
    rank: int
    source_id: str = ""
    title: str = ""
    heading_path: tuple[str, ...] = ()
    text: str = ""
    status: str = "published"
    line_start: int | None = None
    line_end: int | None = None
