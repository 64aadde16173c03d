"""The bundled model run by numpy gives the library's vectors; the embedder uses it only for small
jobs while the library is not loaded, and any model it cannot prove it understands goes to the
library."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.config import EmbeddingConfig
from rag_pipeline.core.ingestion import embedding, numpy_bert
from rag_pipeline.core.ingestion.embedding import NUMPY_MAX_TEXTS, SentenceTransformerEmbedder, resolve_model_path

MODEL = Path(resolve_model_path(EmbeddingConfig().model))

TEXTS = [
    "How do I set a timeout on a request?",
    "  leading and trailing white space  \n",
    "",
    "Ünïcödé café naïve façade — 東京 and 北京 🚀",
    "word " * 400,  # past max_seq_length: truncated as the library truncates
    "HTTP/2 support is optional: pip install httpx[http2]. " * 6,
    "a",
]


@pytest.fixture(scope="module")
def library_vectors() -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MODEL), device="cpu")
    return model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)


@pytest.mark.slow
def test_numpy_gives_the_librarys_vectors(library_vectors):
    vectors = numpy_bert.NumpyBert(MODEL, 256).encode(TEXTS, normalize=True)
    assert vectors.dtype == np.float32 and vectors.shape == library_vectors.shape
    np.testing.assert_allclose(vectors, library_vectors, atol=1e-6)
    # Batched in length order, returned in the caller's: each text alone gives its own row.
    for text, row in zip(TEXTS, vectors):
        np.testing.assert_allclose(numpy_bert.NumpyBert(MODEL, 256).encode([text], normalize=True)[0], row, atol=1e-6)


@pytest.mark.slow
def test_a_shorter_max_seq_length_truncates_as_the_library_does():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MODEL), device="cpu")
    model.max_seq_length = 16
    expected = model.encode(TEXTS[4:6], normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(numpy_bert.NumpyBert(MODEL, 16).encode(TEXTS[4:6], normalize=True), expected, atol=1e-6)


def test_erf_is_within_its_stated_bound():
    import math

    x = np.linspace(-6, 6, 40001, dtype=np.float32)
    exact = np.array([math.erf(v) for v in x.astype(np.float64)])
    erf = numpy_bert._erf(x)
    assert erf.dtype == np.float32 and np.abs(erf.astype(np.float64) - exact).max() < 6.5e-7  # the docstring's bound
    assert np.all(erf * x >= 0) and np.abs(erf).max() <= 1.0  # never of the wrong sign, never past 1


def _copy_model(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(MODEL / "model.safetensors")
    return folder


def _edit_json(path: Path, **changes) -> None:
    value = json.loads(path.read_text())
    value.update(changes)
    path.write_text(json.dumps(value))


@pytest.mark.parametrize(("change", "reason"), [
    (lambda f: _edit_json(f / "config.json", model_type="roberta"), "model_type"),
    (lambda f: _edit_json(f / "config.json", hidden_act="gelu_new"), "hidden_act"),
    (lambda f: _edit_json(f / "config.json", position_embedding_type="relative_key"), "position_embedding_type"),
    (lambda f: _edit_json(f / "1_Pooling" / "config.json", pooling_mode_max_tokens=True), "pooling"),
    (lambda f: _edit_json(f / "sentence_bert_config.json", do_lower_case=True), "lower-cases"),
    (lambda f: _edit_json(f / "config_sentence_transformers.json", default_prompt_name="query"), "prompt"),
    (lambda f: (f / "modules.json").write_text(json.dumps(json.loads((f / "modules.json").read_text())[:1])), "module stack"),
    (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json"),
    (lambda f: (f / "modules.json").write_text("{not json"), "modules.json"),
])
def test_a_model_it_does_not_understand_goes_to_the_library(tmp_path, change, reason):
    folder = _copy_model(tmp_path)
    assert numpy_bert.unsupported_reason(folder) is None
    change(folder)
    assert reason in (numpy_bert.unsupported_reason(folder) or "")
    with pytest.raises(ValueError, match=reason):
        numpy_bert.NumpyBert(folder, 256)
    assert SentenceTransformerEmbedder(EmbeddingConfig(model=str(folder)))._numpy_model_for(1) is None


def test_the_bundled_model_is_understood():
    assert numpy_bert.unsupported_reason(MODEL) is None


# In a fresh interpreter: whether torch was imported tells which path encoded.
PROBE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from rag_pipeline.config import EmbeddingConfig
    from rag_pipeline.core.ingestion.embedding import NUMPY_MAX_TEXTS, make_embedder
    embedder = make_embedder(EmbeddingConfig())
    report = {}
    embedder.prefetch(texts_expected=NUMPY_MAX_TEXTS)
    report["numpy_loading_in_background"] = embedder._numpy_loading is not None and embedder._loading is None
    small = embedder.encode(["one page's new chunk", "a search"])
    report["small_imported_torch"] = "torch" in sys.modules
    report["dimension"] = embedder.dimension
    large = embedder.encode([f"text number {i}" for i in range(NUMPY_MAX_TEXTS + 1)])
    report["large_imported_torch"] = "torch" in sys.modules
    report["library_now"] = embedder._numpy_model_for(2) is None  # loaded: the library encodes everything
    again = embedder.encode(["one page's new chunk", "a search"])
    report["paths_agree"] = bool(np.abs(again - small).max() < 1e-6)
    report["same_shape"] = small.shape == again.shape and large.shape == (NUMPY_MAX_TEXTS + 1, small.shape[1])
    print(json.dumps(report))
""")


@pytest.mark.slow
def test_small_jobs_skip_torch_and_large_ones_load_the_library():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"numpy_loading_in_background": True, "small_imported_torch": False, "dimension": 384, "large_imported_torch": True,
                      "library_now": True, "paths_agree": True, "same_shape": True}


def test_once_the_library_is_loaded_it_encodes_everything(monkeypatch):
    embedder = SentenceTransformerEmbedder(EmbeddingConfig())
    assert embedder._numpy_model_for(1) is not None
    assert embedder._numpy_model_for(NUMPY_MAX_TEXTS + 1) is None
    monkeypatch.setitem(embedding._loaded_models, (embedder.model_path, None), object())
    assert embedder._numpy_model_for(1) is None
