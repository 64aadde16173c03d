"""Scale-out, through a real deployment: a backfill of three source partitions on a Dagster instance
in PostgreSQL, the store in PostgreSQL, a process per step. The partitions run at the same time,
nothing waits on or breaks a lock, and what is served equals a serial build on DuckDB."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest
import yaml

from rag_pipeline.cli.runner import ingest
from rag_pipeline.config import load_config
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import HTTPX_V023, SAMPLE_CONFIG, require
from rag_pipeline_tests.harness.local_deployment import deployment, pipeline_config, postgres_server

SOURCES = ("httpx_a", "httpx_b", "httpx_c")
SERVED = {
    "documents": "SELECT doc_id, content_hash, title, chunk_count FROM documents",
    "chunks": "SELECT chunk_id, text_hash, lex_len, heading_path FROM chunks",
    "postings": "SELECT chunk_id, term, tf FROM postings",
    "embedding_cache": "SELECT identity, text_hash FROM embedding_cache",
    "ledger": "SELECT doc_id, stage, status FROM ledger",
}
LOCK_WORDS = ("lock", "deadlock", "busy", "could not serialize")

# A webserver, a daemon and PostgreSQL started for the module, three sources parsed per build.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def postgres():
    """A server of this module's own: the session's has many tests' connections open by now, and a
    deployment (webserver, daemon, a process per step) opens dozens more."""
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="module")
def parallel(postgres, tmp_path_factory):
    dsn = postgres
    # Three copies of one docs tree: every text is shared, so the runs race on the embedding cache.
    raw = pipeline_config(SAMPLE_CONFIG, {name: require(HTTPX_V023) for name in SOURCES})
    raw["embedding"] = {"kind": "hashing"}
    work = tmp_path_factory.mktemp("parallel")
    with deployment(work / "deployment", raw, "postgres", dsn) as running:
        result = running.backfill(list(SOURCES))
        with running.instance() as instance:
            pids = {r["run_id"]: _step_pids(instance, r["run_id"]) for r in result["runs"]}
        daemon_log = (running.work / "daemon.log").read_text()
        config = load_config(running.config)
    return {"result": result, "pids": pids, "daemon_log": daemon_log, "config": config, "raw": raw, "work": work}


def _step_pids(instance, run_id: str) -> dict[str, int]:
    return {r.event_log_entry.dagster_event.step_key: r.event_log_entry.dagster_event.pid
            for r in instance.get_records_for_run(run_id).records
            if r.event_log_entry.dagster_event is not None
            and r.event_log_entry.dagster_event.event_type == dg.DagsterEventType.STEP_START}


def test_the_partitions_run_at_the_same_time_and_all_succeed(parallel):
    result = parallel["result"]
    assert result["backfill_status"] == "COMPLETED_SUCCESS", result
    assert sorted(r["partition"] for r in result["runs"]) == sorted(SOURCES)
    assert all(r["status"] == "SUCCESS" for r in result["runs"]), result["runs"]
    assert result["runs_overlap"], result["runs"]
    # All three were running at one moment: the latest start comes before the earliest end.
    assert max(r["start_s"] for r in result["runs"]) < min(r["end_s"] for r in result["runs"])


def test_each_step_ran_in_its_own_process(parallel):
    for run_id, pids in parallel["pids"].items():
        assert len(pids) == 5 and len(set(pids.values())) == 5, (run_id, pids)


def test_no_lock_error_anywhere(parallel):
    for run in parallel["result"]["runs"]:
        assert run["errors"] == [], run
    errors = [line for line in parallel["daemon_log"].splitlines() if "error" in line.lower()]
    assert not [line for line in errors if any(word in line.lower() for word in LOCK_WORDS)], errors


def test_the_parallel_build_equals_a_serial_build(parallel, tmp_path, postgres, monkeypatch):
    monkeypatch.setenv("RAG_PIPELINE_PG_DSN", postgres)
    serial_file = tmp_path / "pipeline.yaml"
    serial_file.write_text(yaml.safe_dump({**parallel["raw"], "storage": {"path": str(tmp_path / "serial.duckdb")}}))
    serial_config = load_config(serial_file)
    with dg.DagsterInstance.ephemeral() as instance:
        runs = ingest(serial_config, instance)
    assert all(r.success for r in runs), [r.error for r in runs]
    parallel_store, serial_store = open_store(parallel["config"].storage), open_store(serial_config.storage)
    for name, sql in SERVED.items():
        left, right = (sorted((tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in s.db.rows(sql)), key=repr)
                       for s in (parallel_store, serial_store))
        assert left == right, name
    # One cache row per text, though three runs embedded the same texts at once.
    assert parallel_store.db.value("SELECT count(*) FROM embedding_cache") == len(
        {h for (h,) in parallel_store.db.rows("SELECT text_hash FROM chunks")})
    vector_sql = "SELECT chunk_id, {} FROM vectors ORDER BY chunk_id"
    keys_p, matrix_p = parallel_store.db.read_vectors(vector_sql.format(parallel_store.db.vector_expression("vector")))
    keys_s, matrix_s = serial_store.db.read_vectors(vector_sql.format(serial_store.db.vector_expression("vector")))
    assert keys_p == keys_s and np.array_equal(matrix_p, matrix_s)
