"""The embedding engine on ONNX Runtime, with the real model: the library's vectors, no torch for a
query, one thread for one text, a model it cannot run handed to the library with a log line, and
an export cache that concurrent first uses, damage and a read-only folder do not break."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.config import DEFAULT_MODEL, EmbeddingConfig
from rag_pipeline.core.embedding.model import LibraryEncoder, ModelEmbedder
from rag_pipeline.core.embedding.model_folder import resolve_model_path
from rag_pipeline.core.embedding.onnx_engine import OnnxEncoder, bulk_threads
from rag_pipeline.core.embedding.onnx_export import TOLERANCE
from rag_pipeline_tests.conftest import HTTPX_V023, require
from rag_pipeline_tests.core.embedding.model_copies import weighted_mean_model

pytestmark = pytest.mark.slow
BUNDLED = Path(resolve_model_path(DEFAULT_MODEL))
HARD_TEXTS = [
    "",
    "Crème brûlée, jalapeño, Øresund, São Paulo: déjà vu.",
    "東京都の人口は約千四百万人です。深圳是一座年轻的城市。",
    "Release day 🎉🚀 — thanks to everyone 👩🏽‍💻👨‍👩‍👧!",
    "timeout " * 600,  # far past the 256-token limit: both cut it at the same token
]


def _real_texts() -> list[str]:
    """Paragraphs of the httpx docs: the texts the pipeline embeds."""
    paragraphs = []
    for page in sorted(require(HTTPX_V023).glob("*.md"))[:8]:
        paragraphs += [p.strip() for p in page.read_text(encoding="utf-8").split("\n\n") if len(p.strip()) > 40][:6]
    return paragraphs


@pytest.fixture(scope="module")
def library():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(BUNDLED), device="cpu")


def test_vectors_equal_the_librarys_one_by_one_and_in_batches(library):
    texts = HARD_TEXTS + _real_texts()
    embedder = ModelEmbedder(EmbeddingConfig(batch_size=8))  # several batches, each padded to its longest
    assert isinstance(embedder.engine, OnnxEncoder)
    expected = library.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    batched = embedder.encode(texts)
    one_by_one = np.stack([embedder.encode([text])[0] for text in texts])
    assert batched.shape == (len(texts), 384) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(one_by_one, expected, atol=TOLERANCE, rtol=0)
    # A shorter token limit is the library's too.
    short = ModelEmbedder(EmbeddingConfig(max_seq_length=16))
    library.max_seq_length = 16
    try:
        np.testing.assert_allclose(short.encode(texts[:6]), library.encode(texts[:6], normalize_embeddings=True),
                                   atol=TOLERANCE, rtol=0)
    finally:
        library.max_seq_length = 256
    assert short.identity != embedder.identity


def test_one_text_runs_on_one_thread_and_a_batch_on_every_cpu():
    embedder = ModelEmbedder(EmbeddingConfig(batch_size=17))  # an engine of its own: none of this process's others
    embedder.encode(["how do I set a timeout"])
    engine = embedder.engine
    assert set(engine._sessions) == {1}
    assert engine.session(1).get_session_options().intra_op_num_threads == 1
    embedder.encode(["a first text", "a second text", "a third"])
    assert set(engine._sessions) == {1, bulk_threads()}
    assert engine.session(bulk_threads()).get_session_options().intra_op_num_threads == bulk_threads()


def _run(code: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if cache is not None:
        env["RAG_PIPELINE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=900)


ENCODE_A_QUERY = """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
    from rag_pipeline.config import EmbeddingConfig
    from rag_pipeline.core.embedding.embedder import make_embedder
    vector = make_embedder(EmbeddingConfig()).encode(["how do I set a timeout on a client"])[0]
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "sentence_transformers"))
    print(json.dumps({"heavy": heavy, "vector": vector.tolist()}))
"""


def test_a_fresh_process_encoding_a_query_never_imports_torch(library):
    done = _run(ENCODE_A_QUERY)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["heavy"] == []
    expected = library.encode(["how do I set a timeout on a client"], normalize_embeddings=True)[0]
    np.testing.assert_allclose(report["vector"], expected, atol=TOLERANCE, rtol=0)


def test_concurrent_first_uses_export_once_and_a_damaged_export_is_made_again(tmp_path, library):
    cache = tmp_path / "cache"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_PIPELINE_CACHE": str(cache)}
    first_uses = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(ENCODE_A_QUERY)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outputs = [process.communicate(timeout=900) for process in first_uses]
    assert [process.returncode for process in first_uses] == [0, 0], [err[-2000:] for _, err in outputs]
    assert sum("exporting the embedding model" in err for _, err in outputs) == 1  # the other waited for it
    expected = library.encode(["how do I set a timeout on a client"], normalize_embeddings=True)[0]
    for out, _ in outputs:
        np.testing.assert_allclose(json.loads(out.strip().splitlines()[-1])["vector"], expected, atol=TOLERANCE, rtol=0)
    (export,) = [p for p in (cache / "onnx").iterdir() if p.is_dir()]
    names = sorted(p.name for p in export.iterdir())
    # Nothing else but the optimized graph the first session saved (onnx_optimized.py): no temporary left.
    assert [n for n in names if not n.startswith("optimized-model-")] == ["model.onnx", "model.weights", "verdict.json"]
    assert len([n for n in names if n.startswith("optimized-model-")]) == 1

    # Same size, other bytes: the size check passes, ONNX Runtime refuses it, it is exported again.
    model_file = export / "model.onnx"
    model_file.write_bytes(b"\0" * model_file.stat().st_size)
    again = _run(ENCODE_A_QUERY, cache)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "cannot load" in again.stderr and "exporting the embedding model" in again.stderr
    np.testing.assert_allclose(json.loads(again.stdout.strip().splitlines()[-1])["vector"], expected, atol=TOLERANCE,
                               rtol=0)
    # Cut short: the recorded size differs, it is exported again.
    with open(model_file, "r+b") as handle:
        handle.truncate(1000)
    cut = _run(ENCODE_A_QUERY, cache)
    assert cut.returncode == 0 and "is damaged" in cut.stderr, cut.stderr[-3000:]


def test_a_cache_that_cannot_be_written_exports_for_the_process_only(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    done = _run(ENCODE_A_QUERY, blocker / "cache")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cannot be written" in done.stderr and json.loads(done.stdout.strip().splitlines()[-1])["heavy"] == []


def test_a_model_onnx_cannot_serve_runs_in_the_library_with_a_log_line(tmp_path, caplog, library):
    folder = weighted_mean_model(tmp_path / "weighted")
    embedder = ModelEmbedder(EmbeddingConfig(model=str(folder)))
    with caplog.at_level(logging.WARNING, logger="rag_pipeline.progress.model"):
        vectors = embedder.encode(["a query about proxies"])
    assert isinstance(embedder.engine, LibraryEncoder)
    assert "runs in sentence-transformers (torch): pooling mode weightedmean" in caplog.text
    assert not np.allclose(vectors, library.encode(["a query about proxies"], normalize_embeddings=True), atol=1e-3)
