"""The store and embedder resources hold their config section as launchpad fields generated from
its schema, and the section validates them on use."""

import dagster as dg
import pydantic
import pytest

from rag_pipeline.config import ConfigError, EmbeddingConfig, StorageConfig
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.defs.resources import (
    EmbedderResource,
    StorageFields,
    StoreResource,
    _section,
    launchpad_fields,
    resources_for,
)


def test_store_and_embedder_come_from_the_config_as_given(tmp_path, write_config):
    config = write_config({"docs": tmp_path}, storage={"path": str(tmp_path / "here" / "index.duckdb")})
    # A config changed in memory (as a fresh build beside an incremental one is) is the one served.
    moved = config.model_copy(update={"storage": config.storage.model_copy(update={"path": tmp_path / "there" / "i.duckdb"})})
    resources = resources_for(moved)
    assert set(StoreResource.model_fields) == {"storage"} and set(EmbedderResource.model_fields) == {"embedding"}
    assert str(tmp_path / "there" / "i.duckdb") in resources["store"].get().db.describe()
    assert resources["embedder"].get().identity == make_embedder(config.embedding).identity


@pytest.mark.parametrize(("resource", "field", "section"), [(StoreResource, "storage", StorageConfig),
                                                             (EmbedderResource, "embedding", EmbeddingConfig)])
def test_every_setting_is_a_field_of_the_launchpad_with_its_default(resource, field, section):
    """What the launchpad shows: a nested shape with one field per setting of the section, not a JSON string."""
    nested = resource.to_config_schema().as_field().config_type.fields[field].config_type
    assert set(nested.fields) == set(section.model_fields)
    for name, info in section.model_fields.items():
        default = info.get_default(call_default_factory=True)
        shown = nested.fields[name]
        assert not shown.is_required
        if default is not None:
            assert shown.default_value == (str(default) if not isinstance(default, (bool, int, float)) else default)


def test_a_value_the_validators_refuse_fails_the_resource_naming_the_field(tmp_path, write_config):
    config = write_config({"docs": tmp_path})
    tampered = StorageFields(**{**config.storage.model_dump(mode="json"), "hnsw_m": 1})
    with pytest.raises(ConfigError, match="resource 'store': hnsw_m"):
        StoreResource(storage=tampered).get()
    with pytest.raises(ConfigError, match="resource 'store': backend"):
        StoreResource(storage=StorageFields(backend="mysql")).get()


def test_a_launchpad_run_config_reaches_the_store(tmp_path, write_config):
    """A run configured from the launchpad (run config, as the UI sends it) sets the store's fields."""
    config = write_config({"docs": tmp_path})

    @dg.asset
    def where(store: StoreResource) -> str:
        return store.get().db.describe()

    target = tmp_path / "launchpad" / "index.duckdb"
    result = dg.materialize([where], resources={"store": StoreResource.from_config(config.storage)},
                            run_config={"resources": {"store": {"config": {"storage": {"path": str(target)}}}}})
    assert str(target) in result.output_for_node("where")


def test_a_section_reads_back_as_the_same_settings(tmp_path, write_config):
    # What the file gave, and what code changed since, are the resource's values; the rest are defaults.
    config = write_config({"docs": tmp_path}, embedding={"kind": "hashing", "dimension": 64},
                          storage={"path": str(tmp_path / "index.duckdb"), "memory_search": False})
    storage = config.storage.model_copy(update={"hnsw_m": 24})
    store, embedder = StoreResource.from_config(storage), EmbedderResource.from_config(config.embedding)
    assert store.storage.model_fields_set == {"path", "memory_search", "hnsw_m"}
    assert embedder.embedding.model_fields_set == {"kind", "dimension"}
    assert _section(StorageConfig, store.storage, "store") == storage
    assert _section(EmbeddingConfig, embedder.embedding, "embedder") == config.embedding


def test_a_section_that_refuses_its_own_default_given_explicitly_still_reads_back():
    """As SourceDefaults refuses `tenant: null` (its default) when a file writes it: the launchpad
    fills every default in, and the section must read the result back."""

    class Access(pydantic.BaseModel):
        tenant: str | None = None

        @pydantic.model_validator(mode="before")
        @classmethod
        def _no_explicit_null(cls, raw: object) -> object:
            if isinstance(raw, dict) and "tenant" in raw and raw["tenant"] is None:
                raise ValueError("tenant is null")
            return raw

    fields = launchpad_fields(Access)
    assert _section(Access, fields(), "access") == Access()
    assert _section(Access, fields(tenant="acme"), "access") == Access(tenant="acme")
