"""The thin Dagster layer: assets read inputs, call rag_pipeline.core, return values with metadata."""
