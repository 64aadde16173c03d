"""`embedding.precision: int8` with the real model: vectors close to float32 ones but not equal, an
identity of their own (an index embedded in float32 is embedded again, never mixed), and an int8
copy made once beside the export, made again when damaged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.config import ChunkingConfig, EmbeddingConfig, LifecycleConfig, RetrievalConfig, SourceConfig
from rag_pipeline.core.embedding.model import ModelEmbedder
from rag_pipeline.core.embedding.onnx_quantize import QUANTIZED_FILE, RECORD_FILE
from rag_pipeline.core.ingestion import stages
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree

pytestmark = pytest.mark.slow
SENTENCES = [
    "How do I set a timeout on a client?",
    "Proxies are configured per transport, with an environment variable as the fallback.",
    "Crème brûlée, jalapeño, Øresund, São Paulo: déjà vu.",
    "def get(url, *, timeout=5.0) -> Response: return Client(timeout=timeout).get(url)",
    "Retries apply to connection errors only; a read timeout is raised to the caller.",
    "Streaming responses must be closed, or read in a context manager.",
]
PAGES = {"timeouts.md": "# Timeouts\n\nEvery request has a five second timeout unless the client sets another.\n",
         "proxies.md": "# Proxies\n\nRoute traffic through a proxy with the `proxy` argument of the client.\n",
         "retries.md": "# Retries\n\nA transport retries failed connections when `retries` is set.\n"}


def test_int8_vectors_are_close_to_float32_ones_but_not_equal():
    float32 = ModelEmbedder(EmbeddingConfig())
    int8 = ModelEmbedder(EmbeddingConfig(precision="int8"))
    exact, quantized = float32.encode(SENTENCES), int8.encode(SENTENCES)
    assert quantized.shape == exact.shape and quantized.dtype == np.float32
    cosines = (exact * quantized).sum(axis=1)
    # Measured: 0.987 to 0.995 on such sentences; one scale per tensor instead of per channel gave 0.90.
    assert cosines.min() > 0.98, cosines
    assert np.abs(exact - quantized).max() > 1e-3  # really another model run: not the float32 graph
    # Each sentence is still nearest to itself across precisions.
    assert list((exact @ quantized.T).argmax(axis=1)) == list(range(len(SENTENCES)))
    assert int8.engine.model_file == float32.engine.model_file.parent / QUANTIZED_FILE
    assert int8.identity != float32.identity and '"precision": "int8"' in int8.identity
    assert "precision" not in float32.identity  # indexes embedded before the option keep their vectors


def test_an_index_embedded_in_float32_is_embedded_again_in_int8_and_searched(tmp_path):
    source = SourceConfig(name="kb", path=write_tree(tmp_path / "src", PAGES))
    store = duckdb_store(tmp_path / "index.duckdb")

    def run(precision: str, run_id: str):
        embedder = ModelEmbedder(EmbeddingConfig(precision=precision))
        reports = stages.ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), run_id)
        return embedder, reports["embedded"].counts

    float32, first = run("float32", "r1")
    chunks = store.db.rows("SELECT count(*) FROM chunks")[0][0]
    assert first["embedded"] == chunks > 0
    assert store.db.rows("SELECT DISTINCT identity FROM vectors") == [(float32.identity,)]
    vectors_float32 = dict(store.db.rows("SELECT chunk_id, identity FROM vectors"))

    int8, switched = run("int8", "r2")
    # Every chunk embedded again (no float32 vector reused), and every served vector is int8's.
    assert switched["embedded"] == chunks and switched["cache_hits"] == 0
    assert store.db.rows("SELECT DISTINCT identity FROM vectors") == [(int8.identity,)]
    assert set(dict(store.db.rows("SELECT chunk_id, identity FROM vectors"))) == set(vectors_float32)
    result = Retriever(store, int8, RetrievalConfig(mode="dense", k=3)).search("which proxy does the client use",
                                                                                SearchFilters())
    assert result.hits and result.hits[0].doc_id.endswith("proxies.md")

    # Back to float32: its vectors are still cached under its own identity, nothing embedded again.
    _, back = run("float32", "r3")
    assert back["embedded"] == 0 and back["cache_hits"] == chunks
    assert store.db.rows("SELECT DISTINCT identity FROM vectors") == [(float32.identity,)]


ENCODE_INT8 = """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
    from rag_pipeline.config import EmbeddingConfig
    from rag_pipeline.core.embedding.embedder import make_embedder
    vector = make_embedder(EmbeddingConfig(precision="int8")).encode(["how do I set a timeout on a client"])[0]
    print(json.dumps({"vector": vector.tolist(), "torch": "torch" in sys.modules}))
"""


def _run(cache: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAG_PIPELINE_CACHE": str(cache)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(ENCODE_INT8)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _vector(out: str) -> np.ndarray:
    return np.array(json.loads(out.strip().splitlines()[-1])["vector"])


def test_concurrent_first_uses_quantize_once_and_a_damaged_copy_is_made_again(tmp_path):
    # A cache holding only the float32 export (copied from this process's): int8 is made from it.
    export = ModelEmbedder(EmbeddingConfig()).engine.model_file.parent
    cache = tmp_path / "cache"
    copy = cache / "onnx" / export.name
    shutil.copytree(export, copy, ignore=shutil.ignore_patterns("model-int8.*", "optimized-model-int8-*"))
    float32_files = sorted(p.name for p in copy.iterdir())

    first_uses = [_run(cache) for _ in range(2)]
    outputs = [process.communicate(timeout=900) for process in first_uses]
    assert [process.returncode for process in first_uses] == [0, 0], [err[-2000:] for _, err in outputs]
    assert sum("quantizing the embedding model" in err for _, err in outputs) == 1  # the other waited for it
    assert not any("exporting the embedding model" in err for _, err in outputs)  # the float32 export was reused
    expected = _vector(outputs[0][0])
    np.testing.assert_array_equal(_vector(outputs[1][0]), expected)
    assert not any(json.loads(out.strip().splitlines()[-1])["torch"] for out, _ in outputs)
    # Beside them, the int8 copy's optimized graph, saved by the first session of it (onnx_optimized.py).
    assert sorted(p.name for p in copy.iterdir() if not p.name.startswith("optimized-model-int8-")) == \
        sorted([*float32_files, QUANTIZED_FILE, RECORD_FILE])

    # Cut short: the recorded size differs, it is quantized again (the float32 export stays).
    quantized = copy / QUANTIZED_FILE
    with open(quantized, "r+b") as handle:
        handle.truncate(1000)
    out, err = _run(cache).communicate(timeout=900)
    assert "is damaged" in err and "quantizing the embedding model" in err, err[-3000:]
    assert "exporting the embedding model" not in err
    np.testing.assert_array_equal(_vector(out), expected)

    # Same size, other bytes: the size check passes, ONNX Runtime refuses it, it is quantized again.
    quantized.write_bytes(b"\0" * quantized.stat().st_size)
    out, err = _run(cache).communicate(timeout=900)
    assert "cannot load" in err and "quantizing the embedding model" in err, err[-3000:]
    assert "exporting the embedding model" not in err
    np.testing.assert_array_equal(_vector(out), expected)


def test_int8_for_a_model_only_the_library_runs_is_a_config_error(tmp_path):
    from rag_pipeline.core.errors import InputError
    from rag_pipeline_tests.core.embedding.model_copies import weighted_mean_model

    folder = weighted_mean_model(tmp_path / "weighted")
    # float32 falls back to the library (tested in test_onnx_engine); int8 has no library run: its
    # float32 vectors under the int8 identity would mix, so it is refused, naming the fix.
    with pytest.raises(InputError, match=r"runs only on ONNX Runtime.*pooling mode weightedmean.*precision: float32"):
        ModelEmbedder(EmbeddingConfig(model=str(folder), precision="int8")).encode(["a query about proxies"])
