"""Turning core results into Dagster metadata: numbers as numbers (so the UI plots them), rows as
Dagster tables with a schema, text as plain text (escaped by the one renderer); markdown only where
Dagster renders markdown (reports, plots)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import dagster as dg

from rag_pipeline.config import SourceConfig
from rag_pipeline.core import render
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.reports import StageReport
from rag_pipeline.core.ingestion.source_runs import served_state
from rag_pipeline.core.outcomes import DONE, OUTCOME_KEY, StepOutcome
from rag_pipeline.core.storage import Store

FAILURE_COLUMNS = ["doc_id", "stage", "reason"]


# A table's rows shown in Dagster's table view, at most (the counts beside it say how many there are).
MAX_TABLE_ROWS = 500
# Decimals of a float in a table: what a person compares by eye (the float noise of 0.123456789 is not).
TABLE_DECIMALS = 4


def outcome(step: StepOutcome = DONE) -> dict[str, dg.MetadataValue]:
    """The step's outcome under the one key every caller reads (`core/outcomes.py`)."""
    return {OUTCOME_KEY: dg.MetadataValue.json(step.to_json())}


def table(rows: Sequence[Mapping | Sequence], columns: Sequence[str], limit: int = MAX_TABLE_ROWS) -> dg.MetadataValue:
    """Rows as Dagster's table metadata, with a schema: numbers stay numbers (the table view sorts
    them; floats rounded to TABLE_DECIMALS), text is shown as plain text (its lines kept, other
    control characters escaped, long cells cut)."""
    records = [dict(zip(columns, row)) if not isinstance(row, Mapping) else {c: row.get(c) for c in columns}
               for row in rows[:limit]]
    schema = []
    for column in columns:
        kind = _column_type([r[column] for r in records if r[column] is not None])
        schema.append(dg.TableColumn(column, kind))
        if kind == "float":
            for record in records:
                if record[column] is not None and not math.isnan(record[column]):
                    record[column] = round(float(record[column]), TABLE_DECIMALS)
        elif kind == "string":
            for record in records:
                value = record[column]
                if value is not None:
                    text = ", ".join(map(str, value)) if isinstance(value, (list, tuple, set)) else str(value)
                    record[column] = render.cut(render.plain_text(text), render.MAX_CELL_CHARS)
    return dg.MetadataValue.table([dg.TableRecord(r) for r in records], dg.TableSchema(schema))


def numbers(values: Mapping[str, object], digits: int = 6) -> dict[str, dg.MetadataValue]:
    """Numeric metadata (the UI plots each key's trend): ints as ints, floats rounded to `digits`
    decimals (float noise is not information), NaN and non-numbers left out."""
    out: dict[str, dg.MetadataValue] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, int):
            out[key] = dg.MetadataValue.int(value)
        elif not math.isnan(value):
            out[key] = dg.MetadataValue.float(round(value, digits))
    return out


def _column_type(values: Sequence[object]) -> str:
    """The table view's type of a column: bool, int, float when every value is one, else string."""
    if values and all(isinstance(v, bool) for v in values):
        return "bool"
    numeric = values and not any(isinstance(v, bool) for v in values)
    if numeric and all(isinstance(v, int) for v in values):
        return "int"
    if numeric and all(isinstance(v, (int, float)) for v in values):
        return "float"
    return "string"


def stage_metadata(report: StageReport) -> dict:
    metadata: dict = {**numbers(report.counts), "failed": dg.MetadataValue.int(len(report.failures))}
    if report.failures:
        metadata["failures"] = table(report.failure_rows(), FAILURE_COLUMNS)
    if report.skipped_by_reason:
        metadata["skipped_by_reason"] = table(list(report.skipped_by_reason.items()), ["reason", "files"])
    for key, values in report.details.items():
        if values:
            metadata[f"{key}_documents"] = dg.MetadataValue.md(render.bullets(values))
    return metadata


SOURCE_COLUMNS = ["source", "served", "queryable_documents", "failed_documents", "failed"]


def source_rows(store: Store, sources: Sequence[SourceConfig]) -> list[dict]:
    """Per source: what it serves (current, or the version of its last switch because its latest run
    failed or its folder is gone, and why), the documents queryable in their current version, and
    those whose current version failed a stage (named)."""
    rows = []
    for source in sources:
        coverage = coverage_report(store, source.source_id)
        rows.append({"source": source.source_id, "served": served_state(store, source.source_id, source.path),
                     "queryable_documents": coverage.counts_by_stage.get("queryable", 0),
                     "failed_documents": len(coverage.failed),
                     "failed": "\n".join(f"{f['doc_id']} at {f['stage']}: {f['reason']}" for f in coverage.failed)})
    return rows
