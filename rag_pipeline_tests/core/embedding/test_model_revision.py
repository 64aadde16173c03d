"""The model's weights are hashed once: the revision is remembered by path, size and time."""

from pathlib import Path

import pytest

from rag_pipeline.core.embedding.model_folder import folder_revision, revision_cache_file


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_PIPELINE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"dim": 384}')
    (folder / "model.safetensors").write_bytes(b"weights" * 1000)
    return folder


def test_the_second_identity_reads_no_weights(model, monkeypatch):
    first = folder_revision(model)
    assert revision_cache_file().is_file()

    def refuse(self):
        raise AssertionError(f"read {self}")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert folder_revision(model) == first


def test_changed_weights_are_hashed_again(model):
    first = folder_revision(model)
    (model / "model.safetensors").write_bytes(b"other weights" * 1000)
    assert folder_revision(model) != first
