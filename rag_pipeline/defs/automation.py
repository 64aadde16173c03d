"""Automation: the jobs people launch, the nightly schedule, the sensors that chain a night, the purge.

A night, in order: `nightly_full_suite` (automation.nightly_cron, 02:00 UTC unless told) runs
`ingest_sources` for every source; `golden_eval_sensor`, once no ingestion of any source is in
flight (whatever launched it), runs `evaluate_golden_revision` when what the sources serve, the
golden revision or the retrieval config changed since the last evaluation (`core/evaluation/due.py`
decides, from what `defs/night_state.py` reads of the instance); `monitoring_after_evaluation` sees
that run finish, whatever its gate said, or the night settle with nothing to evaluate, and runs
`monitor_production` for the day to monitor (yesterday, or the last day of a recorded log).
Between nights, `source_change_sensor` runs a source whose files changed, and closes runs whose
process died (defs/runs.py).

These stay sensors rather than declarative automation (`AutomationCondition`): which golden
revision is current, and which day a night monitors, are decided from files and the clock, not
from the asset graph; each says why it skipped.
"""

import json
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta

import dagster as dg

from rag_pipeline.config import AutomationConfig, MonitoringConfig
from rag_pipeline.core.evaluation.due import EvaluatedState, decide
from rag_pipeline.core.ingestion.sources.watch import sensor_fingerprint
from rag_pipeline.core.monitoring.sampling import read_query_log
from rag_pipeline.defs.common import (
    DAY_TAG,
    EVALUATE_JOB,
    FINISHED,
    GOLDEN_TAG,
    INGEST_JOB,
    MONITOR_JOB,
    PURGE_JOB,
    SOURCE_TAG,
    STORE_POOL,
    TICK_TAG,
    TRIGGER_TAG,
)
from rag_pipeline.defs.night_state import night_facts
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import PipelineSettings, StoreResource
from rag_pipeline.defs.runs import close_dead_runs

# A source's chain is one run; sources run as parallel runs. Where the steps of a run execute is
# the backend's choice (definitions.executor_for): one process with DuckDB, a process per step
# with PostgreSQL (or a pod per step with dagster-k8s, see deploy/).
ingest_sources_job = dg.define_asset_job(
    INGEST_JOB,
    selection=dg.AssetSelection.groups("ingestion"),
    description="Ingest one source: discover, parse, chunk, embed, then switch the served index once "
                "coverage and deletions are proven on the new version.",
)
golden_eval_job = dg.define_asset_job(
    EVALUATE_JOB,
    selection=dg.AssetSelection.groups("evaluation"),
    description="Validate one golden-set revision and evaluate retrieval (and answers) on it, gated "
                "against the promoted baseline.",
)
monitoring_job = dg.define_asset_job(
    MONITOR_JOB,
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


@dg.job(name=PURGE_JOB, description="Purge sources removed from the config (requested by the source-change sensor).")
def purge_removed_sources():
    purge_sources()


def source_tags(source_id: str, trigger: str) -> dict[str, str]:
    return {SOURCE_TAG: source_id, TRIGGER_TAG: trigger}


def source_change_sensor_for(interval_s: int) -> dg.SensorDefinition:
    @dg.sensor(
        jobs=[ingest_sources_job, purge_removed_sources], minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="A new source becomes a partition and a run, a source whose files changed (names, sizes, "
                    "times) gets a run, a source removed from the config is purged; runs left STARTED by a "
                    "process that died are closed.",
    )
    def source_change_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult:
        config = settings.load()
        # A run whose process died would hold its partition's queue and the store pool for ever.
        for run_id in close_dead_runs(context.instance):
            context.log.warning(f"closed run {run_id}: its process is gone")
        previous = json.loads(context.cursor) if context.cursor else {}
        current = {s.source_id: sensor_fingerprint(s, config.storage.path.parent) for s in config.sources}
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
        if not run_requests and not partition_requests:
            return dg.SensorResult(skip_reason="no source changed since the last look", cursor=json.dumps(current))
        return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=partition_requests,
                               cursor=json.dumps(current))

    return source_change_sensor


def _cursor(text: str | None) -> dict:
    """A sensor's JSON cursor; {} for none, and for a cursor older versions wrote as plain text."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def golden_eval_sensor_for(interval_s: int) -> dg.SensorDefinition:
    @dg.sensor(
        job=golden_eval_job, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
        description="Evaluates the current golden revision once per settled state: when what the sources serve, "
                    "the golden revision or the retrieval config changed since the last evaluation, and no "
                    "ingestion of any source is queued, running or still being requested by a backfill.",
    )
    def golden_eval_sensor(context: dg.SensorEvaluationContext, settings: PipelineSettings) -> dg.SensorResult | dg.SkipReason:
        config = settings.load_current()
        if config.golden_set is None or not config.golden_set.is_file():
            return dg.SkipReason("no golden set file configured")
        # The cursor holds the state last requested (a cursor of an older version holds none: the
        # latest evaluation's metadata then says what was evaluated), and how many were requested.
        cursor = _cursor(context.cursor)
        decision = decide(night_facts(context.instance, config, EvaluatedState.from_json(cursor.get("evaluated"))))
        if not decision.evaluate:
            return dg.SkipReason(decision.reason)
        state, requested = decision.state, int(cursor.get("requested", 0)) + 1
        context.log.info(f"evaluating golden revision {state.revision}: {decision.reason}")
        known = set(context.instance.get_dynamic_partitions(golden_partitions.name))
        return dg.SensorResult(
            # The count keeps a state evaluated again after a revert its own run key.
            run_requests=[dg.RunRequest(partition_key=state.revision, run_key=f"{state.digest()}:{requested}",
                                        tags={GOLDEN_TAG: state.revision, TRIGGER_TAG: "sensor"})],
            dynamic_partitions_requests=[] if state.revision in known else [golden_partitions.build_add_request([state.revision])],
            cursor=json.dumps({"evaluated": state.to_json(), "requested": requested}),
        )

    return golden_eval_sensor


def nightly_schedule_for(automation: AutomationConfig) -> dg.ScheduleDefinition:
    @dg.schedule(
        cron_schedule=automation.nightly_cron, job=ingest_sources_job, execution_timezone=automation.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="The nightly suite: ingest every configured source; the golden evaluation and the day's "
                    "monitoring follow through golden_eval_sensor and monitoring_after_evaluation.",
    )
    def nightly_full_suite(context: dg.ScheduleEvaluationContext, settings: PipelineSettings):
        config = settings.load()
        if not config.sources:
            return dg.SkipReason("no source configured")
        # One set of runs per tick: a second tick the same day (an hourly cron, a test's) is a new night.
        tick = context.scheduled_execution_time.strftime("%Y-%m-%dT%H:%M")
        existing = set(context.instance.get_dynamic_partitions(source_partitions.name))
        missing = [s for s in config.source_ids if s not in existing]
        if missing:
            context.instance.add_dynamic_partitions(source_partitions.name, missing)
        return [dg.RunRequest(partition_key=source_id, run_key=f"nightly:{tick}:{source_id}",
                              tags=source_tags(source_id, "schedule")) for source_id in config.source_ids]

    return nightly_full_suite


def monitoring_sensor_for(interval_s: int) -> dg.SensorDefinition:
    @dg.sensor(
        job=monitoring_job, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
        description="After each golden evaluation finishes, whatever its gate said (a regression must not hide "
                    "the day's drift), or once a night's ingestion settled with nothing to evaluate, samples the "
                    "day to monitor and writes the drift report: yesterday (UTC), or the last day of a recorded log.",
    )
    def monitoring_after_evaluation(context: dg.SensorEvaluationContext, settings: PipelineSettings):
        instance, config = context.instance, settings.load_current()
        night = latest_night(instance)
        # {"evaluation": run id followed, "night": schedule tick followed}; older versions kept the run id alone.
        seen = _cursor(context.cursor) or ({"evaluation": context.cursor, "night": night[0] if night else None}
                                           if context.cursor else {})
        records = instance.get_run_records(filters=dg.RunsFilter(job_name=golden_eval_job.name, statuses=FINISHED), limit=1)
        evaluation = records[0].dagster_run if records else None
        if evaluation is not None and evaluation.run_id != seen.get("evaluation"):
            day = monitoring_day(evaluation.tags, datetime.now(UTC), config.monitoring)
            return dg.SensorResult(
                run_requests=[dg.RunRequest(partition_key=day, run_key=f"monitor:{day}:{evaluation.run_id}",
                                            tags={DAY_TAG: day, TRIGGER_TAG: "sensor",
                                                  "rag_pipeline/after_evaluation": evaluation.run_id,
                                                  "rag_pipeline/evaluation_status": evaluation.status.value})],
                # The night this evaluation followed needs no second monitoring run.
                cursor=json.dumps({"evaluation": evaluation.run_id, "night": night[0] if night else seen.get("night")}),
            )
        if night is None or night[0] == seen.get("night"):
            return dg.SkipReason("no golden evaluation finished and no night settled since the last monitoring run")
        tick, settled = night
        if not settled:
            return dg.SkipReason(f"the night's ingestion (schedule tick {tick}) is still running")
        if config.golden_set is not None and config.golden_set.is_file():
            facts = night_facts(instance, config)
            if decide(facts).evaluate or facts.ingestion_in_flight or facts.evaluations_in_flight:
                return dg.SkipReason("the night changed what is served or evaluated: monitoring follows its evaluation")
        day = monitoring_day({}, datetime.now(UTC), config.monitoring)
        return dg.SensorResult(
            run_requests=[dg.RunRequest(partition_key=day, run_key=f"monitor:{day}:night:{tick}",
                                        tags={DAY_TAG: day, TRIGGER_TAG: "sensor", "rag_pipeline/after_night": tick})],
            cursor=json.dumps({"evaluation": seen.get("evaluation"), "night": tick}),
        )

    return monitoring_after_evaluation


def latest_night(instance: dg.DagsterInstance) -> tuple[str, bool] | None:
    """(the latest nightly schedule tick, whether all its runs finished), or None before the first night."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={TRIGGER_TAG: "schedule"}), limit=1)
    if not runs or TICK_TAG not in runs[0].tags:
        return None
    tick = runs[0].tags[TICK_TAG]
    of_tick = instance.get_runs(filters=dg.RunsFilter(tags={TICK_TAG: tick}))
    return tick, all(run.status in FINISHED for run in of_tick)


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


def automation_for(automation: AutomationConfig) -> tuple[list[dg.ScheduleDefinition], list[dg.SensorDefinition]]:
    """The schedule and the sensors, at the times the config gives."""
    interval = automation.sensor_interval_seconds
    return ([nightly_schedule_for(automation)],
            [source_change_sensor_for(interval), golden_eval_sensor_for(interval), monitoring_sensor_for(interval)])
