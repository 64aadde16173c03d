"""Resources: Dagster adapters over the core interfaces (settings, store, embedder).

The store and the embedder hold their config section as nested Dagster config, one launchpad field
per setting with its default and description; the fields are generated from the section's schema
(`launchpad_fields`), never copied by hand, and the section validates them again on use, so every
validator of the config applies and a bad value is a ConfigError naming the field.
"""

from __future__ import annotations

import types
import typing
from functools import lru_cache
from pathlib import Path

import dagster as dg
from pydantic import BaseModel, Field, ValidationError, create_model

from rag_pipeline.config import ConfigError, EmbeddingConfig, PipelineConfig, StorageConfig, as_written, load_config
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

    def load_current(self) -> PipelineConfig:
        """The config file as it is now: a sensor runs in a code server that lives for days, and must
        see the config a team edited since it started (`load` keeps the first one it read)."""
        return load_config(self.config_path or None, sources=dict(self.source_overrides), golden_set=self.golden_set or None)

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


def _launchpad_type(annotation: object) -> object:
    """The type Dagster's config system shows for a setting: a choice (`Literal`) or a path as text."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal or annotation is Path:
        return str
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _launchpad_type(inner) | None
    return annotation


def launchpad_fields(section: type[BaseModel]) -> type[dg.Config]:
    """A Dagster config class with one field per setting of `section`, its default and description."""
    fields: dict[str, typing.Any] = {}
    for name, info in section.model_fields.items():
        default = info.get_default(call_default_factory=True)
        fields[name] = (_launchpad_type(info.annotation),
                        Field(default=str(default) if isinstance(default, Path) else default, description=info.description))
    return create_model(f"{section.__name__}Fields", __base__=dg.Config, **fields)


StorageFields = launchpad_fields(StorageConfig)
EmbeddingFields = launchpad_fields(EmbeddingConfig)


def _section(section: type[BaseModel], fields: dg.Config, resource: str):
    """The config section of a resource's fields, validated by the section itself.

    Only the settings that differ from their defaults are handed back: Dagster's config system fills
    in every default, and a section may refuse a default given explicitly (as SourceDefaults refuses
    `tenant: null`); for a section that validated once, an absent setting means its default."""
    try:
        return section.model_validate(fields.model_dump(exclude_defaults=True))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"resource {resource!r}: {problems}") from None


class StoreResource(dg.ConfigurableResource):
    """Where staging, index, cache, ledger and records live: the config's storage section."""

    storage: StorageFields  # type: ignore[valid-type]  (a class generated from StorageConfig)

    @classmethod
    def from_config(cls, storage: StorageConfig) -> StoreResource:
        return cls(storage=StorageFields(**as_written(storage)))

    def get(self) -> Store:
        return _store_for(_section(StorageConfig, self.storage, "store"))


@lru_cache(maxsize=4)
def _store_for(storage: StorageConfig) -> Store:
    # One store per process and config: a PostgreSQL store keeps its connection between steps.
    return open_store(storage)


class EmbedderResource(dg.ConfigurableResource):
    """An embedder built from the config's embedding section; the model loads on first encode."""

    embedding: EmbeddingFields  # type: ignore[valid-type]  (a class generated from EmbeddingConfig)

    @classmethod
    def from_config(cls, embedding: EmbeddingConfig) -> EmbedderResource:
        return cls(embedding=EmbeddingFields(**as_written(embedding)))

    def get(self) -> Embedder:
        return embedder_for(_section(EmbeddingConfig, self.embedding, "embedder"))


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
