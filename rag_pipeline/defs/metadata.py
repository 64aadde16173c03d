"""Turning core results into Dagster metadata: numbers as numbers (so the UI plots them), lists as
tables through the one renderer (which escapes what others wrote)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.ingestion.stages import StageReport

FAILURE_COLUMNS = ["doc_id", "stage", "reason"]


def md_table(rows, columns, **options) -> dg.MetadataValue:
    return dg.MetadataValue.md(render.table(rows, columns, **options))


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


def stage_metadata(report: StageReport) -> dict:
    metadata: dict = {**numbers(report.counts), "failed": dg.MetadataValue.int(len(report.failures))}
    if report.failures:
        metadata["failures"] = md_table(report.failure_rows(), FAILURE_COLUMNS)
    for key, values in report.details.items():
        if values:
            metadata[f"{key}_documents"] = dg.MetadataValue.md(render.bullets(values))
    return metadata
