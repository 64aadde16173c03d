"""Resources: Dagster adapters over the core interfaces (settings, store, embedder)."""

from __future__ import annotations

from functools import lru_cache

import dagster as dg

from rag_pipeline.config import EmbeddingConfig, PipelineConfig, StorageConfig, load_config
from rag_pipeline.core.embedding.embedder import Embedder, make_embedder
from rag_pipeline.core.storage import Store, open_store


class PipelineSettings(dg.ConfigurableResource):
    """The pipeline config file; empty means $RAG_PIPELINE_CONFIG or data/pipeline.yaml."""

    config_path: str = ""
    # `name -> path` sources added or replaced on top of the file (the command line's --source).
    source_overrides: dict[str, str] = {}
    # A golden-set file replacing the configured one (the command line's --golden).
    golden_set: str = ""

    def load(self) -> PipelineConfig:
        return _load_config_cached(self.config_path or None, tuple(sorted(self.source_overrides.items())), self.golden_set or None)

    @classmethod
    def from_config(cls, config: PipelineConfig, overrides: dict[str, str] | None = None) -> PipelineSettings:
        return cls(
            config_path=str(config.config_path or ""),
            source_overrides=overrides or {},
            golden_set=str(config.golden_set or ""),
        )


@lru_cache(maxsize=8)
def _load_config_cached(path: str | None, overrides: tuple[tuple[str, str], ...], golden_set: str | None) -> PipelineConfig:
    return load_config(path, sources=dict(overrides), golden_set=golden_set)


class StoreResource(dg.ConfigurableResource):
    """Where staging, index, cache, ledger and records live: the config's storage section, held
    whole as its JSON and validated again on use (no field copied, every validator applies)."""

    storage: str

    @classmethod
    def from_config(cls, storage: StorageConfig) -> StoreResource:
        return cls(storage=storage.model_dump_json())

    def get(self) -> Store:
        return _store_for(StorageConfig.model_validate_json(self.storage))


@lru_cache(maxsize=4)
def _store_for(storage: StorageConfig) -> Store:
    # One store per process and config: a PostgreSQL store keeps its connection between steps.
    return open_store(storage)


class EmbedderResource(dg.ConfigurableResource):
    """An embedder built from the config's embedding section, held whole as its JSON and validated
    again on use; the model loads on first encode."""

    embedding: str

    @classmethod
    def from_config(cls, embedding: EmbeddingConfig) -> EmbedderResource:
        return cls(embedding=embedding.model_dump_json())

    def get(self) -> Embedder:
        return embedder_for(EmbeddingConfig.model_validate_json(self.embedding))


@lru_cache(maxsize=4)
def embedder_for(config: EmbeddingConfig) -> Embedder:
    # One embedder per process and config, so a run over many partitions loads the model once.
    return make_embedder(config)


def resources_for(
    config: PipelineConfig, embedder: EmbedderResource | None = None, overrides: dict[str, str] | None = None
) -> dict:
    """The resources of one deployment: its settings (with the command line's source overrides), and
    the store and embedder of this config (an in-memory change of it included)."""
    return {
        "settings": PipelineSettings.from_config(config, overrides),
        "store": StoreResource.from_config(config.storage),
        "embedder": embedder or EmbedderResource.from_config(config.embedding),
    }
