"""A night evaluates each settled state once, through the real webserver and daemon.

A fresh deployment with three sources configured and never ingested: the evaluation sensor waits
and says why. A backfill of the three ingestion partitions launched as the UI launches it
(GraphQL `launchPartitionBackfill`, runs named `__ASSET_JOB` with no tag of ours) yields exactly
one evaluation, created after the last ingest run finished. The same backfill again changes
nothing served: no evaluation follows. One deployment serves both halves (the hashing embedder,
three small sources, a sensor that looks every 5 s); the evaluation's `sources` table is read as
the UI reads it, through GraphQL.
"""

from __future__ import annotations

import json
import time

import dagster as dg
import pytest

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.harness.local_deployment import deployment  # the harness that starts webserver and daemon

pytestmark = pytest.mark.slow

SOURCES = ("alpha", "beta", "gamma")
TOPICS = {"alpha": ("refunds", "Refunds are issued within fourteen days of the purchase."),
          "beta": ("travel", "Book travel through the portal two weeks ahead of the trip."),
          "gamma": ("badges", "Office badges are collected at the front desk on the first day.")}
# Two pages of gamma that fail alone (not UTF-8): a green run, and a `failed` cell of two lines.
BROKEN = {"old-1.md": b"# Old one\n\ncaf\xe9 menu\n", "old-2.md": b"# Old two\n\nna\xefve page\n"}
TICKS = """
query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor { sensorState {
  ticks(limit: 500) { status skipReason timestamp runIds } } } } }
"""
SOURCES_TABLE = """
{ assetOrError(assetKey: {path: ["golden_eval"]}) { ... on Asset { assetMaterializations(limit: 1) {
  metadataEntries { label ... on TableMetadataEntry { table { records } } } } } } }
"""
EVALUATE = "evaluate_golden_revision"


def _ticks(running) -> list[dict]:
    selector = {**running.repository(), "sensorName": "golden_eval_sensor"}
    state = running.graphql(TICKS, {"s": selector})["sensorOrError"]["sensorState"]
    return sorted(state["ticks"], key=lambda t: t["timestamp"])


def _evaluations(instance) -> list[dg.RunRecord]:
    return list(instance.get_run_records(filters=dg.RunsFilter(job_name=EVALUATE)))


def _ticks_after(running, moment: float, count: int = 3) -> list[dict]:
    """Wait for `count` finished ticks of the sensor after `moment` (a Unix time); return them."""
    return running.wait(f"{count} sensor ticks", lambda: (
        after if len(after := [t for t in _ticks(running) if t["timestamp"] > moment and t["status"] != "STARTED"])
        >= count else None), timeout_s=180)


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("night-once")
    roots = {}
    for source, (topic, sentence) in TOPICS.items():
        roots[source] = write_tree(work / "corpus" / source, {
            f"{topic}.md": f"# {topic.title()}\n\n{sentence}\n",
            "about.md": f"# About {source}\n\nThis space is about {topic}.\n",
            **(BROKEN if source == "gamma" else {})})
    golden = work / "golden.jsonl"
    golden.write_text("".join(json.dumps({"id": f"q-{source}", "question": f"what about {topic}?", "reference": sentence,
                                          "gold_docs": [f"{source}:{topic}.md"]}) + "\n"
                              for source, (topic, sentence) in TOPICS.items()))
    raw = {"sources": [{"name": s, "path": str(roots[s])} for s in SOURCES], "golden_set": str(golden),
           "embedding": {"kind": "hashing"}, "automation": {"sensor_interval_seconds": 5}}
    seen: dict = {}
    with deployment(work / "deployment", raw) as running:
        running.automation("sensor", "golden_eval_sensor", True)
        seen["before"] = _ticks_after(running, 0, count=2)
        with running.instance() as instance:
            first = running.backfill(list(SOURCES))
            evaluation = running.wait("the evaluation", lambda: [
                r for r in _evaluations(instance) if r.dagster_run.status.value in ("SUCCESS", "FAILURE")], timeout_s=600)[0]
            seen["after_first_ticks"] = _ticks_after(running, evaluation.end_time)
            seen["first"] = {"backfill": first, "evaluations": _evaluations(instance),
                             "ingest_ended": max(r.end_time for r in instance.get_run_records(
                                 filters=dg.RunsFilter(tags={"dagster/backfill": first["backfill_id"]})))}
            seen["sources"] = {
                row["source"]: row for entry in running.graphql(SOURCES_TABLE)["assetOrError"]["assetMaterializations"][0][
                    "metadataEntries"] if entry["label"] == "sources" for row in map(json.loads, entry["table"]["records"])}
            # The same night again: every run re-materializes search_index with the same manifest hash.
            second = running.backfill(list(SOURCES))
            settled = time.time()
            seen["after_second_ticks"] = _ticks_after(running, settled)
            seen["second"] = {"backfill": second, "evaluations": _evaluations(instance)}
            seen["ticks"] = _ticks(running)
    return seen


def test_the_first_start_waits_for_the_first_ingestion_and_says_so(night):
    for tick in night["before"]:
        assert tick["status"] == "SKIPPED" and tick["skipReason"].startswith("source(s) alpha, beta, gamma never ingested")


def test_a_ui_backfill_of_three_sources_yields_one_evaluation_after_its_last_run(night):
    first = night["first"]
    assert first["backfill"]["backfill_status"] == "COMPLETED_SUCCESS", first["backfill"]
    assert {r["job"] for r in first["backfill"]["runs"]} == {"__ASSET_JOB"} and len(first["backfill"]["runs"]) == 3
    [evaluation] = first["evaluations"]
    assert evaluation.dagster_run.tags["rag_pipeline/trigger"] == "sensor"
    assert evaluation.create_timestamp.timestamp() >= first["ingest_ended"]
    # While the backfill ran, the sensor said why it waited; after the evaluation, that it had evaluated.
    reasons = [t["skipReason"] or "" for t in night["ticks"] if t["status"] == "SKIPPED"]
    assert any(r.startswith("ingestion in flight") for r in reasons), reasons
    assert all("already evaluated" in t["skipReason"] for t in night["after_first_ticks"])


def test_a_night_that_changes_nothing_evaluates_nothing(night):
    second = night["second"]
    assert second["backfill"]["backfill_status"] == "COMPLETED_SUCCESS", second["backfill"]
    assert len(second["evaluations"]) == 1
    assert night["after_second_ticks"] and all(
        t["status"] == "SKIPPED" and "already evaluated" in t["skipReason"] for t in night["after_second_ticks"])
    assert sum(1 for t in night["ticks"] if t["runIds"]) == 1  # one tick ever requested a run


def test_the_sources_table_reads_as_the_ui_shows_it(night):
    sources = night["sources"]
    assert set(sources) == set(SOURCES)
    assert all(row["served"].startswith("current (switched ") for row in sources.values())
    assert sources["gamma"]["failed_documents"] == 2 and sources["gamma"]["queryable_documents"] == 2
    lines = sources["gamma"]["failed"].split("\n")  # a line per failed document, not a literal \n
    assert len(lines) == 2 and lines[0].startswith("gamma:old-1.md at ") and "\\n" not in sources["gamma"]["failed"]
