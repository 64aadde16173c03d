"""Monitoring assets, daily partitions: the production sample, coverage gaps and the drift report.

Built per deployment: the daily partitions start at the configured date or the query log's first
day, so the UI shows the days that can have traffic, not years of empty ones.
"""

from datetime import date

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.faults import hold_point
from rag_pipeline.core.monitoring.daily import drift_day, sample_day
from rag_pipeline.core.monitoring.gap_day import GAP_COLUMNS, coverage_gaps_day
from rag_pipeline.core.monitoring.sampling import refused_lines
from rag_pipeline.core.plots import markdown_image
from rag_pipeline.defs import checks
from rag_pipeline.defs.common import OWNERS, STORE_POOL, tag_trigger
from rag_pipeline.defs.evaluation import golden_eval
from rag_pipeline.defs.failures import explained
from rag_pipeline.defs.ingestion import search_index
from rag_pipeline.defs.metadata import numbers, outcome, table
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource


def monitoring_assets(days: dg.DailyPartitionsDefinition) -> list[dg.AssetsDefinition]:
    """production_sample, coverage_gaps and drift_report over these day partitions."""
    common = dict(partitions_def=days, group_name="monitoring", pool=STORE_POOL, kinds={"duckdb"}, owners=OWNERS)

    @dg.asset(deps=[dg.AssetDep(search_index, partition_mapping=dg.AllPartitionMapping())], **common)
    def production_sample(
        context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
    ) -> dg.MaterializeResult:
        """A deterministic, tenant-stratified sample of the day's queries, run through retrieval with
        each query's own caller context; reference-free measures (no-result rate, latency, stale hits)."""
        tag_trigger(context)
        hold_point("monitoring")
        with explained(context):
            report, measures, log = sample_day(settings.load(), store.get(), embedder.get(),
                                               date.fromisoformat(context.partition_key))
        # Named by file, line and reason, the first ones; the rest counted in a last row.
        malformed = refused_lines(log)
        if len(log.malformed) > len(malformed):
            malformed.append({"where": f"and {len(log.malformed) - len(malformed)} more",
                              "reason": f"{len(log.malformed)} lines refused in all (malformed_lines)"})
        return dg.MaterializeResult(metadata={
            **numbers(measures),
            "malformed": table(malformed, ["where", "reason"]),
            "no_result_queries": dg.MetadataValue.md(
                render.bullets([f"{r.query.query} ({r.query.tenant})" for r in report.results if r.no_result])),
            **outcome(),
        })

    @dg.asset(deps=[production_sample], check_specs=checks.specs("coverage_gaps", days), **common)
    def coverage_gaps(
        context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
    ):
        """Topics of the day's questions that the served index holds no good evidence for, ranked by
        traffic; earlier gaps carried on, or closed by the document that now answers them."""
        with explained(context):
            config = settings.load()
            day = coverage_gaps_day(config, store.get(), embedder.get(), date.fromisoformat(context.partition_key))
        verdict = day.verdict(config.monitoring.gap_share_warn)
        yield dg.MaterializeResult(metadata={
            **numbers(day.measures()),
            "threshold_rule": dg.MetadataValue.text(day.threshold.rule),
            "gaps": table(day.rows(), GAP_COLUMNS),
            "coverage_gaps": dg.MetadataValue.json([g.as_json() for g in day.gaps]),
            **outcome(),
        })
        yield checks.result("no_large_new_gap", verdict)

    @dg.asset(
        deps=[production_sample, coverage_gaps, dg.AssetDep(golden_eval, partition_mapping=dg.AllPartitionMapping())],
        check_specs=checks.specs("drift_report", days), **common,
    )
    def drift_report(
        context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
    ):
        """Production against the golden set: distance and threshold, slice mix, unseen vocabulary,
        candidates for new golden cases; the report with its plot."""
        with explained(context):
            config = settings.load()
            drift = drift_day(config, store.get(), embedder.get(), date.fromisoformat(context.partition_key),
                              config.storage.reports)
        verdict = drift.report.verdict()
        yield dg.MaterializeResult(metadata={
            **numbers(verdict.numbers),
            "overview": dg.MetadataValue.md(markdown_image(drift.plot, "drift overview")),
            "report": dg.MetadataValue.md(drift.markdown()),
            "candidates": table(drift.report.candidates, ["excess_density", "distance", "query", "nearest_golden"]),
            "uncovered_pages": table(drift.report.uncovered_pages, ["source", "doc_id", "hits"]),
            "unseen_terms": dg.MetadataValue.md(render.inline(", ".join(t for t, _ in drift.report.unseen_terms))),
            "report_file": dg.MetadataValue.path(str(drift.path)),
            **outcome(),
        })
        yield checks.result("drift_within_threshold", verdict)

    return [production_sample, coverage_gaps, drift_report]
