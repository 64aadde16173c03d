"""Automation: the source-change sensor, the golden-evaluation sensor, the nightly schedule, the purge job."""

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import dagster as dg

from rag_pipeline.core.discovery import source_fingerprint
from rag_pipeline.core.golden import file_revision
from rag_pipeline.defs.ingestion import DUCKDB_POOL
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import PipelineSettings, StoreResource
from rag_pipeline.defs.runs import close_abandoned_runs

ingest_sources_job = dg.define_asset_job(
    "ingest_sources",
    selection=dg.AssetSelection.groups("ingestion"),
    description="Ingest one source partition: discover, parse, chunk, embed, index, prove coverage.",
)
golden_eval_job = dg.define_asset_job(
    "evaluate_golden_revision",
    selection=dg.AssetSelection.groups("evaluation"),
    description="Validate one golden-set revision and evaluate retrieval on it.",
)

# A run tag naming the day an evaluation's monitoring run should sample (YYYY-MM-DD).
MONITORING_DAY_TAG = "rag_pipeline/day"

monitoring_job = dg.define_asset_job(
    "monitor_production",
    selection=dg.AssetSelection.groups("monitoring"),
    description="Sample a day's production queries and compare them with the golden set.",
)


class PurgeConfig(dg.Config):
    source_ids: list[str]


@dg.op(pool=DUCKDB_POOL)
def purge_sources(context: dg.OpExecutionContext, config: PurgeConfig, store: StoreResource) -> None:
    """Remove every row of sources that left the config; the ledger keeps their history."""
    for source_id in config.source_ids:
        store.get().purge_source(source_id)
        context.log.info(f"purged source {source_id!r}")


@dg.job(description="Purge sources removed from the config (requested by the source-change sensor).")
def purge_removed_sources():
    purge_sources()


@dg.sensor(jobs=[ingest_sources_job, purge_removed_sources], minimum_interval_seconds=60)
def source_change_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
    """New sources become partitions and runs, changed sources get a run of their partition only,
    unchanged sources trigger nothing, removed sources are purged and their partition deleted."""
    config = settings.load()
    # A run killed on this machine would hold its partition's queue slot forever (dagster.yaml).
    for source in config.sources:
        for run_id in close_abandoned_runs(context.instance, source.source_id):
            context.log.warning(f"closed run {run_id} of {source.source_id}: its process is gone")
    previous = json.loads(context.cursor) if context.cursor else {}
    current = {s.source_id: source_fingerprint(s.path, s.kind) for s in config.sources}
    existing = set(context.instance.get_dynamic_partitions(source_partitions.name))
    new = sorted(set(current) - existing)
    removed = sorted(existing - set(current))
    run_requests = [
        dg.RunRequest(partition_key=source_id, run_key=f"{source_id}:{fingerprint}", job_name=ingest_sources_job.name)
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
            )
        )
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partition_requests, cursor=json.dumps(current))


@dg.sensor(job=golden_eval_job, minimum_interval_seconds=60)
def golden_eval_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult | dg.SkipReason:
    """Evaluate the current golden revision when it is new, or when the index changed since the
    last evaluation and no ingestion run is still going (so the nightly evaluation follows ingestion)."""
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
        run_requests=[dg.RunRequest(partition_key=revision, run_key=f"{revision}:{index_event}")],
        dynamic_partitions_requests=partition_requests,
        cursor=json.dumps({"revision": revision, "index_event": index_event}),
    )


@dg.schedule(cron_schedule="0 2 * * *", job=ingest_sources_job, execution_timezone="UTC")
def nightly_full_suite(context: dg.ScheduleEvaluationContext, settings: PipelineSettings) -> list[dg.RunRequest]:
    """Every night: ingest every configured source partition; golden_eval_sensor then evaluates
    the current golden revision on the refreshed index, and monitoring_after_evaluation samples
    production traffic and writes the drift report."""
    config = settings.load()
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    existing = set(context.instance.get_dynamic_partitions(source_partitions.name))
    missing = [s for s in config.source_ids if s not in existing]
    if missing:
        context.instance.add_dynamic_partitions(source_partitions.name, missing)
    return [dg.RunRequest(partition_key=source_id, run_key=f"nightly:{day}:{source_id}") for source_id in config.source_ids]


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS, monitored_jobs=[golden_eval_job], request_job=monitoring_job,
    minimum_interval_seconds=60,
)
def monitoring_after_evaluation(context: dg.RunStatusSensorContext) -> dg.RunRequest:
    """After a successful golden evaluation (the last step of the nightly suite), sample the last
    complete day of production queries and write the drift report."""
    day = monitoring_day(context.dagster_run.tags, datetime.now(UTC))
    return dg.RunRequest(partition_key=day, run_key=f"monitor:{day}:{context.dagster_run.run_id}")


def monitoring_day(tags: Mapping[str, str], now: datetime) -> str:
    """The day partition to monitor: the run's `rag_pipeline/day` tag when set, else the last
    complete UTC day. (At 02:00 the current day holds two hours of traffic, not a day's.)"""
    return tags.get(MONITORING_DAY_TAG) or (now.astimezone(UTC).date() - timedelta(days=1)).isoformat()


automation_jobs = [ingest_sources_job, golden_eval_job, purge_removed_sources, monitoring_job]
automation_sensors = [source_change_sensor, golden_eval_sensor, monitoring_after_evaluation]
automation_schedules = [nightly_full_suite]
