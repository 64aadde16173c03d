"""The nightly suite on a real deployment of the bundled sample: what the end-to-end test asserts and
what `tools/ui_screenshots.py` photographs.

    with sample_deployment(work, "duckdb") as night:
        clean = night.clean_night()        # launched by the daemon while the store pool is held
        faulted = night.faulted_night()    # a broken page, a vanished source, a regression
        backfill = night.backfill_failed() # the source back, its partition backfilled as the UI does

Every run comes from the daemon: the schedule's tick (a cron of every minute, stopped after one tick),
the sensors that chain evaluation and monitoring, a backfill launched through GraphQL. The command
line only prepares the instance (first index, first evaluation, its promotion), as a team would.

    python -m rag_pipeline_tests.harness.night --backend postgres --work DIR --out seen.json

observes one whole night (`observe`: the statuses, and the pages the on-call person opens, as
GraphQL answers them) and writes it as JSON; the end-to-end test runs one such process per
deployment shape, side by side, since a night mostly waits for the minute of its tick.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rag_pipeline_tests.harness.local_deployment import (
    INGESTION_ASSETS,
    REPO,
    Deployment,
    deployment,
    pipeline_config,
    postgres_server,
)

SOURCES = ("handbook", "helpcenter", "product_docs")
BROKEN_PAGE = "policies/remote-work.md"
ADDED_PAGE = "release-calendar.md"
VANISHED_SOURCE = "helpcenter"
RECORDED_DAY = "2026-11-29"  # the sample query log's last day
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}

# What the on-call person opens, as the UI asks for it.
RUN_PAGE = """
query($id: ID!) { runOrError(runId: $id) { ... on Run { status tags { key value }
  eventConnection(limit: 1000) { events { __typename
    ... on ExecutionStepFailureEvent { stepKey error { message } failureMetadata { description } } } } } } }
"""
CHECK_EXECUTIONS = """
query($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 50) {
    runId partition status evaluation { description severity } } }
"""
OBSERVATIONS = """
query($key: AssetKeyInput!, $partition: String!) {
  assetOrError(assetKey: $key) { ... on Asset { assetObservations(partitions: [$partition], limit: 5) {
    runId description metadataEntries { label } } } } }
"""
CHECKS = (("search_index", "coverage"), ("search_index", "deletions_propagated"), ("search_index", "sources_fresh"),
          ("search_index", "no_failed_documents"), ("golden_eval", "gate_vs_baseline"))


@dataclass
class Night:
    running: Deployment
    data: Path
    hold: Path
    revision: str
    # The runs of the last night, by source and "evaluation" / "monitoring".
    runs: dict[str, str] = field(default_factory=dict)
    tick_id: str = ""

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rag_pipeline.cli", *args], env=self.running.env, cwd=REPO,
                              capture_output=True, text=True, timeout=900)

    def clean_night(self) -> dict:
        """A night whose tick comes while an evaluation run and a monitoring run hold the store pool
        (each waits at its hold point until released), after a page was added during the day (a
        night that changes nothing served evaluates nothing). Returns the statuses seen."""
        import dagster as dg

        (self.data / "corpus" / "product_docs" / ADDED_PAGE).write_text(
            "# Release calendar\n\nMinor releases ship on the first Tuesday of each quarter.\n")
        self.hold.write_text("evaluation\nmonitoring\n")
        since = time.time()
        held = {"evaluation": self.running.launch_run("evaluate_golden_revision", self.revision),
                "monitoring": self.running.launch_run("monitor_production", RECORDED_DAY)}
        with self.running.instance() as instance:
            self.running.wait("the held evaluation to start", lambda: instance.get_run_by_id(
                held["evaluation"]).status == dg.DagsterRunStatus.STARTED, timeout_s=180)
        tick = self.tick(since)
        with self.running.instance() as instance:
            seen = {"pool_held_at_tick": {k: instance.get_run_by_id(v).status.value for k, v in held.items()},
                    "ingest_at_tick": {r.tags["dagster/partition"]: instance.get_run_by_id(r.run_id).status.value
                                       for r in tick}}
        self.hold.unlink()
        seen["night"] = self.chain(since)
        with self.running.instance() as instance:
            seen["held"] = {k: instance.get_run_by_id(v).status.value for k, v in held.items()}
        return seen

    def faulted_night(self) -> dict:
        """A night after three faults in the data: a handbook page that no longer decodes, the
        helpcenter folder gone, and retrieval switched to dense alone (the hashing embedder), far
        below the hybrid baseline. Returns the night's statuses."""
        page = self.data / "corpus" / "handbook" / BROKEN_PAGE
        page.write_bytes(page.read_bytes() + b"\nA pasted line in latin-1: caf\xe9.\n")
        shutil.move(str(self.data / "corpus" / VANISHED_SOURCE), self.data / f"{VANISHED_SOURCE}-away")
        config = yaml.safe_load(self.running.config.read_text())
        config["retrieval"]["mode"] = "dense"
        self.running.config.write_text(yaml.safe_dump(config))
        since = time.time()
        self.tick(since)
        return self.chain(since)

    def backfill_failed(self) -> dict:
        """The vanished source back in place; its failed partition backfilled through GraphQL."""
        shutil.move(str(self.data / f"{VANISHED_SOURCE}-away"), self.data / "corpus" / VANISHED_SOURCE)
        return self.running.backfill([VANISHED_SOURCE], INGESTION_ASSETS)

    def tick(self, since: float) -> list:
        """Start the nightly schedule until its next tick has requested a run per source; stop it."""
        self.running.automation("schedule", "nightly_full_suite", True)
        with self.running.instance() as instance:
            runs = self.running.wait("the schedule's tick", lambda: (
                found if len(found := self._tick_runs(instance, since)) == len(SOURCES) else None), timeout_s=150)
        self.running.automation("schedule", "nightly_full_suite", False)
        self.tick_id = runs[0].tags["dagster/tick"]
        return runs

    def chain(self, since: float) -> dict[str, str]:
        """The sensors chain the rest of the night: evaluation once ingestion settled, monitoring
        once that evaluation finished. Returns each run's status by source, evaluation, monitoring."""
        import dagster as dg

        def finished(instance, job: str, **tags) -> list:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=job, tags={"rag_pipeline/trigger": "sensor", **tags}))
            return [r for r in runs if _created(instance, r) > since and r.status.value in FINISHED]

        for sensor in ("golden_eval_sensor", "monitoring_after_evaluation"):
            self.running.automation("sensor", sensor, True)
        with self.running.instance() as instance:
            ingest = self.running.wait("the night's ingestion", lambda: (
                runs if all((runs := [instance.get_run_by_id(r.run_id) for r in self._tick_runs(instance, since)]))
                and all(r.status.value in FINISHED for r in runs) else None), timeout_s=900)
            ingested = max(instance.get_run_record_by_id(r.run_id).end_time for r in ingest)
            evaluation = self.running.wait("the night's evaluation", lambda: self._evaluation_of_settled_state(
                instance, ingested), timeout_s=900, explain=lambda: self.running.sensor_reasons("golden_eval_sensor"))
            monitored = self.running.wait("the night's monitoring", lambda: finished(
                instance, "monitor_production", **{"rag_pipeline/after_evaluation": evaluation.run_id}), timeout_s=900,
                explain=lambda: self.running.sensor_reasons("monitoring_after_evaluation"))[0]
        self.running.stop_automation([("sensor", "golden_eval_sensor"), ("sensor", "monitoring_after_evaluation")])
        runs = {**{r.tags["dagster/partition"]: r for r in ingest}, "evaluation": evaluation, "monitoring": monitored}
        self.runs = {name: run.run_id for name, run in runs.items()}
        return {name: run.status.value for name, run in runs.items()}

    def _evaluation_of_settled_state(self, instance, ingested: float):
        """The evaluation that measured what the night settled on, once no other is due: the latest
        finished after ingestion ended. The sensor launches it, unless the run that held the pool
        was released while the tick's ingestion shared the pool (PostgreSQL's limit is 4) and read
        the index after the switch: that state is then evaluated already, and no second run comes."""
        import dagster as dg

        from rag_pipeline.config import load_config
        from rag_pipeline.defs.night_state import latest_evaluated, night_facts

        facts = night_facts(instance, load_config(self.running.config))
        latest = latest_evaluated(instance)
        if facts.ingestion_in_flight or facts.evaluations_in_flight or latest is None \
                or not latest.covers(facts.served_state(), facts.source_ids):
            return None
        records = instance.get_run_records(filters=dg.RunsFilter(job_name="evaluate_golden_revision"), limit=1)
        latest_run = records[0] if records else None
        return latest_run.dagster_run if latest_run and latest_run.end_time and latest_run.end_time >= ingested - 1 else None

    def _tick_runs(self, instance, since: float) -> list:
        """The runs of the schedule's first tick after `since` (one tick is one night)."""
        import dagster as dg

        runs = [r for r in instance.get_runs(filters=dg.RunsFilter(tags={"rag_pipeline/trigger": "schedule"}))
                if _created(instance, r) > since]
        first = min((int(r.tags["dagster/tick"]) for r in runs), default=None)
        return [r for r in runs if int(r.tags["dagster/tick"]) == first]


def _created(instance, run) -> float:
    return instance.get_run_record_by_id(run.run_id).create_timestamp.timestamp()


@contextmanager
def sample_deployment(work: Path, backend: str = "duckdb", embedding: dict | None = None) -> Iterator[Night]:
    """A copy of the bundled sample on a fresh deployment of `backend` (webserver and daemon, all
    automation stopped), indexed, evaluated and promoted by the command line."""
    from rag_pipeline.core.evaluation.golden.cases import file_revision
    from rag_pipeline.core.faults import HOLD_FILE_ENV
    from rag_pipeline.definitions import EXECUTOR_ENV_VAR

    data = work / "data"
    shutil.copytree(REPO / "data", data)
    raw = pipeline_config(data / "pipeline.yaml")
    raw["embedding"] = embedding or {"kind": "hashing"}
    raw["monitoring"]["bootstrap_samples"] = 200
    # A tick every minute (stopped after one) and sensors that look every 5 s: a night in minutes.
    raw["automation"] = {"nightly_cron": "* * * * *", "sensor_interval_seconds": 5}
    hold = work / "hold"
    # Each run's steps in the run's process on both shapes: the night is about which runs the daemon
    # launches and how they share the store pool. A process per step on PostgreSQL (its default) is
    # proven by the parallel and Celery backfills; here it would only multiply interpreter starts.
    env = {HOLD_FILE_ENV: str(hold), EXECUTOR_ENV_VAR: "in_process"}
    with (postgres_server() if backend == "postgres" else nullcontext()) as dsn:
        with deployment(work / "deployment", raw, backend, dsn, extra_env=env) as running:
            night = Night(running, data, hold, file_revision(Path(raw["golden_set"])))
            for command in (["ingest"], ["eval"], ["promote"]):
                done = night.cli(*command)
                if done.returncode != 0:
                    raise RuntimeError(f"rag-pipeline {' '.join(command)} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
            yield night


def observe(work: Path, backend: str) -> dict:
    """One whole night on a fresh deployment of `backend`: the clean night, the faulted night, the
    pages of its runs, checks and vanished partition, and the backfill of that partition."""
    with sample_deployment(work, backend) as night:
        graphql = night.running.graphql
        seen = {"backend": backend, "clean": night.clean_night(), "faulted": night.faulted_night()}
        seen["runs"] = dict(night.runs)
        seen["pages"] = {name: graphql(RUN_PAGE, {"id": run_id})["runOrError"] for name, run_id in night.runs.items()}
        seen["checks"] = {name: graphql(CHECK_EXECUTIONS, {"key": {"path": [asset]}, "check": name})["assetCheckExecutions"]
                          for asset, name in CHECKS}
        seen["observations"] = graphql(OBSERVATIONS, {"key": {"path": ["source_documents"]}, "partition": VANISHED_SOURCE}
                                       )["assetOrError"]["assetObservations"]
        seen["backfill"] = night.backfill_failed()
        with night.running.instance() as instance:
            seen["backfill_tags"] = [dict(instance.get_run_by_id(r["run_id"]).tags) for r in seen["backfill"]["runs"]]
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description="Observe one night of the sample on a real deployment.")
    parser.add_argument("--backend", choices=("duckdb", "postgres"), default="duckdb")
    parser.add_argument("--work", type=Path, required=True, help="a new folder for the deployment and its data")
    parser.add_argument("--out", type=Path, required=True, help="where the night's observations go, as JSON")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(observe(args.work, args.backend), indent=1, default=str))


if __name__ == "__main__":
    main()
