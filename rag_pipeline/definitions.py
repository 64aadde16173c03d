"""The one Definitions object of the code location, built from the pipeline config when loaded."""

from __future__ import annotations

import dagster as dg

from rag_pipeline.config import PipelineConfig, load_config
from rag_pipeline.defs.evaluation import evaluation_assets
from rag_pipeline.defs.ingestion import ingestion_assets
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import EmbedderResource
from rag_pipeline.runner import resources_for

ingest_sources_job = dg.define_asset_job(
    "ingest_sources",
    selection=dg.AssetSelection.groups("ingestion"),
    partitions_def=source_partitions,
    description="Ingest one source partition: discover, parse, chunk, embed, index, prove coverage.",
)

golden_eval_job = dg.define_asset_job(
    "evaluate_golden_revision",
    selection=dg.AssetSelection.groups("evaluation"),
    partitions_def=golden_partitions,
    description="Validate one golden-set revision and evaluate retrieval on it.",
)


def build_definitions(config: PipelineConfig, embedder: EmbedderResource | None = None) -> dg.Definitions:
    """Definitions wired to one config; tests pass a fast embedder, production the configured one."""
    return dg.Definitions(
        assets=[*ingestion_assets, *evaluation_assets],
        jobs=[ingest_sources_job, golden_eval_job],
        resources=resources_for(config, embedder),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
