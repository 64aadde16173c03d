"""The store and embedder resources hold their config section whole, never copies of its fields."""

import pydantic
import pytest

from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.defs.resources import EmbedderResource, StoreResource, resources_for


def test_store_and_embedder_come_from_the_config_as_given(tmp_path, write_config):
    config = write_config({"docs": tmp_path}, storage={"path": str(tmp_path / "here" / "index.duckdb")})
    # A config changed in memory (as a fresh build beside an incremental one is) is the one served.
    moved = config.model_copy(update={"storage": config.storage.model_copy(update={"path": tmp_path / "there" / "i.duckdb"})})
    resources = resources_for(moved)
    assert set(StoreResource.model_fields) == {"storage"} and set(EmbedderResource.model_fields) == {"embedding"}
    assert str(tmp_path / "there" / "i.duckdb") in resources["store"].get().db.describe()
    assert resources["embedder"].get().identity == make_embedder(config.embedding).identity


def test_a_value_the_validators_refuse_fails_the_resource(tmp_path, write_config):
    config = write_config({"docs": tmp_path})
    tampered = config.storage.model_dump_json().replace('"hnsw_m":16', '"hnsw_m":1')
    with pytest.raises(pydantic.ValidationError, match="hnsw_m"):
        StoreResource(storage=tampered).get()
