"""The store and embedder resources hold their config section whole, never copies of its fields."""

import json

import pydantic
import pytest

from rag_pipeline.config import EmbeddingConfig, StorageConfig
from rag_pipeline.core.ingestion.embedding import make_embedder
from rag_pipeline.defs.resources import EmbedderResource, StoreResource, resources_for


def test_store_and_embedder_come_from_the_config_as_given(tmp_path, write_config):
    config = write_config({"docs": tmp_path}, storage={"path": str(tmp_path / "here" / "index.duckdb")})
    # A config changed in memory (as a fresh build beside an incremental one is) is the one served.
    moved = config.model_copy(update={"storage": config.storage.model_copy(update={"path": tmp_path / "there" / "i.duckdb"})})
    resources = resources_for(moved)
    assert set(StoreResource.model_fields) == {"storage"} and set(EmbedderResource.model_fields) == {"embedding"}
    assert str(tmp_path / "there" / "i.duckdb") in resources["store"].get().db.describe()
    assert resources["embedder"].get().identity == make_embedder(config.embedding).identity


def test_a_section_reads_back_as_the_same_settings(tmp_path, write_config):
    # What the file gave, and what code changed since, travel; a default stays a default.
    config = write_config({"docs": tmp_path}, embedding={"kind": "hashing", "dimension": 64},
                          storage={"path": str(tmp_path / "index.duckdb"), "memory_search": False})
    storage = config.storage.model_copy(update={"hnsw_m": 24})
    store, embedder = StoreResource.from_config(storage), EmbedderResource.from_config(config.embedding)
    assert json.loads(store.storage) == {"path": str(tmp_path / "index.duckdb"), "memory_search": False, "hnsw_m": 24}
    assert json.loads(embedder.embedding) == {"kind": "hashing", "dimension": 64}
    assert StorageConfig.model_validate_json(store.storage) == storage
    assert EmbeddingConfig.model_validate_json(embedder.embedding) == config.embedding
    assert embedder.get().identity == make_embedder(config.embedding).identity


def test_a_value_the_validators_refuse_fails_the_resource(tmp_path, write_config):
    config = write_config({"docs": tmp_path})
    tampered = json.dumps({**json.loads(StoreResource.from_config(config.storage).storage), "hnsw_m": 1})
    with pytest.raises(pydantic.ValidationError, match="hnsw_m"):
        StoreResource(storage=tampered).get()
