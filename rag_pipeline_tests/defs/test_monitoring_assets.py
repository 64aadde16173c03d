"""production_sample and drift_report materialized for a day partition, twice: same sample, same report."""

import json
import re

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
    assert "## Coverage gaps" in report and "questions examined" in report.split("## Coverage gaps")[1]
    assert set(first.checks) == {"drift_within_threshold", "no_large_new_gap"}


def test_a_new_off_corpus_topic_warns_on_coverage_gaps_and_reaches_the_report(tmp_path, write_config):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "refunds.md").write_text("# Refunds\n\nRefunds are issued within 14 days of the request.\n")
    (root / "sso.md").write_text("# SSO\n\nSet up single sign-on with Okta or Entra ID.\n")
    log = tmp_path / "query_log"
    log.mkdir()
    day = "2026-11-20"
    # Repeated questions: the same words, the same topic, whatever the embedder.
    asked = ["how long do refunds take", "refunds within 14 days", "single sign-on with okta"] * 4 + \
        ["analytics add-on quarterly pricing"] * 5
    (log / f"{day}.jsonl").write_text("".join(json.dumps(
        {"timestamp": f"{day}T{8 + i % 10:02d}:{i:02d}:00Z", "query": q, "tenant": "acme"}) + "\n"
        for i, q in enumerate(asked)))
    golden = tmp_path / "golden.jsonl"
    cases = [("when are refunds issued", True), ("refunds within 14 days of the request", True),
             ("single sign-on with okta", True), ("set up sso with entra id", True), ("refund request", True),
             ("parking at the office", False), ("yearly staff bonus", False), ("dogs at work", False)]
    golden.write_text("".join(json.dumps({"id": f"c{i}", "question": q, "reference": "r", "slice": "s", "split": "dev",
                                          "gold_docs": ["kb:refunds.md"] if a else [], "answerable": a}) + "\n"
                              for i, (q, a) in enumerate(cases)))
    config = write_config({"kb": root}, golden_set=str(golden), monitoring={
        "query_log": str(log), "start_date": "2026-11-10", "bootstrap_samples": 200, "gap_share_warn": 0.2})
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    run = monitor(config, instance, day)
    assert run.success, run.error
    assert run.checks["no_large_new_gap"] is False  # a WARN: the run still succeeds
    gaps = run.metadata["coverage_gaps"]
    assert gaps[0]["count"] == 5 and gaps[0]["share"] == round(5 / len(asked), 4) and gaps[0]["first_seen"] == day
    assert "analytics" in gaps[0]["label"] and gaps[0]["tenants"] == ["acme"] and gaps[0]["closed_by"] is None
    assert [g["count"] for g in gaps] == sorted((g["count"] for g in gaps), reverse=True)
    check = instance.get_latest_materialization_event(dg.AssetKey("coverage_gaps"))
    assert check.asset_materialization.partition == day
    report = (tmp_path / "reports" / f"drift-{day}.md").read_text()
    assert "analytics add-on quarterly pricing" in report.split("## Coverage gaps")[1]
    assert (tmp_path / "reports" / f"gaps-{day}.png").stat().st_size > 5_000


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


HOSTILE_QUERIES = ["<img src=x onerror=alert(1)> quarterly", "[link](javascript:alert(2)) payroll export",
                   "| table | cell | breaker", "<script>alert(3)</script> vendor", "`code` *bold* # heading"]
# A link or image other than our own embedded plots is live markup too.
LIVE_MARKUP = re.compile(r"<script|<img|onerror\s*=|javascript:|(?<!\\)\]\((?!data:image/png;base64,)", re.I)


def test_hostile_queries_are_escaped_wherever_dagster_renders_markdown(tmp_path, write_config):
    # Production queries are typed by anyone: as drift candidates they reach the report (markdown, rendered
    # by the UI) and the candidates tables (Dagster tables, shown by the UI as text).
    root = tmp_path / "kb"
    root.mkdir()
    (root / "refunds.md").write_text("# Refunds\n\nRefunds are issued within 14 days.\n")
    log = tmp_path / "query_log"
    log.mkdir()
    day = "2026-11-20"
    lines = [{"timestamp": f"{day}T{8 + i % 10:02d}:{i:02d}:00Z", "query": q, "tenant": None}
             for i, q in enumerate(HOSTILE_QUERIES * 4 + ["how long do refunds take", "refund window"] * 3)]
    (log / f"{day}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = write_config({"kb": root}, golden_set=str(GOLDEN), monitoring={
        "query_log": str(log), "start_date": "2026-11-10", "bootstrap_samples": 200, "candidates": 15})
    instance = dg.DagsterInstance.ephemeral()
    assert ingest(config, instance)[0].success
    run = monitor(config, instance, day)
    assert run.success, run.error
    event = instance.get_latest_materialization_event(dg.AssetKey("drift_report"))
    metadata = event.asset_materialization.metadata
    markdown = {k: v.value for k, v in metadata.items() if isinstance(v, dg.MarkdownMetadataValue)}
    assert {"report", "overview", "unseen_terms"} <= set(markdown)
    for key, text in markdown.items():
        found = LIVE_MARKUP.search(text)
        assert not found, (key, text[max(found.start() - 200, 0):found.end() + 50])
        for block in re.split(r"\n\s*\n", text):  # every table row keeps its columns
            rows = [line for line in block.splitlines() if line.startswith("|")]
            assert len({len(re.findall(r"(?<!\\)\|", row)) for row in rows}) <= 1, (key, block)
    report = markdown["report"]
    assert "&lt;img src=x onerror&#61;alert(1)&gt; quarterly" in report  # shown, escaped
    assert "\\[link\\](javascript&#58;alert(2)) payroll export" in report
    assert "\\| table \\| cell \\| breaker" in report
    # The table view shows cells as text, so they hold the query as it was typed.
    candidates = metadata["candidates"]
    assert isinstance(candidates, dg.TableMetadataValue)
    assert set(HOSTILE_QUERIES) <= {record.data["query"] for record in candidates.records}
    # Their scores stay numbers the table view sorts, rounded to what a person compares by eye.
    scores = [record.data[c] for record in candidates.records for c in ("excess_density", "distance")]
    assert scores and all(isinstance(s, float) and s == round(s, 4) for s in scores)
    assert {c.name: c.type for c in candidates.schema.columns}["distance"] == "float"
