"""A new lexical analyzer posts every chunk again on the next run, like a chunking change; the
vectors come from the cache, and nothing posted by the old analyzer stays served."""

import re
from collections import Counter

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion import stages
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.core.ingestion.source_runs import unchanged_run
from rag_pipeline.core.retrieval import lexical
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

PAGES = {"config.md": "# Configuration\n\nSet `PYTEST_ADDOPTS` to add options to every run.\n",
         "hooks.md": "# Hooks\n\nImplement `pytest_addoption` to register options of a plugin.\n"}


def _run(source, store, embedder, run_id):
    return {name: report.counts for name, report in
            stages.ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), run_id).items()}


def _served(store) -> tuple[dict[str, Counter], set]:
    postings: dict[str, Counter] = {}
    for chunk_id, term, tf in store.db.rows("SELECT chunk_id, term, tf FROM postings"):
        postings.setdefault(chunk_id, Counter())[term] = tf
    return postings, {row[0] for row in store.db.rows("SELECT DISTINCT analyzer FROM chunks")}


def _texts(store) -> dict[str, str]:
    return dict(store.db.rows("SELECT chunk_id, embed_text FROM chunks"))


def test_a_changed_analyzer_posts_every_chunk_again(tmp_path, monkeypatch):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "src", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    _run(source, store, embedder, "r1")
    before = settings_fingerprint(ChunkingConfig(), embedder.identity)
    assert unchanged_run(source, store, before) is not None  # nothing changed: no run needed
    postings, analyzers = _served(store)
    assert analyzers == {lexical.analyzer_identity()}
    assert all(postings[c] == Counter(lexical.analyze(t)) for c, t in _texts(store).items())
    assert any("pytest_addopts" in terms for terms in postings.values())

    # Another analyzer: words only, stemmed (what it was before identifiers).
    monkeypatch.setattr(lexical, "_entries", lambda text: [(w, None) for w in re.findall(r"\w+", text.lower())
                                                           if w not in lexical.STOP_WORDS])
    monkeypatch.setattr(lexical, "ANALYZER_RULES", "words/0")
    lexical.analyzer_identity.cache_clear()
    try:
        after = settings_fingerprint(ChunkingConfig(), embedder.identity)
        assert after != before and unchanged_run(source, store, after) is None  # the source needs a run
        upgraded = _run(source, store, embedder, "r2")
        assert upgraded["chunked"]["chunked_documents"] == 2
        assert upgraded["embedded"]["embedded"] == 0 and upgraded["embedded"]["cache_hits"] > 0
        postings, analyzers = _served(store)
        assert analyzers == {"words/0; " + lexical.analyzer_identity().split("; ", 1)[1]}
        assert all(postings[c] == Counter(lexical.analyze(t)) for c, t in _texts(store).items())
        assert not any("pytest_addopts" in terms for terms in postings.values())
        lex_len = dict(store.db.rows("SELECT chunk_id, lex_len FROM chunks"))
        assert all(lex_len[c] == sum(p.values()) for c, p in postings.items())
        settled = _run(source, store, embedder, "r3")
        assert settled["chunked"]["chunked_documents"] == 0
    finally:
        lexical.analyzer_identity.cache_clear()
