"""Two builds of the same sources compare equal by content (run ids and times left out); an
edited document, a missing cache row or a changed vector is named as a difference."""

from rag_pipeline.config import EmbeddingConfig
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline.core.storage.contents import compare_contents, content_differences, served_contents
from rag_pipeline_tests.conftest import write_tree

NOTES = {"a.md": "# Alpha\n\nThe first note, about releases.\n", "b/c.txt": "Gamma notes on deployment and workers.\n"}


def _build(config, folder, run_id: str):
    store = duckdb_store(folder / "index.duckdb")
    ingest_source(config.sources[0], store, make_embedder(EmbeddingConfig(kind="hashing")), config.chunking,
                  config.lifecycle, run_id)
    return store


def test_two_builds_of_the_same_sources_are_equal_and_an_edit_is_named(tmp_path, write_config):
    config = write_config({"notes": write_tree(tmp_path / "notes", NOTES)})
    first, second = _build(config, tmp_path / "one", "run-1"), _build(config, tmp_path / "two", "run-2")
    assert served_contents(first)["documents"], "the build served nothing"
    assert content_differences(first, second) == []

    (tmp_path / "notes" / "a.md").write_text("# Alpha\n\nThe first note, about releases and retries.\n")
    ingest_source(config.sources[0], second, make_embedder(EmbeddingConfig(kind="hashing")), config.chunking,
                  config.lifecycle, "run-3")
    differences = content_differences(first, second)
    changed = {line.split(":")[0] for line in differences}
    assert {"manifest", "documents", "chunks", "vectors.vector"} <= changed, differences


def test_a_changed_vector_or_a_missing_cache_row_is_a_difference(tmp_path, write_config):
    config = write_config({"notes": write_tree(tmp_path / "notes", NOTES)})
    store = _build(config, tmp_path / "one", "run-1")
    before = served_contents(store)
    keys, matrix = before["vectors.vector"]
    changed = {**before, "vectors.vector": (keys, matrix + 1e-6)}
    assert compare_contents(before, changed) == ["vectors.vector: same keys, different vectors"]
    fewer = {**before, "embedding_cache": before["embedding_cache"][1:]}
    [line] = compare_contents(before, fewer)
    assert line.startswith("embedding_cache:") and "1 only in the first" in line
    assert compare_contents(before, fewer, skip=("embedding_cache",)) == []
