"""Each decision of the evaluation sensor (and of the monitoring that follows a night), on a real
Dagster instance holding runs, materializations and backfills made through its public API.

The night evaluates each settled state once: not before the first ingestion, not while an
ingestion of any source is queued or running whatever launched it, not after a run that changed
nothing served, and again when the served index, the golden revision or the config changed.
"""

from __future__ import annotations

import json
import uuid

import dagster as dg
import pytest
import yaml

from rag_pipeline.config import load_config
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.defs.automation import golden_eval_sensor_for, monitoring_sensor_for
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import PipelineSettings, embedder_for

golden_eval_sensor = golden_eval_sensor_for(60)
monitoring_after_evaluation = monitoring_sensor_for(60)
SOURCES = ("alpha", "beta")


@pytest.fixture
def night(tmp_path, write_config):
    """Two sources and a golden set; `night["config"]()` is the config as the file says now."""
    roots = {}
    for name in SOURCES:
        roots[name] = tmp_path / name
        roots[name].mkdir()
        (roots[name] / "a.md").write_text(f"# {name}\n\ntext\n")
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps({"id": "q", "question": "x", "reference": "y", "gold_docs": ["alpha:a.md"],
                                  "slice": "s", "split": "dev"}) + "\n")
    config = write_config(roots, golden_set=str(golden))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(source_partitions.name, list(SOURCES))
        yield {"instance": instance, "path": config.config_path, "golden": golden,
               "config": lambda: load_config(config.config_path)}


def _tick(night, cursor=None, sensor=golden_eval_sensor):
    settings = PipelineSettings(config_path=str(night["path"]))
    with dg.build_sensor_context(instance=night["instance"], cursor=cursor, resources={"settings": settings}) as context:
        return sensor(context)


def _settings(config) -> str:
    return settings_fingerprint(config.chunking, embedder_for(config.embedding).identity)


def _served(night, source: str, manifest_hash: str, settings: str | None = None) -> None:
    """A switch of `source` recorded as Dagster records it: a materialization of its search_index partition."""
    metadata = {"manifest_hash": manifest_hash, "index_settings": settings or _settings(night["config"]())}
    night["instance"].report_runless_asset_event(dg.AssetMaterialization("search_index", partition=source, metadata=metadata))


def _evaluated(night, index: dict[str, str], **changes) -> None:
    """An evaluation of the configured golden revision recorded as golden_eval records one."""
    from rag_pipeline.core.evaluation.golden.cases import file_revision

    config = night["config"]()
    metadata = {"config_fingerprint": config.retrieval_fingerprint(), "mode": config.retrieval.mode,
                "suite": "full (1 cases)", "index_state": dg.MetadataValue.json(index), **changes}
    night["instance"].report_runless_asset_event(
        dg.AssetMaterialization("golden_eval", partition=file_revision(night["golden"]), metadata=metadata))


def _run(night, job: str, status=dg.DagsterRunStatus.NOT_STARTED, tags: dict | None = None, assets=None) -> str:
    run = night["instance"].add_run(dg.DagsterRun(job_name=job, run_id=str(uuid.uuid4()), status=status,
                                                  tags=tags or {}, asset_selection=assets))
    return run.run_id


def _finish(night, run_id: str) -> None:
    instance = night["instance"]
    instance.report_run_canceled(instance.get_run_by_id(run_id))
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.CANCELED


def _edit_config(night, **sections) -> None:
    raw = yaml.safe_load(night["path"].read_text())
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    night["path"].write_text(yaml.safe_dump(raw))


def _skipped(result) -> str:
    assert isinstance(result, dg.SkipReason), result
    return result.skip_message


def test_first_start_with_nothing_ingested_waits_and_says_why(night):
    assert "alpha, beta never ingested" in _skipped(_tick(night))
    _served(night, "alpha", "h-alpha")
    assert "beta never ingested" in _skipped(_tick(night))


def test_both_sources_served_the_first_evaluation_starts(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    result = _tick(night)
    [request] = result.run_requests
    assert request.job_name is None and request.tags["rag_pipeline/trigger"] == "sensor"
    assert result.dynamic_partitions_requests[0].partition_keys == [request.partition_key]
    assert json.loads(result.cursor)["evaluated"]["index"] == {"alpha": "h-alpha", "beta": "h-beta"}
    # The next look, with nothing new, does not ask again.
    assert "already evaluated" in _skipped(_tick(night, result.cursor))


@pytest.mark.parametrize("launched_by", ["schedule", "ui_backfill", "command_line", "any_job_of_the_partition", "purge"])
def test_an_ingestion_in_flight_waits_whatever_launched_it(night, launched_by):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    run_id = {
        "schedule": lambda: _run(night, "ingest_sources", tags={"dagster/partition": "beta",
                                                                "rag_pipeline/trigger": "schedule"}),
        # A backfill the UI launched runs as __ASSET_JOB with its asset selection, and no tag of ours.
        "ui_backfill": lambda: _run(night, "__ASSET_JOB", dg.DagsterRunStatus.STARTED,
                                    {"dagster/partition": "beta", "dagster/backfill": "abcdefgh"},
                                    frozenset({dg.AssetKey("search_index"), dg.AssetKey("chunk_embeddings")})),
        "command_line": lambda: _run(night, "a_job_of_the_team", dg.DagsterRunStatus.STARTED,
                                     {"rag_pipeline/source": "beta", "rag_pipeline/trigger": "cli"}),
        "any_job_of_the_partition": lambda: _run(night, "reindex_everything", tags={"dagster/partition": "alpha"}),
        "purge": lambda: _run(night, "purge_removed_sources", dg.DagsterRunStatus.STARTED),
    }[launched_by]()
    reason = _skipped(_tick(night))
    assert reason.startswith("ingestion in flight") and run_id[:8] in reason
    _finish(night, run_id)
    assert len(_tick(night).run_requests) == 1


def test_runs_of_other_jobs_do_not_hold_the_evaluation_back(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    _run(night, "monitor_production", dg.DagsterRunStatus.STARTED, {"dagster/partition": "2026-11-20"})
    assert len(_tick(night).run_requests) == 1


def test_an_evaluation_in_flight_is_not_doubled(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    run_id = _run(night, "evaluate_golden_revision", dg.DagsterRunStatus.STARTED)
    assert "an evaluation is in flight" in _skipped(_tick(night)) and run_id[:8] in _skipped(_tick(night))


def test_a_no_op_ingest_does_not_evaluate_again(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    assert len(first.run_requests) == 1
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta"})
    # Every source ran again and served what it served: new materializations, the same manifest hashes.
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    assert "already evaluated" in _skipped(_tick(night, first.cursor))
    # Without the sensor's cursor (a cursor of an older version, a sensor reset), the latest
    # evaluation's metadata says what was measured.
    assert "already evaluated" in _skipped(_tick(night, json.dumps({"revision": "x", "index_event": 7})))
    assert "already evaluated" in _skipped(_tick(night))


def test_an_evaluation_by_the_command_line_counts_as_evaluated(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta", "gone": "h-gone"})  # a source since removed
    assert "already evaluated" in _skipped(_tick(night))
    # A pull-request subset, or another system's run file, measured something else.
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta"}, suite="pr (12 cases)")
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta"}, mode="run")
    assert "already evaluated" in _skipped(_tick(night))


def test_a_changed_source_triggers_one_evaluation_naming_it(night, caplog):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    _served(night, "beta", "h-beta-2")
    second = _tick(night, first.cursor)
    [request] = second.run_requests
    assert json.loads(second.cursor)["evaluated"]["index"]["beta"] == "h-beta-2"
    assert request.run_key != first.run_requests[0].run_key
    assert "already evaluated" in _skipped(_tick(night, second.cursor))
    # Back to what the first evaluation measured: a change since the last one, evaluated again.
    _served(night, "beta", "h-beta")
    third = _tick(night, second.cursor)
    assert len(third.run_requests) == 1 and third.run_requests[0].run_key not in {
        first.run_requests[0].run_key, second.run_requests[0].run_key}


def test_a_switch_recorded_by_an_observation_counts_as_served(night):
    # lifecycle.failed_documents_fail_partition: the switch committed, the partition is marked failed,
    # and an observation carries what is served.
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    observation = dg.AssetObservation("search_index", partition="beta", metadata={"manifest_hash": "h-beta-2"})
    night["instance"].report_runless_asset_event(observation)
    second = _tick(night, first.cursor)
    assert json.loads(second.cursor)["evaluated"]["index"]["beta"] == "h-beta-2"
    # An observation without a manifest hash (a failure's) says nothing of what is served.
    night["instance"].report_runless_asset_event(dg.AssetObservation("search_index", partition="beta",
                                                                     description="failed: the store is busy"))
    assert "already evaluated" in _skipped(_tick(night, second.cursor))


def test_a_golden_revision_change_triggers(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    night["golden"].write_text(night["golden"].read_text().replace('"question": "x"', '"question": "x again"'))
    second = _tick(night, first.cursor)
    [request] = second.run_requests
    assert request.partition_key != first.run_requests[0].partition_key
    assert second.dynamic_partitions_requests[0].partition_keys == [request.partition_key]


def test_a_retrieval_config_change_triggers_at_once(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    _edit_config(night, retrieval={"mode": "bm25"})
    second = _tick(night, first.cursor)
    assert len(second.run_requests) == 1
    assert json.loads(second.cursor)["evaluated"]["mode"] == "bm25"


def test_a_chunking_change_waits_for_the_reingestion_it_needs(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    first = _tick(night)
    _edit_config(night, chunking={"max_tokens": 64})
    # The served chunks were built with the old settings: measuring them under the new config's name would lie.
    reason = _skipped(_tick(night, first.cursor))
    assert "alpha, beta serve chunks built with other chunking" in reason
    for source in SOURCES:  # re-chunked: the same documents (manifest), new settings
        _served(night, source, f"h-{source}")
    assert len(_tick(night, first.cursor).run_requests) == 1


def test_a_source_whose_runs_fail_does_not_hold_the_night_back(night):
    # beta's only attempt failed (its folder vanished before its first run): alpha is evaluated, as served.
    _served(night, "alpha", "h-alpha")

    @dg.asset(name="search_index", partitions_def=source_partitions)
    def failing_search_index() -> None:
        raise dg.Failure("source 'beta': root does not exist")

    dg.materialize([failing_search_index], instance=night["instance"], partition_key="beta", raise_on_error=False)
    result = _tick(night)
    [request] = result.run_requests
    assert json.loads(result.cursor)["evaluated"]["index"]["alpha"] == "h-alpha"


def test_nothing_served_anywhere_is_not_evaluated(night):
    @dg.asset(name="search_index", partitions_def=source_partitions)
    def failing_search_index() -> None:
        raise dg.Failure("no root")

    for source in SOURCES:
        dg.materialize([failing_search_index], instance=night["instance"], partition_key=source, raise_on_error=False)
    assert "no source serves anything yet" in _skipped(_tick(night))


def _night_runs(night, tick: str, status=dg.DagsterRunStatus.SUCCESS) -> list[str]:
    return [_run(night, "ingest_sources", status, {"dagster/partition": source, "rag_pipeline/trigger": "schedule",
                                                   "dagster/tick": tick}) for source in SOURCES]


def test_a_quiet_night_is_monitored_once_and_a_changed_one_after_its_evaluation(night):
    for source in SOURCES:
        _served(night, source, f"h-{source}")
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta"})
    before = _tick(night, sensor=monitoring_after_evaluation)
    assert "no night settled" in _skipped(before)
    # A night whose runs changed nothing: no evaluation is due, yesterday is monitored all the same.
    running = _night_runs(night, "101", dg.DagsterRunStatus.STARTED)
    assert "still running" in _skipped(_tick(night, sensor=monitoring_after_evaluation))
    for run_id in running:
        _finish(night, run_id)
    quiet = _tick(night, sensor=monitoring_after_evaluation)
    [request] = quiet.run_requests
    assert request.tags["rag_pipeline/after_night"] == "101" and request.run_key.endswith(":night:101")
    assert "no night settled" in _skipped(_tick(night, quiet.cursor, sensor=monitoring_after_evaluation))
    # The next night changed a source: monitoring waits for the evaluation, then follows it once.
    _night_runs(night, "102")
    _served(night, "beta", "h-beta-2")
    assert "monitoring follows its evaluation" in _skipped(_tick(night, quiet.cursor, sensor=monitoring_after_evaluation))
    evaluation = _run(night, "evaluate_golden_revision", dg.DagsterRunStatus.SUCCESS)
    _evaluated(night, {"alpha": "h-alpha", "beta": "h-beta-2"})
    followed = _tick(night, quiet.cursor, sensor=monitoring_after_evaluation)
    [request] = followed.run_requests
    assert request.tags["rag_pipeline/after_evaluation"] == evaluation
    assert "no night settled" in _skipped(_tick(night, followed.cursor, sensor=monitoring_after_evaluation))


LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }
"""


def test_a_backfill_still_requesting_runs_waits(night, monkeypatch):
    """A backfill launched as the UI launches it (GraphQL `launchPartitionBackfill`, here against the
    pipeline's code location in a server process), before any of its runs exists: the daemon that
    would request them is not running, so it stays REQUESTED."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    from rag_pipeline.definitions import __file__ as definitions_file

    for source in SOURCES:
        _served(night, source, f"h-{source}")
    monkeypatch.setenv("RAG_PIPELINE_CONFIG", str(night["path"]))
    with define_out_of_process_context(definitions_file, "defs", night["instance"]) as context:
        launched = execute_dagster_graphql(context, LAUNCH_BACKFILL, {"params": {
            "partitionNames": ["beta"], "assetSelection": [{"path": [name]} for name in (
                "source_documents", "parsed_documents", "document_chunks", "chunk_embeddings", "search_index")]}})
    answer = launched.data["launchPartitionBackfill"]
    assert answer["__typename"] == "LaunchBackfillSuccess", answer
    assert night["instance"].get_runs() == []  # no run of it exists yet
    reason = _skipped(_tick(night))
    assert f"backfill {answer['backfillId']} still requesting runs" in reason
