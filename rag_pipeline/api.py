"""The public Python surface: what a script of your own (and every benchmark here) may import and
rely on between releases. Everything else under `rag_pipeline.core` may move; these names will not
without a note in the changelog. It imports no Dagster: use it outside a deployment.

    from rag_pipeline.api import load_config, open_store, make_embedder, ingest_source, evaluate
"""

from __future__ import annotations

from rag_pipeline.config import (
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    PipelineConfig,
    RetrievalConfig,
    SourceConfig,
    load_config,
)
from rag_pipeline.core.embedding.embedder import Embedder, make_embedder
from rag_pipeline.core.errors import DomainError, InputError, UnavailableError
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.experiments import render_log, run_experiment
from rag_pipeline.core.evaluation.gating.gates import compare
from rag_pipeline.core.evaluation.gating.policy import GatePolicy, load_policy
from rag_pipeline.core.evaluation.golden.beir import import_beir
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.models import Hit, SearchFilters
from rag_pipeline.core.monitoring.daily import drift_day, sample_day
from rag_pipeline.core.monitoring.gap_day import coverage_gaps_day
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import Store, duckdb_store, open_store

__all__ = [
    "ChunkingConfig",
    "DomainError",
    "Embedder",
    "EmbeddingConfig",
    "GatePolicy",
    "Hit",
    "InputError",
    "LifecycleConfig",
    "PipelineConfig",
    "Retriever",
    "RetrievalConfig",
    "SearchFilters",
    "SourceConfig",
    "Store",
    "UnavailableError",
    "compare",
    "coverage_gaps_day",
    "drift_day",
    "duckdb_store",
    "evaluate",
    "import_beir",
    "ingest_source",
    "load_config",
    "load_golden_set",
    "load_policy",
    "make_embedder",
    "open_store",
    "render_log",
    "run_experiment",
    "sample_day",
]
