"""The nightly suite as it really runs (rag_pipeline_tests/harness/night.py): the real webserver and daemon, the schedule's
tick, the sensors' chain, a backfill launched through GraphQL as the UI launches it, on both
deployment shapes (DuckDB with the instance in SQLite; PostgreSQL for the store and the instance).

A night of the three sample sources starts while an evaluation run and a monitoring run hold the
`store` pool: the ingest runs the tick requests wait for it or share it, never fail for it, and
the night ends green. The same night then meets faults in the data: a broken document, a vanished
source, and a change that makes the golden evaluation regress. Exactly those three fail, each with
its reason where the on-call person looks; monitoring runs although the gate failed. The source
comes back, and a backfill of its partition converges.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline_tests.harness.night import SOURCES, VANISHED_SOURCE

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ("duckdb", "postgres")


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> dict[str, dict | str]:
    """Both nights observed at once, each in its own process (`python -m rag_pipeline_tests.harness.night`): a night
    spends most of its time waiting for its tick's minute and for the sensors. Per backend, what
    was seen, or the end of the process's output when it failed."""
    work = tmp_path_factory.mktemp("nights")
    running = {}
    for backend in BACKENDS:
        log = (work / f"{backend}.log").open("w")
        command = [sys.executable, "-m", "rag_pipeline_tests.harness.night", "--backend", backend, "--work", str(work / backend),
                   "--out", str(work / f"{backend}.json")]
        running[backend] = (subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT), log)
    seen: dict[str, dict | str] = {}
    for backend, (process, log) in running.items():
        try:
            process.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        out = work / f"{backend}.json"
        seen[backend] = (json.loads(out.read_text()) if process.returncode == 0 and out.exists()
                         else f"exit {process.returncode}; logs in {work / backend}\n"
                              + (work / f"{backend}.log").read_text()[-6000:])
    return seen


@pytest.fixture(params=BACKENDS)
def night(request, nights) -> dict:
    seen = nights[request.param]
    if isinstance(seen, str):
        pytest.fail(f"the {request.param} night did not complete: {seen}")
    return seen


def _step_failures(page: dict) -> list[dict]:
    return [e for e in page["eventConnection"]["events"] if e["__typename"] == "ExecutionStepFailureEvent"]


def test_a_night_launched_by_the_daemon_while_the_pool_is_held_ends_green(night):
    clean = night["clean"]
    # At the tick the evaluation held the pool (on PostgreSQL, with its limit of 4, monitoring too).
    assert clean["pool_held_at_tick"]["evaluation"] == "STARTED"
    if night["backend"] == "postgres":
        assert clean["pool_held_at_tick"]["monitoring"] == "STARTED"
    # The tick's runs were created meanwhile; none failed for it.
    assert set(clean["ingest_at_tick"]) == set(SOURCES) and "FAILURE" not in clean["ingest_at_tick"].values()
    assert clean["held"] == {"evaluation": "SUCCESS", "monitoring": "SUCCESS"}
    assert clean["night"] == {**dict.fromkeys(SOURCES, "SUCCESS"), "evaluation": "SUCCESS", "monitoring": "SUCCESS"}


def test_the_faulted_night_fails_exactly_where_the_data_is_wrong(night):
    assert night["faulted"] == {"handbook": "SUCCESS", VANISHED_SOURCE: "FAILURE", "product_docs": "SUCCESS",
                                "evaluation": "FAILURE", "monitoring": "SUCCESS"}
    # The broken document fails alone: its run is green, and the runs list says a document failed.
    tags = {t["key"]: t["value"] for t in night["pages"]["handbook"]["tags"]}
    assert tags["rag_pipeline/failed_documents"] == "1"
    [documents] = [e for e in night["checks"]["no_failed_documents"] if e["runId"] == night["runs"]["handbook"]]
    assert documents["status"] == "FAILED" and documents["evaluation"]["severity"] == "WARN"
    assert "remote-work.md" in documents["evaluation"]["description"]
    # Monitoring ran after the failed evaluation, and says which one it followed.
    tags = {t["key"]: t["value"] for t in night["pages"]["monitoring"]["tags"]}
    assert tags["rag_pipeline/evaluation_status"] == "FAILURE"


def test_a_vanished_source_says_why_on_its_run_and_its_partition(night):
    [step] = _step_failures(night["pages"][VANISHED_SOURCE])
    assert step["stepKey"] == "source_documents"
    # A dg.Failure: the reason, as written for people, is the step's failure description.
    reason = step["failureMetadata"]["description"]
    assert reason.startswith(f"source '{VANISHED_SOURCE}'") and "does not exist" in reason
    assert "Traceback" not in reason and "Error" not in reason
    # The partition's page: an observation of source_documents carrying the same reason.
    latest = night["observations"][0]
    assert latest["runId"] == night["runs"][VANISHED_SOURCE] and reason in latest["description"]
    assert {"reason", "still_served_documents", "last_committed_switch"} <= {m["label"] for m in latest["metadataEntries"]}
    # The runs list: a tag with the stage and the reason, no stack trace.
    tags = {t["key"]: t["value"] for t in night["pages"][VANISHED_SOURCE]["tags"]}
    assert tags["rag_pipeline/failure"].startswith(f"source_documents: source '{VANISHED_SOURCE}'")


def test_the_gate_failure_names_what_regressed(night):
    [step] = _step_failures(night["pages"]["evaluation"])
    assert step["stepKey"] == "golden_eval"
    assert step["failureMetadata"]["description"].startswith("gate_vs_baseline: ")
    assert any(metric in step["failureMetadata"]["description"] for metric in ("recall", "mrr", "ndcg"))  # names what fell
    tags = {t["key"]: t["value"] for t in night["pages"]["evaluation"]["tags"]}
    assert tags["rag_pipeline/failure"].startswith("golden_eval: gate_vs_baseline: ")
    [gate] = [e for e in night["checks"]["gate_vs_baseline"] if e["runId"] == night["runs"]["evaluation"]]
    assert gate["status"] == "FAILED" and gate["evaluation"]["severity"] == "ERROR"
    description = gate["evaluation"]["description"]
    assert "&gt;" not in description and "&#" not in description and "&amp;" not in description


def test_checks_a_failed_source_never_reached_are_not_reported_failed(night):
    run = night["runs"][VANISHED_SOURCE]
    for name in ("coverage", "deletions_propagated", "sources_fresh", "no_failed_documents"):
        statuses = {e["status"] for e in night["checks"][name] if e["runId"] == run}
        assert statuses and "FAILED" not in statuses and "SUCCEEDED" not in statuses, (name, statuses)


def test_the_backfill_of_the_failed_partition_converges_and_says_it_is_one(night):
    backfill = night["backfill"]
    assert backfill["backfill_status"] == "COMPLETED_SUCCESS", backfill
    assert [r["status"] for r in backfill["runs"]] == ["SUCCESS"]
    assert all(tags.get("rag_pipeline/trigger") == "backfill" for tags in night["backfill_tags"])
