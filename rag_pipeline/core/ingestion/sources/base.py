"""The source interface: what every kind of source (a folder, a git ref, a web site, a connector
of a third party) gives the pipeline, and nothing more.

A source lists its documents, each with a cheap *version* (a content hash, an ETag, a git blob id,
a modification time: anything that changes whenever the document's bytes may have changed), and
fetches one document's bytes and metadata on demand. Discovery fetches only the documents whose
version differs from the one it read before, so a source that lists cheaply is ingested cheaply.

A listing also says whether it is *complete*. Only a complete listing proves that a document it
lacks was deleted: the documents an incomplete listing lacks stay served as they were. A source
that cannot be listed at all raises `SourceUnavailableError` (the run fails, nothing is deleted).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rag_pipeline.core.ingestion.source_tree import DocumentReadError, SourceUnavailableError

__all__ = [
    "DocumentReadError", "DocumentSource", "FetchedDocument", "ListedDocument", "Listing", "SourceContext",
    "SourceUnavailableError",
]


@dataclass(frozen=True)
class ListedDocument:
    """One name a source lists. `rel_path` is the document's identity within the source (a POSIX
    path; the pipeline's doc id is `<source id>:<rel_path>`); its suffix gives the file type unless
    `file_type` says it (md, txt, html, pdf, docx). `error`: the document is listed but cannot be
    read now; it fails alone and its last indexed version stays served."""

    rel_path: str
    version: str
    size: int | None = None
    file_type: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Listing:
    """Every document of the source now. `complete` False: some could not be listed (a page limit
    reached, a folder of the remote that failed); nothing missing from it is deleted. `revision`:
    what the source as a whole is at (a git commit), recorded with the switch that serves it."""

    documents: tuple[ListedDocument, ...]
    complete: bool = True
    incomplete_reason: str | None = None
    revision: str | None = None


@dataclass(frozen=True)
class FetchedDocument:
    """One document's bytes, and metadata the source knows about it (title, tenant, visibility,
    roles, status...: the keys of front matter, checked the same way and failing closed the same
    way; front matter inside the bytes still counts, the source's keys win)."""

    data: bytes
    metadata: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceContext:
    """What the pipeline gives a source when it opens it: its id, a folder of its own for caches
    (kept between runs, never shared with another source) and the largest document it may read."""

    source_id: str
    cache_dir: Path
    max_document_bytes: int


class DocumentSource(abc.ABC):
    """A source of documents. Implement `list` and `fetch`; raise `SourceUnavailableError` from
    `list` when the source cannot be listed at all, and `DocumentReadError` from `fetch` when one
    document cannot be read (that document fails alone)."""

    #: Shown in the ledger and the UI as where the source reads from (a URL, a path).
    location: str = ""

    @abc.abstractmethod
    def list(self) -> Listing:
        """Every document now, each with its cheap version."""

    @abc.abstractmethod
    def fetch(self, document: ListedDocument) -> FetchedDocument:
        """The bytes and metadata of `document`, in the version listed (or a `DocumentReadError`)."""

    def close(self) -> None:
        """Release what the source holds (connections); called after each use."""
