"""Turning core reports into Dagster metadata: numbers as numbers (so the UI plots them), lists as tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from rag_pipeline.core.coverage import CoverageReport
from rag_pipeline.core.ingestion import StageReport
from rag_pipeline.core.lifecycle import DeletionReport, FreshnessReport

MAX_TABLE_ROWS = 50


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str], limit: int = MAX_TABLE_ROWS) -> str:
    if not rows:
        return "_none_"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:limit]:
        cells = [_cell(row.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    if len(rows) > limit:
        lines.append(f"\n… and {len(rows) - limit} more")
    return "\n".join(lines)


def stage_metadata(report: StageReport) -> dict:
    metadata: dict = {key: dg.MetadataValue.int(value) for key, value in report.counts.items()}
    metadata["failed"] = dg.MetadataValue.int(len(report.failures))
    if report.failures:
        metadata["failures"] = dg.MetadataValue.md(markdown_table(report.failure_rows(), ["doc_id", "stage", "reason"]))
    for key, values in report.details.items():
        if values:
            metadata[f"{key}_documents"] = dg.MetadataValue.md("\n".join(f"- `{v}`" for v in values[:MAX_TABLE_ROWS]))
    return metadata


def coverage_metadata(report: CoverageReport) -> dict:
    metadata: dict = {f"{stage}_documents": dg.MetadataValue.int(n) for stage, n in report.counts_by_stage.items()}
    metadata["supported_documents"] = dg.MetadataValue.int(report.supported)
    metadata["failed_documents"] = dg.MetadataValue.int(len(report.failed))
    metadata["uncovered_documents"] = dg.MetadataValue.int(len(report.uncovered))
    metadata["queryable_share"] = dg.MetadataValue.float(round(report.queryable_share, 4))
    metadata["failures"] = dg.MetadataValue.md(markdown_table(report.failed, ["doc_id", "stage", "reason"]))
    if report.uncovered:
        metadata["uncovered"] = dg.MetadataValue.md("\n".join(f"- `{d}`" for d in report.uncovered[:MAX_TABLE_ROWS]))
    return metadata


def deletion_metadata(report: DeletionReport) -> dict:
    return {
        "deleted_documents_checked": dg.MetadataValue.int(len(report.checked)),
        "documents_with_remnants": dg.MetadataValue.int(len(report.remnants)),
        "documents_still_retrievable": dg.MetadataValue.int(len(report.retrievable)),
        "orphan_documents": dg.MetadataValue.int(len(report.orphans)),
        "problems": dg.MetadataValue.md(markdown_table(report.problems(), ["doc_id", "problem"])),
    }


def freshness_metadata(report: FreshnessReport) -> dict:
    rows = [{**s, "age_hours": f"{s['age_hours']:.1f}"} for s in report.stale]
    metadata: dict = {
        "stale_documents": dg.MetadataValue.int(len(report.stale)),
        "oldest_stale_hours": dg.MetadataValue.float(round(report.oldest_stale_hours, 3)),
        "max_staleness_hours": dg.MetadataValue.float(report.max_staleness_hours),
        "indexed_documents": dg.MetadataValue.int(report.indexed_documents),
        "stale": dg.MetadataValue.md(markdown_table(rows, ["doc_id", "reason", "age_hours"])),
    }
    if report.index_age_hours is not None:
        metadata["index_age_hours"] = dg.MetadataValue.float(round(report.index_age_hours, 3))
    return metadata
