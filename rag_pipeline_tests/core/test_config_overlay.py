"""An experiment's overlay means what the same keys written into the config file mean, and every
config section handed elsewhere (an overlay, a Dagster resource) reads back as the same config."""

from pathlib import Path

import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT, ConfigError, PipelineConfig, as_written, load_config, with_overlay
from rag_pipeline_tests.conftest import SAMPLE_CONFIG

# A user's own config: a source shared by every tenant (no tenant key), one of a tenant, internal
# pages for two roles, and sections left to their defaults.
OWN_CONFIG = """\
sources:
  - name: docs
    path: docs
  - name: acme wiki
    path: wiki
    defaults: {tenant: acme, visibility: internal, roles: [support, sales], status: draft}
golden_set: golden.jsonl
storage:
  path: store/index.duckdb
"""


def _sample_folder(tmp_path: Path) -> Path:
    """A folder that holds what data/ holds (linked), so data/pipeline.yaml's relative paths work from a copy."""
    folder = tmp_path / "data"
    folder.mkdir()
    for entry in (PROJECT_ROOT / "data").iterdir():
        if entry.name != "pipeline.yaml":
            (folder / entry.name).symlink_to(entry)
    return folder


def _written_into_the_file(path: Path, keys: dict) -> Path:
    """`path`'s YAML with `keys` (nested) written into it, as a file beside it."""
    raw = yaml.safe_load(path.read_text())
    for dotted, value in keys.items():
        *sections, field = dotted.split(".")
        node = raw
        for section in sections:
            node = node.setdefault(section, {})
        node[field] = value
    edited = path.with_name("edited-" + path.name)
    edited.write_text(yaml.safe_dump(raw))
    return edited


def _settings(config: PipelineConfig) -> PipelineConfig:
    """The config's settings, without the file they were read from."""
    return config.model_copy(update={"config_path": None})


def _configs(tmp_path: Path) -> dict[str, Path]:
    sample = _sample_folder(tmp_path) / "pipeline.yaml"
    sample.write_text(SAMPLE_CONFIG.read_text())
    own = tmp_path / "own" / "pipeline.yaml"
    own.parent.mkdir()
    own.write_text(OWN_CONFIG)
    return {"sample": sample, "own": own}


@pytest.mark.parametrize("which", ["sample", "own"])
@pytest.mark.parametrize("keys", [
    {"chunking.max_tokens": 80},
    {"chunking.strategy": "fixed", "chunking.overlap_tokens": 10},
    {"retrieval.mode": "bm25", "retrieval.k": 20},
    {"embedding.kind": "hashing"},
    {"golden_set": "other-golden.jsonl"},
], ids=lambda keys: ",".join(keys))
def test_an_overlay_is_the_config_with_those_keys_in_the_file(tmp_path, which, keys):
    path = _configs(tmp_path)[which]
    assignments = [f"{key}={value}" for key, value in keys.items()]
    overlaid = with_overlay(load_config(path), assignments)
    assert _settings(overlaid) == _settings(load_config(_written_into_the_file(path, keys)))
    assert overlaid.config_path == path.resolve()


def test_an_overlay_file_means_the_same_as_the_assignments(tmp_path):
    path = _configs(tmp_path)["own"]
    overlay = tmp_path / "candidate.yaml"
    overlay.write_text("chunking:\n  max_tokens: 80\nretrieval:\n  mode: dense\ngolden_set: next.jsonl\n")
    from_file = with_overlay(load_config(path), overlay_file=overlay)
    assert from_file == with_overlay(load_config(path), ["chunking.max_tokens=80", "retrieval.mode=dense",
                                                         "golden_set=next.jsonl"])
    # A relative path of the overlay is the config file's, as it would be written there.
    assert from_file.golden_set == (path.parent / "next.jsonl").resolve()
    # The source defaults the file gave, and the ones it left out, are untouched.
    assert [s.defaults for s in from_file.sources] == [s.defaults for s in load_config(path).sources]
    assert from_file.sources[0].defaults.tenant is None


@pytest.mark.parametrize(("assignment", "named"), [
    ("chunking.max_tokenz=80", "chunking.max_tokenz: Extra inputs are not permitted"),
    ("chunking.max_tokens=eighty", "chunking.max_tokens: Input should be a valid integer"),
    ("chunking.max_tokens=8", "chunking.max_tokens: Input should be greater than or equal to 16"),
    ("chunking.max_tokens=30", "overlap_tokens (40) must be smaller than max_tokens (30)"),
    ("retrival.mode=bm25", "retrival: Extra inputs are not permitted"),
    ("monitoring.gap_distance=0.5", "monitoring.gap_distance: retired: coverage-gap topics are cut at a distance"),
    ("sources.0.defaults.tenant=acme", "sources: Input should be a valid"),
])
def test_an_overlay_the_file_would_refuse_names_the_key(tmp_path, assignment, named):
    with pytest.raises(ConfigError) as excinfo:
        with_overlay(load_config(_configs(tmp_path)["sample"]), [assignment])
    assert named in str(excinfo.value) and f"--set {assignment}" in str(excinfo.value)


@pytest.mark.parametrize(("assignments", "reason"), [
    (["chunking.max_tokens"], "expected section.key=value"),
    (["chunking..max_tokens=80"], "expected section.key=value"),
    (["=80"], "expected section.key=value"),
    (["retrieval.mode=[bm25"], "the value is not valid YAML"),
    (["chunking=fixed", "chunking.max_tokens=80"], "chunking is given a value of its own"),
])
def test_a_malformed_assignment_is_a_config_error(tmp_path, assignments, reason):
    with pytest.raises(ConfigError, match=reason):
        with_overlay(load_config(_configs(tmp_path)["own"]), assignments)


def test_an_unreadable_overlay_file_names_it(tmp_path):
    overlay = tmp_path / "candidate.yaml"
    overlay.write_text("chunking:\n  max_tokens: 80\n  max_tokens: 90\n")
    with pytest.raises(ConfigError, match=r"candidate.yaml.*max_tokens"):
        with_overlay(load_config(_configs(tmp_path)["own"]), overlay_file=overlay)


@pytest.mark.parametrize("which", ["sample", "own"])
def test_every_section_reads_back_from_what_was_written(tmp_path, which):
    config = load_config(_configs(tmp_path)[which])
    moved = config.model_copy(update={"storage": config.storage.model_copy(update={"backend": "postgres"})})
    for whole in (config, moved):
        assert PipelineConfig.model_validate(as_written(whole)) == _settings(whole)
        for name in PipelineConfig.model_fields:
            section = getattr(whole, name)
            if hasattr(section, "model_dump"):
                assert type(section).model_validate(as_written(section)) == section, name
        for source in whole.sources:
            assert type(source.defaults).model_validate(as_written(source.defaults)) == source.defaults
