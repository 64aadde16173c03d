"""Automation: the jobs people launch, the nightly schedule, the sensors that chain a night, the purge.

A night, in order: `nightly_full_suite` (02:00 UTC) runs `ingest_sources` for every source;
`golden_eval_sensor` sees the index change and, once no ingestion run is in flight, runs
`evaluate_golden_revision` on the current golden revision; `monitoring_after_evaluation` sees that
run succeed and runs `monitor_production` for the day to monitor (yesterday, or the last day of a
recorded log). Between nights, `source_change_sensor` runs a source whose files changed.
"""

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

import dagster as dg

from rag_pipeline.config import MonitoringConfig
from rag_pipeline.core.evaluation.golden import file_revision
from rag_pipeline.core.ingestion.discovery import source_fingerprint
from rag_pipeline.core.monitoring.sampling import read_query_log
from rag_pipeline.defs.common import DAY_TAG, GOLDEN_TAG, SOURCE_TAG, STORE_POOL, TRIGGER_TAG
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import PipelineSettings, StoreResource
from rag_pipeline.defs.runs import close_abandoned_runs, free_slots_of_dead_runs

# A source's chain is one run; sources run as parallel runs. Where the steps of a run execute is
# the backend's choice (definitions.executor_for): one process with DuckDB, a process per step
# with PostgreSQL (or a pod per step with dagster-k8s, see deploy/).
ingest_sources_job = dg.define_asset_job(
    "ingest_sources",
    selection=dg.AssetSelection.groups("ingestion"),
    description="Ingest one source: discover, parse, chunk, embed, then switch the served index once "
                "coverage and deletions are proven on the new version.",
)
golden_eval_job = dg.define_asset_job(
    "evaluate_golden_revision",
    selection=dg.AssetSelection.groups("evaluation"),
    description="Validate one golden-set revision and evaluate retrieval (and answers) on it, gated "
                "against the promoted baseline.",
)
monitoring_job = dg.define_asset_job(
    "monitor_production",
    selection=dg.AssetSelection.groups("monitoring"),
    description="Sample a day's production queries and compare them with the golden set (drift report).",
)


class PurgeConfig(dg.Config):
    source_ids: list[str]


@dg.op(pool=STORE_POOL)
def purge_sources(context: dg.OpExecutionContext, config: PurgeConfig, store: StoreResource) -> None:
    """Remove every row of sources that left the config; the ledger keeps their history."""
    for source_id in config.source_ids:
        store.get().served.purge_source(source_id)
        context.log.info(f"purged source {source_id!r}")


@dg.job(description="Purge sources removed from the config (requested by the source-change sensor).")
def purge_removed_sources():
    purge_sources()


def source_tags(source_id: str, trigger: str) -> dict[str, str]:
    return {SOURCE_TAG: source_id, TRIGGER_TAG: trigger}


@dg.sensor(
    jobs=[ingest_sources_job, purge_removed_sources], minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Every minute: a new source becomes a partition and a run, a source whose files changed "
                "(names, sizes, times) gets a run, a source removed from the config is purged; runs left "
                "STARTED by a dead process are closed.",
)
def source_change_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
    config = settings.load()
    # A run killed on this machine would hold its partition's queue slot forever (dagster.yaml).
    for source in config.sources:
        for run_id in close_abandoned_runs(context.instance, source.source_id):
            context.log.warning(f"closed run {run_id} of {source.source_id}: its process is gone")
    for run_id in free_slots_of_dead_runs(context.instance):
        context.log.warning(f"freed the pool slot of run {run_id}: its process is gone or it ended without freeing it")
    previous = json.loads(context.cursor) if context.cursor else {}
    current = {s.source_id: source_fingerprint(s.path, s.kind) for s in config.sources}
    existing = set(context.instance.get_dynamic_partitions(source_partitions.name))
    new = sorted(set(current) - existing)
    removed = sorted(existing - set(current))
    run_requests = [
        dg.RunRequest(partition_key=source_id, run_key=f"{source_id}:{fingerprint}", job_name=ingest_sources_job.name,
                      tags=source_tags(source_id, "sensor"))
        for source_id, fingerprint in sorted(current.items())
        if previous.get(source_id) != fingerprint
    ]
    partition_requests = []
    if new:
        partition_requests.append(source_partitions.build_add_request(new))
    if removed:
        partition_requests.append(source_partitions.build_delete_request(removed))
        run_requests.append(
            dg.RunRequest(
                run_key=f"purge:{','.join(removed)}",
                job_name=purge_removed_sources.name,
                run_config={"ops": {"purge_sources": {"config": {"source_ids": removed}}}},
                tags={TRIGGER_TAG: "sensor"},
            )
        )
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partition_requests, cursor=json.dumps(current))


@dg.sensor(
    job=golden_eval_job, minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="Evaluates the current golden revision when it is new, or when the index changed since the "
                "last evaluation and no ingestion run is in flight (so the nightly evaluation follows ingestion).",
)
def golden_eval_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult | dg.SkipReason:
    config = settings.load()
    if config.golden_set is None or not config.golden_set.is_file():
        return dg.SkipReason("no golden set file configured")
    revision = file_revision(config.golden_set)
    state = json.loads(context.cursor) if context.cursor else {}
    records = context.instance.fetch_materializations(dg.AssetKey("search_index"), limit=1).records
    index_event = records[0].storage_id if records else 0
    in_flight = context.instance.get_runs(
        filters=dg.RunsFilter(
            job_name=ingest_sources_job.name,
            statuses=[dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED],
        ),
        limit=1,
    )
    partition_requests = []
    if revision not in set(context.instance.get_dynamic_partitions(golden_partitions.name)):
        partition_requests.append(golden_partitions.build_add_request([revision]))
    if state.get("revision") == revision and state.get("index_event", 0) >= index_event:
        return dg.SkipReason(f"golden revision {revision} already evaluated on the current index")
    if in_flight:
        return dg.SkipReason("ingestion still running: evaluate once the index settles")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=revision, run_key=f"{revision}:{index_event}",
                                    tags={GOLDEN_TAG: revision, TRIGGER_TAG: "sensor"})],
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps({"revision": revision, "index_event": index_event}),
    )


@dg.schedule(
    cron_schedule="0 2 * * *", job=ingest_sources_job, execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="02:00 UTC: ingest every configured source; the golden evaluation and the day's monitoring "
                "follow through golden_eval_sensor and monitoring_after_evaluation.",
)
def nightly_full_suite(context: dg.ScheduleEvaluationContext, settings: PipelineSettings) -> list[dg.RunRequest]:
    config = settings.load()
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    existing = set(context.instance.get_dynamic_partitions(source_partitions.name))
    missing = [s for s in config.source_ids if s not in existing]
    if missing:
        context.instance.add_dynamic_partitions(source_partitions.name, missing)
    return [dg.RunRequest(partition_key=source_id, run_key=f"nightly:{day}:{source_id}",
                          tags=source_tags(source_id, "schedule")) for source_id in config.source_ids]


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[golden_eval_job], request_job=monitoring_job,
    minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
    description="After a successful golden evaluation (the nightly suite's last step), samples the day to "
                "monitor and writes the drift report: yesterday (UTC), or the last day of a recorded log.",
)
def monitoring_after_evaluation(context: dg.RunStatusSensorContext, settings: PipelineSettings) -> dg.RunRequest:
    day = monitoring_day(context.dagster_run.tags, datetime.now(UTC), settings.load().monitoring)
    return dg.RunRequest(partition_key=day, run_key=f"monitor:{day}:{context.dagster_run.run_id}",
                         tags={DAY_TAG: day, TRIGGER_TAG: "sensor"})


def monitoring_day(tags: Mapping[str, str], now: datetime, monitoring: MonitoringConfig | None = None) -> str:
    """The day partition to monitor: the run's `rag_pipeline/day` tag when set; for a recorded log its
    last day; else the last complete UTC day. (At 02:00 the current day holds two hours of traffic.)"""
    if tags.get(DAY_TAG):
        return tags[DAY_TAG]
    if monitoring is not None and monitoring.recorded_log and monitoring.query_log is not None:
        last = last_logged_day(monitoring)
        if last is not None:
            return last.isoformat()
    return (now.astimezone(UTC).date() - timedelta(days=1)).isoformat()


def last_logged_day(monitoring: MonitoringConfig) -> date | None:
    """The UTC day of the latest valid query in the log (None for an empty or missing log)."""
    if monitoring.query_log is None or not monitoring.query_log.is_dir():
        return None
    log = read_query_log(monitoring.query_log)
    return log.queries[-1].timestamp.date() if log.queries else None


automation_jobs = [ingest_sources_job, golden_eval_job, purge_removed_sources, monitoring_job]
automation_sensors = [source_change_sensor, golden_eval_sensor, monitoring_after_evaluation]
automation_schedules = [nightly_full_suite]
