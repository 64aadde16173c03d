"""A new parser version parses the same bytes again and chunks them again; nothing else runs twice."""

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion import parse_reading, parsing, stages
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

PAGES = {"a.md": "# Alpha\n\nAlpha explains the refund window of fourteen days.\n",
         "b.md": "# Beta\n\nBeta is for support staff who answer tickets.\n"}


class InProcessParser:
    """The worker's job run in this process, so that a patched parser version applies to it too."""

    def parse(self, job, timeout_s):
        return parsing.parse_job(job)

    def use_memory_limit(self, memory_limit_mb):
        """This process has no limit of its own to take."""


def _run(source, store, embedder, run_id):
    reports = stages.ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), run_id)
    return {name: report.counts for name, report in reports.items()}


def test_an_upgraded_parser_reparses_and_rechunks_unchanged_documents(tmp_path, monkeypatch):
    monkeypatch.setattr(parse_reading, "shared_parsers", lambda count: [InProcessParser()])
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "src", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    first = _run(source, store, embedder, "r1")
    assert first["parsed"]["parsed"] == 2 and first["embedded"]["embedded"] > 0
    again = _run(source, store, embedder, "r2")
    assert again["parsed"]["parsed"] == 0 and again["chunked"]["chunked_documents"] == 0

    monkeypatch.setattr(parsing, "parser_version", lambda: "unstructured 99.0")
    upgraded = _run(source, store, embedder, "r3")
    assert upgraded["parsed"]["parsed"] == 2
    assert upgraded["chunked"]["chunked_documents"] == 2
    # Same texts, so the vectors come from the cache: the model is not asked again.
    assert upgraded["embedded"]["embedded"] == 0 and upgraded["embedded"]["cache_hits"] > 0
    versions = {v for _, _, v in store.staging.parsed_versions("kb").values()}
    assert versions == {"unstructured 99.0"}
    assert {r["parser_version"] for r in store.ledger.rows() if r["stage"] == "indexed" and r["run_id"] == "r3"} \
        == {"unstructured 99.0"}
    settled = _run(source, store, embedder, "r4")
    assert settled["parsed"]["parsed"] == 0 and settled["chunked"]["chunked_documents"] == 0
    assert len(store.served.indexed_documents("kb")) == 2
