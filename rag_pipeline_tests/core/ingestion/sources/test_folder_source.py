"""A folder through the source interface (`FolderSource`, for connectors that wrap folders): what
it lists, how a version moves, and what it reads and refuses."""

from __future__ import annotations

import pytest

from rag_pipeline.core.ingestion.source_tree import SourceTree
from rag_pipeline.core.ingestion.sources.base import DocumentReadError
from rag_pipeline.core.ingestion.sources.folder import FolderSource
from rag_pipeline_tests.conftest import write_tree


@pytest.fixture
def folder(tmp_path):
    return write_tree(tmp_path / "docs", {"guide/a.md": "# A\n\nAlpha page.\n", "b.txt": "Bravo.\n",
                                          "guide/a.md.meta.yaml": "tenant: acme\n", "logo.bin": "\x00\x01"})


def _listed(source: FolderSource) -> dict:
    return {d.rel_path: d for d in source.list().documents}


def test_every_file_is_listed_with_a_version_and_read_as_its_bytes(folder):
    source = FolderSource(SourceTree("docs", folder))
    listing = source.list()
    assert listing.complete and listing.incomplete_reason is None
    listed = _listed(source)
    assert {"guide/a.md", "b.txt"} <= set(listed)
    assert source.fetch(listed["guide/a.md"]).data == b"# A\n\nAlpha page.\n"
    with pytest.raises(DocumentReadError, match="sidecar"):
        source.fetch(listed["guide/a.md.meta.yaml"])


def test_an_edit_moves_the_version_and_a_deleted_file_leaves_the_listing(folder):
    source = FolderSource(SourceTree("docs", folder))
    before = _listed(source)
    page = folder / "b.txt"
    page.write_text("Bravo, rewritten.\n")  # another size: another version
    (folder / "guide" / "a.md").unlink()
    after = _listed(source)
    assert after["b.txt"].version != before["b.txt"].version
    assert "guide/a.md" not in after
