"""The store and embedder resources are built from the one validated config, never from copies of its fields."""

import pytest

from rag_pipeline.config import ConfigError
from rag_pipeline.core.ingestion.embedding import make_embedder
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource, resources_for


def test_store_and_embedder_come_from_the_settings_config(tmp_path, write_config):
    config = write_config({"docs": tmp_path}, storage={"path": str(tmp_path / "here" / "index.duckdb")})
    resources = resources_for(config)
    assert set(StoreResource.model_fields) == set(EmbedderResource.model_fields) == {"settings"}
    store = resources["store"].get()
    assert str(tmp_path / "here" / "index.duckdb") in store.db.describe()
    assert resources["embedder"].get().identity == make_embedder(config.embedding).identity


def test_a_config_the_validators_refuse_fails_the_resource_with_the_configs_error(tmp_path):
    (tmp_path / "pipeline.yaml").write_text(f"sources:\n  - name: docs\n    path: {tmp_path}\nstorage:\n  hnsw_m: 1\n")
    settings = PipelineSettings(config_path=str(tmp_path / "pipeline.yaml"))
    with pytest.raises(ConfigError, match="hnsw_m"):
        StoreResource(settings=settings).get()
    with pytest.raises(ConfigError, match="hnsw_m"):
        EmbedderResource(settings=settings).get()
