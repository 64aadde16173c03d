"""The one Definitions object of the code location, built from the pipeline config when loaded."""

from __future__ import annotations

import dagster as dg

from rag_pipeline.config import PipelineConfig, load_config
from rag_pipeline.defs.automation import (
    automation_jobs,
    automation_schedules,
    automation_sensors,
)
from rag_pipeline.defs.evaluation import evaluation_assets
from rag_pipeline.defs.ingestion import ingestion_assets
from rag_pipeline.defs.monitoring import monitoring_assets
from rag_pipeline.defs.resources import EmbedderResource
from rag_pipeline.runner import resources_for


def build_definitions(config: PipelineConfig, embedder: EmbedderResource | None = None) -> dg.Definitions:
    """Definitions wired to one config; tests pass a fast embedder, production the configured one."""
    return dg.Definitions(
        assets=[*ingestion_assets, *evaluation_assets, *monitoring_assets],
        jobs=automation_jobs,
        sensors=automation_sensors,
        schedules=automation_schedules,
        resources=resources_for(config, embedder),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
