"""Resources: Dagster adapters over the core interfaces (settings, store, embedder)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import dagster as dg

from rag_pipeline.config import EmbeddingConfig, PipelineConfig, load_config
from rag_pipeline.core.ingestion.embedding import Embedder, make_embedder
from rag_pipeline.core.storage.store import DuckDBStore


class PipelineSettings(dg.ConfigurableResource):
    """The pipeline config file; empty means $RAG_PIPELINE_CONFIG or data/pipeline.yaml."""

    config_path: str = ""
    # `name -> path` sources added or replaced on top of the file (the command line's --source).
    source_overrides: dict[str, str] = {}
    # A golden-set file replacing the configured one (the command line's --golden).
    golden_set: str = ""

    def load(self) -> PipelineConfig:
        overrides = tuple(sorted(self.source_overrides.items()))
        return _load_config_cached(self.config_path or None, overrides, self.golden_set or None)

    @classmethod
    def from_config(cls, config: PipelineConfig, overrides: dict[str, str] | None = None) -> PipelineSettings:
        return cls(
            config_path=str(config.config_path or ""),
            source_overrides=overrides or {},
            golden_set=str(config.golden_set or ""),
        )


@lru_cache(maxsize=8)
def _load_config_cached(
    path: str | None, overrides: tuple[tuple[str, str], ...], golden_set: str | None
) -> PipelineConfig:
    config = load_config(path)
    if overrides:
        config = config.with_sources({name: Path(p) for name, p in overrides})
    if golden_set:
        config = config.model_copy(update={"golden_set": Path(golden_set)})
    return config


class StoreResource(dg.ConfigurableResource):
    """The DuckDB file that holds staging, index, cache and ledger."""

    path: str

    def get(self) -> DuckDBStore:
        return DuckDBStore(self.path)


class EmbedderResource(dg.ConfigurableResource):
    """An embedder built from the embedding settings; the model loads on first encode."""

    model: str
    kind: str = "sentence-transformers"
    batch_size: int = 32
    normalize: bool = True
    max_seq_length: int | None = None
    dimension: int = 384

    @classmethod
    def from_config(cls, config: EmbeddingConfig) -> EmbedderResource:
        return cls(**config.model_dump())

    def get(self) -> Embedder:
        return _embedder_for(EmbeddingConfig(**self.model_dump()))


@lru_cache(maxsize=4)
def _embedder_for(config: EmbeddingConfig) -> Embedder:
    # One embedder per process and config, so a run over many partitions loads the model once.
    return make_embedder(config)


def resources_for(
    config: PipelineConfig, embedder: EmbedderResource | None = None, overrides: dict[str, str] | None = None
) -> dict:
    """The resources of one deployment: its settings (with the command line's source overrides), store, embedder."""
    return {
        "settings": PipelineSettings.from_config(config, overrides),
        "store": StoreResource(path=str(config.storage.path)),
        "embedder": embedder or EmbedderResource.from_config(config.embedding),
    }
