"""Monitoring assets, daily partitions: the production sample and the drift report."""

import math
from datetime import date
from pathlib import Path

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.monitoring import drift_day, sample_day
from rag_pipeline.defs.evaluation import golden_eval
from rag_pipeline.defs.ingestion import DUCKDB_POOL, search_index
from rag_pipeline.defs.metadata import md_table
from rag_pipeline.defs.partitions import daily_partitions
from rag_pipeline.defs.resources import (
    EmbedderResource,
    PipelineSettings,
    StoreResource,
)

DRIFT_CHECK = "drift_within_threshold"


def _numbers(values: dict) -> dict:
    return {k: dg.MetadataValue.float(float(v)) for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)}


@dg.asset(
    partitions_def=daily_partitions,
    group_name="monitoring",
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    deps=[dg.AssetDep(search_index, partition_mapping=dg.AllPartitionMapping())],
)
def production_sample(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """A deterministic, tenant-stratified sample of the last days' queries, run through retrieval."""
    day = date.fromisoformat(context.partition_key)
    report, measures, log = sample_day(settings.load(), store.get(), embedder.get(), day)
    malformed = [{"where": f"{m['file']}:{m['line']}", "reason": m["reason"]} for m in log.malformed]
    return dg.MaterializeResult(
        metadata={
            **_numbers(measures),
            "malformed": md_table(malformed, ["where", "reason"]),
            "no_result_queries": dg.MetadataValue.md(
                render.bullets([f"{r.query.query} ({r.query.tenant})" for r in report.results if r.no_result])
            ),
        }
    )


@dg.asset(
    partitions_def=daily_partitions,
    group_name="monitoring",
    pool=DUCKDB_POOL,
    kinds={"duckdb"},
    deps=[production_sample, dg.AssetDep(golden_eval, partition_mapping=dg.AllPartitionMapping())],
    check_specs=[dg.AssetCheckSpec(DRIFT_CHECK, asset="drift_report")],
)
def drift_report(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
):
    """Production against the golden set: distance and threshold, slice mix, unseen vocabulary,
    candidates for new golden cases; a markdown report with PNG plots."""
    config = settings.load()
    day = date.fromisoformat(context.partition_key)
    folder = Path(config.storage.path).parent / "reports"
    report, markdown, pngs = drift_day(config, store.get(), embedder.get(), day, folder)
    yield dg.MaterializeResult(
        metadata={
            "mmd2_distance": dg.MetadataValue.float(report.distance),
            "drift_threshold": dg.MetadataValue.float(report.threshold),
            "report": dg.MetadataValue.path(str(markdown)),
            "plot": dg.MetadataValue.path(str(pngs[0])),
            "overview": dg.MetadataValue.md(f"![drift]({pngs[0].as_uri()})"),
            "candidates": md_table(report.candidates, ["excess_density", "distance", "query", "nearest_golden"]),
            "unseen_terms": dg.MetadataValue.md(render.inline(", ".join(t for t, _ in report.unseen_terms))),
        }
    )
    yield dg.AssetCheckResult(
        check_name=DRIFT_CHECK,
        passed=not report.drifted,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            f"MMD² {report.distance:.4f} vs threshold {report.threshold:.4f} (calibrated on the golden set)"
            + (f"; top candidate: {render.inline(report.candidates[0]['query'], 120)}" if report.drifted and report.candidates else "")
        ),
    )


monitoring_assets = [production_sample, drift_report]
