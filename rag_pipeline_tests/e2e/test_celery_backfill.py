"""Steps on a real distributed executor: a backfill of 6 source partitions launched through
GraphQL, its steps run by three dagster-celery workers over a real Redis broker, the instance and
the store in PostgreSQL. What is served equals a serial DuckDB build. Then a worker process is
SIGKILLed in the middle of a source's switch: the run fails with the reason in GraphQL, nothing
served is lost, and the backfill's re-execution from failure converges to the serial build again."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rag_pipeline.cli.runner import ingest
from rag_pipeline.config import load_config
from rag_pipeline.core.faults import KILL_AT_ENV
from rag_pipeline.core.storage import open_store
from rag_pipeline.core.storage.contents import compare_contents, content_differences, served_contents
from rag_pipeline_tests.conftest import SAMPLE_CONFIG, require
from rag_pipeline_tests.harness.celery_deployment import (
    HTTPX_PAGES,
    SCIFACT,
    broker_env,
    celery_workers,
    redis_server,
    split_sources,
    steps_by_worker,
    worker_figures,
)
from rag_pipeline_tests.harness.local_deployment import INGESTION_ASSETS, deployment, pipeline_config, postgres_server

pytestmark = pytest.mark.slow

WORKERS = ["worker1", "worker2", "worker3"]
# Six partitions of five steps: enough for every worker to take steps of runs it did not start
# (benchmarks/backfill.py times twelve).
PARTITIONS = 6
# The sources whose documents change before the killed backfill.
CHANGED = ["part_01", "part_04"]
_RUN_FAILURE = """
query($runId: ID!) {
  runOrError(runId: $runId) { __typename ... on Run { status } }
  logsForRun(runId: $runId) {
    __typename
    ... on EventConnection { events { __typename ... on ErrorEvent { error { message } } } }
  }
}"""


def _serial_build(raw: dict, folder: Path):
    """The sources ingested one after another in this process, into the DuckDB file in `folder`
    (a second call ingests them again into the same file, as a nightly run would)."""
    config_file = folder / "pipeline.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    config_file.write_text(yaml.safe_dump({**raw, "storage": {"path": str(folder / "serial.duckdb")}}))
    config = load_config(config_file)
    with dg.DagsterInstance.ephemeral() as instance:
        runs = ingest(config, instance)
    assert all(r.success for r in runs), [r.error for r in runs]
    return config


def _differences(distributed_config, serial_config) -> list[str]:
    left, right = open_store(distributed_config.storage), open_store(serial_config.storage)
    try:
        return content_differences(left, right)
    finally:
        left.close()
        right.close()


def _contents(config) -> dict:
    store = open_store(config.storage)
    try:
        return served_contents(store)
    finally:
        store.close()


def _failure_messages(running, run_id: str) -> tuple[str, list[str]]:
    """The run's status and its error messages, as the UI reads them (GraphQL)."""
    answer = running.graphql(_RUN_FAILURE, {"runId": run_id})
    events = answer["logsForRun"]["events"]
    return answer["runOrError"]["status"], [e["error"]["message"] for e in events if e.get("error")]


@pytest.fixture(scope="module")
def celery(tmp_path_factory):
    require(HTTPX_PAGES)
    require(SCIFACT)
    work = tmp_path_factory.mktemp("celery")
    sources = split_sources(work / "sources", count=PARTITIONS)
    raw = pipeline_config(SAMPLE_CONFIG, sources)
    # The fast deterministic embedder: this test is about where steps run; the real model is
    # covered by the ingestion tests.
    raw["embedding"] = {"kind": "hashing"}
    out: dict = {"sources": sources}
    previous_dsn = os.environ.get("RAG_PIPELINE_PG_DSN")
    with postgres_server() as dsn, redis_server(work / "redis") as redis_url:
        os.environ["RAG_PIPELINE_PG_DSN"] = dsn
        try:
            with deployment(work / "deployment", raw, "postgres", dsn, extra_env=broker_env(redis_url)) as running:
                config = load_config(running.config)
                with celery_workers(running.env, work / "workers", WORKERS):
                    first = running.backfill(list(sources), INGESTION_ASSETS)
                    with running.instance() as instance:
                        out["taken"] = steps_by_worker(instance, [r["run_id"] for r in first["runs"]])
                out["first"] = first
                out["first_differences"] = _differences(config, _serial_build(raw, work / "serial"))
                served_before = _contents(config)

                # The corpus changes in two sources; every worker process now dies inside the
                # switch of a source (SIGKILL, no cleanup), between replacing and committing its rows.
                for name in CHANGED:
                    page = sorted(sources[name].iterdir())[0]
                    page.write_text(page.read_text() + "\n\nA paragraph added after the first build.\n")
                with celery_workers(running.env, work / "workers_killed", WORKERS,
                                    extra_env={KILL_AT_ENV: "switch:replaced"}):
                    killed = running.backfill(CHANGED, INGESTION_ASSETS)
                out["killed"] = killed
                out["killed_graphql"] = {r["run_id"]: _failure_messages(running, r["run_id"]) for r in killed["runs"]}
                # The ledger records the killed run's stages and the cache its new vectors; what is
                # served (manifest, documents, chunks, postings, vectors) must not have moved.
                out["after_kill_differences"] = compare_contents(_contents(config), served_before,
                                                                 skip=("ledger", "embedding_cache"))
                with celery_workers(running.env, work / "workers_retry", WORKERS):
                    out["retry"] = running.retry_backfill(killed["backfill_id"])
                # The serial store goes through the same history (the cache keeps the vectors of
                # the texts before the edit, as a cache should): the same sources ingested again.
                out["final_differences"] = _differences(config, _serial_build(raw, work / "serial"))
        finally:
            if previous_dsn is None:
                os.environ.pop("RAG_PIPELINE_PG_DSN", None)
            else:
                os.environ["RAG_PIPELINE_PG_DSN"] = previous_dsn
    return out


def test_the_backfill_ran_its_steps_on_every_worker(celery):
    first = celery["first"]
    assert first["backfill_status"] == "COMPLETED_SUCCESS", first
    assert sorted(r["partition"] for r in first["runs"]) == sorted(celery["sources"])
    assert all(r["status"] == "SUCCESS" for r in first["runs"]), first["runs"]
    figures = worker_figures(celery["taken"])
    # Every step of every run went through a Celery worker, and all three workers took some.
    assert sum(figures["steps_per_worker"].values()) == len(celery["sources"]) * len(INGESTION_ASSETS), figures
    assert sorted(w.split("@")[0] for w in figures["steps_per_worker"]) == WORKERS, figures
    # The executor hands out steps, not runs: some run had its steps taken by more than one worker.
    workers_of_run: dict[str, set[str]] = {}
    for worker, steps in celery["taken"].items():
        for step in steps:
            workers_of_run.setdefault(step.split(":")[0], set()).add(worker)
    assert max(len(workers) for workers in workers_of_run.values()) > 1, workers_of_run


def test_what_is_served_equals_a_serial_duckdb_build(celery):
    assert celery["first_differences"] == []


def test_a_worker_killed_mid_switch_fails_its_run_with_the_reason(celery):
    killed = celery["killed"]
    assert killed["backfill_status"] != "COMPLETED_SUCCESS", killed
    assert sorted(r["partition"] for r in killed["runs"]) == sorted(CHANGED)
    for run_id, (status, messages) in celery["killed_graphql"].items():
        assert status == "FAILURE", (run_id, messages)
        text = "\n".join(messages)
        assert "search_index" in text and "SIGKILL" in text, (run_id, messages)


def test_the_killed_switch_left_the_previous_version_served(celery):
    # Nothing of the killed transaction is visible: the two sources still serve their old content.
    assert celery["after_kill_differences"] == []


def test_the_retried_backfill_converges_to_the_serial_build(celery):
    retry = celery["retry"]
    assert retry["backfill_status"] == "COMPLETED_SUCCESS", retry
    assert sorted(r["partition"] for r in retry["runs"]) == sorted(CHANGED)
    assert all(r["status"] == "SUCCESS" for r in retry["runs"]), retry["runs"]
    assert celery["final_differences"] == []
