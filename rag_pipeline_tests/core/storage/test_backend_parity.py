"""The same corpus and golden set on DuckDB and on PostgreSQL give the same served rows, the same
rankings and the same metrics (exact search): a number never depends on the backend."""

from __future__ import annotations

import pytest

from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline_tests.conftest import BACKENDS, make_store

MODES = ("dense", "bm25", "hybrid")


@pytest.fixture(scope="module")
def built(request, sample_index, tmp_path_factory):
    """The session's sample index (DuckDB), and the same corpus ingested into PostgreSQL alike."""
    config, duckdb_store, embedder = sample_index
    pg_store = make_store(request, "postgres", tmp_path_factory.mktemp("postgres"))
    for source in config.sources:
        ingest_source(source, pg_store, embedder, config.chunking, config.lifecycle, "parity")
    stores = {"duckdb": duckdb_store, "postgres": pg_store}
    results = {}
    for backend in BACKENDS:
        for mode in MODES:
            _, results[backend, mode] = run_golden_evaluation(
                config.golden_set, stores[backend], embedder, config.retrieval, "fp", config.source_ids, mode)
    yield stores, results
    pg_store.close()


def test_the_served_rows_are_the_same(built):
    stores, _ = built
    queries = {
        "documents": "SELECT doc_id, content_hash, title, tenant, visibility, roles, status, effective_date, chunk_count FROM documents",
        "chunks": "SELECT chunk_id, text_hash, heading_path, lex_len, line_start, line_end FROM chunks",
        "postings": "SELECT chunk_id, term, tf FROM postings",
        "ledger": "SELECT doc_id, stage, status, reason FROM ledger",
    }
    for name, sql in queries.items():
        duck, pg = (sorted((tuple(tuple(v) if isinstance(v, list) else v for v in row)
                            for row in stores[b].db.rows(sql)), key=repr) for b in BACKENDS)
        assert duck == pg, name
        assert duck, name


@pytest.mark.parametrize("mode", MODES)
def test_rankings_and_metrics_are_the_same(built, mode):
    _, results = built
    duck, pg = results["duckdb", mode], results["postgres", mode]
    assert [c.case.id for c in duck.cases] == [c.case.id for c in pg.cases]
    for a, b in zip(duck.cases, pg.cases):
        assert a.ranked_docs == b.ranked_docs, a.case.id
        assert a.best_score == pytest.approx(b.best_score, abs=1e-9), a.case.id
    for metric, value in duck.overall.items():
        assert pg.overall[metric] == pytest.approx(value, abs=1e-9), metric
    for slice_name, metrics in duck.by_slice.items():
        for metric, value in metrics.items():
            assert pg.by_slice[slice_name][metric] == pytest.approx(value, abs=1e-9), (slice_name, metric)
    assert duck.no_result_threshold == pytest.approx(pg.no_result_threshold, abs=1e-9)
