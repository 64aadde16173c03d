
import pytest

from rag_pipeline.config import ConfigError, load_config, slugify_source_id
from rag_pipeline_tests.conftest import SAMPLE_CONFIG


def test_sample_config_loads_with_paths_resolved_against_the_file():
    config = load_config(SAMPLE_CONFIG)
    assert [s.source_id for s in config.sources] == ["handbook", "helpcenter", "product_docs"]
    for source in config.sources:
        assert source.path.is_absolute() and source.path.is_dir(), source.path
    assert config.storage.path.is_absolute()


def test_env_var_selects_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    path = tmp_path / "other.yaml"
    path.write_text("sources:\n  - name: Docs Site\n    path: docs\n")
    monkeypatch.setenv("RAG_PIPELINE_CONFIG", str(path))
    config = load_config()
    assert config.sources[0].source_id == "docs_site"
    assert config.sources[0].path == (tmp_path / "docs").resolve()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("sources:\n  - path: docs\n", "sources.0.name"),
        ("sources: []\nchunking:\n  strategy: paragraphs\n", "chunking.strategy"),
        ("sources: []\nchunking:\n  max_tokens: 50\n  overlap_tokens: 60\n", "overlap_tokens"),
        ("sources: []\nretrieval:\n  k: 0\n", "retrieval.k"),
        ("sources: []\nembeding:\n  model: x\n", "embeding"),
        # Retired: the topic cut is calibrated on the golden set; the message says so and what to set.
        ("sources: []\nmonitoring:\n  gap_distance: 0.5\n", "monitoring.gap_distance: retired"),
        ("sources: []\nmonitoring:\n  gap_distance: 0.5\n", "gap_topic_quantile"),
    ],
)
def test_invalid_config_names_the_field(tmp_path, body, field):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    assert field in str(excinfo.value)
    assert str(path) in str(excinfo.value)


def test_duplicate_source_ids_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("sources:\n  - {name: Help Center, path: a}\n  - {name: help-center, path: b}\n")
    with pytest.raises(ConfigError, match="help_center"):
        load_config(path)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_source_override_adds_and_replaces(tmp_path):
    config = load_config(SAMPLE_CONFIG)
    replaced = config.with_sources({"handbook": tmp_path, "New Docs": tmp_path / "new"})
    assert replaced.source("handbook").path == tmp_path.resolve()
    assert replaced.source("new_docs").path == (tmp_path / "new").resolve()
    assert len(replaced.sources) == len(config.sources) + 1


def test_slugify_keeps_partition_keys_valid():
    assert slugify_source_id("Help Centre / EU, v2|x") == "help_centre_eu_v2_x"
    with pytest.raises(ValueError):
        slugify_source_id("///")


def test_fingerprint_changes_with_the_retrieval_relevant_settings(tmp_path):
    config = load_config(SAMPLE_CONFIG)
    other = config.model_copy(update={"chunking": config.chunking.model_copy(update={"max_tokens": 99})})
    assert config.retrieval_fingerprint() != other.retrieval_fingerprint()
    batch = config.model_copy(update={"embedding": config.embedding.model_copy(update={"batch_size": 7})})
    assert config.retrieval_fingerprint() == batch.retrieval_fingerprint()


@pytest.mark.parametrize(("defaults", "reason"), [
    ("visibility: null", "visibility is null"),
    ("visibility: no", "visibility is the YAML boolean false"),
    ("tenant: ''", "tenant is an empty text"),
    ("tenant: null", "tenant is null"),
    ("tenant: [acme]", "tenant is a list of 1"),
    ("roles: []", "roles is an empty list"),
    ("roles: [employee, 0]", "role 2 of roles is the number 0"),
    ("status: 0", "status is the number 0"),
    ("visibility: internal\n      visibility: public", "key 'visibility' is given twice (lines 6 and 7)"),
])
def test_a_source_default_that_fails_open_is_a_config_error(tmp_path, defaults, reason):
    # The source defaults decide who may read every page that says nothing itself.
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"sources:\n  - name: docs\n    path: docs\n    defaults:\n      tenant: acme\n      {defaults}\n"
                    .replace("      tenant: acme\n      tenant", "      tenant"))
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    assert reason in str(excinfo.value) and str(path) in str(excinfo.value)


def test_good_source_defaults_load(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("sources:\n  - name: docs\n    path: docs\n    defaults: {tenant: acme, visibility: internal, "
                    "roles: support, status: draft}\n")
    defaults = load_config(path).sources[0].defaults
    assert (defaults.tenant, defaults.visibility, defaults.roles, defaults.status) == ("acme", "internal", ("support",), "draft")


def test_a_config_file_over_its_limit_is_refused_unread(tmp_path):
    from rag_pipeline.config import MAX_CONFIG_BYTES

    path = tmp_path / "huge.yaml"
    path.write_text("sources: []\n# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(ConfigError, match=r"huge.yaml is over 1 MB: not read"):
        load_config(path)
