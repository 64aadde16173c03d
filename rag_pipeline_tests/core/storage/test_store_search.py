"""The served index on both backends: filters inside each retriever, BM25 by its formula, transactional publishing."""

import math
from datetime import date

import numpy as np
import pytest

from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze
from rag_pipeline_tests.conftest import BACKENDS, indexed_store

DOCS = {
    "shared.md": "# Refunds\n\nRefunds are issued within 14 days of the request for every customer.\n",
    "acme.md": "---\ntenant: acme\n---\n# Acme SSO\n\nAcme single sign-on uses entity id urn:acme:sso for the refunds portal.\n",
    "globex.md": "---\ntenant: globex\n---\n# Globex SSO\n\nGlobex single sign-on uses entity id urn:globex:sso.\n",
    "runbook.md": "---\nvisibility: internal\nroles: [support]\n---\n# Escalation\n\nEscalate refunds over 5000 dollars to finance.\n",
    "old.md": "---\nstatus: superseded\n---\n# Refunds (2023)\n\nRefunds were issued within 30 days.\n",
    "future.md": "---\neffective_date: 2999-01-01\n---\n# Refunds (next)\n\nRefunds will be issued within 7 days.\n",
}


@pytest.fixture(scope="module", params=BACKENDS)
def store(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("kb")
    db = indexed_store(request, request.param, tmp_path, "kb", DOCS)
    yield db
    db.close()


def _docs(hits) -> set[str]:
    return {h.doc_id.split(":")[1] for h in hits}


def _both(store, text, filters):
    vector = store.embedder.encode([text])
    dense = store.search.dense_search(vector, 50, filters)[0]
    lexical = store.search.bm25_search([analyze(text)], 50, filters, k1=0.9, b=0.4)[0]
    return _docs(dense), _docs(lexical)


@pytest.mark.parametrize(
    ("filters", "visible"),
    [
        (SearchFilters(tenant="acme", roles=("customer",)), {"shared.md", "acme.md"}),
        (SearchFilters(tenant="globex", roles=("customer",)), {"shared.md", "globex.md"}),
        (SearchFilters(tenant=None, roles=("support",)), {"shared.md", "runbook.md"}),
        (SearchFilters(tenant="acme", statuses=("published", "superseded")), {"shared.md", "acme.md", "old.md"}),
        (SearchFilters(tenant=None, as_of=date(2999, 6, 1)), {"shared.md", "future.md"}),
        (SearchFilters(unrestricted=True), set(DOCS)),
    ],
)
def test_filters_apply_inside_dense_and_bm25(store, filters, visible):
    dense, lexical = _both(store, "refunds sso entity escalate days", filters)
    assert dense == visible
    assert lexical <= visible and "shared.md" in lexical


def test_bm25_scores_follow_the_formula(store):
    query = analyze("refunds within days")
    [hits] = store.search.bm25_search([query], 10, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    rows = store.db.rows("SELECT chunk_id, lex_len FROM chunks")
    postings = store.db.rows("SELECT chunk_id, term, tf FROM postings")
    lengths = dict(rows)
    tf = {(c, t): f for c, t, f in postings}
    n, avgdl = len(lengths), sum(lengths.values()) / len(lengths)
    df = {t: sum(1 for (c, term) in tf if term == t) for t in query}

    def expected(chunk_id: str) -> float:
        total = 0.0
        for term in query:
            f = tf.get((chunk_id, term), 0)
            if f:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                total += idf * f * 1.9 / (f + 0.9 * (1 - 0.4 + 0.4 * lengths[chunk_id] / avgdl))
        return total

    assert hits, "the query shares terms with several documents"
    for hit in hits:
        assert hit.score == pytest.approx(expected(hit.chunk_id), rel=1e-9)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))


def test_dense_scores_are_cosine_similarities(store):
    vector = store.embedder.encode(["escalate refunds to finance"])
    [hits] = store.search.dense_search(vector, 3, SearchFilters(unrestricted=True))
    ids, matrix = store.db.read_vectors(f"SELECT chunk_id, {store.db.vector_expression('vector')} FROM vectors")
    stored = dict(zip(ids, matrix))
    for hit in hits:
        v = np.asarray(stored[hit.chunk_id])
        expected = float(v @ vector[0] / (np.linalg.norm(v) * np.linalg.norm(vector[0])))
        assert hit.score == pytest.approx(expected, abs=1e-5)


def test_a_failed_publish_leaves_the_served_index_untouched(store, monkeypatch):
    before = store.served.table_counts("kb")

    def explode(sql, params=()):
        raise RuntimeError("disk full")

    # The last statement of the switch fails after its deletes and inserts: all of it rolls back.
    monkeypatch.setattr(store.db, "value", explode)
    with pytest.raises(RuntimeError, match="disk full"), store.transaction():
        store.served.replace_served("kb", store.embedder.identity)
    monkeypatch.undo()
    assert store.served.table_counts("kb") == before


def test_batched_and_single_dense_search_agree(store):
    """A query's hits and scores do not depend on the other queries of its batch."""
    questions = [f"refunds {word} sso escalation days" for word in ("acme", "globex", "finance", "portal")] * 5
    vectors = store.embedder.encode(questions)
    for filters in (SearchFilters(unrestricted=True), SearchFilters(tenant="acme", roles=("customer",))):
        batched = store.search.dense_search(vectors, 3, filters)
        for i, hits in enumerate(batched):
            single = store.search.dense_search(vectors[i : i + 1], 3, filters)[0]
            assert [h.chunk_id for h in hits] == [h.chunk_id for h in single]
            assert [h.score for h in hits] == [h.score for h in single]


FILTERS = [
    SearchFilters(tenant="acme", roles=("customer",)),
    SearchFilters(tenant=None, roles=("support",)),
    SearchFilters(tenant="acme", statuses=("published", "superseded")),
    SearchFilters(tenant=None, as_of=date(2999, 6, 1)),
    SearchFilters(tenant="nobody", roles=("nobody",), statuses=("draft",)),
    SearchFilters(unrestricted=True),
]


@pytest.mark.parametrize("filters", FILTERS)
def test_the_in_memory_copy_ranks_exactly_as_the_database(store, filters):
    from rag_pipeline.core.storage.search import Search

    in_database = Search(store.db, memory=False)
    assert store.search.served_copy() is not None
    questions = ["refunds within days", "sso entity id urn", "escalate refunds to finance", "nothing matches zzz"]
    vectors = store.embedder.encode(questions)
    memory_dense, database_dense = store.search.dense_search(vectors, 5, filters), in_database.dense_search(vectors, 5, filters)
    assert [[(h.chunk_id, h.score) for h in hits] for hits in memory_dense] == \
        [[(h.chunk_id, h.score) for h in hits] for hits in database_dense]
    terms = [analyze(q) for q in questions]
    memory_bm25 = store.search.bm25_search(terms, 5, filters, k1=0.9, b=0.4)
    database_bm25 = in_database.bm25_search(terms, 5, filters, k1=0.9, b=0.4)
    assert [[h.chunk_id for h in hits] for hits in memory_bm25] == [[h.chunk_id for h in hits] for hits in database_bm25]
    for left, right in zip(memory_bm25, database_bm25):
        assert [h.score for h in left] == pytest.approx([h.score for h in right], rel=1e-12)


@pytest.mark.parametrize("filters", FILTERS)
def test_one_question_in_the_database_ranks_as_the_copy(store, filters):
    """A question alone in the database is answered by the engine's own statement (DuckDB scores
    every vector in the file, PostgreSQL likewise): the copy's hits and scores, under each filter;
    a zero vector (no cosine) scores 0 everywhere, as in the copy."""
    from rag_pipeline.core.storage.search import Search

    in_database = Search(store.db, memory=False)
    vectors = np.vstack([store.embedder.encode(["escalate refunds to finance", "sso entity id urn"]),
                         np.zeros((1, store.embedder.encode(["x"]).shape[1]), dtype=np.float32)])
    for i in range(len(vectors)):
        alone = in_database.dense_search(vectors[i:i + 1], 3, filters)[0]
        copied = store.search.dense_search(vectors[i:i + 1], 3, filters)[0]
        assert [(h.chunk_id, h.score) for h in alone] == [(h.chunk_id, h.score) for h in copied]
