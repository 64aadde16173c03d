"""A one-page edit on the command line, with the real model: it loads neither torch nor pandas and
stores the vector the library would have given; a command that will parse starts the parser for
the changed files' types before it imports Dagster."""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pytest
import yaml

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.embedding.model_folder import resolve_model_path
from rag_pipeline.core.ingestion.inputs import walk_source
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

PAGES = {
    "guide/start.md": "# Start\n\nInstall the client and make a first request with a timeout of five seconds.\n",
    "guide/auth.md": "# Auth\n\nBasic authentication takes a user name and a password.\n",
    "notes.txt": "Release notes: the proxy settings moved to the transport.\n",
    "index.html": "<html><body><h1>Home</h1><p>Welcome to the client's documentation.</p></body></html>",
}


def _imported(stderr: str) -> set[str]:
    """Top-level modules in `python -X importtime` lines."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \| +(\S+)$", stderr, re.M)}


@pytest.mark.slow
def test_a_one_page_edit_needs_no_torch_and_stores_the_librarys_vector(tmp_path):
    root = tmp_path / "docs"
    write_tree(root, PAGES)
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"name": "docs", "path": str(root)}],
                                      "storage": {"path": str(tmp_path / "index.duckdb")}}))
    full = run_cli("ingest", "--config", str(config), "--json")
    assert full.returncode == 0, full.stderr[-3000:]

    page = root / "guide" / "auth.md"
    page.write_text(page.read_text() + "\nA token can replace the password for service accounts.\n")
    edit = run_cli("ingest", "--config", str(config), "--json", python_options=["-X", "importtime"])
    assert edit.returncode == 0, edit.stderr[-3000:]
    assert '"parsed": 1' in edit.stdout and '"embedded": 1' in edit.stdout
    imported = _imported(edit.stderr)
    # scipy: the switch probes in the database, it builds no in-memory copy (Search.in_database).
    assert "dagster" in imported and not {"torch", "sentence_transformers", "transformers", "pandas", "scipy"} & imported

    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        text, vector = con.execute(
            "SELECT c.embed_text, v.vector FROM chunks c JOIN vectors v USING (chunk_id) WHERE c.text LIKE '%token can replace%'"
        ).fetchone()
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(resolve_model_path(EmbeddingConfig().model), device="cpu").encode(
        [text], normalize_embeddings=True)[0]
    np.testing.assert_allclose(np.asarray(vector, dtype=np.float32), expected, atol=1e-6)


def test_the_types_to_parse_are_those_of_changed_new_files(tmp_path):
    root = tmp_path / "docs"
    write_tree(root, PAGES)
    source = SourceConfig(name="docs", path=root)
    store = duckdb_store(tmp_path / "index.duckdb")
    assert walk_source(source).types_likely_to_parse([]) == {"md", "txt", "html"}  # nothing committed yet
    ingest_source(source, store, HashingEmbedder(EmbeddingConfig(kind="hashing")), ChunkingConfig(), LifecycleConfig(), "r1")
    manifest = store.staging.manifest_rows("docs")
    assert walk_source(source).types_likely_to_parse(manifest) == set()
    (root / "notes.txt").write_text("Release notes, edited.\n")
    assert walk_source(source).types_likely_to_parse(manifest) == {"txt"}
    write_tree(root, {"more/new.md": "# New\n\nA new page.\n", "image.png": "not a document"})
    assert walk_source(source).types_likely_to_parse(manifest) == {"txt", "md"}
    assert walk_source(source.model_copy(update={"kind": "beir", "path": root / "notes.txt"})).types_likely_to_parse(manifest) == set()
    # A new mkdocs partial is skipped by discovery as a template: it starts no HTML parser...
    write_tree(root, {"overrides/partials/nav.html": '<nav>{% for item in nav %}<a href="{{ item.url }}">{{ item.title }}</a>'
                                                      "{% endfor %}</nav>\n"})
    assert walk_source(source).types_likely_to_parse(manifest) == {"txt", "md"}
    # ...and a page that shows template tags inside a code sample is a page.
    write_tree(root, {"jinja.html": "<h1>Loops</h1><pre><code>{% for x in xs %}{% endfor %}</code></pre>"})
    assert walk_source(source).types_likely_to_parse(manifest) == {"txt", "md", "html"}


@pytest.mark.slow
def test_a_command_that_will_parse_starts_the_parser_with_those_types_warm(tmp_path, write_config):
    from rag_pipeline.cli.common import configured_store
    from rag_pipeline.cli.ingest import _start_early, _walks
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.ingestion.parse_worker import ParserProcess, shared_parsers
    from rag_pipeline.core.ingestion.parsing import ParseJob

    root = write_tree(tmp_path / "docs", {"a.md": "# A\n\nA page.\n"})
    config = write_config({"docs": root})
    parser = shared_parsers(1)[0]
    parser.close()
    _start_early(config, configured_store(config), _walks(config), make_embedder(config.embedding))
    assert parser.running() and parser._process.args[-2:] == ["--warm", "md"]
    assert parser.memory_limit_mb == config.sources[0].limits.max_parser_memory_mb
    doc = parser.parse(ParseJob("docs:a.md", "a.md", "md", b"# A\n\nThe parser reads this page.\n", "h", None, None), timeout_s=120)
    assert [e.category for e in doc.elements] == ["Title", "NarrativeText"]
    parser.close()

    # A type the worker has no parser for is warmed as nothing: it still starts and serves.
    broken = ParserProcess()
    broken.start({"no-such-type"})
    assert broken.parse(ParseJob("docs:b.md", "b.md", "md", b"# B\n\nText.\n", "h", None, None), timeout_s=120).elements
    broken.close()
