"""The search copy kept in the cache folder: mapped by later searches, never stale, rebuilt when damaged,
safe when processes race to write it."""

import json
import multiprocessing
import shutil

import numpy as np
import pytest

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze
from rag_pipeline.core.storage import search as search_module
from rag_pipeline.core.storage.duckdb import DuckDBDatabase
from rag_pipeline.core.storage.memory_cache import CopyCache
from rag_pipeline.core.storage.search import Search
from rag_pipeline.core.storage.served import served_version
from rag_pipeline_tests.conftest import indexed_store

WORDS = ("refund", "invoice", "sso", "tenant", "escalation", "finance", "portal", "latency", "backup", "quota")
QUESTIONS = ["refund invoice", "sso tenant portal", "backup quota latency", "finance escalation refund"]
FILTERS = (SearchFilters(unrestricted=True), SearchFilters(), SearchFilters(tenant="acme", roles=("staff",)))


def _page(i: int) -> str:
    rng = np.random.default_rng(i)
    body = "\n\n".join(" ".join(rng.choice(WORDS, size=int(rng.integers(6, 30)))) + "." for _ in range(2))
    front = "---\ntenant: acme\nvisibility: internal\nroles: [staff]\n---\n" if i % 3 == 0 else ""
    return f"{front}# Page {i}\n\n{body}\n"


@pytest.fixture
def store(request, tmp_path):
    db = indexed_store(request, "duckdb", tmp_path, "pages", {f"p{i:02d}.md": _page(i) for i in range(15)})
    yield db
    db.close()


def _answers(search: Search, store) -> list:
    """Every field of every hit of a few dense and BM25 questions under a few filters (scores rounded:
    BM25 sums in another order in SQL)."""
    vectors = store.embedder.encode(QUESTIONS)
    out = []
    for filters in FILTERS:
        for hits in [*search.dense_search(vectors, 4, filters),
                     *search.bm25_search([analyze(q) for q in QUESTIONS], 4, filters, k1=0.9, b=0.4)]:
            out.append([(h.chunk_id, h.doc_id, round(h.score, 9), h.rank, h.source_id, h.title, h.heading_path, h.text,
                         h.status, h.line_start, h.line_end) for h in hits])
    return out


def _no_database_read(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the copy was read from the database, not mapped")

    monkeypatch.setattr(search_module, "load_served_copy", refuse)


def test_a_later_search_maps_the_copy_and_answers_as_the_database(store, monkeypatch):
    expected = _answers(Search(store.db, memory=False), store)
    assert any(expected) and _answers(store.search, store) == expected
    assert store.search.served_copy().records is not None  # mapped once written: hits read from its records
    _no_database_read(monkeypatch)
    mapped = Search(store.db)  # a new search, as in a new process
    assert _answers(mapped, store) == expected
    copy = mapped.served_copy()
    assert not copy.vectors.flags.owndata and not copy.vectors.flags.writeable  # a read-only map, not a copy
    folders = [p for p in CopyCache.of(store.db).folder.iterdir() if p.is_dir()]
    assert [p.name for p in folders] == [CopyCache.of(store.db).place(served_version(store.db)).name]


def test_a_switch_between_two_searches_gives_the_new_state(store, tmp_path):
    before = Search(store.db)
    old = before.served_copy()
    cache = CopyCache.of(store.db)
    old_place = cache.place(old.version)
    (tmp_path / "src" / "p01.md").write_text("# Page 1\n\nzanzibar now.\n")
    (tmp_path / "src" / "p02.md").unlink()
    from rag_pipeline.config import ChunkingConfig, LifecycleConfig, SourceConfig
    from rag_pipeline.core.ingestion.stages import ingest_source

    ingest_source(SourceConfig(name="pages", path=tmp_path / "src"), store, store.embedder, ChunkingConfig(),
                  LifecycleConfig(), "t2")
    for search in (before, Search(store.db)):  # the search that mapped the old state, and a new one
        [hits] = search.bm25_search([["zanzibar"]], 5, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
        assert [h.doc_id for h in hits] == ["pages:p01.md"]
        assert not [c for c in search.served_copy().chunk_ids if c.startswith("pages:p02.md")]
    assert _answers(Search(store.db), store) == _answers(Search(store.db, memory=False), store)
    assert not old_place.exists(), "the older version's copy is pruned"


def test_a_stale_copy_never_answers(store, tmp_path):
    """An older version's folder found under the new version's name (say, restored from a backup) is
    refused (its meta.json names the version it holds) and the copy is read again."""
    old = Search(store.db).served_copy()
    cache = CopyCache.of(store.db)
    saved = tmp_path / "old-copy"
    shutil.copytree(cache.place(old.version), saved)
    (tmp_path / "src" / "p01.md").write_text("# Page 1\n\nzanzibar now.\n")
    from rag_pipeline.config import ChunkingConfig, LifecycleConfig, SourceConfig
    from rag_pipeline.core.ingestion.stages import ingest_source

    ingest_source(SourceConfig(name="pages", path=tmp_path / "src"), store, store.embedder, ChunkingConfig(),
                  LifecycleConfig(), "t2")
    new = cache.place(served_version(store.db))
    shutil.rmtree(new, ignore_errors=True)
    shutil.copytree(saved, new)
    assert cache.map(served_version(store.db)) is None and not new.exists()
    [hits] = Search(store.db).bm25_search([["zanzibar"]], 5, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    assert [h.doc_id for h in hits] == ["pages:p01.md"]
    assert json.loads((new / "meta.json").read_text())["version"] == [list(r) for r in served_version(store.db)]


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _scribble_tail(path):
    data = bytearray(path.read_bytes())
    data[-5:] = b"\xff" * 5
    path.write_bytes(bytes(data))


def _scribble_header(path):
    data = bytearray(path.read_bytes())
    data[:16] = b"\x00" * 16
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, damage", [
    ("vectors.npy", _truncate), ("records.bin", _scribble_tail), ("posting_chunks.npy", _scribble_header),
    ("chunk_ids.bin", lambda p: p.unlink()), ("meta.json", lambda p: p.write_text("{not json")),
    ("meta.json", lambda p: p.unlink()),
])
def test_a_damaged_cache_file_is_rebuilt_not_trusted(store, name, damage):
    expected = _answers(Search(store.db, memory=False), store)
    version = served_version(store.db)
    place = CopyCache.of(store.db).place(version)
    Search(store.db).served_copy()
    damage(place / name)
    assert _answers(Search(store.db), store) == expected
    meta = json.loads((place / "meta.json").read_text())  # written again, whole
    assert meta["version"] == [list(row) for row in version] and name in {*meta["files"], "meta.json"}
    assert CopyCache.of(store.db).map(version) is not None


def test_no_copy_is_written_inside_a_transaction(store):
    """A transaction's state may be rolled back: its searches read a copy into memory, and write none."""
    folder = CopyCache.of(store.db).folder
    with store.db.transaction():
        copy = Search(store.db).served_copy()
    assert copy is not None and copy.records is None
    assert not folder.exists() or not [p for p in folder.iterdir() if p.is_dir()]


def test_a_version_written_by_another_process_first_is_mapped(store):
    """The second writer of a version finds it in place when it renames its own: it keeps the first
    and leaves no temporary folder."""
    version = served_version(store.db)
    cache = CopyCache.of(store.db)
    first, _ = cache.build(store.db, version)
    meta = (cache.place(version) / "meta.json").read_bytes()
    second, still = cache.build(store.db, version)
    assert still and second.records is not None and second.size == first.size
    assert (cache.place(version) / "meta.json").read_bytes() == meta
    assert [p.name for p in cache.folder.iterdir() if p.is_dir()] == [cache.place(version).name]


def _search_in_process(path: str) -> list:
    search = Search(DuckDBDatabase(path, read_only=True))
    copy = search.served_copy()
    hits = search.bm25_search([analyze(q) for q in QUESTIONS], 4, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    search.db.close()
    return [copy.records is not None, [[(h.chunk_id, h.text) for h in row] for row in hits]]


def test_two_processes_racing_to_write_the_copy_both_answer_right(store):
    expected = [[(h.chunk_id, h.text) for h in row] for row in Search(store.db, memory=False).bm25_search(
        [analyze(q) for q in QUESTIONS], 4, SearchFilters(unrestricted=True), k1=0.9, b=0.4)]
    path = str(store.db.path)
    store.db.close()
    # Closed and joined, not terminated (`with Pool` would): a worker that inherited an ignored
    # SIGTERM from its test process never dies of `terminate`, and the test would hang instead of
    # failing. A search that never answers fails after its timeout.
    pool = multiprocessing.get_context("spawn").Pool(2)
    try:
        results = pool.map_async(_search_in_process, [path, path]).get(timeout=300)
    finally:
        pool.close()
        pool.join()
    assert results == [[True, expected], [True, expected]]
    folder = CopyCache.of(store.db).folder
    assert [p.name for p in folder.iterdir() if p.is_dir()] == [CopyCache.of(store.db).place(served_version(store.db)).name]
