"""What the on-call person reads in the UI, read back from the instance as the webserver serves it:
reasons of several lines as lines, floats rounded in tables, what each source serves and why, and
a source with failed documents that can be retried as a failed partition when the team asks for it."""

from __future__ import annotations

import json
import shutil

import dagster as dg
import yaml

from rag_pipeline.cli.runner import evaluate_golden, ingest
from rag_pipeline.config import load_config
from rag_pipeline.core.outcomes import Status
from rag_pipeline.core.storage import open_store
from rag_pipeline.defs.metadata import table
from rag_pipeline_tests.conftest import write_tree

PAGES = {"a.md": "# Refunds\n\nRefunds take fourteen days.\n", "b.md": "# Travel\n\nBook travel two weeks ahead.\n"}


def _golden(path, lines: list[dict]):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _step_failure(instance: dg.DagsterInstance, run_id: str, step: str):
    [event] = [e.dagster_event for e in instance.all_logs(run_id)
               if e.dagster_event and e.dagster_event.is_step_failure and e.dagster_event.step_key == step]
    return event.step_failure_data.user_failure_data


def test_a_reason_of_several_lines_reads_as_lines(tmp_path, write_config):
    golden = _golden(tmp_path / "golden.jsonl", [
        {"id": "q1", "question": "", "gold_docs": ["kb:a.md"]},
        {"id": "q2\x1b[31m", "question": "refunds?"},
    ])
    config = write_config({"kb": write_tree(tmp_path / "kb", PAGES)}, golden_set=str(golden))
    instance = dg.DagsterInstance.ephemeral()
    assert all(run.success for run in ingest(config, instance))
    evaluation = evaluate_golden(config, instance)
    assert not evaluation.measured
    [run] = instance.get_runs(filters=dg.RunsFilter(job_name="evaluate_golden_revision"))
    failure = _step_failure(instance, run.run_id, "golden_set")
    # The step's failure, as the run page shows it: the headline, then one problem per line.
    lines = failure.description.split("\n")
    assert lines[0].startswith("golden set ") and len(lines) >= 3, failure.description
    assert "\\n" not in failure.description and "\x1b" not in failure.description
    assert "\\u001b" in failure.description  # a control character stays escaped
    assert failure.metadata["reason"].value == failure.description
    # The partition's observation says the same, and the runs list's tag holds it on one line.
    [observation] = instance.fetch_observations(dg.AssetKey("golden_set"), limit=1).records
    assert observation.asset_observation.description == f"failed: {failure.description}"
    tag = instance.get_run_by_id(run.run_id).tags["rag_pipeline/failure"]
    assert "\n" not in tag and " / " in tag and tag.startswith("golden_set: golden set ")


def test_tables_keep_numbers_numeric_rounded_and_text_as_lines():
    rows = [{"score": 0.123456789, "count": 3, "query": "line one\nline two\ttab\x1b[2J"},
            {"score": 2.0, "count": 4, "query": "plain"}]
    value = table(rows, ["score", "count", "query"])
    kinds = {column.name: column.type for column in value.schema.columns}
    assert kinds == {"score": "float", "count": "int", "query": "string"}
    first = value.records[0].data
    assert first["score"] == 0.1235 and first["count"] == 3
    assert first["query"] == "line one\nline two\ttab\\u001b[2J"


def test_the_sources_table_says_what_each_source_serves_and_why(tmp_path, write_config):
    roots = {name: write_tree(tmp_path / name, PAGES) for name in ("kept", "vanished", "gone_unseen")}
    golden = _golden(tmp_path / "golden.jsonl", [{"id": "q1", "question": "how long do refunds take?",
                                                    "reference": "Fourteen days.", "gold_docs": ["kept:a.md"]}])
    config = write_config(roots, golden_set=str(golden))
    instance = dg.DagsterInstance.ephemeral()
    assert all(run.success for run in ingest(config, instance))
    # One folder vanishes and its run fails; another vanishes with no run since.
    shutil.rmtree(roots["vanished"])
    [failed] = ingest(config, instance, source_ids=["vanished"])
    assert not failed.success
    shutil.rmtree(roots["gone_unseen"])
    evaluation = evaluate_golden(config, instance)
    assert evaluation.measured, evaluation.error
    event = instance.get_latest_materialization_event(dg.AssetKey("golden_eval"))
    sources = {r.data["source"]: r.data for r in event.asset_materialization.metadata["sources"].records}
    assert sources["kept"]["served"].startswith("current (switched ")
    vanished = sources["vanished"]["served"]
    assert vanished.startswith("served from the version of ") and "; latest run failed: source 'vanished'" in vanished
    assert "does not exist" in vanished
    assert sources["gone_unseen"]["served"].endswith(f"its folder {roots['gone_unseen']} is gone (no run has failed on it yet)")
    assert {s["queryable_documents"] for s in sources.values()} == {2}  # the last good versions stay served
    # The ledger keeps the failure with the source until its next committed switch.
    store = open_store(config.storage)
    assert "does not exist" in store.ledger.last_failure("vanished") and store.ledger.last_failure("kept") is None
    roots["vanished"] = write_tree(tmp_path / "vanished", PAGES)
    assert all(run.success for run in ingest(config, instance, source_ids=["vanished"]))
    assert store.ledger.last_failure("vanished") is None


def test_failed_documents_mark_the_partition_failed_only_when_asked(tmp_path):
    pages = {**PAGES, "broken.md": b"# Broken\n\ncaf\xe9 in latin-1\n"}
    root = write_tree(tmp_path / "kb", pages)
    for asked in (False, True):
        (tmp_path / f"{asked}").mkdir()
        path = tmp_path / f"{asked}" / "pipeline.yaml"  # a file of its own: each deployment reads its config once
        path.write_text(yaml.safe_dump({
            "sources": [{"name": "kb", "path": str(root)}], "embedding": {"kind": "hashing"},
            "storage": {"path": str(tmp_path / f"{asked}" / "index.duckdb")},
            "lifecycle": {"failed_documents_fail_partition": asked}}))
        config = load_config(path)
        instance = dg.DagsterInstance.ephemeral()
        [run] = ingest(config, instance, force=True)
        status = instance.get_status_by_partition(dg.AssetKey("search_index"), ["kb"],
                                                  dg.DynamicPartitionsDefinition(name="sources"))["kb"]
        served = {d["doc_id"] for d in open_store(config.storage).served.indexed_documents("kb")}
        # Either way the switch committed: the good pages are served, the broken one failed alone.
        assert served == {"kb:a.md", "kb:b.md"} and [f["doc_id"] for f in run.failures] == ["kb:broken.md"]
        assert run.counts["queryable"] == 2
        if not asked:
            assert run.success and status == dg.AssetPartitionStatus.MATERIALIZED
            continue
        # Asked: a failed partition, which the UI's "Failed" selection retries; the reason says the switch stands.
        assert not run.success and status == dg.AssetPartitionStatus.FAILED
        assert "the switch committed" in run.error and "failed_documents_fail_partition" in run.error
        [dagster_run] = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": "kb"}))
        failure = _step_failure(instance, dagster_run.run_id, "search_index")
        assert failure.metadata["outcome"].value["status"] == Status.INCOMPLETE
        # What is served is recorded where the evaluation sensor reads it: an observation with its manifest hash.
        [observation] = instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("search_index"), asset_partitions=["kb"]), limit=1).records
        manifest = open_store(config.storage).served.manifest_hash("kb")
        assert observation.asset_observation.metadata["manifest_hash"].value == manifest
