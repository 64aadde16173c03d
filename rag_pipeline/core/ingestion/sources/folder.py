"""A local folder as a `DocumentSource`.

The pipeline's own discovery of folders (`discovery.describe_entries`) reads them through the same
`SourceTree` with more care than the interface can express (a file changed within the clock's
tick is read again; a folder that cannot be listed keeps its documents served); this adapter gives
a folder the interface that every other kind of source has, for connectors that wrap folders and
for the interface's own tests.
"""

from __future__ import annotations

from rag_pipeline.core.ingestion.source_tree import SIDECAR_SUFFIX, SourceTree
from rag_pipeline.core.ingestion.sources.base import (
    DocumentReadError,
    DocumentSource,
    FetchedDocument,
    ListedDocument,
    Listing,
)


class FolderSource(DocumentSource):
    """Every file under a root; its version is its size, times and inode (nothing read to list)."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self.location = str(tree.root)

    def list(self) -> Listing:
        entries, unreadable = self.tree.walk()
        documents = tuple(
            ListedDocument(e.rel_path, f"{e.size}:{e.mtime_ns}:{e.ctime_ns}:{e.inode}", e.size,
                           error=e.error or e.skip_reason)
            for e in entries
        )
        reason = f"folders that cannot be listed: {', '.join(unreadable)}" if unreadable else None
        return Listing(documents, complete=not unreadable, incomplete_reason=reason)

    def fetch(self, document: ListedDocument) -> FetchedDocument:
        if document.rel_path.endswith(SIDECAR_SUFFIX) or document.error:
            raise DocumentReadError(document.error or "a metadata sidecar is not a document")
        return FetchedDocument(self.tree.read(document.rel_path))
