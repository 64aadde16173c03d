"""The in-memory copy in compact arrays: the SQL path's results, a footprint that is a few bytes per posting."""

import numpy as np
import pytest

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze
from rag_pipeline.core.storage.memory import PackedStrings
from rag_pipeline.core.storage.memory_load import load_served_copy
from rag_pipeline.core.storage.search import Search
from rag_pipeline.core.storage.served import served_version
from rag_pipeline_tests.conftest import BACKENDS, indexed_store

WORDS = ("refund", "invoice", "sso", "tenant", "escalation", "finance", "portal", "latency", "backup", "quota",
         "retention", "audit", "export", "webhook", "token", "rotation")
QUESTIONS = ["refund invoice within days", "sso tenant portal token", "backup retention audit export",
             "quota latency webhook", "escalation finance refund refund", "nothing matches zzz"]


def _page(i: int) -> str:
    """A page of a few paragraphs whose words repeat unevenly, so tf, df and lengths vary."""
    rng = np.random.default_rng(i)
    paragraphs = [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 40)))) + "." for _ in range(3)]
    return f"# Page {i}\n\n" + "\n\n".join(paragraphs) + "\n"


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pages")
    db = indexed_store(request, request.param, tmp_path, "pages", {f"p{i:02d}.md": _page(i) for i in range(40)})
    yield db
    db.close()


def test_the_compact_copy_returns_what_the_sql_path_returns(store):
    in_database = Search(store.db, memory=False)
    copy = store.search.served_copy()
    assert copy is not None and copy.size == store.db.value("SELECT count(*) FROM chunks")
    filters = SearchFilters(unrestricted=True)
    vectors = store.embedder.encode(QUESTIONS)
    for k in (1, 5, 50):
        assert [[(h.chunk_id, h.score) for h in hits] for hits in store.search.dense_search(vectors, k, filters)] == \
            [[(h.chunk_id, h.score) for h in hits] for hits in in_database.dense_search(vectors, k, filters)]
        terms = [analyze(q) for q in QUESTIONS]
        memory = store.search.bm25_search(terms, k, filters, k1=0.9, b=0.4)
        database = in_database.bm25_search(terms, k, filters, k1=0.9, b=0.4)
        assert [[h.chunk_id for h in hits] for hits in memory] == [[h.chunk_id for h in hits] for hits in database]
        for left, right in zip(memory, database):
            assert [h.score for h in left] == pytest.approx([h.score for h in right], rel=1e-12)
            assert [(h.doc_id, h.text, h.rank) for h in left] == [(h.doc_id, h.text, h.rank) for h in right]


def test_the_copy_holds_every_posting_in_a_few_bytes(store):
    copy = load_served_copy(store.db, served_version(store.db))
    postings = store.db.rows("SELECT term, chunk_id, tf FROM postings")
    assert copy.postings.nnz == len(postings) > 500
    # An int32 chunk index and the narrowest tf type (one byte here): no Python object per posting.
    assert copy.postings.chunks.dtype == np.int32 and copy.postings.tf.dtype == np.uint8
    assert (copy.postings.chunks.nbytes + copy.postings.tf.nbytes) / copy.postings.nnz == 5
    assert copy.postings.indptr.nbytes == 8 * (len(copy.terms) + 1)
    # The CSR rows hold exactly the table's postings.
    ids = list(copy.chunk_ids)
    rebuilt = set()
    for term, row in copy.terms.items():
        start, end = copy.postings.indptr[row], copy.postings.indptr[row + 1]
        rebuilt |= {(term, ids[c], int(f)) for c, f in zip(copy.postings.chunks[start:end], copy.postings.tf[start:end])}
    assert rebuilt == set(postings)
    # Vectors: one float32 matrix in chunk id order; ids packed, not a Python string each.
    assert ids == sorted(ids) and copy.vectors.dtype == np.float32 and copy.vectors.shape[0] == copy.size
    assert copy.chunk_ids.nbytes == len("".join(ids).encode()) + 8 * (copy.size + 1)
    stored_ids, stored = store.db.read_vectors(f"SELECT chunk_id, {store.db.vector_expression('vector')} FROM vectors")
    place = {c: i for i, c in enumerate(ids)}
    assert np.array_equal(copy.vectors[[place[c] for c in stored_ids]], stored)
    per_chunk = copy.nbytes - copy.vectors.nbytes - copy.postings.nbytes - copy.chunk_ids.nbytes
    assert per_chunk / copy.size <= 40  # norms, lengths and filter codes


def test_packed_strings_index_like_a_list():
    values = ["kb:a.md#0", "", "kb:é.md#12", "x" * 300]
    packed = PackedStrings.pack([values[:2], [], values[2:]])
    assert list(packed) == values and len(packed) == 4
    assert packed[-1] == values[-1] and packed[np.int64(2)] == values[2]
    with pytest.raises(IndexError):
        packed[4]


@pytest.mark.parametrize("group", [8192, 7])
def test_many_questions_at_once_rank_as_each_alone(store, monkeypatch, group):
    """From `scan_once_queries` questions, the database search scores one read of the vectors (on
    PostgreSQL too, instead of a statement per question), a group of questions per read: the same
    hits as each question alone (scored by the engine's statement, DuckDB's included)."""
    from rag_pipeline.core.storage import search

    monkeypatch.setattr(search, "SCAN_GROUP_QUERIES", group)

    in_database = Search(store.db, memory=False)
    filters = SearchFilters(unrestricted=True)
    texts = [f"{QUESTIONS[i % len(QUESTIONS)]} {WORDS[i % len(WORDS)]}" for i in range(32 + 3)]
    assert store.db.scan_once_queries <= 32
    vectors = store.embedder.encode(texts)
    together = in_database.dense_search(vectors, 5, filters)
    alone = [in_database.dense_search(vectors[i:i + 1], 5, filters)[0] for i in range(len(texts))]
    assert [[(h.chunk_id, h.score) for h in hits] for hits in together] == \
        [[(h.chunk_id, h.score) for h in hits] for hits in alone]
