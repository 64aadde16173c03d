"""Discovery reads only what can have changed: a file whose size, times and inode are those an
earlier discovery read it with is carried over; anything else is read again."""

import os

import pytest

from rag_pipeline.config import LifecycleConfig, SourceConfig
from rag_pipeline.core.ingestion import discovery, stages
from rag_pipeline.core.ingestion.source_tree import SourceTree
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

PAGES = {
    "a.md": "---\ntenant: acme\n---\n# A\n\nAlpha text.\n",
    "b.txt": "Bravo text.\n",
    "c.md": "# C\n\nCharlie text.\n",
    "c.md.meta.yaml": "visibility: internal\n",
}


@pytest.fixture
def reads(monkeypatch):
    """The relative paths of the documents read, in order (the sidecar reads are not counted)."""
    seen: list[str] = []
    original = SourceTree.read_entry

    def counting(self, entry, max_bytes=None):
        if not entry.rel_path.endswith(".meta.yaml"):
            seen.append(entry.rel_path)
        return original(self, entry, max_bytes)

    monkeypatch.setattr(SourceTree, "read_entry", counting)
    return seen


@pytest.fixture
def no_racy_margin(monkeypatch):
    # Files written by a test are changed within the margin of the discovery that follows: without
    # it, that discovery would (rightly) read them all again.
    monkeypatch.setattr(discovery, "RACY_MARGIN_NS", -10**12)


def _discover(source, store, run_id="r"):
    report = stages.discover_source(source, store, LifecycleConfig(), run_id)
    rows = {r["rel_path"]: r for r in store.staging.discovery_rows(source.source_id)}
    return report, rows


def test_unchanged_files_are_not_read_again(tmp_path, reads, no_racy_margin):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    _, first = _discover(source, store)
    assert sorted(reads) == ["a.md", "b.txt", "c.md"]
    reads.clear()
    _, second = _discover(source, store, "r2")
    # The document with a sidecar is read again (its metadata lives in another file); no other.
    assert reads == ["c.md"]
    for name in ("a.md", "b.txt", "c.md"):
        assert (second[name]["content_hash"], second[name]["meta_json"]) == (first[name]["content_hash"], first[name]["meta_json"])
    assert '"tenant": "acme"' in second["a.md"]["meta_json"]


def test_a_change_that_keeps_size_and_modification_time_is_read(tmp_path, reads, no_racy_margin):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    _, first = _discover(source, store)
    page = tmp_path / "kb" / "b.txt"
    before = os.stat(page)
    page.write_text("Bravo TEXT.\n")  # the same size
    os.utime(page, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same modification time
    assert (os.stat(page).st_size, os.stat(page).st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    reads.clear()
    report, second = _discover(source, store, "r2")
    assert "b.txt" in reads  # its change time moved: read again
    assert second["b.txt"]["content_hash"] == discovery.sha256_bytes(b"Bravo TEXT.\n") != first["b.txt"]["content_hash"]
    assert report.details["changed"] == [] and report.counts["added"] == 3  # nothing committed yet: all new


def test_a_file_replaced_by_another_is_read(tmp_path, reads, no_racy_margin):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    _discover(source, store)
    page, other = tmp_path / "kb" / "a.md", tmp_path / "elsewhere.md"
    other.write_text("---\ntenant: acme\n---\n# A\n\nAlpha tuxt.\n")
    stat = os.stat(page)
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.replace(other, page)  # same size, same times, another inode
    reads.clear()
    _, rows = _discover(source, store, "r2")
    assert "a.md" in reads
    assert rows["a.md"]["content_hash"] == discovery.sha256_bytes(page.read_bytes())


def test_new_metadata_defaults_are_applied_to_unchanged_files(tmp_path, reads, no_racy_margin):
    root = write_tree(tmp_path / "kb", {"b.txt": "Bravo text.\n"})
    store = duckdb_store(tmp_path / "index.duckdb")
    _discover(SourceConfig(name="kb", path=root), store)
    reads.clear()
    _, rows = _discover(SourceConfig(name="kb", path=root, defaults={"visibility": "internal"}), store, "r2")
    assert reads == ["b.txt"]
    assert '"visibility": "internal"' in rows["b.txt"]["meta_json"]


def test_an_edited_sidecar_changes_the_metadata(tmp_path, no_racy_margin):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    _discover(source, store)
    (tmp_path / "kb" / "c.md.meta.yaml").write_text("visibility: public\n")
    _, rows = _discover(source, store, "r2")
    assert '"visibility": "public"' in rows["c.md"]["meta_json"]


def test_files_changed_around_the_earlier_discovery_are_read_again(tmp_path, reads):
    # With the real margin: the files were written just before the first discovery began.
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    _discover(source, store)
    reads.clear()
    _discover(source, store, "r2")
    assert sorted(reads) == ["a.md", "b.txt", "c.md"]


def test_failed_documents_are_read_again(tmp_path, reads, no_racy_margin):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "kb", {"bad.md": "---\nroles: [\n---\nbody\n"}))
    store = duckdb_store(tmp_path / "index.duckdb")
    _, rows = _discover(source, store)
    assert rows["bad.md"]["error"] and rows["bad.md"]["stat_key"] is None
    reads.clear()
    _discover(source, store, "r2")
    assert reads == ["bad.md"]
