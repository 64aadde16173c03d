"""The source-change sensor, the monitoring sensor and the nightly schedule, in Dagster's test contexts
(the evaluation sensor's decisions: test_night_decisions.py)."""

import json
from datetime import UTC, datetime

import dagster as dg
import pytest

from rag_pipeline.config import AutomationConfig
from rag_pipeline.definitions import build_definitions
from rag_pipeline.defs.automation import (
    monitoring_sensor_for,
    nightly_schedule_for,
    source_change_sensor_for,
)
from rag_pipeline.defs.resources import PipelineSettings

source_change_sensor = source_change_sensor_for(60)
monitoring_after_evaluation = monitoring_sensor_for(60)
nightly_full_suite = nightly_schedule_for(AutomationConfig())


@pytest.fixture
def two_sources(tmp_path, write_config):
    roots = {}
    for name in ("alpha", "beta"):
        roots[name] = tmp_path / name
        roots[name].mkdir()
        (roots[name] / "a.md").write_text(f"# {name}\n\ntext\n")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"id": "q", "question": "x", "reference": "y", "gold_docs": ["alpha:a.md"],
                                  "slice": "s", "split": "dev"}) + "\n")
    config = write_config(roots, golden_set=str(golden))
    return config, roots, golden


def _tick(instance, config, cursor=None):
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"settings": PipelineSettings.from_config(config)}) as context:
        result = source_change_sensor(context)
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def test_source_sensor_new_changed_unchanged_removed(two_sources, write_config):
    config, roots, _ = two_sources
    with dg.instance_for_test() as instance:
        first = _tick(instance, config)
        assert sorted(r.partition_key for r in first.run_requests) == ["alpha", "beta"]
        assert sorted(instance.get_dynamic_partitions("sources")) == ["alpha", "beta"]

        unchanged = _tick(instance, config, first.cursor)
        assert unchanged.run_requests == [] and "no source changed" in unchanged.skip_reason.skip_message

        (roots["beta"] / "b.md").write_text("# new page\n")
        changed = _tick(instance, config, unchanged.cursor)
        assert [r.partition_key for r in changed.run_requests] == ["beta"]

        only_alpha = write_config({"alpha": roots["alpha"]})
        removed = _tick(instance, only_alpha, changed.cursor)
        purge = [r for r in removed.run_requests if r.job_name == "purge_removed_sources"]
        assert len(purge) == 1 and purge[0].run_config["ops"]["purge_sources"]["config"]["source_ids"] == ["beta"]
        assert instance.get_dynamic_partitions("sources") == ["alpha"]


def test_nightly_schedule_requests_every_source_partition(two_sources):
    config, _, _ = two_sources
    with dg.instance_for_test() as instance:
        # Entered and closed before the instance goes: a context left to the garbage collector
        # later restores Dagster's state storage of the disposed test instance.
        with dg.build_schedule_context(
            instance=instance, scheduled_execution_time=datetime(2026, 12, 1, 2, 0),
            resources={"settings": PipelineSettings.from_config(config)},
        ) as context:
            requests = nightly_full_suite(context)
        assert [r.partition_key for r in requests] == ["alpha", "beta"]
        assert requests[0].run_key == "nightly:2026-12-01T02:00:alpha"
        assert sorted(instance.get_dynamic_partitions("sources")) == ["alpha", "beta"]


def test_definitions_list_the_sensors_schedule_and_jobs(two_sources):
    config, _, _ = two_sources
    defs = build_definitions(config)
    assert {s.name for s in defs.sensors} == {"source_change_sensor", "golden_eval_sensor", "monitoring_after_evaluation"}
    assert {s.name for s in defs.schedules} == {"nightly_full_suite"}
    # (defs.get_repository_def() would leave Dagster's global load context bound to a test instance.)
    assert {j.name for j in defs.jobs} == {"ingest_sources", "evaluate_golden_revision", "purge_removed_sources", "monitor_production",
                                           "restore_index_state", "disable_source", "unpin_source"}


def test_the_nightly_monitoring_samples_the_last_complete_day():
    from datetime import UTC, datetime, timedelta, timezone

    from rag_pipeline.defs.automation import monitoring_day
    from rag_pipeline.defs.common import DAY_TAG as MONITORING_DAY_TAG

    two_am = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    assert monitoring_day({}, two_am) == "2026-11-29"
    # The same instant seen from UTC+9 is still 11-30 02:00 UTC: the day is a UTC day.
    assert monitoring_day({}, two_am.astimezone(timezone(timedelta(hours=9)))) == "2026-11-29"
    assert monitoring_day({MONITORING_DAY_TAG: "2026-11-20"}, two_am) == "2026-11-20"


def test_the_sensor_closes_runs_whose_process_died(two_sources):
    import os
    import subprocess
    import uuid

    from rag_pipeline.defs.runs import process_tags

    config, _, _ = two_sources
    gone = subprocess.Popen(["true"])
    gone.wait()
    with dg.instance_for_test() as instance:
        def started_run(pid: int) -> str:
            tags = {**process_tags(), "rag_pipeline/pid": str(pid), "dagster/partition": "alpha"}
            run = instance.add_run(dg.DagsterRun(job_name="ingest_sources", run_id=str(uuid.uuid4()),
                                                 status=dg.DagsterRunStatus.STARTED, tags=tags))
            return run.run_id

        dead, alive = started_run(gone.pid), started_run(os.getpid())
        _tick(instance, config)
        assert instance.get_run_by_id(dead).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive).status == dg.DagsterRunStatus.STARTED
        [failure] = [e for e in instance.all_logs(dead) if e.dagster_event and e.dagster_event.is_run_failure]
        assert f"(pid {gone.pid}) is gone" in failure.dagster_event.message


def test_every_job_sensor_and_schedule_says_what_it_does(two_sources):
    defs = build_definitions(two_sources[0])
    for item in [*defs.sensors, *defs.schedules, *defs.jobs]:
        assert len(item.description or "") > 40, item.name


def test_a_recorded_log_is_monitored_on_its_last_day_a_live_one_yesterday():
    from rag_pipeline.config import load_config
    from rag_pipeline.defs.automation import monitoring_day
    from rag_pipeline_tests.conftest import SAMPLE_CONFIG

    sample = load_config(SAMPLE_CONFIG).monitoring
    now = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    assert sample.recorded_log and monitoring_day({}, now, sample) == "2026-11-29"
    live = sample.model_copy(update={"recorded_log": False})
    assert monitoring_day({}, now, live) == "2026-11-30"  # no traffic that day: drift_report fails, saying so


def test_daily_partitions_start_at_the_configured_day_without_reading_the_log(tmp_path):
    from datetime import date

    from rag_pipeline.config import ConfigError, MonitoringConfig, load_config
    from rag_pipeline.defs.partitions import daily_partitions
    from rag_pipeline_tests.conftest import SAMPLE_CONFIG

    monitoring = load_config(SAMPLE_CONFIG).monitoring
    assert daily_partitions(monitoring, today=date(2026, 12, 1)).start.date() == date(2026, 11, 10)
    # The log is not read: a folder that does not exist yet gives the same partitions.
    elsewhere = monitoring.model_copy(update={"query_log": tmp_path / "not-yet-written"})
    assert daily_partitions(elsewhere, today=date(2026, 12, 1)).start.date() == date(2026, 11, 10)
    assert daily_partitions(MonitoringConfig(), today=date(2026, 12, 1)).start.date() == date(2026, 12, 1)
    # A query log without a first day is a config error that says what to add.
    (tmp_path / "pipeline.yaml").write_text(f"monitoring:\n  query_log: {tmp_path}\n")
    with pytest.raises(ConfigError, match="monitoring.start_date is required with a query_log"):
        load_config(tmp_path / "pipeline.yaml")


def test_assets_carry_owners_kinds_code_references_and_the_freshness_policy(two_sources):
    from datetime import timedelta

    defs = build_definitions(two_sources[0])
    graph = defs.resolve_asset_graph()
    index = graph.get(dg.AssetKey("search_index"))
    assert index.freshness_policy.fail_window.to_timedelta() == timedelta(hours=24)  # lifecycle.max_staleness_hours
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.owners == ["team:rag-platform"] and node.kinds, key
        assert "dagster/code_references" in node.metadata, key


def test_the_nightly_schedule_runs_at_the_configured_time(two_sources):
    config = two_sources[0].model_copy(update={"automation": AutomationConfig(nightly_cron="30 23 * * 1-5",
                                                                             timezone="Europe/Berlin")})
    [schedule] = build_definitions(config).schedules
    assert schedule.cron_schedule == "30 23 * * 1-5" and schedule.execution_timezone == "Europe/Berlin"


def test_a_cron_of_the_wrong_shape_is_a_config_error():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="nightly_cron"):
        AutomationConfig(nightly_cron="every night")


def _finished_evaluation(instance, status: dg.DagsterRunStatus, tags: dict | None = None) -> str:
    import uuid

    run = instance.add_run(dg.DagsterRun(job_name="evaluate_golden_revision", run_id=str(uuid.uuid4()), status=status,
                                         tags=tags or {}))
    return run.run_id


def test_monitoring_follows_an_evaluation_whatever_its_gate_said(two_sources):
    config = two_sources[0]
    resources = {"settings": PipelineSettings.from_config(config)}

    def tick(instance, cursor=None):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
            return monitoring_after_evaluation(context)

    with dg.instance_for_test() as instance:
        nothing = tick(instance)
        assert isinstance(nothing, dg.SkipReason) and "no golden evaluation finished" in nothing.skip_message
        # The gate failed: the evaluation run is red, and the day is monitored all the same.
        failed = _finished_evaluation(instance, dg.DagsterRunStatus.FAILURE, {"rag_pipeline/day": "2026-11-20"})
        after_failure = tick(instance)
        [request] = after_failure.run_requests
        assert request.partition_key == "2026-11-20" and request.tags["rag_pipeline/evaluation_status"] == "FAILURE"
        assert request.tags["rag_pipeline/after_evaluation"] == failed
        again = tick(instance, after_failure.cursor)
        assert isinstance(again, dg.SkipReason) and "no golden evaluation finished" in again.skip_message
        # A cursor written by an older version (the run id alone) is read as the evaluation followed.
        assert isinstance(tick(instance, failed), dg.SkipReason)
        passed = _finished_evaluation(instance, dg.DagsterRunStatus.SUCCESS, {"rag_pipeline/day": "2026-11-21"})
        [request] = tick(instance, after_failure.cursor).run_requests
        assert request.partition_key == "2026-11-21" and request.run_key.endswith(passed)
