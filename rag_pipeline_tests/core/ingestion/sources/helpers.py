"""Shared by the tests of listed sources: ingest one source with the hashing embedder, and ask
the served index what a word finds."""

from __future__ import annotations

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.lexical import analyze

EMBEDDER = HashingEmbedder(EmbeddingConfig(kind="hashing"))


def ingest(source: SourceConfig, store, run_id: str, lifecycle: LifecycleConfig | None = None) -> dict:
    return ingest_source(source, store, EMBEDDER, ChunkingConfig(), lifecycle or LifecycleConfig(), run_id)


def found(store, word: str) -> set[str]:
    """The documents whose served chunks a BM25 search for `word` returns."""
    [hits] = store.search.bm25_search([analyze(word)], 20, SearchFilters(unrestricted=True), k1=0.9, b=0.4)
    return {hit.doc_id for hit in hits}


def served(store, source_id: str) -> set[str]:
    return {d["doc_id"] for d in store.served.indexed_documents(source_id)}
