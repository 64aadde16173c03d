"""Turning core reports into Dagster metadata: numbers as numbers (so the UI plots them), lists as
tables through the one renderer (which escapes what others wrote)."""

from __future__ import annotations

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.coverage import CoverageReport
from rag_pipeline.core.ingestion import StageReport
from rag_pipeline.core.lifecycle import DeletionReport, FreshnessReport

FAILURE_COLUMNS = ["doc_id", "stage", "reason"]


def md_table(rows, columns, **options) -> dg.MetadataValue:
    return dg.MetadataValue.md(render.table(rows, columns, **options))


def stage_metadata(report: StageReport) -> dict:
    metadata: dict = {key: dg.MetadataValue.int(value) for key, value in report.counts.items()}
    metadata["failed"] = dg.MetadataValue.int(len(report.failures))
    if report.failures:
        metadata["failures"] = md_table(report.failure_rows(), FAILURE_COLUMNS)
    for key, values in report.details.items():
        if values:
            metadata[f"{key}_documents"] = dg.MetadataValue.md(render.bullets(values))
    return metadata


def coverage_metadata(report: CoverageReport) -> dict:
    metadata: dict = {f"{stage}_documents": dg.MetadataValue.int(n) for stage, n in report.counts_by_stage.items()}
    metadata["supported_documents"] = dg.MetadataValue.int(report.supported)
    metadata["failed_documents"] = dg.MetadataValue.int(len(report.failed))
    metadata["uncovered_documents"] = dg.MetadataValue.int(len(report.uncovered))
    metadata["queryable_share"] = dg.MetadataValue.float(round(report.queryable_share, 4))
    metadata["failures"] = md_table(report.failed, FAILURE_COLUMNS)
    if report.uncovered:
        metadata["uncovered"] = md_table(report.uncovered_rows(), ["doc_id", "where"])
    return metadata


def deletion_metadata(report: DeletionReport) -> dict:
    return {
        "deleted_documents_checked": dg.MetadataValue.int(len(report.checked)),
        "documents_with_remnants": dg.MetadataValue.int(len(report.remnants)),
        "documents_still_retrievable": dg.MetadataValue.int(len(report.retrievable)),
        "orphan_documents": dg.MetadataValue.int(len(report.orphans)),
        "problems": md_table(report.problems(), ["doc_id", "problem"]),
    }


def freshness_metadata(report: FreshnessReport) -> dict:
    metadata: dict = {
        "stale_documents": dg.MetadataValue.int(len(report.stale)),
        "oldest_stale_hours": dg.MetadataValue.float(round(report.oldest_stale_hours, 3)),
        "max_staleness_hours": dg.MetadataValue.float(report.max_staleness_hours),
        "indexed_documents": dg.MetadataValue.int(report.indexed_documents),
        "stale": md_table(report.stale, ["doc_id", "reason", "age_hours"]),
    }
    if report.index_age_hours is not None:
        metadata["index_age_hours"] = dg.MetadataValue.float(round(report.index_age_hours, 3))
    return metadata
