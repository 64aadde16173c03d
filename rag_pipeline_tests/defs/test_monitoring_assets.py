"""production_sample and drift_report materialized for a day partition, twice: same sample, same report."""

import dagster as dg

from rag_pipeline.cli.runner import ingest, monitor
from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.monitoring.sampling import read_query_log
from rag_pipeline.core.storage import open_store

QUERY_LOG = PROJECT_ROOT / "data" / "query_log"
GOLDEN = PROJECT_ROOT / "data" / "golden" / "golden_set.jsonl"


def test_same_day_gives_the_same_sample_and_report(tmp_path, write_config):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "refunds.md").write_text("# Refunds\n\nRefunds are issued within 14 days.\n")
    (root / "sso.md").write_text("# SSO\n\nSet up single sign-on with Okta or Entra ID.\n")
    config = write_config({"kb": root}, golden_set=str(GOLDEN),
                          monitoring={"query_log": str(QUERY_LOG), "start_date": "2026-11-10", "sample_size": 25, "days_back": 2, "bootstrap_samples": 200})
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    first = monitor(config, instance, "2026-11-20")
    assert first.success, first.error
    store = open_store(config.storage)
    sample_first = [(r["query"], r["log_source"], r["top_docs"]) for r in store.records.sample_rows("2026-11-20")]
    second = monitor(config, instance, "2026-11-20")
    sample_second = [(r["query"], r["log_source"], r["top_docs"]) for r in store.records.sample_rows("2026-11-20")]
    assert len(sample_first) == 25 and sample_first == sample_second
    for key in ("mmd2_distance", "drift_threshold", "no_result_rate", "p95_latency_ms", "lexical_dense_overlap"):
        assert key in first.metadata, key
    assert first.metadata["mmd2_distance"] == second.metadata["mmd2_distance"]
    assert first.metadata["drift_threshold"] == second.metadata["drift_threshold"]
    assert first.metadata["malformed_lines"] == len(read_query_log(QUERY_LOG).malformed)
    assert (tmp_path / "reports" / "drift-2026-11-20.png").stat().st_size > 10_000
    report = (tmp_path / "reports" / "drift-2026-11-20.md").read_text()
    assert "Candidates for new golden cases" in report and "![overview](drift-2026-11-20.png)" in report
    assert set(first.checks) == {"drift_within_threshold"}


def test_a_day_without_traffic_fails_the_drift_step_with_the_reason(tmp_path, write_config):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "refunds.md").write_text("# Refunds\n\nRefunds are issued within 14 days.\n")
    config = write_config({"kb": root}, golden_set=str(GOLDEN),
                          monitoring={"query_log": str(QUERY_LOG), "start_date": "2026-11-10", "bootstrap_samples": 200})
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    run = monitor(config, instance, "2026-11-30")  # the sample log ends on 2026-11-29
    assert not run.success
    assert run.metadata["sampled_queries"] == 0  # the sample itself is recorded: zero queries that day
    assert "drift_report" in run.error and "holds 0 queries" in run.error and "query log" in run.error
