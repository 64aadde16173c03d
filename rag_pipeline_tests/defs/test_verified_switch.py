"""In Dagster: a refused switch is a red run with its documents named, and the partition keeps its
last materialization; failed documents are a WARN check and one warning line each."""

import dagster as dg
import pytest

from rag_pipeline.definitions import build_definitions
from rag_pipeline.defs.ingestion import ingestion_assets, search_index
from rag_pipeline.defs.resources import resources_for
from rag_pipeline_tests.conftest import write_tree

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds are issued within 14 days of the request.\n",
    "invoices.md": "# Invoices\n\nInvoices are sent on the first day of each month.\n",
}


@pytest.fixture
def setup(tmp_path, write_config):
    root = write_tree(tmp_path / "kb", PAGES)
    config = write_config({"kb": root})
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("sources", ["kb"])
    resources = resources_for(config)  # the config's fast hashing embedder
    return root, config, instance, resources


def _materialize(setup, selection=None):
    _, _, instance, resources = setup
    return dg.materialize(ingestion_assets, selection=selection, instance=instance, resources=resources,
                          partition_key="kb", raise_on_error=False)


def test_a_refused_switch_is_red_names_its_documents_and_keeps_the_partition(setup):
    root, _, instance, _ = setup
    assert _materialize(setup).success
    first = instance.get_latest_materialization_event(search_index.key)
    (root / "payroll.md").write_text("# Payroll\n\nPayroll runs twice a month.\n")
    # The stages up to chunks, then search_index alone: the new page would reach the index without a vector.
    assert _materialize(setup, selection=[a.key for a in ingestion_assets[:3]]).success
    result = _materialize(setup, selection=[search_index.key])
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "switch refused, the previous version of 'kb' stays served" in failure.step_failure_data.error.message
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not checks["coverage"].passed and "kb:payroll.md" in checks["coverage"].description
    assert checks["deletions_propagated"].passed
    # No materialization for the refused version: the partition still shows the first run's.
    assert instance.get_latest_materialization_event(search_index.key).run_id == first.run_id


def test_failed_documents_are_a_warn_check_and_a_warning_each(setup):
    root, _, instance, _ = setup
    (root / "broken.md").write_bytes(b"\xff\xfe\x00 not text")
    (root / "empty.md").write_bytes(b"")
    result = _materialize(setup)
    assert result.success  # a bad document fails alone: the run is green...
    check = next(e for e in result.get_asset_check_evaluations() if e.check_name == "no_failed_documents")
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN  # ...with a warning
    assert "2 document(s) failed (2 in this run)" in check.description
    # A table with a schema (the UI's table view), ids as plain text.
    failures = check.metadata["failures"].value
    assert [c.name for c in failures.schema.columns] == ["doc_id", "stage", "reason", "since"]
    assert sorted(r.data["doc_id"] for r in failures.records) == ["kb:broken.md", "kb:empty.md"]
    run = instance.get_run_by_id(result.run_id)
    assert run.tags["rag_pipeline/failed_documents"] == "2"  # visible in the runs list
    warnings = [e.user_message for e in instance.all_logs(result.run_id)
                if e.level == 30 and "document failed" in (e.user_message or "")]
    assert len(warnings) == 2 and any("kb:empty.md" in w and "empty file" in w for w in warnings)


def test_every_check_is_declared_with_the_definitions(write_config, tmp_path):
    defs = build_definitions(write_config({"kb": tmp_path}))
    specs = {k.name for k in defs.resolve_asset_graph().asset_check_keys if k.asset_key == search_index.key}
    assert specs == {"coverage", "deletions_propagated", "sources_fresh", "no_failed_documents", "served_as_configured"}


def test_the_checks_say_whether_the_proof_was_full_or_incremental_and_a_run_can_ask_for_a_full_one(setup):
    root, _, instance, resources = setup

    def proofs(result):
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        return {name: (checks[name].metadata["proof"].value, checks[name].description)
                for name in ("coverage", "deletions_propagated")}

    first = proofs(_materialize(setup))
    assert {scope for scope, _ in first.values()} == {"full"}  # the source's first switch
    (root / "refunds.md").write_text("# Refunds\n\nRefunds are issued within 30 days.\n")
    second = _materialize(setup)
    assert {scope for scope, _ in proofs(second).values()} == {"incremental"}
    assert all("incremental proof" in text for _, text in proofs(second).values())
    materialized = instance.get_latest_materialization_event(search_index.key).asset_materialization
    assert materialized.metadata["proof"].value == "incremental"
    asked = dg.materialize(ingestion_assets, instance=instance, resources=resources, partition_key="kb",
                           run_config={"ops": {"search_index": {"config": {"full_proof": True}}}})
    checks = {e.check_name: e for e in asked.get_asset_check_evaluations()}
    assert checks["coverage"].metadata["proof"].value == "full"
    assert "full_proof: true" in checks["coverage"].metadata["proof_reason"].value
    nightly = dg.materialize(ingestion_assets, instance=instance, resources=resources, partition_key="kb",
                             tags={"rag_pipeline/trigger": "schedule"})
    checks = {e.check_name: e for e in nightly.get_asset_check_evaluations()}
    assert checks["coverage"].metadata["proof_reason"].value == "the nightly schedule's run"
